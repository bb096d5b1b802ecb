/**
 * The model as one document (API.md, "Models as files"): the catalog, the
 * policies and the roles, named by name, exported, planned and applied
 * whole. A plan says what apply would create, change and remove, and which
 * users would gain or lose which permission; apply does exactly that in one
 * transaction and one audit event.
 */
import { writeMark, type AbortOptions, type Db, type Queryable, type Snapshot } from "../store/db.js";
import { auditStore } from "../store/audit-store.js";
import { catalogStore, type CatalogEntry } from "../store/catalog-store.js";
import { modelStore } from "../store/model-store.js";
import { modelDocumentStore, type StoredPolicy, type StoredRole, type UserRoleSet } from "../store/model-document-store.js";
import { policiesStore } from "../store/policies-store.js";
import { rolePermissionsStore } from "../store/role-permissions-store.js";
import { rolesStore } from "../store/roles-store.js";
import { SAMPLE_SIZE } from "../store/impact-store.js";
import { newId } from "../lib/ids.js";
import { lockApplication, requireApplication } from "./applications.js";
import { catalogViolations, diffCatalog, effectiveCatalog, type CatalogEntryInput, type RelationInput } from "./catalog-rules.js";
import { strandingOf, strandingRefusal, type StrandedUse } from "./catalog.js";
import { failedPrecondition, Violations } from "./errors.js";
import { check, descriptionProblem, identifierProblem, nameProblem } from "./formats.js";
import { storedCondition } from "./conditions.js";
import { grantImpact, mergeImpact, type PermissionImpact } from "./grant-impact.js";

export type { PermissionImpact };
import type { Principal } from "./principal.js";

export interface ModelPolicyInput {
  name: string;
  description: string;
  permissions: string[];
  tenantId: string | undefined;
  /** A CEL condition (conditions.ts); absent or "": none. */
  condition?: string | undefined;
}

export interface ModelRoleInput {
  name: string;
  description: string;
  tenantId: string | undefined;
  /** Policy names of the same document. */
  policies: string[];
}

export interface ModelInput {
  catalog: CatalogEntryInput[];
  policies: ModelPolicyInput[];
  roles: ModelRoleInput[];
}

export interface ModelDocument extends ModelInput {
  version: string;
}

/** Names, each list sorted in code point order. */
export interface NameChanges {
  created: string[];
  changed: string[];
  removed: string[];
}


/** What apply would strand, and so refuse (409) with this message naming these. */
export interface ModelStranding {
  message: string;
  uses: StrandedUse[];
}

export interface ModelPlan {
  version: string;
  catalog: NameChanges;
  policies: NameChanges;
  roles: NameChanges;
  impact: PermissionImpact[];
  /** Present when apply would refuse the document because its catalog strands grants. */
  stranding?: ModelStranding;
}

/** How a role is named in a plan: "name", or "tenant/name" for a tenant's. */
export const roleKey = (r: { name: string; tenantId: string | null | undefined }) => (r.tenantId == null ? r.name : `${r.tenantId}/${r.name}`);

const byCodePoint = (a: string, b: string) => Buffer.compare(Buffer.from(a), Buffer.from(b));

/** The model of an application as a document. */
export class Models {
  constructor(private readonly db: Db) {}

  /** The whole model, read in one snapshot. */
  async export(appId: string, options?: AbortOptions): Promise<ModelDocument> {
    const { value } = await this.db.snapshot(async (q) => {
      await requireApplication(q, appId);
      return documentOf(await readState(q, appId));
    }, options);
    return value;
  }

  /** What apply would do, changing nothing. One snapshot (Db.snapshot), as the preview. */
  async plan(appId: string, input: ModelInput, options?: AbortOptions): Promise<ModelPlan> {
    const target = validateModel(input);
    return (await this.planned(appId, target, options)).value.plan;
  }

  /** The plan of `target` and what it read, in one snapshot. */
  private planned(appId: string, target: Target, options?: AbortOptions): Promise<Snapshot<Planned>> {
    return this.db.snapshot(async (q) => {
      await requireApplication(q, appId);
      const state = await readState(q, appId);
      return { state, ...(await planOf(q, appId, state, target)) };
    }, options);
  }

  /**
   * Makes the model the document, in one transaction and one audit event
   * (none when nothing changes). Refused as a whole when expectedVersion is
   * stale or when the catalog would strand grants.
   */
  async apply(actor: Principal, appId: string, input: ModelInput, expectedVersion: string | undefined, options?: AbortOptions): Promise<ModelPlan> {
    const target = validateModel(input);
    if (expectedVersion !== undefined) {
      const v = new Violations();
      check(v, "expectedVersion", /^[0-9]{1,19}$/.test(expectedVersion) ? undefined : "must be a version as GET .../model returns it");
      v.throwIfAny();
    }
    // Where the snapshot's reads ran each on its own (PGlite), the plan is
    // made there, and the transaction holds the connection for the writes
    // alone when it starts from the state the plan read (the same write
    // mark); else, as on Postgres, it plans again under its locks.
    const early = this.db.snapshotMarks ? await this.planned(appId, target, options) : undefined;
    return this.db.transaction(async (tx) => {
      const read = early?.mark !== undefined && (await writeMark(tx)) === early.mark ? early.value : undefined;
      // The application row FOR UPDATE: catalog replacements and every grant
      // and policy writer wait (they take it FOR SHARE); the model lock:
      // policy and role writers wait.
      await lockApplication(tx, appId, "update");
      await rolePermissionsStore.lockModel(tx, appId);
      const state = read?.state ?? (await readState(tx, appId));
      if (expectedVersion !== undefined && expectedVersion !== state.version) {
        throw failedPrecondition(
          `the model is at version ${state.version}, not the expected ${expectedVersion}: plan again against the current model`,
          [{ field: "expectedVersion", expected: expectedVersion, current: state.version }],
        );
      }
      const { plan, diff } = read ?? (await planOf(tx, appId, state, target));
      const nothing = [plan.catalog, plan.policies, plan.roles].every((c) => c.created.length + c.changed.length + c.removed.length === 0);
      if (nothing) return plan;
      // The plan's own finding, of the state this transaction starts from: what a plan reports, apply refuses.
      if (plan.stranding !== undefined) throw strandingRefusal({ ...plan.stranding, held: [] });

      if (plan.catalog.created.length + plan.catalog.changed.length + plan.catalog.removed.length > 0) await catalogStore.replace(tx, appId, target.catalog);

      // Policies: removed ones are detached from every role and deleted;
      // created ones get an id; changed ones keep theirs.
      await modelDocumentStore.deletePolicies(tx, appId, diff.policiesRemoved.map((p) => p.policyId));
      const policyIds = new Map(state.policies.map((p) => [p.name, p.policyId]));
      for (const p of target.policies) {
        const existing = policyIds.get(p.name);
        const stored: StoredPolicy = { ...p, policyId: existing ?? newId("pol") };
        if (existing === undefined) {
          await policiesStore.insert(tx, appId, { ...stored, tenantId: stored.tenantId ?? undefined });
          policyIds.set(p.name, stored.policyId);
        } else if (diff.policiesChanged.has(p.name)) await modelDocumentStore.updatePolicy(tx, appId, stored);
        if (existing === undefined || diff.policiesChanged.has(p.name)) await policiesStore.setPermissions(tx, appId, stored.policyId, p.permissions);
      }

      // Roles likewise; a removed role takes its assignments with it.
      await modelDocumentStore.deleteRoles(tx, appId, diff.rolesRemoved.map((r) => r.roleId));
      const roleIds = new Map(state.roles.map((r) => [roleKey(r), r.roleId]));
      const touched: string[] = [];
      for (const r of target.roles) {
        const key = roleKey(r);
        const existing = roleIds.get(key);
        const stored: StoredRole = { ...r, roleId: existing ?? newId("rol"), policyIds: r.policies.map((name) => policyIds.get(name)!) };
        if (existing === undefined) await rolesStore.insert(tx, appId, { ...stored, tenantId: stored.tenantId ?? undefined });
        else if (diff.rolesChanged.has(key)) await modelDocumentStore.updateRole(tx, appId, stored);
        if (existing === undefined || diff.rolesChanged.has(key)) await rolesStore.setPolicies(tx, appId, stored.roleId, stored.policyIds);
        // A role whose policies' permissions changed holds other things too.
        if (existing === undefined || diff.rolesChanged.has(key) || diff.rolesMoved.has(stored.roleId)) touched.push(stored.roleId);
      }
      // Derives what every role touched holds, which gives the model its new version; with no
      // role touched, the version is taken here: one apply, one version.
      await rolePermissionsStore.refresh(tx, appId, touched);
      if (touched.length === 0) await modelStore.bump(tx, appId);
      const version = await modelDocumentStore.version(tx, appId);
      await auditStore.append(tx, {
        appId,
        type: "model.applied",
        actorKeyId: actor.keyId,
        targetType: "model",
        targetId: appId,
        data: {
          fromVersion: state.version,
          toVersion: version,
          catalog: { ...plan.catalog },
          policies: { ...plan.policies },
          roles: { ...plan.roles },
          impact: plan.impact.map((i) => ({
            permission: i.permission,
            gaining: i.gaining,
            losing: i.losing,
            gainingPairs: i.gainingPairs.map((x) => ({ userId: x.userId, resourceId: x.resourceId })),
            losingPairs: i.losingPairs.map((x) => ({ userId: x.userId, resourceId: x.resourceId })),
            atLeast: i.atLeast,
            ...(i.condition === undefined ? {} : { condition: i.condition }),
          })),
        },
      });
      return { ...plan, version };
    }, options);
  }
}

// ------------------------------------------------------------------ state

interface State {
  version: string;
  catalog: CatalogEntry[];
  policies: StoredPolicy[];
  roles: StoredRole[];
}

/** A plan, what it was made from, and what apply needs of it. */
interface Planned {
  state: State;
  plan: ModelPlan;
  diff: Diff;
}

/** The document's target: its catalog made effective, its roles' tenants as null. */
interface Target {
  catalog: CatalogEntry[];
  policies: (Omit<StoredPolicy, "policyId">)[];
  roles: (Omit<StoredRole, "roleId" | "policyIds"> & { policies: string[] })[];
}

async function readState(q: Queryable, appId: string): Promise<State> {
  return {
    version: await modelDocumentStore.version(q, appId),
    catalog: await catalogStore.load(q, appId),
    policies: await modelDocumentStore.policies(q, appId),
    roles: await modelDocumentStore.roles(q, appId),
  };
}

/** The catalog entry as a document holds it: custom relations only, without the flag. */
function entryOf(entry: CatalogEntry): CatalogEntryInput {
  return {
    resource: entry.resource,
    description: entry.description,
    actions: [...entry.actions],
    relations: entry.relations
      .filter((r) => !r.builtIn)
      .map(
        (r): RelationInput => ({
          name: r.name,
          actions: [...r.actions],
          builtIn: false,
          subjects: [...r.subjects],
          inherits: r.inherits.map((i) => ({ ...i })),
          requires: r.requires.map((i) => ({ ...i })),
          unless: r.unless.map((i) => ({ ...i })),
        }),
      ),
  };
}

function documentOf(state: State): ModelDocument {
  const policyNames = new Map(state.policies.map((p) => [p.policyId, p.name]));
  return {
    version: state.version,
    catalog: state.catalog.map(entryOf),
    policies: state.policies.map((p) => ({
      name: p.name,
      description: p.description,
      permissions: [...p.permissions],
      tenantId: p.tenantId ?? undefined,
      ...(p.condition === null ? {} : { condition: p.condition }),
    })),
    roles: state.roles.map((r) => ({
      name: r.name,
      description: r.description,
      tenantId: r.tenantId ?? undefined,
      policies: r.policyIds.map((id) => policyNames.get(id)!),
    })),
  };
}

// ------------------------------------------------------------------ validation

/**
 * The document checked whole before anything is read: every problem named
 * by its path in the document (`policies[3].permissions[1]`), nothing
 * applied.
 */
export function validateModel(input: ModelInput): Target {
  const v = new Violations();
  catalogViolations(v, input.catalog, "catalog");
  const catalog = new Map(input.catalog.map((e) => [e.resource, new Set(e.actions)]));
  const policyTenants = new Map<string, string | null>();
  input.policies.forEach((p, i) => {
    const at = `policies[${i}]`;
    if (check(v, `${at}.name`, nameProblem(p.name))) {
      if (policyTenants.has(p.name)) v.add(`${at}.name`, `"${p.name}" is already the name of policies[${input.policies.findIndex((q) => q.name === p.name)}]`);
      else policyTenants.set(p.name, p.tenantId ?? null);
    }
    check(v, `${at}.description`, descriptionProblem(p.description));
    if (p.tenantId !== undefined) check(v, `${at}.tenantId`, identifierProblem(p.tenantId));
    storedCondition(v, `${at}.condition`, p.condition);
    const seen = new Set<string>();
    p.permissions.forEach((permission, j) => {
      const pat = `${at}.permissions[${j}]`;
      const colon = permission.indexOf(":");
      const resource = colon < 0 ? permission : permission.slice(0, colon);
      const action = colon < 0 ? "" : permission.slice(colon + 1);
      if (colon < 0) v.add(pat, `${JSON.stringify(permission)} is not a permission of the form resource:action`);
      else if (!catalog.has(resource)) v.add(pat, `${JSON.stringify(permission)} is not in the document's catalog: there is no resource "${resource}"`);
      else if (!catalog.get(resource)!.has(action)) v.add(pat, `${JSON.stringify(permission)} is not in the document's catalog: resource "${resource}" has no action "${action}"`);
      else if (seen.has(permission)) v.add(pat, `${JSON.stringify(permission)} is listed twice`);
      seen.add(permission);
    });
  });
  const roleKeys = new Map<string, number>();
  input.roles.forEach((r, i) => {
    const at = `roles[${i}]`;
    if (check(v, `${at}.name`, nameProblem(r.name))) {
      const key = roleKey(r);
      const first = roleKeys.get(key);
      if (first !== undefined) v.add(`${at}.name`, `"${r.name}" is already the name of roles[${first}] ${r.tenantId === undefined ? "among the application-wide roles" : `in tenant "${r.tenantId}"`}`);
      else roleKeys.set(key, i);
    }
    check(v, `${at}.description`, descriptionProblem(r.description));
    if (r.tenantId !== undefined) check(v, `${at}.tenantId`, identifierProblem(r.tenantId));
    const seen = new Set<string>();
    r.policies.forEach((name, j) => {
      const pat = `${at}.policies[${j}]`;
      if (!policyTenants.has(name)) v.add(pat, `${JSON.stringify(name)} is not a policy of the document`);
      else if (seen.has(name)) v.add(pat, `${JSON.stringify(name)} is listed twice`);
      else {
        const tenant = policyTenants.get(name)!;
        if (tenant !== null && tenant !== (r.tenantId ?? null)) {
          v.add(pat, `policy "${name}" belongs to tenant "${tenant}" and cannot be attached to ${r.tenantId === undefined ? "an application-wide role" : `a role of tenant "${r.tenantId}"`}`);
        }
      }
      seen.add(name);
    });
  });
  v.throwIfAny();
  return {
    catalog: effectiveCatalog(input.catalog),
    policies: input.policies.map((p) => ({
      name: p.name,
      description: p.description,
      tenantId: p.tenantId ?? null,
      permissions: [...p.permissions],
      condition: p.condition === undefined || p.condition === "" ? null : p.condition, // checked above (storedCondition)
    })),
    roles: input.roles.map((r) => ({ name: r.name, description: r.description, tenantId: r.tenantId ?? null, policies: [...r.policies] })),
  };
}

// ------------------------------------------------------------------ plan

interface Diff {
  policiesRemoved: StoredPolicy[];
  policiesChanged: Set<string>;
  rolesRemoved: StoredRole[];
  rolesChanged: Set<string>;
  /** Existing roles whose permissions change (through their policies or their attachments). */
  rolesMoved: Set<string>;
}

const same = (a: unknown, b: unknown) => JSON.stringify(a) === JSON.stringify(b);
/** A catalog entry with its keys in one order, stored or made effective alike. */
const canonical = (e: CatalogEntry) => [
  e.resource,
  e.description,
  e.actions,
  e.relations.map((r) => [
    r.name,
    r.actions,
    r.builtIn,
    r.subjects,
    ...[r.inherits, r.requires, r.unless].map((rules) => rules.map((i) => [i.through, i.relation])),
  ]),
];
const sorted = (names: Iterable<string>) => [...names].sort(byCodePoint);

async function planOf(q: Queryable, appId: string, state: State, target: Target): Promise<{ plan: ModelPlan; diff: Diff }> {
  // The catalog, by resource.
  const catalogBefore = new Map(state.catalog.map((e) => [e.resource, e]));
  const catalogAfter = new Map(target.catalog.map((e) => [e.resource, e]));
  const catalog: NameChanges = {
    created: sorted([...catalogAfter.keys()].filter((r) => !catalogBefore.has(r))),
    changed: sorted([...catalogAfter].filter(([r, e]) => catalogBefore.has(r) && !same(canonical(catalogBefore.get(r)!), canonical(e))).map(([r]) => r)),
    removed: sorted([...catalogBefore.keys()].filter((r) => !catalogAfter.has(r))),
  };

  // Policies, by name.
  const policiesBefore = new Map(state.policies.map((p) => [p.name, p]));
  const policiesAfter = new Map(target.policies.map((p) => [p.name, p]));
  const policiesChanged = new Set(
    target.policies
      .filter((p) => {
        const b = policiesBefore.get(p.name);
        return b !== undefined && !same([b.description, b.tenantId, b.permissions, b.condition], [p.description, p.tenantId, p.permissions, p.condition]);
      })
      .map((p) => p.name),
  );
  const policiesRemoved = state.policies.filter((p) => !policiesAfter.has(p.name));
  const policies: NameChanges = {
    created: sorted(target.policies.filter((p) => !policiesBefore.has(p.name)).map((p) => p.name)),
    changed: sorted(policiesChanged),
    removed: sorted(policiesRemoved.map((p) => p.name)),
  };

  // Roles, by scope and name.
  const policyNames = new Map(state.policies.map((p) => [p.policyId, p.name]));
  const rolesBefore = new Map(state.roles.map((r) => [roleKey(r), r]));
  const rolesAfter = new Map(target.roles.map((r) => [roleKey(r), r]));
  const rolesChanged = new Set(
    target.roles
      .filter((r) => {
        const b = rolesBefore.get(roleKey(r));
        return b !== undefined && !same([b.description, b.policyIds.map((id) => policyNames.get(id))], [r.description, r.policies]);
      })
      .map(roleKey),
  );
  const rolesRemoved = state.roles.filter((r) => !rolesAfter.has(roleKey(r)));
  const roles: NameChanges = {
    created: sorted(target.roles.filter((r) => !rolesBefore.has(roleKey(r))).map(roleKey)),
    changed: sorted(rolesChanged),
    removed: sorted(rolesRemoved.map(roleKey)),
  };

  // What the catalog would strand: grants only. The document's policies hold
  // only its catalog's permissions (validateModel), and every other policy
  // goes, so no policy can be left holding a permission the catalog drops.
  let stranding: ModelStranding | undefined;
  if (catalog.created.length + catalog.changed.length + catalog.removed.length > 0) {
    const found = await strandingOf(q, appId, { ...diffCatalog(state.catalog, target.catalog), permissionsRemoved: [] });
    if (found !== undefined) stranding = { message: found.message, uses: found.uses };
  }

  // What each role holds before and after: its policies' permissions.
  // A permission held under a condition is its own key (conditionalKey).
  const storedPermissions = new Map(state.policies.map((p) => [p.policyId, p.permissions.map((x) => conditionalKey(x, p.condition))]));
  const holdsBefore = new Map(state.roles.map((r) => [r.roleId, new Set(r.policyIds.flatMap((id) => storedPermissions.get(id) ?? []))]));
  const targetPermissions = new Map(target.policies.map((p) => [p.name, p.permissions.map((x) => conditionalKey(x, p.condition))]));
  const holdsAfter = new Map<string, Set<string>>();
  for (const r of state.roles) {
    const after = rolesAfter.get(roleKey(r));
    holdsAfter.set(r.roleId, new Set(after === undefined ? [] : after.policies.flatMap((name) => targetPermissions.get(name) ?? [])));
  }
  const moved = state.roles.filter((r) => !same(sorted(holdsBefore.get(r.roleId)!), sorted(holdsAfter.get(r.roleId)!))).map((r) => r.roleId);
  const groups = await modelDocumentStore.roleSets(q, appId, moved);
  const tenants = new Map(state.roles.map((r) => [r.roleId, r.tenantId]));
  // Through grants: what the catalog change makes grants imply, merged per permission.
  const grants = await grantImpact(q, appId, state.catalog, target.catalog);
  const appWide = (roleIds: readonly string[], side: "before" | "after") =>
    new Set(roleIds.filter((id) => tenants.get(id) === null).flatMap((id) => [...((side === "before" ? holdsBefore : holdsAfter).get(id) ?? [])]));
  const roleChange = (roleIds: readonly string[], permission: string, gained: boolean) =>
    impactOf([{ roleIds: [...roleIds], users: 1, sample: [""] }], tenants, holdsBefore, holdsAfter).some(
      (i) => i.permission === permission && i.condition === undefined && (gained ? i.gaining : i.losing) > 0,
    );
  const impact = mergeImpact(impactOf(groups, tenants, holdsBefore, holdsAfter), grants, SAMPLE_SIZE, appWide, roleChange);

  return {
    plan: { version: state.version, catalog, policies, roles, impact, ...(stranding === undefined ? {} : { stranding }) },
    diff: { policiesRemoved, policiesChanged, rolesRemoved, rolesChanged, rolesMoved: new Set(moved) },
  };
}

/**
 * Who gains and who loses each permission, counted as the policy preview
 * counts (impact.ts): a check of tenant t counts the user's
 * application-wide roles and t's, a check without a tenant the
 * application-wide ones; a user gains a permission when some scope of
 * theirs holds it after and not before, loses it when some scope held it
 * before and not after. Users holding the same roles change alike, so this
 * works on groups of them.
 */
export function impactOf(
  groups: readonly UserRoleSet[],
  tenants: ReadonlyMap<string, string | null>,
  before: ReadonlyMap<string, ReadonlySet<string>>,
  after: ReadonlyMap<string, ReadonlySet<string>>,
): Omit<PermissionImpact, "gainingPairs" | "losingPairs" | "atLeast">[] {
  const gaining = new Map<string, UserRoleSet[]>();
  const losing = new Map<string, UserRoleSet[]>();
  const add = (to: Map<string, UserRoleSet[]>, permission: string, group: UserRoleSet) => {
    const list = to.get(permission);
    if (list === undefined) to.set(permission, [group]);
    else if (list.at(-1) !== group) list.push(group);
  };
  for (const group of groups) {
    const scopes = new Set<string | null>([null, ...group.roleIds.map((id) => tenants.get(id) ?? null)]);
    for (const scope of scopes) {
      const held = (holds: ReadonlyMap<string, ReadonlySet<string>>) => {
        const out = new Set<string>();
        for (const id of group.roleIds) {
          const tenant = tenants.get(id) ?? null;
          if (tenant === null || tenant === scope) for (const p of holds.get(id) ?? []) out.add(p);
        }
        return out;
      };
      const b = outright(held(before));
      const a = outright(held(after));
      for (const p of a) if (!b.has(p)) add(gaining, p, group);
      for (const p of b) if (!a.has(p)) add(losing, p, group);
    }
  }
  const count = (of: UserRoleSet[] | undefined) => (of ?? []).reduce((n, g) => n + g.users, 0);
  const sample = (of: UserRoleSet[] | undefined) => (of ?? []).flatMap((g) => g.sample).sort(byCodePoint).slice(0, SAMPLE_SIZE);
  return sorted(new Set([...gaining.keys(), ...losing.keys()])).map((key) => {
    const newline = key.indexOf("\n");
    return {
      permission: newline < 0 ? key : key.slice(0, newline),
      gaining: count(gaining.get(key)),
      losing: count(losing.get(key)),
      gainingSample: sample(gaining.get(key)),
      losingSample: sample(losing.get(key)),
      ...(newline < 0 ? {} : { condition: key.slice(newline + 1) }),
    };
  });
}

/**
 * A permission as impact counts it: "resource:action" when held outright,
 * else that, a newline and the condition it is held under (a permission
 * never holds a newline), so a conditional permission is counted apart.
 */
export const conditionalKey = (permission: string, condition: string | null) => (condition === null ? permission : `${permission}\n${condition}`);

/** The keys held, less those held under a condition that the same scope also holds outright. */
function outright(keys: Set<string>): Set<string> {
  for (const key of keys) {
    const newline = key.indexOf("\n");
    if (newline >= 0 && keys.has(key.slice(0, newline))) keys.delete(key);
  }
  return keys;
}
