/**
 * The catalog over REST, on each engine: replace, read back, effective
 * relations, validation, the orphan rule, and atomicity.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestDatabase, engines, type TestDatabase } from "./support/engines.js";
import { createAppWithKey, startTestService, type TestService } from "./support/service.js";

const catalog = {
  resources: [
    {
      resource: "document",
      description: "A text document",
      actions: ["create", "read", "update", "delete", "comment", "list"],
      relations: [{ name: "reviewer", actions: ["read", "comment"] }],
    },
    { resource: "invoice", description: "", actions: ["read", "send", "approve"] },
  ],
};

describe.each(engines)("catalog API on %s", (engine) => {
  let database: TestDatabase;
  let service: TestService;
  let appKey: string;

  beforeAll(async () => {
    database = await createTestDatabase(engine);
    service = await startTestService(database.db);
    appKey = await createAppWithKey(service, "shop");
  });
  afterAll(async () => {
    await service?.close();
    await database?.dispose();
  });

  it("replaces the catalog and returns the stored one with effective relations", async () => {
    const put = await service.call("PUT", "/api/v1/applications/shop/resources", { body: catalog });
    expect(put.status).toBe(200);
    const get = await service.call("GET", "/api/v1/applications/shop/resources", { key: appKey });
    expect(get.status).toBe(200);
    expect(get.body).toEqual(put.body);
    const [document, invoice] = get.body.resources;
    expect(document.relations).toEqual([
      { name: "owner", actions: ["create", "read", "update", "delete", "comment", "list"], builtIn: true },
      { name: "editor", actions: ["create", "read", "update"], builtIn: true },
      { name: "viewer", actions: ["read", "list"], builtIn: true },
      { name: "commenter", actions: ["read", "comment"], builtIn: true },
      { name: "reviewer", actions: ["read", "comment"], builtIn: false },
    ]);
    expect(invoice.relations).toEqual([
      { name: "owner", actions: ["read", "send", "approve"], builtIn: true },
      { name: "editor", actions: ["read"], builtIn: true },
      { name: "viewer", actions: ["read"], builtIn: true },
      { name: "commenter", actions: ["read"], builtIn: true },
    ]);
  });
});
