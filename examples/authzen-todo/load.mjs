#!/usr/bin/env node
// Loads the OpenID AuthZEN working group's "Todo" interop scenario into a
// running Portcullis (README.md beside this file says how it maps): an
// application, its catalog, policies (the ownership rule a policy's
// condition) and roles, the five users' role assignments and stored
// properties (their e-mail addresses, which the ownership rule compares
// with a todo's ownerID), and an API key with the
// `check` scope for the PEP, which it prints on stdout (progress goes to
// stderr).
//
//   node examples/authzen-todo/load.mjs --url http://127.0.0.1:8080 --key $OPERATOR_KEY [--app todo]
//
// PORTCULLIS_URL and PORTCULLIS_OPERATOR_KEY may stand for --url and --key.
// Plain Node (20 or later), nothing to install: it speaks the REST API with fetch.

import { parseArgs } from "node:util";

// The scenario's users: subject.id is the opaque id the Todo app's PEP sends
// (its identity provider's `sub`), not the e-mail.
const USERS = [
  { id: "CiRmZDA2MTRkMy1jMzlhLTQ3ODEtYjdiZC04Yjk2ZjVhNTEwMGQSBWxvY2Fs", name: "Rick Sanchez", email: "rick@the-citadel.com", roles: ["admin", "evil_genius"] },
  { id: "CiRmZDE2MTRkMy1jMzlhLTQ3ODEtYjdiZC04Yjk2ZjVhNTEwMGQSBWxvY2Fs", name: "Morty Smith", email: "morty@the-citadel.com", roles: ["editor"] },
  { id: "CiRmZDI2MTRkMy1jMzlhLTQ3ODEtYjdiZC04Yjk2ZjVhNTEwMGQSBWxvY2Fs", name: "Summer Smith", email: "summer@the-smiths.com", roles: ["editor"] },
  { id: "CiRmZDM2MTRkMy1jMzlhLTQ3ODEtYjdiZC04Yjk2ZjVhNTEwMGQSBWxvY2Fs", name: "Beth Smith", email: "beth@the-smiths.com", roles: ["viewer"] },
  { id: "CiRmZDQ2MTRkMy1jMzlhLTQ3ODEtYjdiZC04Yjk2ZjVhNTEwMGQSBWxvY2Fs", name: "Jerry Smith", email: "jerry@the-smiths.com", roles: ["viewer"] },
];

// The PEP asks about two resource types: users (can_read_user) and todos.
const CATALOG = [
  { resource: "user", description: "A user of the Todo app", actions: ["can_read_user"] },
  { resource: "todo", description: "A todo", actions: ["can_read_todos", "can_create_todo", "can_update_todo", "can_delete_todo"] },
];

const POLICIES = {
  read: { name: "Read users and todos", permissions: ["user:can_read_user", "todo:can_read_todos"] },
  create: { name: "Create todos", permissions: ["todo:can_create_todo"] },
  updateAny: { name: "Update any todo", permissions: ["todo:can_update_todo"] },
  deleteAny: { name: "Delete any todo", permissions: ["todo:can_delete_todo"] },
  // The ownership rule, written once as the policy's condition: a todo's
  // owner is its ownerID, an e-mail (which the PEP sends as a resource
  // property); the user's is a stored property.
  changeOwn: {
    name: "Update and delete one's own todos",
    permissions: ["todo:can_update_todo", "todo:can_delete_todo"],
    condition: "resource.properties.ownerID == subject.properties.email",
  },
};

// The scenario's roles, each a set of policies: an editor changes the todos
// they own; admin and evil_genius are editors who may also delete, or
// update, any todo.
const ROLES = {
  viewer: ["read"],
  editor: ["read", "create", "changeOwn"],
  admin: ["read", "create", "changeOwn", "deleteAny"],
  evil_genius: ["read", "create", "changeOwn", "updateAny"],
};

const { values } = parseArgs({
  options: { url: { type: "string" }, key: { type: "string" }, app: { type: "string", default: "todo" } },
});
const url = (values.url ?? process.env.PORTCULLIS_URL ?? "").replace(/\/+$/, "");
const operatorKey = values.key ?? process.env.PORTCULLIS_OPERATOR_KEY ?? "";
const appId = values.app;
if (url === "" || operatorKey === "") {
  process.stderr.write("usage: load.mjs --url URL --key OPERATOR_KEY [--app todo] (or PORTCULLIS_URL, PORTCULLIS_OPERATOR_KEY)\n");
  process.exit(2);
}

/** One REST call with the operator key; any answer but a 2xx stops the script, saying what the service said. */
async function call(method, path, body) {
  const res = await fetch(url + path, {
    method,
    headers: { "x-api-key": operatorKey, ...(body === undefined ? {} : { "content-type": "application/json" }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${text}`);
  return JSON.parse(text);
}

const say = (line) => process.stderr.write(`${line}\n`);
const app = `/api/v1/applications/${encodeURIComponent(appId)}`;

try {
  await call("POST", "/api/v1/applications", { appId, name: "AuthZEN Todo interop" });
  await call("PUT", `${app}/resources`, { resources: CATALOG });
  say(`application ${appId}: catalog of ${CATALOG.map((r) => r.resource).join(" and ")}`);

  const policyIds = {};
  for (const [key, policy] of Object.entries(POLICIES)) policyIds[key] = (await call("POST", `${app}/policies`, policy)).policyId;
  const roleIds = {};
  for (const [name, policies] of Object.entries(ROLES)) {
    roleIds[name] = (await call("POST", `${app}/roles`, { name, policyIds: policies.map((p) => policyIds[p]) })).roleId;
  }
  say(`${Object.keys(POLICIES).length} policies, ${Object.keys(ROLES).length} roles`);

  for (const user of USERS) {
    const path = `${app}/users/${encodeURIComponent(user.id)}`;
    await call("PUT", `${path}/properties`, { email: user.email, name: user.name });
    for (const role of user.roles) await call("POST", `${app}/roles/${roleIds[role]}/assignments`, { userId: user.id });
    say(`${user.name}: ${user.roles.join(", ")}`);
  }

  const key = await call("POST", `${app}/api-keys`, { name: "authzen-pep", scopes: ["check"] });
  say("the PEP's API key (scope check), shown once:");
  process.stdout.write(`${key.key}\n`);
} catch (error) {
  say(error instanceof Error ? error.message : String(error));
  process.exit(1);
}
