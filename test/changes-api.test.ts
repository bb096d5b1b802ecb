/**
 * The change feed through the API (API.md, "Change feed"), on each engine:
 * every kind of change from every write path, in commit order, a
 * transaction's changes together, a write that changes nothing absent;
 * resuming from every token; the wait; the 400s, the scopes and the
 * isolation; the 409 for a token older than the retention; Watch on gRPC,
 * Connect and gRPC-Web giving the same changes and tokens as REST, ending
 * when its client goes away.
 *
 * The expected feed is the test's own account of what each call changed,
 * kept beside the calls (`expectChanges`), not read back from the service.
 */
import { Code, ConnectError, createClient, type Client } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { toJson } from "@bufbuild/protobuf";
import { ChangeSchema, ChangeService } from "../gen/authz/v1/changes_pb.js";
import { ExpirySweep } from "../src/domain/expiry-sweep.js";
import { createTestDatabase, engines, type TestDatabase } from "./support/engines.js";
import { grpc, grpcServiceClient } from "./support/grpc-client.js";
import { GRAPH_CATALOG, set, user, type AnyGrant } from "./support/graph.js";
import { startTestService, type TestService } from "./support/service.js";
import { admin, apiTime, createApp, expectError, expectStatus, queryString } from "./helpers/authz.js";

const CHANGES = "/api/v1/authorization/changes";

interface ApiChange {
  kind: string;
  token: string;
  changedAt: string;
  grant?: AnyGrant & { createdAt: string; expiresAt?: string };
  assignment?: { roleId: string; userId: string; createdAt: string };
  modelEvent?: { eventId: string; type: string; targetId: string; actorKeyName: string; data: Record<string, unknown> };
}

/** A change as one line: its kind and what it is about (the grant, the assignment, or the event's type). */
function line(c: ApiChange): string {
  if (c.grant !== undefined) {
    const g = c.grant;
    const holder = g.subject === undefined ? g.userId : `${g.subject.resource}:${g.subject.resourceId}${g.subject.relation ? `#${g.subject.relation}` : ""}`;
    return `${c.kind} ${g.resource}:${g.resourceId}#${g.relation}@${holder}${g.expiresAt === undefined ? "" : " expiring"}`;
  }
  if (c.assignment !== undefined) return `${c.kind} ${c.assignment.roleId}@${c.assignment.userId}`;
  return `${c.kind} ${c.modelEvent!.type}`;
}

const grantLine = (kind: string, g: AnyGrant, expiring = false) =>
  line({ kind, token: "", changedAt: "", grant: { ...g, createdAt: "", ...(expiring ? { expiresAt: "x" } : {}) } });

describe.each(engines)("the change feed on %s", (engine) => {
  let database: TestDatabase;
  let service: TestService;
  let key: string;
  let otherKey: string;
  const call = (method: string, path: string, body?: unknown, as = key) => service.call(method, path, { key: as, ...(body === undefined ? {} : { body }) });

  /** Every change after `after`, page by page (pages of `size`), and the token after the last. */
  async function readAll(after: string | undefined, size = 100, as = key): Promise<{ changes: ApiChange[]; next: string }> {
    const changes: ApiChange[] = [];
    let token = after;
    for (let pages = 0; pages < 1_000; pages++) {
      const res = await call("GET", CHANGES + queryString({ after: token, pageSize: size }), undefined, as);
      expectStatus(res, 200);
      expect(Object.keys(res.body).sort()).toEqual(["changes", "nextToken"]);
      changes.push(...(res.body.changes as ApiChange[]));
      token = res.body.nextToken as string;
      expect(token).toMatch(/^[A-Za-z0-9_-]+$/);
      if ((res.body.changes as ApiChange[]).length < size) return { changes, next: token };
    }
    throw new Error("the feed never ended");
  }

  let mark: string;
  /** What the calls since the last mark must have added to the feed, in order; moves the mark past them. */
  async function expectChanges(expected: string[]): Promise<ApiChange[]> {
    const read = await readAll(mark);
    expect(read.changes.map(line)).toEqual(expected);
    mark = read.next;
    return read.changes;
  }

  beforeAll(async () => {
    database = await createTestDatabase(engine, { migrated: true });
    service = await startTestService(database.db);
    key = await createApp(service, "feed", GRAPH_CATALOG);
    otherKey = await createApp(service, "feed-other", GRAPH_CATALOG);
    mark = (await readAll(undefined)).next;
  }, 120_000);

  afterAll(async () => {
    await service?.close();
    await database?.dispose();
  });

  it("starts, without after, from the oldest change kept: the catalog the application was made with", async () => {
    const all = await readAll(undefined);
    expect(all.changes.map(line)).toEqual(["model_changed catalog.replaced"]);
    expect(all.changes[0]!.modelEvent).toMatchObject({ type: "catalog.replaced", targetId: "feed", actorKeyName: "operator" });
  });

  it("single writes: a new grant, the same again (no change), a new expiry, a delete, a delete of nothing", async () => {
    const g = user("ann", "document", "d1", "viewer");
    expectStatus(await call("POST", "/api/v1/authorization/relationships", g), 201);
    expectStatus(await call("POST", "/api/v1/authorization/relationships", g), 200);
    const expiresAt = apiTime(Date.now() + 3_600_000);
    expectStatus(await call("POST", "/api/v1/authorization/relationships", { ...g, expiresAt }), 200);
    const del = `/api/v1/authorization/relationships${queryString({ userId: g.userId, resource: g.resource, resourceId: g.resourceId, relation: g.relation })}`;
    expectStatus(await call("DELETE", del), 200);
    expectStatus(await call("DELETE", del), 200);
    const changes = await expectChanges([grantLine("grant_written", g), grantLine("grant_written", g, true), grantLine("grant_deleted", g, true)]);
    // Each change carries the grant as stored then: the delete, the expiry it had.
    expect(changes[1]!.grant!.expiresAt).toBe(expiresAt);
    expect(changes[2]!.grant!.expiresAt).toBe(expiresAt);
    expect(changes[0]!.grant!.createdAt).toBe(changes[2]!.grant!.createdAt);
    for (const c of changes) expect(Object.keys(c).sort()).toEqual(["changedAt", "grant", "kind", "token"]);
  });

  it("a bulk write is one transaction: its deletes, then its writes, together; grants to subjects and links too", async () => {
    const first = [user("bo", "document", "d2", "editor"), set("team:t1#member", "document", "d2", "viewer"), set("folder:f1", "document", "d2", "parent")];
    expectStatus(await call("POST", "/api/v1/authorization/relationships/bulk", { writes: first }), 200);
    const second = [user("cy", "document", "d2", "viewer"), ...first]; // the three again: unchanged
    expectStatus(await call("POST", "/api/v1/authorization/relationships/bulk", { writes: second, deletes: [user("nobody", "document", "d2", "viewer")] }), 200);
    expectStatus(await call("POST", "/api/v1/authorization/relationships/bulk", { writes: [user("dee", "document", "d2", "viewer")], deletes: [user("bo", "document", "d2", "editor")] }), 200);
    const changes = await expectChanges([
      // Grants to subjects are written first (store/relationships-store.ts writeMany), each
      // statement's in the order of the request.
      grantLine("grant_written", set("team:t1#member", "document", "d2", "viewer")),
      grantLine("grant_written", set("folder:f1", "document", "d2", "parent")),
      grantLine("grant_written", first[0]!),
      grantLine("grant_written", user("cy", "document", "d2", "viewer")),
      grantLine("grant_deleted", user("bo", "document", "d2", "editor")),
      grantLine("grant_written", user("dee", "document", "d2", "viewer")),
    ]);
    expect(changes[0]!.grant!.subject).toEqual({ resource: "team", resourceId: "t1", relation: "member" });
    expect(changes[1]!.grant!.subject).toEqual({ resource: "folder", resourceId: "f1", relation: "" });
  });

  it("deletes by filter and by subject: one change per grant deleted", async () => {
    expectStatus(
      await call("POST", "/api/v1/authorization/relationships/bulk", {
        writes: [user("eve", "document", "d3", "viewer"), user("eve", "folder", "f3", "viewer"), set("team:t9#member", "document", "d3", "viewer"), set("team:t9#member", "folder", "f3", "editor")],
      }),
      200,
    );
    await expectChanges([
      grantLine("grant_written", set("team:t9#member", "document", "d3", "viewer")),
      grantLine("grant_written", set("team:t9#member", "folder", "f3", "editor")),
      grantLine("grant_written", user("eve", "document", "d3", "viewer")),
      grantLine("grant_written", user("eve", "folder", "f3", "viewer")),
    ]);
    expect((await call("POST", "/api/v1/authorization/relationships/delete", { userId: "eve" })).body).toEqual({ deleted: 2 });
    expect((await call("POST", "/api/v1/authorization/relationships/delete", { subject: { resource: "team", resourceId: "t9" } })).body).toEqual({ deleted: 2 });
    expect((await call("POST", "/api/v1/authorization/relationships/delete", { userId: "eve" })).body).toEqual({ deleted: 0 });
    // A statement's changes in the order of the grants' keys, on every engine.
    await expectChanges([
      grantLine("grant_deleted", user("eve", "document", "d3", "viewer")),
      grantLine("grant_deleted", user("eve", "folder", "f3", "viewer")),
      grantLine("grant_deleted", set("team:t9#member", "document", "d3", "viewer")),
      grantLine("grant_deleted", set("team:t9#member", "folder", "f3", "editor")),
    ]);
  });

  it("the expiry sweep's deletes are changes", async () => {
    const g = user("fay", "document", "d4", "viewer");
    const expiresAt = new Date(Date.now() + 1_200).toISOString();
    expectStatus(await call("POST", "/api/v1/authorization/relationships", { ...g, expiresAt }), 201);
    await new Promise((resolve) => setTimeout(resolve, 1_400));
    const sweep = new ExpirySweep(database.db, { intervalMs: 60_000, batchSize: 100, onError: (error) => { throw error; } });
    expect(await sweep.sweepOnce()).toBeGreaterThanOrEqual(1);
    await expectChanges([grantLine("grant_written", g, true), grantLine("grant_deleted", g, true)]);
  });

  it("role assignments added and removed, singly, by offboarding and with their role; model changes carry their audit event", async () => {
    const a = admin(service, "feed");
    const policyId = await a.createPolicy("readers", ["document:read"]);
    const r1 = await a.createRole("reader", [policyId]);
    const r2 = await a.createRole("auditor", [policyId]);
    await a.assign(r1, "gus");
    await a.assign(r1, "gus"); // again: no change
    await a.assign(r2, "gus");
    await a.assign(r2, "hal");
    await a.unassign(r1, "gus");
    await a.offboard("gus");
    await a.deleteRole(r2);
    await a.setPermissions(policyId, ["document:read", "document:update"]);
    const changes = await expectChanges([
      "model_changed policy.created",
      "model_changed role.created",
      "model_changed role.created",
      `assignment_added ${r1}@gus`,
      `assignment_added ${r2}@gus`,
      `assignment_added ${r2}@hal`,
      `assignment_removed ${r1}@gus`,
      `assignment_removed ${r2}@gus`,
      `assignment_removed ${r2}@hal`,
      "model_changed role.deleted",
      "model_changed policy.updated",
    ]);
    expect(changes[0]!.modelEvent).toMatchObject({ type: "policy.created", targetId: policyId, actorKeyName: "operator" });
    expect(changes[0]!.modelEvent!.eventId).toMatch(/^evt_/);
    // The event is the audit log's own.
    const audit = await service.call("GET", `/api/v1/applications/feed/audit-log${queryString({ type: "policy.updated" })}`);
    expect(audit.body.events[0]).toEqual(changes[10]!.modelEvent);
  });

  it("a model applied whole is one model_changed, after the assignments its removed roles took with them", async () => {
    const a = admin(service, "feed");
    const policyId = await a.createPolicy("temp", ["document:read"]);
    const role = await a.createRole("temp", [policyId]);
    await a.assign(role, "ivy");
    await expectChanges(["model_changed policy.created", "model_changed role.created", `assignment_added ${role}@ivy`]);
    const exported = await service.call("GET", "/api/v1/applications/feed/model");
    expectStatus(exported, 200);
    const model = exported.body as { catalog: unknown[]; policies: { name: string }[]; roles: { name: string }[] };
    const applied = await service.call("PUT", "/api/v1/applications/feed/model", {
      body: { catalog: model.catalog, policies: model.policies.filter((p) => p.name !== "temp"), roles: model.roles.filter((r) => r.name !== "temp") },
    });
    expectStatus(applied, 200);
    const changes = await expectChanges([`assignment_removed ${role}@ivy`, "model_changed model.applied"]);
    expect(changes[1]!.modelEvent!.data).toMatchObject({ roles: { removed: ["temp"] } });
  });

  it("resuming from any change's token gives exactly the changes after it", async () => {
    const all = await readAll(undefined, 7);
    expect(all.changes.length).toBeGreaterThan(20);
    // A change's token is the snapshot of the read that returned it (docs/change-feed.md): another
    // read, after other transactions anywhere on the server (another test file's), may give the
    // same change a later one. So the changes are compared without their tokens.
    const untokened = (changes: { token: string }[]) => changes.map(({ token: _, ...change }) => change);
    for (let i = 0; i < all.changes.length; i++) {
      const rest = await readAll(all.changes[i]!.token, 5);
      expect(untokened(rest.changes)).toEqual(untokened(all.changes.slice(i + 1)));
    }
    // Every page size gives the same feed.
    for (const size of [1, 3, 1_000]) expect(untokened((await readAll(undefined, size)).changes)).toEqual(untokened(all.changes));
  });

  it("waitMs: a read waits for the next change, and answers empty (with a token) when none comes", async () => {
    const from = (await readAll(undefined)).next;
    const started = Date.now();
    const empty = await call("GET", CHANGES + queryString({ after: from, waitMs: 300 }));
    expectStatus(empty, 200);
    expect(empty.body.changes).toEqual([]);
    expect(Date.now() - started).toBeGreaterThanOrEqual(290);
    const waiting = call("GET", CHANGES + queryString({ after: empty.body.nextToken, waitMs: 10_000 }));
    await new Promise((resolve) => setTimeout(resolve, 200));
    const written = Date.now();
    expectStatus(await call("POST", "/api/v1/authorization/relationships", user("jo", "document", "d5", "viewer")), 201);
    const woke = await waiting;
    expect(woke.body.changes.map(line)).toEqual([grantLine("grant_written", user("jo", "document", "d5", "viewer"))]);
    // Woken by the write through this process, not by the probe's interval.
    expect(Date.now() - written).toBeLessThan(2_000);
    mark = woke.body.nextToken;
  });

  it.each([
    ["after", { after: "not-a-token" }],
    ["after", { after: Buffer.from("s|9:3:", "ascii").toString("base64url") }],
    ["pageSize", { pageSize: 0 }],
    ["pageSize", { pageSize: 1_001 }],
    ["waitMs", { waitMs: 30_001 }],
    ["waitMs", { waitMs: -1 }],
  ])("a bad %s is a 400 naming it", async (field, params) => {
    const res = await call("GET", CHANGES + queryString(params));
    expectError(res, 400, "invalid_argument");
    expect(res.body.message).toContain(field);
  });

  it("is per application: another application's key sees only its own; the operator key and a key without read are refused", async () => {
    const other = await readAll(undefined, 100, otherKey);
    expect(other.changes.map(line)).toEqual(["model_changed catalog.replaced"]);
    expect(other.changes[0]!.modelEvent!.targetId).toBe("feed-other");
    // A token of another application's feed reads this one's from the same point: tokens name positions, not applications.
    expectError(await service.call("GET", CHANGES), 403, "permission_denied");
    const created = await service.call("POST", "/api/v1/applications/feed/api-keys", { body: { name: "writer", scopes: ["write"] } });
    expectStatus(created, 201);
    const res = await call("GET", CHANGES, undefined, created.body.key as string);
    expectError(res, 403, "permission_denied");
    expect(res.body.message).toContain("read");
  });

  it("Watch on gRPC, Connect and gRPC-Web: the same changes and tokens as REST, as they commit", async () => {
    const sessions: Http2SessionManager[] = [];
    const transports = {
      "grpc (connect-node)": () => createGrpcTransport({ baseUrl: service.url, sessionManager: session(service.url, sessions) }),
      "connect over HTTP/2": () => createConnectTransport({ baseUrl: service.url, httpVersion: "2", sessionManager: session(service.url, sessions) }),
      "connect over HTTP/1.1": () => createConnectTransport({ baseUrl: service.url, httpVersion: "1.1" }),
      "grpc-web over HTTP/1.1": () => createGrpcWebTransport({ baseUrl: service.url, httpVersion: "1.1" }),
    };
    const from = (await readAll(undefined)).next;
    const controllers: AbortController[] = [];
    const streams = Object.entries(transports).map(([name, make]) => {
      const client: Client<typeof ChangeService> = createClient(ChangeService, make());
      const controller = new AbortController();
      controllers.push(controller);
      const received: ApiChange[] = [];
      const done = (async () => {
        for await (const res of client.watch({ after: from }, { signal: controller.signal, headers: { "x-api-key": key } })) {
          // As REST writes JSON: every field, defaults included (a grant's allUsers: false).
          received.push(toJson(ChangeSchema, res.change!, { alwaysEmitImplicit: true }) as unknown as ApiChange);
          if (received.length === 3) return;
        }
      })();
      return { name, received, done };
    });
    await waitFor(() => service.waitingReaders() >= streams.length);
    const writes = [user("kim", "document", "d6", "viewer"), user("lou", "document", "d6", "viewer")];
    for (const g of writes) expectStatus(await call("POST", "/api/v1/authorization/relationships", g), 201);
    expectStatus(await call("POST", "/api/v1/authorization/relationships/delete", { userId: "kim" }), 200);
    const rest = await readAll(from);
    expect(rest.changes.map(line)).toEqual([...writes.map((g) => grantLine("grant_written", g)), grantLine("grant_deleted", writes[0]!)]);
    await Promise.all(streams.map((s) => s.done));
    for (const s of streams) {
      // The same changes, whole. A token is a reader's position (the windows it read in), so two
      // readers' tokens for a change may differ as text; each resumes at the same place, on any protocol.
      expect(s.received.map(({ token: _, ...c }) => c), s.name).toEqual(rest.changes.map(({ token: _, ...c }) => c));
      for (const [i, c] of s.received.entries()) expect((await readAll(c.token)).changes.map(line), s.name).toEqual(rest.changes.slice(i + 1).map(line));
    }
    for (const c of controllers) c.abort();
    for (const s of sessions) s.abort();
    mark = rest.next;
  });

  it("Watch over @grpc/grpc-js: a stream from a token; a cancelled stream frees its wait", async () => {
    const client = grpcServiceClient(service.url, "ChangeService");
    const metadata = new grpc.Metadata();
    metadata.set("x-api-key", key);
    const from = (await readAll(undefined)).next;
    const stream = (client as unknown as { watch(req: object, md: grpc.Metadata): grpc.ClientReadableStream<{ change: ApiChange }> }).watch({ after: from }, metadata);
    const got: string[] = [];
    stream.on("data", (res: { change: ApiChange }) => got.push(`${res.change.kind} ${res.change.grant?.userId}`));
    const ended = new Promise<grpc.StatusObject>((resolve) => stream.on("status", resolve));
    stream.on("error", () => undefined);
    await waitFor(() => service.waitingReaders() >= 1);
    expectStatus(await call("POST", "/api/v1/authorization/relationships", user("max", "document", "d7", "viewer")), 201);
    await waitFor(() => got.length === 1);
    expect(got).toEqual(["grant_written max"]);
    const before = service.waitingReaders();
    stream.cancel();
    expect((await ended).code).toBe(grpc.status.CANCELLED);
    await waitFor(() => service.waitingReaders() === before - 1);
    client.close();
    mark = (await readAll(undefined)).next;
  });

  it("Watch refuses a bad token (INVALID_ARGUMENT naming after) and a key without read (PERMISSION_DENIED), before any message", async () => {
    const client = createClient(ChangeService, createConnectTransport({ baseUrl: service.url, httpVersion: "1.1" }));
    const first = async (after: string, as: string) => {
      for await (const res of client.watch({ after }, { headers: { "x-api-key": as } })) return res;
      return undefined;
    };
    const bad = await first("%%%", key).catch((error: unknown) => error);
    expect(bad).toBeInstanceOf(ConnectError);
    expect((bad as ConnectError).code).toBe(Code.InvalidArgument);
    expect((bad as ConnectError).rawMessage).toContain("after");
    const created = await service.call("POST", "/api/v1/applications/feed/api-keys", { body: { name: "checker", scopes: ["check"] } });
    const denied = await first("", created.body.key as string).catch((error: unknown) => error);
    expect((denied as ConnectError).code).toBe(Code.PermissionDenied);
  });

  it("a token older than the retention: 409 failed_precondition saying to start again; a fresh read works", async () => {
    const old = mark;
    expectStatus(await call("POST", "/api/v1/authorization/relationships", user("ned", "document", "d8", "viewer")), 201);
    await new Promise((resolve) => setTimeout(resolve, 30));
    const sweep = new ExpirySweep(database.db, { intervalMs: 60_000, batchSize: 2, onError: (error) => { throw error; }, changesRetentionMs: 1 });
    expect(await sweep.sweepChanges("feed")).toBeGreaterThan(0);
    const res = await call("GET", CHANGES + queryString({ after: old }));
    expectError(res, 409, "failed_precondition");
    expect(res.body.message).toMatch(/older than the change feed's retention.*Start again/);
    const client = createClient(ChangeService, createConnectTransport({ baseUrl: service.url, httpVersion: "1.1" }));
    const watched = await (async () => {
      for await (const _ of client.watch({ after: old }, { headers: { "x-api-key": key } })) return "a message";
      return "ended";
    })().catch((error: unknown) => error);
    expect((watched as ConnectError).code).toBe(Code.FailedPrecondition);
    // Every change went, and a fresh read starts from nothing, at a token that works.
    const fresh = await readAll(undefined);
    expect(fresh.changes).toEqual([]);
    expectStatus(await call("POST", "/api/v1/authorization/relationships", user("oz", "document", "d8", "viewer")), 201);
    expect((await readAll(fresh.next)).changes.map(line)).toEqual([grantLine("grant_written", user("oz", "document", "d8", "viewer"))]);
    // Another application's feed is untouched.
    expect((await readAll(undefined, 100, otherKey)).changes).toHaveLength(1);
  });
});

function session(baseUrl: string, sessions: Http2SessionManager[]): Http2SessionManager {
  const manager = new Http2SessionManager(baseUrl);
  sessions.push(manager);
  return manager;
}

async function waitFor(condition: () => boolean, ms = 5_000): Promise<void> {
  const until = Date.now() + ms;
  while (!condition()) {
    if (Date.now() > until) throw new Error("timed out waiting");
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}
