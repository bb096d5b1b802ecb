/**
 * The AuthZEN Authorization API's evaluations on each engine, through a real
 * port (fetch over REST as a PEP calls it; a typed Connect client and one
 * over gRPC): decisions by grants, roles and conditions fed by the request's
 * properties and context; the standard's denies where this API would answer
 * a 400; Access Evaluations' defaults and its three semantics; the key as a
 * bearer token or X-API-Key, its scope and its revocation; X-Request-ID;
 * every malformed body a 400 naming the field and nothing a 5xx; and the
 * metadata at /.well-known/authzen-configuration.
 */
import { createClient } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import http from "node:http";
import http2 from "node:http2";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AccessService } from "../gen/authzen/v1/access_pb.js";
import { admin, createApp, expectStatus } from "./helpers/authz.js";
import { expectErrorBody } from "./helpers/error-body.js";
import { createTestDatabase, oneEngine, type TestDatabase } from "./support/engines.js";
import { ADMIN_KEY, startTestService, type TestService } from "./support/service.js";

const CATALOG = [
  { resource: "document", description: "", actions: ["read", "update", "delete", "share"], relations: [{ name: "reviewer", actions: ["read"] }] },
  { resource: "folder", description: "", actions: ["read"] },
];

const EVALUATION = "/access/v1/evaluation";
const EVALUATIONS = "/access/v1/evaluations";

type Json = Record<string, unknown>;

/** An AuthZEN request about user `user`, `action` on `type`:`id`. */
const q = (user: string, type: string, id: string, action: string, extra: Json = {}): Json => ({
  subject: { type: "user", id: user },
  action: { name: action },
  resource: { type, id },
  ...extra,
});

describe.each(oneEngine(import.meta.url))("AuthZEN evaluations, on %s", (engine) => {
  let database: TestDatabase;
  let service: TestService;
  let key: string;

  /** A POST as a PEP sends it: JSON, the key as a bearer token unless `headers` say otherwise. */
  const post = async (path: string, body: unknown, headers: Record<string, string> = {}) => {
    const res = await fetch(`${service.url}${path}`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${key}`, ...headers },
      body: typeof body === "string" ? body : JSON.stringify(body),
    });
    const text = await res.text();
    let json: any;
    try {
      json = JSON.parse(text);
    } catch {
      json = text;
    }
    return { status: res.status, text, body: json, headers: res.headers };
  };
  const decide = async (body: Json): Promise<boolean> => {
    const res = await post(EVALUATION, body);
    expect(res.status, res.text).toBe(200);
    expect(Object.keys(res.body)).toEqual(["decision"]);
    return res.body.decision as boolean;
  };
  const grant = async (body: Json) => expect([200, 201]).toContain((await service.call("POST", "/api/v1/authorization/relationships", { key, body })).status);

  beforeAll(async () => {
    database = await createTestDatabase(engine);
    service = await startTestService(database.db);
    key = await createApp(service, "az", CATALOG);
    const a = admin(service, "az");
    const readers = await a.createPolicy("readers", ["document:read", "folder:read"]);
    await a.assign(await a.createRole("Reader", [readers]), "rita");
    await grant({ userId: "ann", resource: "document", resourceId: "d1", relation: "editor" });
    await grant({ userId: "bob", resource: "document", resourceId: "d2", relation: "viewer" });
    await grant({ userId: "cat", resource: "document", resourceId: "d3", relation: "reviewer", condition: "context.mfa == true" });
    await grant({
      userId: "dan",
      resource: "document",
      resourceId: "d4",
      relation: "editor",
      condition: "resource.properties.ownerID == subject.properties.email && action.properties.via == 'ui'",
    });
    expectStatus(await service.call("PUT", "/api/v1/applications/az/users/dan/properties", { body: { email: "dan@example.com" } }), 200);
  });
  afterAll(async () => {
    await service?.close();
    await database?.dispose();
  });

  describe("Access Evaluation", () => {
    it.each([
      ["a grant's relation implies the action", q("ann", "document", "d1", "update"), true],
      ["the grant's relation does not imply it (share is the owner's)", q("ann", "document", "d1", "share"), false],
      ["a viewer may not update", q("bob", "document", "d2", "update"), false],
      ["a role allows it on every instance", q("rita", "folder", "anything", "read"), true],
      ["nobody holds anything", q("zed", "document", "d1", "read"), false],
      ["an unknown resource type", q("ann", "spaceship", "d1", "read"), false],
      ["an unknown action", q("ann", "document", "d1", "launch"), false],
      ["a type outside the catalog's format", q("ann", "Document", "d1", "read"), false],
      ["an action outside the catalog's format", q("ann", "document", "d1", "Read!"), false],
      ["a subject that is not a user", { ...q("ann", "document", "d1", "read"), subject: { type: "group", id: "ann" } }, false],
      ["a user id no grant can hold (257 characters)", q("a".repeat(257), "document", "d1", "read"), false],
      ["a resource id with a control character", q("ann", "document", "d1\u0007", "read"), false],
    ])("%s → %s", async (_, body, expected) => {
      expect(await decide(body)).toBe(expected);
    });

    it("a deny is a 200 with exactly {\"decision\": false}", async () => {
      const res = await post(EVALUATION, q("zed", "document", "d1", "read"));
      expect(res.status).toBe(200);
      expect(res.text).toBe('{"decision":false}');
      expect(res.headers.get("content-type")).toMatch(/^application\/json/);
    });

    it("context and properties reach conditions, stored properties under the request's", async () => {
      expect(await decide(q("cat", "document", "d3", "read"))).toBe(false);
      expect(await decide(q("cat", "document", "d3", "read", { context: { mfa: true } }))).toBe(true);
      expect(await decide(q("cat", "document", "d3", "read", { context: { mfa: "yes" } }))).toBe(false);
      const dan = (ownerID: string, via: string, email?: string): Json => ({
        subject: { type: "user", id: "dan", ...(email === undefined ? {} : { properties: { email } }) },
        action: { name: "update", properties: { via } },
        resource: { type: "document", id: "d4", properties: { ownerID } },
      });
      expect(await decide(dan("dan@example.com", "ui"))).toBe(true);
      expect(await decide(dan("dan@example.com", "api"))).toBe(false);
      expect(await decide(dan("eve@example.com", "ui"))).toBe(false);
      // The request's subject.properties are laid over the stored ones, key by key.
      expect(await decide(dan("eve@example.com", "ui", "eve@example.com"))).toBe(true);
      // A "__proto__" key is a key like any other: it lends the properties no ownerID.
      const sneaky = JSON.stringify(dan("x", "ui")).replace('"properties":{"ownerID":"x"}', '"properties":{"__proto__":{"ownerID":"dan@example.com"}}');
      expect((await post(EVALUATION, sneaky)).body).toEqual({ decision: false });
    });

    it("unknown fields are ignored, at the top and inside entities", async () => {
      const body = { ...q("ann", "document", "d1", "update"), surprise: [1], __proto__: { x: 1 } };
      const raw = JSON.stringify(body).replace('"subject":{', '"subject":{"_note":"ID for Ann","constructor":1,');
      const res = await post(EVALUATION, raw.replace('"action":{', '"action":{"__proto__":{"name":"read"},'));
      expect(res.status, res.text).toBe(200);
      expect(res.body).toEqual({ decision: true });
    });

    it("each change is seen by the very next evaluation", async () => {
      const body = q("fay", "document", "d9", "read");
      expect(await decide(body)).toBe(false);
      await grant({ userId: "fay", resource: "document", resourceId: "d9", relation: "viewer" });
      expect(await decide(body)).toBe(true);
      expectStatus(await service.call("DELETE", "/api/v1/authorization/relationships?userId=fay&resource=document&resourceId=d9&relation=viewer", { key }), 200);
      expect(await decide(body)).toBe(false);
    });
  });

  describe("Access Evaluations", () => {
    const top = { subject: { type: "user", id: "ann" }, action: { name: "update" } };

    it("items take the top level's parts and override them; answers in request order", async () => {
      const res = await post(EVALUATIONS, {
        ...top,
        context: { mfa: true },
        evaluations: [
          { resource: { type: "document", id: "d1" } },
          { resource: { type: "document", id: "d2" } },
          { subject: { type: "user", id: "bob" }, action: { name: "read" }, resource: { type: "document", id: "d2" } },
          // cat's condition reads the top-level context...
          { subject: { type: "user", id: "cat" }, action: { name: "read" }, resource: { type: "document", id: "d3" } },
          // ...unless the item gives its own, which replaces it whole.
          { subject: { type: "user", id: "cat" }, action: { name: "read" }, resource: { type: "document", id: "d3" }, context: { other: 1 } },
        ],
      });
      expect(res.status, res.text).toBe(200);
      expect(res.text).toBe(JSON.stringify({ evaluations: [true, false, true, true, false].map((decision) => ({ decision })) }));
    });

    it("an item's entity without type or id takes them from the top level's (certification c-3-2-7)", async () => {
      const res = await post(EVALUATIONS, {
        subject: { type: "user" },
        action: { name: "read" },
        resource: { type: "document" },
        evaluations: [{ subject: { id: "ann" }, resource: { id: "d1" } }, { subject: { id: "bob" }, resource: { id: "d1" } }, { subject: { id: "rita" }, resource: { type: "folder", id: "f1" } }],
      });
      expect(res.body).toEqual({ evaluations: [{ decision: true }, { decision: false }, { decision: true }] });
    });

    it("an empty top-level resource that every item replaces is accepted", async () => {
      const res = await post(EVALUATIONS, { ...top, resource: {}, evaluations: [{ resource: { type: "document", id: "d1" } }] });
      expect(res.body).toEqual({ evaluations: [{ decision: true }] });
    });

    it.each([
      ["absent", undefined],
      ["empty", []],
    ])("without items (%s), the top level is one evaluation, answered {\"decision\": ...} alone", async (_, evaluations) => {
      for (const [resource, decision] of [["d1", true], ["d2", false]] as const) {
        const res = await post(EVALUATIONS, { ...top, resource: { type: "document", id: resource }, ...(evaluations === undefined ? {} : { evaluations }) });
        expect(res.status, res.text).toBe(200);
        expect(res.text).toBe(JSON.stringify({ decision }));
      }
      // Then it requires what an evaluation requires.
      const missing = await post(EVALUATIONS, { ...top, evaluations });
      expect(missing.status).toBe(400);
      expect(missing.body.details).toContainEqual(expect.objectContaining({ field: "resource" }));
    });

    const items = (...ids: string[]) => ids.map((id) => ({ resource: { type: "document", id } }));
    // ann may update d1, not d2 nor d3.
    it.each([
      ["execute_all (the default, no options)", undefined, ["d2", "d1", "d3", "d1"], [false, true, false, true]],
      ["execute_all", "execute_all", ["d2", "d1", "d3"], [false, true, false]],
      ["deny_on_first_deny: up to and including the first deny", "deny_on_first_deny", ["d1", "d2", "d1"], [true, false]],
      ["deny_on_first_deny: a deny first", "deny_on_first_deny", ["d2", "d1"], [false]],
      ["deny_on_first_deny: no deny, all answered", "deny_on_first_deny", ["d1", "d1"], [true, true]],
      ["permit_on_first_permit: up to and including the first permit", "permit_on_first_permit", ["d2", "d3", "d1", "d2"], [false, false, true]],
      ["permit_on_first_permit: no permit, all answered", "permit_on_first_permit", ["d2", "d3"], [false, false]],
    ])("%s", async (_, semantic, ids, expected) => {
      const options = semantic === undefined ? {} : { options: { evaluations_semantic: semantic, unknown_option: true } };
      const res = await post(EVALUATIONS, { ...top, evaluations: items(...ids), ...options });
      expect(res.status, res.text).toBe(200);
      expect(res.body).toEqual({ evaluations: expected.map((decision) => ({ decision })) });
    });

    it("an item missing a required part is a deny carrying the error, its place kept (certification c-3-4-1)", async () => {
      const res = await post(EVALUATIONS, { ...top, evaluations: [...items("d1"), {}, { resource: { type: "document" } }, ...items("d1")] });
      expect(res.status, res.text).toBe(200);
      expect(res.body.evaluations).toEqual([
        { decision: true },
        { decision: false, context: { error: { status: 400, message: "evaluations[1].resource: is required" } } },
        { decision: false, context: { error: { status: 400, message: "evaluations[2].resource.id: is required" } } },
        { decision: true },
      ]);
      // An error is a deny: deny_on_first_deny stops there.
      const cut = await post(EVALUATIONS, { ...top, options: { evaluations_semantic: "deny_on_first_deny" }, evaluations: [...items("d1"), {}, ...items("d1")] });
      expect(cut.body.evaluations).toHaveLength(2);
    });

    it("unknown types and actions are denies among the rest, however many", async () => {
      const evaluations = [
        ...items("d1"),
        ...Array.from({ length: 150 }, (_, i) => ({ resource: { type: `kind_${i}`, id: "x" } })),
        { action: { name: "launch" }, resource: { type: "document", id: "d1" } },
        ...items("d1"),
      ];
      const res = await post(EVALUATIONS, { ...top, evaluations });
      expect(res.status, res.text).toBe(200);
      const decisions = (res.body.evaluations as { decision: boolean }[]).map((d) => d.decision);
      expect(decisions).toHaveLength(153);
      expect(decisions.filter((d) => d)).toHaveLength(2);
      expect([decisions[0], decisions[152]]).toEqual([true, true]);
    });

    it.each([
      ["an unknown semantic", { options: { evaluations_semantic: "first_come" } }, "options.evaluations_semantic"],
      ["a semantic that is not a string", { options: { evaluations_semantic: 1 } }, "options.evaluations_semantic"],
      ["evaluations that are not a list", { evaluations: { resource: {} } }, "evaluations"],
      ["an item that is not an object", { evaluations: ["d1"] }, "evaluations[0]"],
      ["over 1,000 items", { evaluations: Array.from({ length: 1001 }, () => ({ resource: { type: "document", id: "d1" } })) }, "evaluations"],
    ])("%s → 400 naming %s", async (_, extra, field) => {
      const res = await post(EVALUATIONS, { ...top, resource: { type: "document", id: "d1" }, ...extra });
      expect(res.status, res.text).toBe(400);
      expect(res.body.details).toContainEqual(expect.objectContaining({ field }));
    });
  });

  describe("keys", () => {
    const body = q("ann", "document", "d1", "update");

    it("as Authorization: Bearer (any case of the scheme) or X-API-Key, or both when they agree", async () => {
      const ways: Record<string, string>[] = [{ authorization: `Bearer ${key}` }, { authorization: `bearer ${key}` }, { authorization: "", "x-api-key": key }, { authorization: `Bearer ${key}`, "x-api-key": key }];
      for (const headers of ways) {
        const res = await post(EVALUATION, body, headers);
        expect(res.status, JSON.stringify(headers)).toBe(200);
        expect(res.body).toEqual({ decision: true });
      }
    });

    it.each([
      ["no key at all", { authorization: "" }, "send it as Authorization: Bearer KEY, or as X-API-Key"],
      ["another scheme", { authorization: `Basic ${Buffer.from("a:b").toString("base64")}` }, "must be Bearer KEY"],
      ["a bearer with no token", { authorization: "Bearer " }, "must be Bearer KEY"],
      ["an unknown key", { authorization: "Bearer pcl_nope" }, "unknown or revoked"],
      ["two different keys", { authorization: `Bearer ${"x".repeat(10)}`, "x-api-key": "y" }, "two different keys"],
    ])("%s → 401 with WWW-Authenticate: Bearer", async (_, headers, fragment) => {
      for (const path of [EVALUATION, EVALUATIONS, "/access/v1/search/subject", "/access/v1/search/resource", "/access/v1/search/action"]) {
        const res = await post(path, body, headers);
        expect(res.status, `${path}: ${res.text}`).toBe(401);
        expect(res.headers.get("www-authenticate")).toBe('Bearer realm="portcullis"');
        expect(res.body.code).toBe("unauthenticated");
        expect(res.body.message).toContain(fragment);
        expectErrorBody(res.body, res.headers.get("x-request-id"));
      }
    });

    it("the operator key is refused (these act on the key's own application)", async () => {
      const res = await post(EVALUATION, body, { authorization: `Bearer ${ADMIN_KEY}` });
      expect(res.status).toBe(403);
      expect(res.body.code).toBe("permission_denied");
    });

    it("the check scope suffices for every route; a key without it is refused naming it", async () => {
      const make = async (scopes: string[]) => (await service.call("POST", "/api/v1/applications/az/api-keys", { body: { name: scopes.join("+"), scopes } })).body.key as string;
      const checkOnly = await make(["check"]);
      const noCheck = await make(["read", "write"]);
      const bodies: [string, Json][] = [
        [EVALUATION, body],
        [EVALUATIONS, { ...body, evaluations: [{}] }],
        ["/access/v1/search/subject", { subject: { type: "user" }, action: { name: "read" }, resource: { type: "document", id: "d1" } }],
        ["/access/v1/search/resource", { subject: { type: "user", id: "ann" }, action: { name: "read" }, resource: { type: "document" } }],
        ["/access/v1/search/action", { subject: { type: "user", id: "ann" }, resource: { type: "document", id: "d1" } }],
      ];
      for (const [path, request] of bodies) {
        expect((await post(path, request, { authorization: `Bearer ${checkOnly}` })).status, path).toBe(200);
        const refused = await post(path, request, { authorization: `Bearer ${noCheck}` });
        expect(refused.status, path).toBe(403);
        expect(refused.body.message).toContain('"check" scope');
      }
    });

    it("a revoked key fails on its very next call, even where no question is asked (a subject that is not a user)", async () => {
      const created = (await service.call("POST", "/api/v1/applications/az/api-keys", { body: { name: "doomed", scopes: ["check"] } })).body;
      const headers = { authorization: `Bearer ${created.key}` };
      const group = { subject: { type: "group", id: "g" }, action: { name: "read" }, resource: { type: "document", id: "d1" } };
      const requests: [string, Json][] = [
        [EVALUATION, group],
        [EVALUATIONS, { ...group, evaluations: [{}] }],
        ["/access/v1/search/subject", { ...group, subject: { type: "group" } }],
        ["/access/v1/search/resource", { ...group, resource: { type: "document" } }],
        ["/access/v1/search/action", { subject: group.subject, resource: group.resource }],
      ];
      for (const [path, request] of requests) expect((await post(path, request, headers)).status, path).toBe(200);
      expectStatus(await service.call("DELETE", `/api/v1/applications/az/api-keys/${created.keyId}`), 200);
      for (const [path, request] of requests) expect((await post(path, request, headers)).status, path).toBe(401);
    });
  });

  describe("X-Request-ID", () => {
    it.each([
      ["a UUID", "0f8fad5b-d9cb-469f-a165-70867728950e"],
      ["an arbitrary string", "PEP request #42 (retry)"],
    ])("%s comes back as sent, on answers and errors", async (_, id) => {
      for (const [body, status] of [[q("ann", "document", "d1", "read"), 200], ["{", 400]] as const) {
        const res = await post(EVALUATION, body, { "x-request-id": id });
        expect(res.status).toBe(status);
        expect(res.headers.get("x-request-id")).toBe(id);
      }
      expect((await post(EVALUATION, {}, { "x-request-id": id, authorization: "" })).headers.get("x-request-id")).toBe(id);
    });

    it("without one, the answer carries the service's own", async () => {
      const res = await post(EVALUATION, q("ann", "document", "d1", "read"));
      expect(res.headers.get("x-request-id")).toMatch(/^req_/);
    });
  });

  describe("malformed requests: a 400 naming the field, never a 5xx", () => {
    const good = q("ann", "document", "d1", "read");
    const cases: [string, string | Json, string][] = [
      ["not JSON", "{subject:", "request body"],
      ["an array", "[1]", "request body"],
      ["a JSON string", '"subject"', "request body"],
      ["subject a string", { ...good, subject: "alice" }, "subject"],
      ["action.name a number", { ...good, action: { name: 123 } }, "action.name"],
      ["resource.id a number", { ...good, resource: { type: "document", id: 7 } }, "resource.id"],
      ["subject.properties an array", { ...good, subject: { type: "user", id: "ann", properties: [1] } }, "subject.properties"],
      ["context an array", { ...good, context: [1] }, "context"],
      ["context a string", { ...good, context: "x" }, "context"],
      ["no subject", { action: good.action, resource: good.resource }, "subject"],
      ["no action", { subject: good.subject, resource: good.resource }, "action"],
      ["no resource", { subject: good.subject, action: good.action }, "resource"],
      ["subject without type", { ...good, subject: { id: "ann" } }, "subject.type"],
      ["subject without id", { ...good, subject: { type: "user" } }, "subject.id"],
      ["resource without id", { ...good, resource: { type: "document" } }, "resource.id"],
      ["an empty id", { ...good, resource: { type: "document", id: "" } }, "resource.id"],
      ["action without name", { ...good, action: {} }, "action.name"],
      ["subject null", { ...good, subject: null }, "subject"],
      ["an empty body", "", "subject"],
      ["an unpaired surrogate in an id", { ...good, subject: { type: "user", id: "a\ud800" } }, "subject.id"],
      ["a NUL in a type", { ...good, resource: { type: "doc\u0000", id: "d1" } }, "resource.type"],
      ["an unpaired surrogate in a context key", { ...good, context: { "k\udc00": 1 } }, 'context["k\\udc00"]'],
      ["context and properties over 64 KiB together", { ...good, context: { a: "x".repeat(40_000) }, resource: { type: "document", id: "d1", properties: { b: "y".repeat(30_000) } } }, "context"],
    ];
    it.each(cases)("%s → 400 naming %s", async (_, body, field) => {
      const res = await post(EVALUATION, body);
      expect(res.status, res.text).toBe(400);
      expect(res.body.code).toBe("invalid_argument");
      const fields = (res.body.details as { field: string }[]).map((d) => d.field);
      if (field === "request body") expect(res.body.message).toMatch(/^request body/);
      else expect(fields, res.text).toContain(field);
      expectErrorBody(res.body, res.headers.get("x-request-id"));
    });

    it("numbers beyond a double (1e400) → 400 naming the value", async () => {
      const raw = JSON.stringify(good).replace(/}$/, ',"context":{"level":1e400}}');
      const res = await post(EVALUATION, raw);
      expect(res.status, res.text).toBe(400);
      expect(res.body.details).toContainEqual(expect.objectContaining({ field: "context.level" }));
    });

    it("a body that is not application/json → 400 naming Content-Type; bytes that are not UTF-8 → 400", async () => {
      for (const type of ["text/plain", "application/x-www-form-urlencoded"]) {
        const res = await post(EVALUATION, good, { "content-type": type });
        expect(res.status, type).toBe(400);
        expect(res.body.details).toContainEqual(expect.objectContaining({ field: "Content-Type" }));
      }
      // None at all (fetch would add text/plain to a string body; bytes go without one).
      const untyped = await fetch(`${service.url}${EVALUATION}`, { method: "POST", headers: { authorization: `Bearer ${key}` }, body: new TextEncoder().encode(JSON.stringify(good)) });
      expect(untyped.status).toBe(400);
      expect(((await untyped.json()) as { message: string }).message).toBe("Content-Type: must be application/json, got none");
      expect((await post(EVALUATION, good, { "content-type": "application/json; charset=utf-8" })).status).toBe(200);
      const res = await fetch(`${service.url}${EVALUATION}`, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
        body: Buffer.concat([Buffer.from('{"subject":{"type":"user","id":"'), Buffer.from([0xff, 0xfe]), Buffer.from('"}}')]),
      });
      expect(res.status).toBe(400);
    });

    it("nesting past 64 levels → 400; a body over 8 MiB → 413; a query string → 400", async () => {
      const deep = `{"subject":{"type":"user","id":"ann"},"action":{"name":"read"},"resource":{"type":"document","id":"d1"},"context":${"{\"a\":".repeat(70)}1${"}".repeat(70)}}`;
      expect((await post(EVALUATION, deep)).status).toBe(400);
      const huge = await post(EVALUATION, { ...good, context: { a: "x".repeat(9 * 1024 * 1024) } });
      expect(huge.status).toBe(413);
      const query = await post(`${EVALUATION}?debug=1`, good);
      expect(query.status).toBe(400);
      expect(query.body.details).toContainEqual(expect.objectContaining({ field: "debug" }));
    });

    it("identical requests get identical decisions", async () => {
      const answers = await Promise.all(Array.from({ length: 20 }, () => post(EVALUATION, q("ann", "document", "d1", "update"))));
      expect(new Set(answers.map((a) => a.text))).toEqual(new Set(['{"decision":true}']));
    });
  });

  it("REST over HTTP/2 (h2c): the same answer, the request id echoed", async () => {
    const session = http2.connect(service.url);
    try {
      const answer = await new Promise<{ status: number; id: unknown; text: string }>((resolve, reject) => {
        const stream = session.request({ ":method": "POST", ":path": EVALUATION, "content-type": "application/json", authorization: `Bearer ${key}`, "x-request-id": "over h2" });
        let text = "";
        let head: http2.IncomingHttpHeaders = {};
        stream.on("response", (headers) => (head = headers));
        stream.on("data", (chunk: Buffer) => (text += chunk.toString()));
        stream.on("end", () => resolve({ status: Number(head[":status"]), id: head["x-request-id"], text }));
        stream.on("error", reject);
        stream.end(JSON.stringify(q("ann", "document", "d1", "update")));
      });
      expect(answer).toEqual({ status: 200, id: "over h2", text: '{"decision":true}' });
    } finally {
      session.close();
    }
  });

  describe("typed clients", () => {
    it("Connect over HTTP/1.1 and gRPC: the same decisions, with the key as a bearer token", async () => {
      const headers = { authorization: `Bearer ${key}` };
      for (const transport of [createConnectTransport({ baseUrl: service.url, httpVersion: "1.1" }), createGrpcTransport({ baseUrl: service.url })]) {
        const client = createClient(AccessService, transport);
        const yes = await client.evaluation({ subject: { type: "user", id: "ann" }, action: { name: "update" }, resource: { type: "document", id: "d1" } }, { headers });
        expect(yes.decision).toBe(true);
        const batch = await client.evaluations(
          { subject: { type: "user", id: "cat" }, action: { name: "read" }, context: { mfa: true }, evaluations: [{ resource: { type: "document", id: "d3" } }, { resource: { type: "document", id: "d1" } }] },
          { headers },
        );
        expect(batch.evaluations.map((e) => e.decision)).toEqual([true, false]);
        expect(batch.decision).toBeUndefined();
      }
    });
  });

  describe("metadata", () => {
    const metadataOf = (url: string) => ({
      policy_decision_point: url,
      access_evaluation_endpoint: `${url}/access/v1/evaluation`,
      access_evaluations_endpoint: `${url}/access/v1/evaluations`,
      search_subject_endpoint: `${url}/access/v1/search/subject`,
      search_resource_endpoint: `${url}/access/v1/search/resource`,
      search_action_endpoint: `${url}/access/v1/search/action`,
    });

    /** A GET with headers fetch will not send (Host). */
    const get = (headers: Record<string, string>) =>
      new Promise<{ status: number; body: any; headers: http.IncomingHttpHeaders }>((resolve, reject) => {
        const request = http.get(`${service.url}/.well-known/authzen-configuration`, { headers }, (res) => {
          let text = "";
          res.on("data", (chunk: Buffer) => (text += chunk.toString()));
          res.on("end", () => resolve({ status: res.statusCode!, body: JSON.parse(text), headers: res.headers }));
        });
        request.on("error", reject);
      });

    it("without a key: the base URL from the request, and every endpoint under it", async () => {
      const res = await fetch(`${service.url}/.well-known/authzen-configuration`);
      expect(res.status).toBe(200);
      expect(await res.json()).toEqual(metadataOf(service.url));
      expect(res.headers.get("cache-control")).toBe("public, max-age=300");
      expect(res.headers.get("vary")).toBe("Host, X-Forwarded-Proto");
    });

    it("behind a proxy: its Host and X-Forwarded-Proto; a Host that makes no URL → 400", async () => {
      expect((await get({ host: "PDP.example.com", "x-forwarded-proto": "https" })).body).toEqual(metadataOf("https://pdp.example.com"));
      expect((await get({ host: "[::1]:8443", "x-forwarded-proto": "http" })).body).toEqual(metadataOf("http://[::1]:8443"));
      const bad = await get({ host: "evil.example.com/path?x=1" });
      expect(bad.status).toBe(400);
      expect(bad.body.details).toContainEqual(expect.objectContaining({ field: "Host" }));
    });

    it("with PUBLIC_URL, that URL whatever the request says", async () => {
      const other = await startTestService(database.db, { publicUrl: "https://pdp.example.com/authz" });
      try {
        const res = await fetch(`${other.url}/.well-known/authzen-configuration`, { headers: { "x-forwarded-proto": "http" } });
        expect(await res.json()).toEqual(metadataOf("https://pdp.example.com/authz"));
        expect(res.headers.get("vary")).toBeNull();
      } finally {
        await other.close();
      }
    });
  });
});
