/**
 * A service on a database of its own for one describe block: started before
 * the block's tests, closed and its database dropped after them.
 */
import { afterAll, beforeAll } from "vitest";
import type { Config } from "../../src/config.js";
import { expectStatus } from "../helpers/authz.js";
import { createTestDatabase, type EngineName, type TestDatabase } from "./engines.js";
import { startTestService, type RestAnswer, type TestService } from "./service.js";

export interface UsedService {
  /** Set once the block's beforeAll has run. */
  readonly service: TestService;
  readonly database: TestDatabase;
  /** A REST call that must answer 200 (the operator's key unless `key`); its body. */
  ok(method: string, path: string, body: unknown, key?: string): Promise<RestAnswer["body"]>;
}

export function useService(engine: EngineName, overrides: Partial<Config> = {}): UsedService {
  let database: TestDatabase | undefined;
  let service: TestService | undefined;
  beforeAll(async () => {
    database = await createTestDatabase(engine, { migrated: true });
    service = await startTestService(database.db, overrides);
  }, 60_000);
  afterAll(async () => {
    await service?.close();
    await database?.dispose();
  });
  const used: UsedService = {
    get service() {
      if (service === undefined) throw new Error("the service starts in beforeAll: use it inside a test");
      return service;
    },
    get database() {
      if (database === undefined) throw new Error("the database is made in beforeAll: use it inside a test");
      return database;
    },
    async ok(method, path, body, key) {
      const res = await used.service.call(method, path, { body, ...(key === undefined ? {} : { key }) });
      expectStatus(res, 200);
      return res.body;
    },
  };
  return used;
}
