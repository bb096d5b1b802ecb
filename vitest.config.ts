import { defineConfig } from "vitest/config";

/**
 * Most files run two at a time (the `together` project): most of a file's
 * time is spent waiting on its database or its service, and Vitest's default
 * on two cores is one worker (the cores less one). `npm test`
 * (scripts/test.mjs) runs this room with the Citus leg and then `paired`
 * beside it, each a Vitest run of its own, and `timing` and `clocks` after
 * them with nothing beside.
 *
 * `paired`, two files at a time: the browser files (Chromium takes a
 * core of its own) and the files that mostly wait (on processes starting and
 * stopping, replicas catching up), in Vitest's order (a file's last
 * duration when it has one, else the largest first), each file to the
 * worker that is free. As in `together`, a worker runs its files in one
 * process, the modules loaded once.
 */
const BROWSER = [
  "test/console-e2e.test.ts",
  "test/console-links.test.ts",
  "test/console-conditions.test.ts",
  "test/console-model.test.ts",
  "test/console-hierarchy.test.ts",
  "test/docs-page.test.ts",
  "test/console-all-users.test.ts",
  "test/console-grant-import.test.ts",
  "test/console-static.test.ts",
  // A console file not named above runs here too.
  "test/console-*.test.ts",
];
const WAITING = [
  "test/freshness.test.ts",
  "test/read-replicas.test.ts",
  "test/start-up-mistakes.test.ts",
  "test/changes-restarts.test.ts",
  "test/changes-streams.test.ts",
  // The command line killed mid-import and run as processes: here, it also evens the two lanes npm test runs side by side.
  "test/cli.test.ts",
];
/**
 * `timing`, truly alone: the files whose assertions are about time at
 * the scale of a scheduler's hiccup and which load the cores themselves (a
 * first start ready within 10 s, building its embedded folder; answers
 * within 100 ms while thousands of streams attack). Beside another file they
 * would measure the neighbour: beside a browser file, a first start on a
 * fresh embedded folder once took 12.1 s.
 */
const TIMING = ["test/process.test.ts", "test/h2-attacks.test.ts"];
/**
 * `clocks`, four at a time: files about time that mostly wait on their
 * own timers (deadlines, connection and stream timeouts, cancellation
 * mid-write), with hundreds of milliseconds of slack, light enough that
 * four side by side use about a core and a half (41 s of CPU in 33 s).
 * The deadlines are a file per engine, so the two run side by side.
 */
const CLOCKS = [
  "test/deadlines-pglite.test.ts",
  "test/deadlines-postgres.test.ts",
  "test/cancel-while-writing.test.ts",
  "test/connection-timeouts.test.ts",
  "test/h2-limits.test.ts",
];

/**
 * Files that replace a module (`vi.mock`): `together` and `paired` share
 * each worker's module cache between its files, where the replacement would
 * meet a copy already loaded, so these run in `clocks`, a process per file.
 */
const MOCKING = ["test/authzen-fast-path.test.ts"];

export default defineConfig({
  test: {
    globalSetup: ["test/support/global-setup.ts"],
    // Each file starts its own engines (PGlite takes seconds to open). A
    // timeout guards against a hang; it is not a speed test (npm run bench
    // measures speed). With six files side by side on two cores, tests that
    // take 2 s alone took 18 to 27 s, close to the 30 s these once were.
    testTimeout: 90_000,
    hookTimeout: 120_000,
    // expect.poll waits for what comes eventually (a page's heading after a
    // load, a replica catching up); it returns at the first match, so its
    // bound is only how long a loaded machine may take. Vitest's default of
    // 1 s once failed a console page that Chromium drew in more.
    expect: { poll: { timeout: 15_000 } },
    pool: "forks",
    projects: [
      {
        extends: true,
        // The Citus leg (npm run test:citus) runs here too, two files at a time: most of its
        // time is its three servers answering small statements.
        test: {
          name: "together",
          include: ["test/**/*.test.ts"],
          exclude: [...BROWSER, ...WAITING, ...TIMING, ...CLOCKS, ...MOCKING],
          // A worker runs its files one after another in one process: each
          // file starts its own database and service, but the modules (the
          // service's, PGlite's WebAssembly) load once per worker, not once
          // per file, which was a third of the room's time.
          isolate: false,
          maxWorkers: 2,
          sequence: { groupOrder: 0 },
        },
      },
      { extends: true, test: { name: "paired", include: [...BROWSER, ...WAITING], isolate: false, maxWorkers: 2, sequence: { groupOrder: 1 } } },
      { extends: true, test: { name: "timing", include: TIMING, maxWorkers: 1, sequence: { groupOrder: 2 } } },
      { extends: true, test: { name: "clocks", include: [...CLOCKS, ...MOCKING], maxWorkers: 4, sequence: { groupOrder: 3 } } },
    ],
  },
});
