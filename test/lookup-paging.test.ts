/**
 * Lookup pages are stable and complete: a user holding 100,000 grants (over
 * several relations, some instances under two) is paged through with page
 * sizes that do and do not divide the total, while other users' grants on
 * the same resource type are written and deleted all along. Every instance
 * comes back exactly once, in ascending order, with no gap.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestDatabase, oneEngine, type TestDatabase } from "./support/engines.js";
import { startTestService, type TestService } from "./support/service.js";
import { authz, createApp, expectStatus, grant, type Authz, type Grant } from "./helpers/authz.js";

const CATALOG = [
  { resource: "document", description: "", actions: ["read", "update"], relations: [{ name: "reviewer", actions: ["read"] }] },
];
const INSTANCES = 100_000;
const RELATIONS = ["viewer", "editor", "owner", "reviewer"];

/** A scrambled id per instance, so ascending order is not the order of writing. */
const instanceId = (i: number) => `doc-${((i * 7_919) % INSTANCES).toString(36).padStart(4, "0")}-${i % 10}`;

describe.each(oneEngine(import.meta.url))("lookup paging on %s", (engine) => {
  let database: TestDatabase;
  let service: TestService;
  let x: Authz;
  let expected: string[];

  beforeAll(async () => {
    database = await createTestDatabase(engine);
    service = await startTestService(database.db);
    x = authz(service, await createApp(service, "paging", CATALOG));
    const grants: Grant[] = [];
    for (let i = 0; i < INSTANCES; i++) grants.push(grant("heavy", "document", instanceId(i), RELATIONS[i % RELATIONS.length]!));
    // A second relation on every 50th instance: it must still be listed once.
    for (let i = 0; i < INSTANCES; i += 50) grants.push(grant("heavy", "document", instanceId(i), "reviewer"));
    for (let at = 0; at < grants.length; at += 5000) expectStatus(await x.bulk(grants.slice(at, at + 5000)), 200);
    expected = [...new Set(grants.map((g) => g.resourceId))].sort();
    expect(expected).toHaveLength(INSTANCES);
  }, 300_000);
  afterAll(async () => {
    await service?.close();
    await database?.dispose();
  });

  const sizes = engine === "postgres" ? [1000, 337, 100] : [1000, 337];

  it.each(sizes)("pageSize=%i: every instance once, in order, while other users' grants change", async (pageSize) => {
    let stop = false;
    let writes = 0;
    // Other users' grants on the same type, interleaving the heavy user's ids, written and deleted all along.
    const writer = (async () => {
      for (let round = 0; !stop; round++) {
        const batch = Array.from({ length: 200 }, (_, j) => grant(`other-${j % 7}`, "document", instanceId((round * 200 + j) % INSTANCES), "viewer"));
        expectStatus(await x.bulk(batch), 200);
        expectStatus(await x.bulk([], batch.slice(0, 100)), 200);
        writes += 300;
      }
    })();
    const seen: string[] = [];
    try {
      let pageToken = "";
      for (let pages = 0; pages <= INSTANCES; pages++) {
        const res = await service.call("POST", "/api/v1/authorization/lookup", {
          key: x.key,
          body: { userId: "heavy", resource: "document", action: "read", pageSize, pageToken },
        });
        expectStatus(res, 200);
        expect(res.body.allInstances).toBe(false);
        seen.push(...res.body.resourceIds);
        pageToken = res.body.nextPageToken;
        if (pageToken === "") break;
        expect(res.body.resourceIds).toHaveLength(pageSize);
      }
    } finally {
      stop = true;
      await writer;
    }
    expect(writes).toBeGreaterThan(0);
    expect(seen.length).toBe(expected.length);
    // Exactly the expected list: no repeat, no gap, ascending.
    const firstDifference = seen.findIndex((id, i) => id !== expected[i]);
    expect(firstDifference, `first difference at ${firstDifference}: ${seen[firstDifference]} vs ${expected[firstDifference]}`).toBe(-1);
  }, 300_000);

  it("another action lists exactly the instances whose relations imply it", async () => {
    // editor and owner imply update (instances i % 4 of 1 and 2); viewer and reviewer do not.
    const want = Array.from({ length: INSTANCES }, (_, i) => i).filter((i) => i % 4 === 1 || i % 4 === 2).map(instanceId).sort();
    const seen: string[] = [];
    let pageToken = "";
    do {
      const res = await service.call("POST", "/api/v1/authorization/lookup", {
        key: x.key,
        body: { userId: "heavy", resource: "document", action: "update", pageSize: 1000, pageToken },
      });
      expectStatus(res, 200);
      seen.push(...res.body.resourceIds);
      pageToken = res.body.nextPageToken;
    } while (pageToken !== "");
    expect(seen.length).toBe(want.length);
    expect(seen.findIndex((id, i) => id !== want[i])).toBe(-1);
  });
});
