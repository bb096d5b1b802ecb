/**
 * The world of the groups-and-hierarchy tests (graph-api, graph-model,
 * sql-rules): a catalog with nested teams, a folder forest and documents,
 * and shortcuts for grants to users, subject sets and links.
 */
export const GRAPH_CATALOG = [
  {
    resource: "team",
    description: "",
    actions: ["read"],
    relations: [{ name: "member", actions: ["read"], subjects: ["user", "team#member"] }],
  },
  {
    resource: "folder",
    description: "",
    actions: ["read", "list", "update"],
    relations: [
      { name: "parent", actions: [], subjects: ["folder"] },
      { name: "viewer", actions: ["read", "list"], subjects: ["user", "team#member"], inherits: [{ through: "parent", relation: "viewer" }] },
      { name: "editor", actions: ["read", "update"], subjects: ["user", "team#member"], inherits: [{ through: "parent", relation: "editor" }] },
    ],
  },
  {
    resource: "document",
    description: "",
    actions: ["read", "update", "delete"],
    relations: [
      { name: "parent", actions: [], subjects: ["folder"] },
      { name: "viewer", actions: ["read"], subjects: ["user", "team#member"], inherits: [{ through: "parent", relation: "viewer" }] },
      { name: "editor", actions: ["read", "update"], subjects: ["user", "team#member"], inherits: [{ through: "parent", relation: "editor" }] },
    ],
  },
];

/**
 * GRAPH_CATALOG plus groups that are not only nested groups: a group's
 * members are users, teams' members and the viewers of a folder (fed by
 * links), and a group may view a document. The service meets teams from
 * the user's side (AccessModel.groups) but must walk groups down: the
 * walk from a document goes through a group to a team, then meets.
 */
export const OPEN_GROUPS_CATALOG = [
  ...GRAPH_CATALOG.map((entry) =>
    entry.resource !== "document"
      ? entry
      : { ...entry, relations: entry.relations.map((r) => (r.name === "viewer" ? { ...r, subjects: [...r.subjects, "group#member"] } : r)) },
  ),
  { resource: "group", description: "", actions: ["read"], relations: [{ name: "member", actions: ["read"], subjects: ["user", "team#member", "folder#viewer", "group#member"] }] },
];

/**
 * GRAPH_CATALOG where every user may be given a team's membership and a
 * folder's or a document's viewer at once ("user:*", API.md "Everyone"):
 * public folders whose documents inherit it, and a team everyone is in.
 */
export const ALL_USERS_CATALOG = GRAPH_CATALOG.map((entry) => ({
  ...entry,
  relations: entry.relations.map((r) => (r.name === "member" || r.name === "viewer" ? { ...r, subjects: [...r.subjects, "user:*"] } : r)),
}));

type Subject = { resource: string; resourceId: string; relation?: string };
export interface AnyGrant {
  userId?: string;
  subject?: Subject;
  resource: string;
  resourceId: string;
  relation: string;
  expiresAt?: string;
}
/** A grant every user holds (API.md, "Everyone"): where the relation's subjects include "user:*". */
export interface EveryoneGrant {
  allUsers: true;
  resource: string;
  resourceId: string;
  relation: string;
  expiresAt?: string;
}
export const everyone = (resource: string, resourceId: string, relation: string): EveryoneGrant => ({ allUsers: true, resource, resourceId, relation });

export const user = (userId: string, resource: string, resourceId: string, relation: string): AnyGrant => ({ userId, resource, resourceId, relation });
export const set = (subject: string, resource: string, resourceId: string, relation: string): AnyGrant => {
  const [res, rest] = subject.split(":") as [string, string];
  const [id, rel] = rest.split("#") as [string, string | undefined];
  return { subject: { resource: res, resourceId: id, ...(rel === undefined ? {} : { relation: rel }) }, resource, resourceId, relation };
};

/** A grant as a sentence: "alice is member of team:eng", "folder:a is parent of document:1". */
export const text = (g: AnyGrant | EveryoneGrant): string => {
  // An answer's grants all carry allUsers (false for the others).
  if ((g as { allUsers?: boolean }).allUsers === true) return `everyone is ${g.relation} of ${g.resource}:${g.resourceId}`;
  const a = g as AnyGrant;
  const holder = a.subject === undefined ? a.userId! : `${a.subject.resource}:${a.subject.resourceId}${a.subject.relation ? `#${a.subject.relation}` : ""}`;
  return `${holder} is ${g.relation} of ${g.resource}:${g.resourceId}`;
};


/**
 * A small world on GRAPH_CATALOG, by name: alice is in team platform,
 * platform is in team eng, bob is in eng; eng's members view folder
 * runbooks, whose parent is folder root (carol edits root); runbooks is the
 * parent of documents d1 and d2.
 */
export const SMALL_WORLD = {
  alice: user("alice", "team", "platform", "member"),
  nested: set("team:platform#member", "team", "eng", "member"),
  bob: user("bob", "team", "eng", "member"),
  engViews: set("team:eng#member", "folder", "runbooks", "viewer"),
  rootLink: set("folder:root", "folder", "runbooks", "parent"),
  d1Link: set("folder:runbooks", "document", "d1", "parent"),
  d2Link: set("folder:runbooks", "document", "d2", "parent"),
  carol: user("carol", "folder", "root", "editor"),
};
