import { defineConfig } from "vitest/config";

/**
 * Files that run alone, after the others: the browser's (Chromium takes a
 * core of its own, and their waits are for what a person would see) and
 * those whose assertions are about time or processes (deadlines, timeouts,
 * restarts, replicas catching up, a cluster of their own). Beside another
 * file they would measure the neighbour.
 */
const ALONE = [
  "test/console-*.test.ts",
  "test/docs-page.test.ts",
  "test/deadlines.test.ts",
  "test/connection-timeouts.test.ts",
  "test/h2-attacks.test.ts",
  "test/h2-limits.test.ts",
  "test/cancel-while-writing.test.ts",
  "test/start-up-mistakes.test.ts",
  "test/process.test.ts",
  "test/changes-restarts.test.ts",
  "test/changes-streams.test.ts",
  "test/read-replicas.test.ts",
  "test/freshness.test.ts",
  "test/citus.test.ts",
];

export default defineConfig({
  test: {
    globalSetup: ["test/support/global-setup.ts"],
    // Each file starts its own engines (PGlite takes seconds to open).
    testTimeout: 30_000,
    hookTimeout: 60_000,
    pool: "forks",
    projects: [
      {
        extends: true,
        // Two files at once: most of a file's time is spent waiting on its database or its service,
        // and Vitest's default on two cores is one (the cores less one).
        // The Citus leg (npm run test:citus) runs its files one at a time: its three servers already
        // take both cores, and its tests of concurrent writers and lapsing grants then time out.
        test: {
          name: "together",
          include: ["test/**/*.test.ts"],
          exclude: ALONE,
          maxWorkers: process.env.PORTCULLIS_TEST_ENGINES === "citus" ? 1 : 2,
          sequence: { groupOrder: 0 },
        },
      },
      { extends: true, test: { name: "alone", include: ALONE, maxWorkers: 1, sequence: { groupOrder: 1 } } },
    ],
  },
});
