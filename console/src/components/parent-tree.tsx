/**
 * An instance's parents, as a tree: the instances its link grants point at
 * (a document's "parent" folder), theirs, and so on upward. Each instance's
 * link grants are read with the list route by instance, one call per link
 * relation of its resource (relations whose holders are instances only, in
 * the catalog). The data may hold a cycle (folder a in b, b in a): an
 * instance already above is shown, marked, and not walked again; and the walk
 * stops 16 levels up, as the checks do.
 */
import { createClient } from "@connectrpc/connect";
import { useTransport } from "@connectrpc/connect-query";
import { useQuery } from "@tanstack/react-query";
import { useMemo } from "react";
import type { CatalogResource } from "../../../gen/authz/v1/catalog_pb.js";
import { RelationshipService } from "../../../gen/authz/v1/relationships_pb.js";
import { effectiveSubjects, isLinkSubjects } from "../lib/holders";
import { ErrorNote } from "./error-note";

/** How far up the walk goes: the checks' own limit (16 hops). */
export const MAX_PARENT_DEPTH = 16;
/** Link grants read per instance and link relation (an instance has a parent or two, not thousands). */
const PER_LINK = 100;

interface Instance {
  resource: string;
  resourceId: string;
}

interface Parent extends Instance {
  /** The link relation that names it. */
  via: string;
}

/** Code-point order, as the service sorts ids. */
const order = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

const text = (i: Instance) => `${i.resource}:${i.resourceId}`;

/** The link relations of a resource in the catalog. */
export const linkRelations = (resources: readonly CatalogResource[], resource: string): string[] =>
  resources.find((r) => r.resource === resource)?.relations.filter((r) => isLinkSubjects(effectiveSubjects(r.subjects))).map((r) => r.name) ?? [];

/** The parents of one instance: its link grants' holders, with whether some were left unread. */
function useParents(instance: Instance, links: string[], enabled: boolean) {
  const transport = useTransport();
  const client = useMemo(() => createClient(RelationshipService, transport), [transport]);
  return useQuery({
    queryKey: ["portcullis.parents", instance.resource, instance.resourceId, links],
    enabled,
    queryFn: async ({ signal }) => {
      const answers = await Promise.all(
        links.map((relation) =>
          client.listRelationships({ resource: instance.resource, resourceId: instance.resourceId, relation, pageSize: PER_LINK }, { signal }),
        ),
      );
      const parents: Parent[] = answers.flatMap((a, i) =>
        a.relationships.flatMap((g) => (g.subject !== undefined && g.userId === "" ? [{ resource: g.subject.resource, resourceId: g.subject.resourceId, via: links[i]! }] : [])),
      );
      parents.sort((a, b) => order(a.via, b.via) || order(a.resource, b.resource) || order(a.resourceId, b.resourceId));
      return { parents, more: answers.some((a) => a.nextPageToken !== "") };
    },
  });
}

/** The tree of `root`'s parents. */
export function ParentTree({ root, resources }: { root: Instance; resources: readonly CatalogResource[] }) {
  if (linkRelations(resources, root.resource).length === 0) {
    return (
      <p role="status">
        {root.resource} has no link relation in the catalog (a relation whose holders are instances, such as a parent folder), so{" "}
        <code>{text(root)}</code> has no parents.
      </p>
    );
  }
  return (
    <ul className="parent-tree" aria-label={`Parents of ${text(root)}`}>
      <ParentNode instance={root} via={undefined} ancestors={[]} resources={resources} />
    </ul>
  );
}

function ParentNode({
  instance,
  via,
  ancestors,
  resources,
}: {
  instance: Instance;
  via: string | undefined;
  /** The instances below this one on the way up from the root, root first. */
  ancestors: string[];
  resources: readonly CatalogResource[];
}) {
  const key = text(instance);
  const depth = ancestors.length;
  const cycle = ancestors.includes(key);
  const links = linkRelations(resources, instance.resource);
  const parents = useParents(instance, links, !cycle && links.length > 0);
  const label = (
    <>
      {via !== undefined && <span className="muted">{via} → </span>}
      <code>{key}</code>
    </>
  );
  if (cycle) {
    return (
      <li className="parent-cycle">
        {label} <span className="muted">(a cycle: already on this path, not followed again)</span>
      </li>
    );
  }
  const found = parents.data?.parents ?? [];
  return (
    <li>
      {label}
      {parents.isPending && links.length > 0 && <span role="status"> Loading parents…</span>}
      {parents.isError && <ErrorNote error={parents.error} title={`The parents of ${key} could not be read`} />}
      {parents.isSuccess && found.length === 0 && depth === 0 && <span className="muted"> (no parents)</span>}
      {parents.isSuccess && found.length > 0 && depth >= MAX_PARENT_DEPTH && (
        <span className="muted"> (has parents further up: not shown, {MAX_PARENT_DEPTH} levels at most)</span>
      )}
      {parents.isSuccess && found.length > 0 && depth < MAX_PARENT_DEPTH && (
        <ul>
          {found.map((p) => (
            <ParentNode key={`${p.via} ${text(p)}`} instance={p} via={p.via} ancestors={[...ancestors, key]} resources={resources} />
          ))}
          {parents.data.more && <li className="muted">More than {PER_LINK} parents through one link: the first {PER_LINK} are shown.</li>}
        </ul>
      )}
    </li>
  );
}
