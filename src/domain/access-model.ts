import { Metrics } from "../lib/metrics.js";
import type { Db, Queryable } from "../store/db.js";
import { modelStore, type ModelRows } from "../store/model-store.js";
import type { GraphGroups, InwardStep } from "../store/graph-store.js";
import { isUserSubject } from "./subjects.js";
import { DecisionRules } from "./relation-decision.js";
import type { RelationShape } from "./relation-strata.js";

interface ResourceModel {
  actions: Set<string>;
  /** relation → the actions it implies */
  relations: Map<string, Set<string>>;
  /** relation → what its grants may name as holder ("user", "team#member", "folder") */
  subjects: Map<string, string[]>;
  /** relation → its inheritance rules */
  inherits: Map<string, { through: string; relation: string }[]>;
  /** relation → its `requires` and `unless` entries (none: absent) */
  operators: Map<string, { requires: { through: string; relation: string }[]; unless: { through: string; relation: string }[] }>;
}

/**
 * An entry as the check's walk names the root it starts for it: its
 * relation on the instance, or `through>relation` for one through a link
 * (no relation is named so: names are lowercase letters, digits and "_").
 */
export const entryName = (e: { through: string; relation: string }): string => (e.through === "" ? e.relation : `${e.through}>${e.relation}`);

/** A relation implying the action, with the entries the check's walk decides (AccessModel.quickRules), by entryName. */
export interface QuickRule {
  relation: string;
  requires: string[];
  unless: string[];
}

interface RoleModel {
  /** null: the role holds application-wide */
  tenantId: string | null;
  /** "resource:action" held outright */
  permissions: Set<string>;
  /** "resource:action" → the conditions of the policies that grant it, any of which must hold */
  conditional: Map<string, string[]>;
}

/**
 * One application's access model at one version: the catalog and what each
 * role holds. Immutable: a change anywhere makes a new version, read whole.
 */
export class AccessModel {
  private constructor(
    readonly version: string,
    private readonly resources: Map<string, ResourceModel>,
    private readonly roles: Map<string, RoleModel>,
    /**
     * Some relation names a subject set or a link, or inherits: questions
     * then walk the graph (store/graph-store.ts); otherwise the direct
     * statements answer.
     */
    readonly hierarchical: boolean,
    /** Some policy attached to a role has a condition: a role may then hold a permission only where it holds. */
    readonly policyConditions: boolean,
  ) {}

  /**
   * Some relation has a `requires` or an `unless`: the walks' answers are
   * then a superset, and the relations held are decided over the rows a
   * question reaches (operator-answers.ts).
   */
  get operators(): boolean {
    return (this.operatorsOf ??= [...this.resources.values()].some((m) => m.operators.size > 0));
  }

  private operatorsOf: boolean | undefined;

  /** The rules as the decision reads them (relation-decision.ts), built on first use. */
  get decisionRules(): DecisionRules {
    if (this.rulesOf !== undefined) return this.rulesOf;
    const shape = new Map(
      [...this.resources].map(([resource, m]) => [
        resource,
        new Map(
          [...m.relations.keys()].map((relation): [string, RelationShape] => [
            relation,
            {
              subjects: m.subjects.get(relation) ?? [],
              inherits: m.inherits.get(relation) ?? [],
              requires: m.operators.get(relation)?.requires ?? [],
              unless: m.operators.get(relation)?.unless ?? [],
            },
          ]),
        ),
      ]),
    );
    return (this.rulesOf = new DecisionRules(shape));
  }

  private rulesOf: DecisionRules | undefined;

  static from(rows: ModelRows): AccessModel {
    const resources = new Map<string, ResourceModel>();
    for (const [resource, actions] of rows.resources) {
      resources.set(resource, { actions: new Set(actions), relations: new Map(), subjects: new Map(), inherits: new Map(), operators: new Map() });
    }
    let hierarchical = rows.inherits.length > 0;
    for (const [resource, relation, actions, subjects] of rows.relations) {
      const model = resources.get(resource);
      model?.relations.set(relation, new Set(actions));
      model?.subjects.set(relation, subjects);
      // Users alone, one or all of them ("user:*"), need no walk: the direct statement reads both.
      if (!subjects.every(isUserSubject)) hierarchical = true;
    }
    for (const [resource, relation, through, inherited] of rows.inherits) {
      const model = resources.get(resource);
      if (model === undefined) continue;
      let rules = model.inherits.get(relation);
      if (rules === undefined) model.inherits.set(relation, (rules = []));
      rules.push({ through, relation: inherited });
    }
    for (const [resource, relation, operator, through, target] of rows.operators ?? []) {
      const model = resources.get(resource);
      if (model === undefined) continue;
      let entries = model.operators.get(relation);
      if (entries === undefined) model.operators.set(relation, (entries = { requires: [], unless: [] }));
      entries[operator].push({ through, relation: target });
      hierarchical = true;
    }
    const roles = new Map<string, RoleModel>();
    let policyConditions = false;
    for (const [roleId, tenantId, resource, action, conditions] of rows.permissions) {
      let role = roles.get(roleId);
      if (role === undefined) roles.set(roleId, (role = { tenantId, permissions: new Set(), conditional: new Map() }));
      if (conditions === null) role.permissions.add(`${resource}:${action}`);
      else {
        role.conditional.set(`${resource}:${action}`, conditions);
        policyConditions = true;
      }
    }
    return new AccessModel(rows.version, resources, roles, hierarchical, policyConditions);
  }

  /** "X#R" → the edges that reach it in one hop; computed once per model, on first use. */
  private into: Map<string, InwardStep[]> | undefined;
  /** `into` but for the copies of edges leaving a relation another inherits within the instance. */
  private intoGroups: Map<string, InwardStep[]> | undefined;

  private oneHopInto(): Map<string, InwardStep[]> {
    if (this.into !== undefined) return this.into;
    const into = new Map<string, InwardStep[]>();
    const add = (step: InwardStep) => {
      const to = `${step.r}#${step.g}`;
      const list = into.get(to);
      if (list === undefined) into.set(to, [step]);
      else list.push(step);
    };
    for (const [x, model] of this.resources) {
      for (const [relation, subjects] of model.subjects) {
        for (const subject of subjects) {
          const hash = subject.indexOf("#");
          if (hash > 0) add({ fr: subject.slice(0, hash), fl: subject.slice(hash + 1), sr: subject.slice(hash + 1), r: x, p: relation, g: relation });
        }
      }
      for (const [relation, rules] of model.inherits) {
        for (const rule of rules) {
          if (rule.through === "") continue; // within the instance: folded in below
          for (const linked of model.subjects.get(rule.through) ?? []) {
            if (!linked.includes("#") && !isUserSubject(linked)) add({ fr: linked, fl: rule.relation, sr: "", r: x, p: rule.through, g: relation });
          }
        }
      }
    }
    // Whoever holds a relation that R inherits within the instance holds R
    // there, at no hop. So an edge into X#R' reaches X#R too (its `g` is
    // R); and an edge leaving Y#R leaves from each such Y#R' too (its `fl`
    // is R', the grant row the same: its subject relation stays R's).
    for (const [x, model] of this.resources) {
      for (const relation of model.inherits.keys()) {
        for (const inherited of this.withinInstance(x, [relation]).slice(1)) {
          for (const step of into.get(`${x}#${inherited}`) ?? []) add({ ...step, g: relation });
        }
      }
    }
    // Groups read these (groups()): the user's side starts from a group's
    // own relation and those it inherits within the instance (`h`), so an
    // edge leaving one of those is the group's edge already.
    this.intoGroups = new Map([...into].map(([pair, steps]) => [pair, [...steps]]));
    const seen = new Set<string>();
    for (const steps of into.values()) {
      for (const step of steps) seen.add(JSON.stringify(step));
      for (const step of [...steps]) {
        for (const relation of this.withinInstance(step.fr, [step.fl]).slice(1)) {
          const copy = { ...step, fl: relation };
          const key = JSON.stringify(copy);
          if (!seen.has(key)) {
            seen.add(key);
            steps.push(copy);
          }
        }
      }
    }
    return (this.into = into);
  }

  /**
   * `relations` and every relation of `resource` whose holders hold one of
   * them on the same instance, by inherits rules with no link, transitively
   * (the catalog refuses cycles of them).
   */
  withinInstance(resource: string, relations: readonly string[]): string[] {
    const rules = this.resources.get(resource)?.inherits;
    const out = [...relations];
    if (rules === undefined) return out;
    for (let k = 0; k < out.length; k++) {
      for (const rule of rules.get(out[k]!) ?? []) if (rule.through === "" && !out.includes(rule.relation)) out.push(rule.relation);
    }
    return out;
  }

  /**
   * The relations implying `action` on `resource` with their `requires` and
   * `unless` entries, where the check's own walk decides them: no relation
   * below the relation's own grants and inherits, nor below an entry (on
   * the instance, or on each type its `through` links to), has entries of
   * its own. The walk then gives each relation and each entry exactly (it
   * follows grants, sets, links and inherits; an entry is a root of its own,
   * named by entryName, whose walk starts its bound again where the entry
   * is asked), and the answer is the rule applied to what it found
   * (check-questions.ts, quickAnswer). Undefined where some relation does
   * not qualify: the decision's statement answers.
   */
  quickRules(resource: string, action: string): QuickRule[] | undefined {
    const key = `${resource}\0${action}`;
    if (this.quickOf.has(key)) return this.quickOf.get(key);
    const model = this.resources.get(resource);
    let out: QuickRule[] | undefined = [];
    for (const relation of this.relationsImplying(resource, action)) {
      const entries = model?.operators.get(relation) ?? { requires: [], unless: [] };
      const all = [...entries.requires, ...entries.unless];
      const asked = all.flatMap((e): [string, string][] =>
        e.through === "" ? [[resource, e.relation]] : (model?.subjects.get(e.through) ?? []).map((linked): [string, string] => [linked, e.relation]),
      );
      if (!this.plainBelow([[resource, relation]], false) || !this.plainBelow(asked, true)) {
        out = undefined;
        break;
      }
      out.push({ relation, requires: entries.requires.map(entryName), unless: entries.unless.map(entryName) });
    }
    this.quickOf.set(key, out);
    return out;
  }

  private readonly quickOf = new Map<string, QuickRule[] | undefined>();

  /**
   * Whether no relation reached from `starts` by subject sets and inherits
   * (within the instance and through links) has `requires` or `unless`;
   * the starts themselves are judged only with `startsToo` (or when reached
   * again).
   */
  private plainBelow(starts: [string, string][], startsToo: boolean): boolean {
    const seen = new Set<string>();
    const queue: [string, string, boolean][] = starts.map(([r, l]) => [r, l, startsToo]);
    while (queue.length > 0) {
      const [resource, relation, judged] = queue.pop()!;
      const k = `${resource}#${relation}`;
      if (judged) {
        if (seen.has(k)) continue;
        seen.add(k);
      }
      const model = this.resources.get(resource);
      if (model === undefined) continue;
      if (judged && model.operators.has(relation)) return false;
      for (const subject of model.subjects.get(relation) ?? []) {
        const hash = subject.indexOf("#");
        if (hash > 0) queue.push([subject.slice(0, hash), subject.slice(hash + 1), true]);
      }
      for (const rule of model.inherits.get(relation) ?? []) {
        if (rule.through === "") queue.push([resource, rule.relation, true]);
        else for (const linked of model.subjects.get(rule.through) ?? []) queue.push([linked, rule.relation, true]);
      }
    }
    return true;
  }

  /**
   * The entries of quickRules(resource, action) that imply no `action`, by
   * their entryName: the check's walk starts from them too, so that it
   * finds whether each holds (keyed `resource\0action`); and each entry
   * through a link, as the rule its walk follows (`entries`: from r#n
   * through the link t to l on the linked instances, its bound started
   * again there).
   */
  private quickWalks(): { walks: Record<string, string[]>; entries: { r: string; n: string; t: string; l: string }[] } {
    const walks: Record<string, string[]> = {};
    const entries = new Map<string, { r: string; n: string; t: string; l: string }>();
    if (!this.operators) return { walks, entries: [] };
    for (const [resource, model] of this.resources) {
      for (const action of model.actions) {
        if (this.quickRules(resource, action) === undefined) continue;
        const extra = new Set<string>();
        for (const relation of this.relationsImplying(resource, action)) {
          const ops = model.operators.get(relation);
          for (const e of [...(ops?.requires ?? []), ...(ops?.unless ?? [])]) {
            if (e.through !== "") entries.set(`${resource}#${entryName(e)}`, { r: resource, n: entryName(e), t: e.through, l: e.relation });
            if (e.through !== "" || !model.relations.get(e.relation)?.has(action)) extra.add(entryName(e));
          }
        }
        if (extra.size > 0) walks[`${resource}\0${action}`] = [...extra].sort();
      }
    }
    return { walks, entries: [...entries.values()] };
  }

  /** The relations of the resource that imply the action, in catalog order. */
  relationsImplying(resource: string, action: string): string[] {
    const relations = this.resources.get(resource)?.relations;
    if (relations === undefined) return [];
    return [...relations].filter(([, actions]) => actions.has(action)).map(([relation]) => relation);
  }

  /** inward's answers by resource and targets, computed once per model (a model never changes). */
  private readonly inwardOf = new Map<string, { steps: InwardStep[]; last: InwardStep[] }>();

  /**
   * What lookup walks (store/graph-store.ts), from the catalog of this
   * version: the edges into one of `targets` (relations of `resource`)
   * themselves (`last`), and the edges between the (resource, relation)
   * pairs from which a target can be reached in one hop or more (`steps`: a
   * pair Y#r reaches X#R in one hop when R names the subject set "Y#r", or
   * when R inherits r through a link L of X that names Y). Those pairs are
   * the edges' origins, where the walk starts from the user's own grants.
   * The statement follows only these edges, each one index probe of its
   * own: nothing is read to be dropped, and the plan does not rest on the
   * planner's guess of which catalog rows match.
   */
  inward(resource: string, targets: readonly string[]): { steps: InwardStep[]; last: InwardStep[] } {
    const key = `${resource}#${targets.join(",")}`;
    const known = this.inwardOf.get(key);
    if (known !== undefined) return known;
    const into = this.oneHopInto();
    const seen = new Set<string>();
    const queue = targets.map((t) => `${resource}#${t}`);
    const last = queue.flatMap((target) => into.get(target) ?? []);
    while (queue.length > 0) {
      for (const step of into.get(queue.pop()!) ?? []) {
        const from = `${step.fr}#${step.fl}`;
        if (seen.has(from)) continue;
        seen.add(from);
        queue.push(from);
      }
    }
    // Every edge into a pair reached comes from a pair reached.
    const walked = { steps: [...seen].flatMap((pair) => into.get(pair) ?? []), last };
    this.inwardOf.set(key, walked);
    return walked;
  }

  private groupsOf: GraphGroups | undefined;

  /**
   * The groups the check meets from the user's side (store/graph-check-sql.ts,
   * graphCheckSql): the (resource, relation) pairs named as subject sets
   * ("team#member") into which every edge comes from another such pair.
   * That is what makes the meeting exact: whoever holds a group holds it
   * through users' grants of groups and groups nested in groups, all of
   * which the user's side walks. The largest such set: pairs are dropped
   * while one has an edge from outside it. Pairs reached through a link
   * are dropped too, though the walk would stay exact: walked from the
   * user, a link goes down a tree (a folder's viewer views every folder
   * below it), which is wide; walked up, a group's members nest a few
   * levels at most. The check's walk from the instance stops at the
   * groups and the statement walks up from the user's own memberships
   * instead: walked down, the 4-hop check probed every team inside a parent
   * team. An edge into a relation that a group's relation inherits within
   * the instance (a subject set granted a team's admin, who are its
   * members) is an edge into the group, and the user's own grants of those
   * relations start from it too (each pair's `h`). `steps` are the edges
   * into them; `key` tells two sets apart.
   */
  groups(): GraphGroups {
    if (this.groupsOf !== undefined) return this.groupsOf;
    this.oneHopInto();
    const into = this.intoGroups!;
    const pairs = new Set<string>();
    for (const [, model] of this.resources) {
      for (const subjects of model.subjects.values()) {
        for (const subject of subjects) {
          const hash = subject.indexOf("#");
          if (hash > 0 && this.resources.get(subject.slice(0, hash))?.relations.has(subject.slice(hash + 1)) === true) pairs.add(subject);
        }
      }
    }
    const open = (pair: string) => (into.get(pair) ?? []).some((step) => step.sr === "" || !pairs.has(`${step.fr}#${step.fl}`));
    for (let dropped = true; dropped; ) {
      dropped = false;
      for (const pair of pairs) {
        if (open(pair)) {
          pairs.delete(pair);
          dropped = true;
        }
      }
    }
    const sorted = [...pairs].sort();
    // A group is held through the user's own grants of its relation and of
    // those it inherits within the instance (`h`: a team's admins are its members).
    const groupPairs = sorted.flatMap((pair) => {
      const hash = pair.indexOf("#");
      const r = pair.slice(0, hash);
      const l = pair.slice(hash + 1);
      return this.withinInstance(r, [l]).map((h) => ({ r, l, h }));
    });
    const within = [...this.resources.values()].some((model) => [...model.inherits.values()].some((rules) => rules.some((rule) => rule.through === "")));
    const { walks, entries } = this.quickWalks();
    return (this.groupsOf = {
      pairs: groupPairs,
      steps: sorted.flatMap((pair) => into.get(pair) ?? []),
      within,
      walks,
      entries,
      // The walks' roots and rules are part of the shape: facts read without an entry's root must not decide by it.
      key: `${within ? "within:" : ""}${groupPairs.map((p) => `${p.r}#${p.l}#${p.h}`).join(",")}${Object.keys(walks).length === 0 ? "" : `;${JSON.stringify([walks, entries])}`}`,
    });
  }

  /** resource → relation → what its grants may name as holder: what a grant is checked against (relationships.ts's checkGrant). */
  get grantSubjects(): ReadonlyMap<string, ReadonlyMap<string, string[]>> {
    return (this.subjectsOf ??= new Map([...this.resources].map(([resource, m]) => [resource, m.subjects])));
  }

  private subjectsOf: Map<string, Map<string, string[]>> | undefined;

  hasResource(resource: string): boolean {
    return this.resources.has(resource);
  }

  hasAction(resource: string, action: string): boolean {
    return this.resources.get(resource)?.actions.has(action) ?? false;
  }

  /**
   * Allowed when one of the user's relations on the instance implies the
   * action, or one of the user's roles (application-wide, or of the asked
   * tenant) holds resource:action through a policy.
   */
  allows(
    q: { resource: string; action: string; tenantId: string | undefined },
    relations: readonly string[],
    roleIds: readonly string[],
  ): boolean {
    const implied = this.resources.get(q.resource)?.relations;
    if (implied !== undefined) {
      for (const relation of relations) if (implied.get(relation)?.has(q.action)) return true;
    }
    if (roleIds.length === 0) return false;
    const permission = `${q.resource}:${q.action}`;
    for (const roleId of roleIds) {
      const role = this.roles.get(roleId);
      if (role === undefined || (role.tenantId !== null && role.tenantId !== q.tenantId)) continue;
      if (role.permissions.has(permission)) return true;
    }
    return false;
  }

  /** Whether the role, in the question's scope (application-wide, or of its tenant), holds resource:action. */
  roleAllows(roleId: string, q: { resource: string; action: string; tenantId: string | undefined }): boolean {
    const role = this.roles.get(roleId);
    if (role === undefined || (role.tenantId !== null && role.tenantId !== q.tenantId)) return false;
    return role.permissions.has(`${q.resource}:${q.action}`);
  }

  /**
   * The conditions under which the role, in the question's scope, holds
   * resource:action through policies with a condition (any one must hold);
   * none when it holds it outright or not at all.
   */
  roleConditions(roleId: string, q: { resource: string; action: string; tenantId: string | undefined }): readonly string[] {
    const role = this.roles.get(roleId);
    if (role === undefined || (role.tenantId !== null && role.tenantId !== q.tenantId)) return NO_CONDITIONS;
    return role.conditional.get(`${q.resource}:${q.action}`) ?? NO_CONDITIONS;
  }

  /** Whether the role holds anything only by a policy with a condition. */
  roleHasConditions(roleId: string): boolean {
    return (this.roles.get(roleId)?.conditional.size ?? 0) > 0;
  }

  /** The resource's actions in catalog order (none for a resource the catalog lacks). */
  catalogActions(resource: string): string[] {
    return [...(this.resources.get(resource)?.actions ?? [])];
  }

  /** The actions a relation of the resource implies (none for a relation or resource the catalog lacks). */
  actionsOf(resource: string, relation: string): ReadonlySet<string> {
    return this.resources.get(resource)?.relations.get(relation) ?? NO_ACTIONS;
  }

  /**
   * Every action of the resource that allows() would allow, in catalog
   * order: the union of what the relations imply and what the roles in
   * scope hold, by the same rules.
   */
  actionsAllowed(q: { resource: string; tenantId: string | undefined }, relations: readonly string[], roleIds: readonly string[]): string[] {
    const resource = this.resources.get(q.resource);
    if (resource === undefined) return [];
    const allowed = new Set<string>();
    for (const relation of relations) for (const action of resource.relations.get(relation) ?? []) allowed.add(action);
    for (const roleId of roleIds) {
      const role = this.roles.get(roleId);
      if (role === undefined || (role.tenantId !== null && role.tenantId !== q.tenantId)) continue;
      for (const action of resource.actions) if (role.permissions.has(`${q.resource}:${action}`)) allowed.add(action);
    }
    return [...resource.actions].filter((action) => allowed.has(action));
  }
}

const NO_ACTIONS: ReadonlySet<string> = new Set();
const NO_CONDITIONS: readonly string[] = [];

const MODELS_MAX = 1_000;

/**
 * The models of the applications this replica checks for, kept by version.
 * A copy is used only when the version a check statement read equals the
 * copy's version (see Checker), so a change committed on any replica is seen
 * by the next check on every replica; a stale copy is read again, whole.
 */
export class AccessModels {
  private readonly models = new Map<string, AccessModel>();
  /** Loads in flight, per application, with where they read from. */
  private readonly loading = new Map<string, { from: Queryable; model: Promise<AccessModel | undefined> }>();

  constructor(
    private readonly db: Db,
    private readonly metrics: Metrics = Metrics.off,
  ) {}

  /** The newest model of the application this replica holds, whatever its version. */
  latest(appId: string): AccessModel | undefined {
    return this.models.get(appId);
  }

  /** The cached model of the application when it is at `version`. */
  cached(appId: string, version: string): AccessModel | undefined {
    const model = this.models.get(appId);
    return model?.version === version ? model : undefined;
  }

  /**
   * Reads the application's current model from `from` (the database by
   * default; a read replica answering a check reads its model there too):
   * one load at a time per application and source. A load from elsewhere is
   * not shared: a replica's model may be older than the primary's, and a
   * model read where the check statement ran is never older than what that
   * statement read.
   */
  load(appId: string, from: Queryable = this.db): Promise<AccessModel | undefined> {
    const pending = this.loading.get(appId);
    if (pending !== undefined && pending.from === from) return pending.model;
    this.metrics.modelReloaded(this.models.has(appId) ? "changed" : "first");
    const model = modelStore.load(from, appId).then(
      (rows) => {
        if (this.loading.get(appId)?.model === model) this.loading.delete(appId);
        if (rows === undefined) {
          this.models.delete(appId);
          return undefined;
        }
        const loaded = AccessModel.from(rows);
        const current = this.models.get(appId);
        // A slower load from a replica must not replace a newer copy.
        if (current !== undefined && BigInt(current.version) > BigInt(loaded.version)) return loaded;
        this.models.delete(appId); // re-inserted last: the map's order is the eviction order
        if (this.models.size >= MODELS_MAX) this.models.delete(this.models.keys().next().value!);
        this.models.set(appId, loaded);
        return loaded;
      },
      (error: unknown) => {
        if (this.loading.get(appId)?.model === model) this.loading.delete(appId);
        throw error;
      },
    );
    this.loading.set(appId, { from, model });
    return model;
  }
}
