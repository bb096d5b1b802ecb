/**
 * Applications and their API keys over REST, on each engine: create, read,
 * list with paging, key lifecycle (create, list without secrets, revoke), and
 * the audit events those changes write.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { expectErrorBody } from "./helpers/error-body.js";
import { createTestDatabase, oneEngine, type TestDatabase } from "./support/engines.js";
import { createAppWithKey, startTestService, type RestAnswer, type TestService } from "./support/service.js";

/** Every non-2xx answer: exactly {code, message, details, requestId}, details an array, requestId the answer's x-request-id. */
function expectError(res: RestAnswer, status: number, code: string, ...fragments: string[]): void {
  expect(res.status, JSON.stringify(res.body)).toBe(status);
  expectErrorBody(res.body, res.headers.get("x-request-id"));
  expect(res.body.code).toBe(code);
  expect(typeof res.body.message).toBe("string");
  expect(Array.isArray(res.body.details)).toBe(true);
  for (const fragment of fragments) expect(res.body.message).toContain(fragment);
}

/** An RFC 3339 timestamp within a minute of now. */
function expectRecentTimestamp(value: unknown): void {
  expect(typeof value).toBe("string");
  expect(value as string).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$/);
  expect(Math.abs(Date.parse(value as string) - Date.now())).toBeLessThan(60_000);
}

/** The token of the next page, or undefined on the last page (absent or empty). */
const nextToken = (body: { nextPageToken?: string }) =>
  body.nextPageToken === undefined || body.nextPageToken === "" ? undefined : body.nextPageToken;

describe.each(oneEngine(import.meta.url))("applications and API keys on %s", (engine) => {
  let database: TestDatabase;
  let service: TestService;

  const createApp = (body: unknown) => service.call("POST", "/api/v1/applications", { body });
  const createKey = (appId: string, body: unknown, key?: string) =>
    service.call("POST", `/api/v1/applications/${appId}/api-keys`, { body, ...(key !== undefined ? { key } : {}) });
  const auditEvents = async (appId: string, query = "") => {
    const res = await service.call("GET", `/api/v1/applications/${appId}/audit-log${query}`);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    return res;
  };

  /** Follows nextPageToken from `path` (which has a `?`), checking every page's size; returns all items. */
  async function walk<T>(path: string, listField: string, pageSize: number): Promise<T[]> {
    const items: T[] = [];
    let token: string | undefined;
    for (let pages = 0; pages < 50; pages++) {
      const url = `${path}&pageSize=${pageSize}${token === undefined ? "" : `&pageToken=${encodeURIComponent(token)}`}`;
      const res = await service.call("GET", url);
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      const page = res.body[listField] as T[];
      expect(page.length).toBeLessThanOrEqual(pageSize);
      items.push(...page);
      token = nextToken(res.body);
      if (token === undefined) return items;
    }
    throw new Error(`${path}: more than 50 pages; paging does not terminate (got ${items.length} items)`);
  }

  beforeAll(async () => {
    database = await createTestDatabase(engine);
    service = await startTestService(database.db);
  });
  afterAll(async () => {
    await service?.close();
    await database?.dispose();
  });

  describe("applications", () => {
    it("create → 201 {appId, name, createdAt}; name defaults to appId", async () => {
      const res = await createApp({ appId: "shop" });
      expect(res.status, JSON.stringify(res.body)).toBe(201);
      expect(Object.keys(res.body).sort()).toEqual(["appId", "createdAt", "name"]);
      expect(res.body.appId).toBe("shop");
      expect(res.body.name).toBe("shop");
      expectRecentTimestamp(res.body.createdAt);
      expect(res.headers.get("content-type")).toMatch(/^application\/json/);
    });

    it("create with a name keeps it", async () => {
      const res = await createApp({ appId: "crm", name: "Customer Relations" });
      expect(res.status).toBe(201);
      expect(res.body).toMatchObject({ appId: "crm", name: "Customer Relations" });
    });

    it("a duplicate appId → 409 already_exists naming it, and the first is kept", async () => {
      expect((await createApp({ appId: "dup-app", name: "First" })).status).toBe(201);
      expectError(await createApp({ appId: "dup-app", name: "Second" }), 409, "already_exists", "dup-app");
      const get = await service.call("GET", "/api/v1/applications/dup-app");
      expect(get.body.name).toBe("First");
    });

    it.each([
      ["", "required"],
      ["Shop", '"Shop"'],
      ["-x", '"-x"'],
      ["_x", '"_x"'],
      ["a".repeat(65), `"${"a".repeat(65)}"`],
      ["a b", '"a b"'],
      ["ümlaut", '"ümlaut"'],
      ["shop.eu", '"shop.eu"'],
    ])("appId %j → 400 naming appId and the value", async (appId, fragment) => {
      expectError(await createApp({ appId }), 400, "invalid_argument", "appId", fragment);
    });

    it.each(["a", "0", "a".repeat(64), "x-1_y", "9lives"])("appId %j is valid", async (appId) => {
      const res = await createApp({ appId });
      expect(res.status, JSON.stringify(res.body)).toBe(201);
      expect(res.body.appId).toBe(appId);
    });

    it("a name over 200 characters → 400 naming name", async () => {
      expectError(await createApp({ appId: "long-name", name: "n".repeat(201) }), 400, "invalid_argument", "name", "200");
      expectError(await service.call("GET", "/api/v1/applications/long-name"), 404, "not_found");
      expect((await createApp({ appId: "long-name", name: "n".repeat(200) })).status).toBe(201);
    });

    it("GET one returns what create returned", async () => {
      const created = await createApp({ appId: "get-me", name: "Get Me" });
      const res = await service.call("GET", "/api/v1/applications/get-me");
      expect(res.status).toBe(200);
      expect(res.body).toEqual(created.body);
    });

    it("GET an unknown application → 404 not_found naming it", async () => {
      expectError(await service.call("GET", "/api/v1/applications/no-such-app"), 404, "not_found", "no-such-app");
    });

    describe("list", () => {
      const ids = ["page-a", "page-b", "page-c", "page-d", "page-e"];
      beforeAll(async () => {
        for (const appId of ids) expect((await createApp({ appId })).status).toBe(201);
      });

      it("the default page holds every application, with the token absent or empty", async () => {
        const res = await service.call("GET", "/api/v1/applications");
        expect(res.status).toBe(200);
        const listed = (res.body.applications as { appId: string }[]).map((a) => a.appId);
        for (const id of ids) expect(listed).toContain(id);
        expect(nextToken(res.body)).toBeUndefined();
        for (const app of res.body.applications) expect(Object.keys(app).sort()).toEqual(["appId", "createdAt", "name"]);
      });

      it.each([1, 2, 3])("pageSize=%i walks every application exactly once", async (size) => {
        const all = await service.call("GET", "/api/v1/applications?pageSize=1000");
        const expected = (all.body.applications as { appId: string }[]).map((a) => a.appId);
        const walked = (await walk<{ appId: string }>("/api/v1/applications?", "applications", size)).map((a) => a.appId);
        expect(walked).toEqual(expected);
        expect(new Set(walked).size).toBe(walked.length);
      });

      it("pageSize=2 gives a token when more remain", async () => {
        const res = await service.call("GET", "/api/v1/applications?pageSize=2");
        expect(res.body.applications).toHaveLength(2);
        expect(typeof res.body.nextPageToken).toBe("string");
        expect(res.body.nextPageToken).not.toBe("");
      });

      it.each([
        ["0", "0"],
        ["1001", "1001"],
        ["-1", "-1"],
        ["abc", '"abc"'],
        ["1.5", '"1.5"'],
        ["", '""'],
      ])("pageSize=%s → 400 naming pageSize", async (value, fragment) => {
        expectError(await service.call("GET", `/api/v1/applications?pageSize=${value}`), 400, "invalid_argument", "pageSize", fragment);
      });

      it.each(["garbage", "!!!", "e30", Buffer.from('{"appId":5}').toString("base64url")])(
        "pageToken=%s → 400 naming pageToken",
        async (token) => {
          expectError(
            await service.call("GET", `/api/v1/applications?pageToken=${encodeURIComponent(token)}`),
            400,
            "invalid_argument",
            "pageToken",
          );
        },
      );

      it("a page token of another list → 400 naming pageToken", async () => {
        await createAppWithKey(service, "token-mix");
        await createKey("token-mix", { name: "second" });
        const keys = await service.call("GET", "/api/v1/applications/token-mix/api-keys?pageSize=1");
        const token = nextToken(keys.body);
        expect(token).toBeDefined();
        expectError(
          await service.call("GET", `/api/v1/applications?pageToken=${encodeURIComponent(token!)}`),
          400,
          "invalid_argument",
          "pageToken",
        );
      });
    });
  });

  describe("API keys", () => {
    beforeAll(async () => {
      expect((await createApp({ appId: "keys" })).status).toBe(201);
      expect((await createApp({ appId: "other" })).status).toBe(201);
    });

    it("create → 201 {keyId, name, key, createdAt, scopes}; the key works for its application", async () => {
      const res = await createKey("keys", { name: "ci" });
      expect(res.status, JSON.stringify(res.body)).toBe(201);
      expect(Object.keys(res.body).sort()).toEqual(["createdAt", "key", "keyId", "name", "scopes"]);
      expect(res.body.scopes).toEqual(["check", "read", "write"]);
      expect(res.body.name).toBe("ci");
      expect(res.body.keyId).toMatch(/^[A-Za-z0-9_-]+$/);
      expect(typeof res.body.key).toBe("string");
      expect(res.body.key.length).toBeGreaterThanOrEqual(20);
      expectRecentTimestamp(res.body.createdAt);

      const own = await service.call("GET", "/api/v1/applications/keys", { key: res.body.key });
      expect(own.status).toBe(200);
      expect(own.body.appId).toBe("keys");
    });

    it("every key is new: two creates give different ids and secrets", async () => {
      const a = await createKey("keys", { name: "same" });
      const b = await createKey("keys", { name: "same" });
      expect(a.status).toBe(201);
      expect(b.status).toBe(201);
      expect(a.body.keyId).not.toBe(b.body.keyId);
      expect(a.body.key).not.toBe(b.body.key);
    });

    it("the list has no secret: no `key` field, and no secret anywhere in the body", async () => {
      const created = await createKey("keys", { name: "listed" });
      const res = await service.call("GET", "/api/v1/applications/keys/api-keys");
      expect(res.status).toBe(200);
      const listed = res.body.apiKeys as Record<string, unknown>[];
      expect(listed.map((k) => k.keyId)).toContain(created.body.keyId);
      for (const entry of listed) expect(Object.keys(entry).sort()).toEqual(["createdAt", "keyId", "name", "scopes"]);
      expect(JSON.stringify(res.body)).not.toContain(created.body.key);
      expect(JSON.stringify(res.body)).not.toContain(created.body.key.slice(4, 24));
    });

    it("the list holds only this application's keys", async () => {
      const mine = await createKey("keys", { name: "mine" });
      const theirs = await createKey("other", { name: "theirs" });
      const res = await service.call("GET", "/api/v1/applications/keys/api-keys?pageSize=1000");
      const ids = (res.body.apiKeys as { keyId: string }[]).map((k) => k.keyId);
      expect(ids).toContain(mine.body.keyId);
      expect(ids).not.toContain(theirs.body.keyId);
    });

    it("pageSize=1 walks every key exactly once", async () => {
      await createAppWithKey(service, "paged-keys");
      for (const name of ["two", "three", "four"]) expect((await createKey("paged-keys", { name })).status).toBe(201);
      const all = await service.call("GET", "/api/v1/applications/paged-keys/api-keys");
      const expected = (all.body.apiKeys as { keyId: string }[]).map((k) => k.keyId);
      expect(expected).toHaveLength(4);
      const walked = (await walk<{ keyId: string }>("/api/v1/applications/paged-keys/api-keys?", "apiKeys", 1)).map((k) => k.keyId);
      expect(walked).toEqual(expected);
    });

    it.each([
      ["0", "pageSize"],
      ["1001", "pageSize"],
      ["abc", "pageSize"],
    ])("list keys with pageSize=%s → 400 naming it", async (value, field) => {
      expectError(await service.call("GET", `/api/v1/applications/keys/api-keys?pageSize=${value}`), 400, "invalid_argument", field);
    });

    it("list keys with a bad pageToken → 400 naming pageToken", async () => {
      expectError(await service.call("GET", "/api/v1/applications/keys/api-keys?pageToken=zzz"), 400, "invalid_argument", "pageToken");
    });

    it("delete → 200 {keyId, deleted: true}; the key is gone from the list and fails with 401", async () => {
      const created = await createKey("keys", { name: "doomed" });
      const { keyId, key } = created.body;
      const del = await service.call("DELETE", `/api/v1/applications/keys/api-keys/${keyId}`);
      expect(del.status, JSON.stringify(del.body)).toBe(200);
      expect(del.body).toEqual({ keyId, deleted: true });

      const list = await service.call("GET", "/api/v1/applications/keys/api-keys?pageSize=1000");
      expect((list.body.apiKeys as { keyId: string }[]).map((k) => k.keyId)).not.toContain(keyId);
      expectError(await service.call("GET", "/api/v1/applications/keys", { key }), 401, "unauthenticated");
    });

    it("delete of an unknown or already deleted key → 404 not_found naming it", async () => {
      expectError(await service.call("DELETE", "/api/v1/applications/keys/api-keys/key_doesnotexist"), 404, "not_found", "key_doesnotexist");
      const created = await createKey("keys", { name: "twice" });
      expect((await service.call("DELETE", `/api/v1/applications/keys/api-keys/${created.body.keyId}`)).status).toBe(200);
      expectError(await service.call("DELETE", `/api/v1/applications/keys/api-keys/${created.body.keyId}`), 404, "not_found");
    });

    it("delete of another application's key through this application's path → 404, and it keeps working", async () => {
      const theirs = await createKey("other", { name: "not-yours" });
      expectError(await service.call("DELETE", `/api/v1/applications/keys/api-keys/${theirs.body.keyId}`), 404, "not_found");
      expect((await service.call("GET", "/api/v1/applications/other", { key: theirs.body.key })).status).toBe(200);
    });

    it("keys of an unknown application → 404", async () => {
      expectError(await createKey("ghost", { name: "x" }), 404, "not_found", "ghost");
      expectError(await service.call("GET", "/api/v1/applications/ghost/api-keys"), 404, "not_found", "ghost");
      expectError(await service.call("DELETE", "/api/v1/applications/ghost/api-keys/key_x"), 404, "not_found", "ghost");
    });

    it.each([
      ["missing", {}],
      ["empty", { name: "" }],
      ["blank", { name: "   " }],
      ["over 200 characters", { name: "k".repeat(201) }],
      ["with a control character", { name: "bad\u0007name" }],
    ])("a name %s → 400 naming name", async (_label, body) => {
      const before = await service.call("GET", "/api/v1/applications/keys/api-keys?pageSize=1000");
      expectError(await createKey("keys", body), 400, "invalid_argument", "name");
      const after = await service.call("GET", "/api/v1/applications/keys/api-keys?pageSize=1000");
      expect(after.body.apiKeys).toEqual(before.body.apiKeys);
    });

    it("a name of exactly 200 characters is accepted", async () => {
      const res = await createKey("keys", { name: "k".repeat(200) });
      expect(res.status).toBe(201);
      expect(res.body.name).toBe("k".repeat(200));
    });

    describe("audit events", () => {
      it("api_key.created and api_key.revoked name the key and never contain the secret", async () => {
        const created = await createKey("keys", { name: "audited" });
        const { keyId, key } = created.body;
        expect((await service.call("DELETE", `/api/v1/applications/keys/api-keys/${keyId}`)).status).toBe(200);

        const res = await auditEvents("keys", `?targetId=${keyId}`);
        const events = res.body.events as Record<string, unknown>[];
        expect(events.map((e) => e.type)).toEqual(["api_key.revoked", "api_key.created"]); // newest first
        for (const event of events) {
          expect(Object.keys(event).sort()).toEqual(["actorKeyId", "actorKeyName", "data", "eventId", "occurredAt", "targetId", "targetType", "type"]);
          expect(event).toMatchObject({ targetType: "api_key", targetId: keyId, actorKeyId: "operator", data: { name: "audited" } });
          expectRecentTimestamp(event.occurredAt);
        }
        const all = await auditEvents("keys", "?pageSize=1000");
        expect(JSON.stringify(all.body)).not.toContain(key);
        expect(JSON.stringify(all.body)).not.toContain(key.slice(4, 24));
      });

      it("the actor of a change made with an application key is that key's id", async () => {
        const first = await createKey("keys", { name: "actor" });
        const second = await createKey("keys", { name: "made-by-actor" }, first.body.key);
        expect(second.status).toBe(201);
        const res = await auditEvents("keys", `?targetId=${second.body.keyId}`);
        expect(res.body.events).toHaveLength(1);
        expect(res.body.events[0]).toMatchObject({ type: "api_key.created", actorKeyId: first.body.keyId });
        expect(JSON.stringify(res.body)).not.toContain(second.body.key);
      });

      it("?type= filters; events are newest first; paging walks them all once", async () => {
        await createAppWithKey(service, "audit-paging");
        for (const name of ["a", "b", "c"]) await createKey("audit-paging", { name });
        const created = await auditEvents("audit-paging", "?type=api_key.created");
        const events = created.body.events as { type: string; data: { name: string } }[];
        expect(events.every((e) => e.type === "api_key.created")).toBe(true);
        expect(events.map((e) => e.data.name)).toEqual(["c", "b", "a", "test"]);

        const all = await auditEvents("audit-paging", "?pageSize=1000");
        const expected = (all.body.events as { eventId: string }[]).map((e) => e.eventId);
        expect(all.body.events.map((e: { type: string }) => e.type)).toContain("application.created");
        const walked = (await walk<{ eventId: string }>("/api/v1/applications/audit-paging/audit-log?", "events", 2)).map((e) => e.eventId);
        expect(walked).toEqual(expected);
      });

      it("the audit log rejects a bad pageToken and an unknown application", async () => {
        expectError(await service.call("GET", "/api/v1/applications/keys/audit-log?pageToken=nope"), 400, "invalid_argument", "pageToken");
        expectError(await service.call("GET", "/api/v1/applications/ghost/audit-log"), 404, "not_found", "ghost");
      });
    });
  });
});
