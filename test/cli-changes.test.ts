/**
 * `portcullis changes` as a real process (support/entry-points.ts)
 * against a real service (in this process, on PGlite),
 * changes made through the REST API: the feed printed as NDJSON, each line
 * the change exactly as the route returns it, page after page; --state
 * resumes without a repeat or a gap across runs, and a run killed midway
 * repeats at most the page in flight; --follow prints a change written
 * after it started, within seconds, outlives a service it cannot reach and a
 * connection cut mid-poll (through a proxy the test controls), and exits 0
 * on SIGTERM with the state file at the last page's nextToken; a consumer
 * that goes away (EPIPE) ends it quietly; a position older than the
 * retention (a service that keeps changes a second) stops it, --follow
 * included, saying how to start again; a bad --after is the API's 400
 * naming after; bad flags, a state file of another application and the
 * operator key are usage errors (exit 2).
 */
import type { ChildProcessWithoutNullStreams } from "node:child_process";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { createServer, connect, type Server, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestDatabase, type TestDatabase } from "./support/engines.js";
import { freePort } from "./support/ports.js";
import { startTestService, type TestService } from "./support/service.js";
import { cli, type Run } from "./support/cli-process.js";

const CATALOG = { resources: [{ resource: "document", description: "", actions: ["read", "update"] }] };

interface Change {
  kind: string;
  token: string;
  changedAt: string;
  grant?: { userId: string; resource: string; resourceId: string; relation: string };
  assignment?: unknown;
  modelEvent?: unknown;
}

/**
 * A change's token is the reader's position after it, which includes the
 * snapshot the read took: the same change read twice may carry two
 * different tokens, each of which resumes right after it.
 */
const withoutTokens = (changes: Change[]) => changes.map(({ token: _, ...c }) => c);

const linesOf = (stdout: string): Change[] =>
  stdout
    .split("\n")
    .filter((l) => l !== "")
    .map((l) => JSON.parse(l) as Change);

/** The grants' changes as "kind resourceId", the order kept. */
const grantsIn = (changes: Change[]) => changes.filter((c) => c.grant !== undefined).map((c) => `${c.kind} ${c.grant!.resourceId}`);

/** Polls until `ready` holds, or fails after `ms` saying what it waited for. */
async function waitFor(what: string, ready: () => boolean | Promise<boolean>, ms = 10_000): Promise<void> {
  const until = Date.now() + ms;
  while (!(await ready())) {
    if (Date.now() > until) throw new Error(`waited ${ms / 1000} s for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** A run the test watches as it goes: its output so far, and the child to signal. */
interface Running {
  done: Promise<Run>;
  out: () => string;
  err: () => string;
  child: () => ChildProcessWithoutNullStreams;
}

describe("portcullis changes", () => {
  let database: TestDatabase;
  let service: TestService;
  let dir: string;
  let apps = 0;

  /** A new application (its own feed) with a catalog; its key, with every scope. */
  const app = async () => {
    const appId = `feed-${++apps}`;
    expect((await service.call("POST", "/api/v1/applications", { body: { appId } })).status).toBe(201);
    expect((await service.call("PUT", `/api/v1/applications/${appId}/resources`, { body: CATALOG })).status).toBe(200);
    const key = await service.call("POST", `/api/v1/applications/${appId}/api-keys`, { body: { name: "feed" } });
    expect(key.status).toBe(201);
    return { appId, key: key.body.key as string };
  };

  const grant = (resourceId: string, userId = "alice") => ({ userId, resource: "document", resourceId, relation: "viewer" });

  const write = async (key: string, resourceId: string) => {
    const res = await service.call("POST", "/api/v1/authorization/relationships", { key, body: grant(resourceId) });
    expect(res.status, JSON.stringify(res.body)).toBe(201);
  };

  const bulk = async (key: string, writes: ReturnType<typeof grant>[], deletes: ReturnType<typeof grant>[] = []) => {
    const res = await service.call("POST", "/api/v1/authorization/relationships/bulk", { key, body: { writes, deletes } });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
  };

  /** One page of the feed through the route itself. */
  const page = async (key: string, after: string, pageSize = 1000) => {
    const res = await service.call("GET", `/api/v1/authorization/changes?after=${encodeURIComponent(after)}&pageSize=${pageSize}`, { key });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    return res.body as { changes: Change[]; nextToken: string };
  };

  /** The whole feed, as the route pages it. */
  const feedOf = async (key: string) => {
    const all: Change[] = [];
    let after = "";
    for (;;) {
      const p = await page(key, after);
      all.push(...p.changes);
      after = p.nextToken;
      if (p.changes.length < 1000) return all;
    }
  };

  /** The lines are these changes, each exactly as the route gives it (the token as the run's own read gave it). */
  const expectLines = (stdout: string, changes: Change[]) => {
    const lines = linesOf(stdout);
    expect(withoutTokens(lines)).toEqual(withoutTokens(changes));
    expect(stdout).toBe(changes.map((c, i) => `${JSON.stringify({ ...c, token: lines[i]!.token })}\n`).join(""));
  };

  const start = (args: string[], options: { key: string | null; url?: string }): Running => {
    let out = "";
    let err = "";
    let child: ChildProcessWithoutNullStreams | undefined;
    const done = cli(service, ["changes", ...args], {
      ...options,
      onSpawn: (_kill, c) => {
        child = c;
        c.stdout.on("data", (chunk: string) => (out += chunk));
        c.stderr.on("data", (chunk: string) => (err += chunk));
      },
    });
    return { done, out: () => out, err: () => err, child: () => child! };
  };

  beforeAll(async () => {
    database = await createTestDatabase("pglite");
    service = await startTestService(database.db);
    dir = await mkdtemp(join(tmpdir(), "portcullis-changes-"));
  });
  afterAll(async () => {
    await service?.close();
    await database?.dispose();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("prints every change up to now as NDJSON, each line the route's change exactly, page after page, then exits 0", async () => {
    const { key } = await app();
    await write(key, "d1");
    await bulk(key, [grant("d2"), grant("d3"), grant("d4")]);
    const del = await service.call("DELETE", "/api/v1/authorization/relationships?userId=alice&resource=document&resourceId=d1&relation=viewer", { key });
    expect(del.status, JSON.stringify(del.body)).toBe(200);
    await write(key, "d5");
    await bulk(key, [], [grant("d2")]);

    const feed = await feedOf(key);
    expect(grantsIn(feed)).toEqual(["grant_written d1", "grant_written d2", "grant_written d3", "grant_written d4", "grant_deleted d1", "grant_written d5", "grant_deleted d2"]);

    // Pages of 2: a short page ends it, whether the last one is short or empty.
    for (const pageSize of ["2", String(feed.length), "1000"]) {
      const run = await cli(service, ["changes", "--page-size", pageSize], { key });
      expect(run.code, run.stderr).toBe(0);
      expectLines(run.stdout, feed);
      expect(run.stderr).toMatch(new RegExp(`^${feed.length} changes in [\\d.]+ s, up to now; go on with --after [A-Za-z0-9_-]+\\n$`));
    }
    const lines = linesOf((await cli(service, ["changes"], { key })).stdout);
    expect(new Set(lines.map((c) => c.token)).size).toBe(lines.length);
    for (const c of lines) {
      expect(Object.keys(c).slice(0, 3)).toEqual(["kind", "token", "changedAt"]);
      expect([c.grant, c.assignment, c.modelEvent].filter((x) => x !== undefined)).toHaveLength(1);
    }

    // --after a change's token: the changes after it.
    const fourth = feed.findIndex((c) => c.kind === "grant_written" && c.grant?.resourceId === "d4");
    const after = await cli(service, ["changes", "--after", feed[fourth]!.token], { key });
    expect(after.code, after.stderr).toBe(0);
    expectLines(after.stdout, feed.slice(fourth + 1));
  }, 60_000);

  it("--state resumes where the last run stopped: no repeat and no gap across runs", async () => {
    const { appId, key } = await app();
    const state = join(dir, "resume.json");
    await bulk(key, [grant("a1"), grant("a2"), grant("a3")]);

    const first = await cli(service, ["changes", "--state", state, "--page-size", "2"], { key });
    expect(first.code, first.stderr).toBe(0);
    expect(first.stderr).toContain(`the position is saved in ${state}`);
    const saved = JSON.parse(await readFile(state, "utf8")) as { version: number; appId: string; nextToken: string };
    expect(saved).toMatchObject({ version: 1, appId, nextToken: expect.stringMatching(/^[A-Za-z0-9_-]+$/) });

    await write(key, "a4");
    await bulk(key, [], [grant("a1")]);
    await write(key, "a5");
    const second = await cli(service, ["changes", "--state", state, "--page-size", "2"], { key });
    expect(second.code, second.stderr).toBe(0);
    expect(grantsIn(linesOf(second.stdout))).toEqual(["grant_written a4", "grant_deleted a1", "grant_written a5"]);
    expectLines(first.stdout + second.stdout, await feedOf(key));

    const third = await cli(service, ["changes", "--state", state], { key });
    expect(third.code, third.stderr).toBe(0);
    expect(third.stdout).toBe("");
    expect(third.stderr).toMatch(/^0 changes in/);
  }, 60_000);

  it("a run killed midway resumes from its state file, repeating at most the page in flight", async () => {
    const { key } = await app();
    await bulk(key, Array.from({ length: 1000 }, (_, i) => grant(`k${i}`)));
    const feed = await feedOf(key);
    const state = join(dir, "killed.json");

    let polling: NodeJS.Timeout | undefined;
    const first = await cli(service, ["changes", "--state", state, "--page-size", "5"], {
      key,
      onSpawn: (kill) => {
        polling = setInterval(() => void readFile(state).then(kill, () => undefined), 5);
      },
    });
    clearInterval(polling);
    expect(first.signal, `the run finished before it could be killed: ${first.stderr}`).toBe("SIGKILL");
    // Whole pages reach the pipe in one write each; a line cut short by the kill does not count.
    const printed = linesOf(first.stdout.slice(0, first.stdout.lastIndexOf("\n") + 1));
    expect(printed.length).toBeLessThan(feed.length);
    expect(withoutTokens(printed)).toEqual(withoutTokens(feed.slice(0, printed.length)));

    const second = await cli(service, ["changes", "--state", state, "--page-size", "5"], { key });
    expect(second.code, second.stderr).toBe(0);
    const rest = linesOf(second.stdout);
    expect(withoutTokens(rest)).toEqual(withoutTokens(feed.slice(feed.length - rest.length)));
    const repeated = printed.length + rest.length - feed.length;
    expect(repeated, "no gap").toBeGreaterThanOrEqual(0);
    expect(repeated, "at most the page in flight").toBeLessThanOrEqual(5);
  }, 60_000);

  it("--follow prints a change written after it started within seconds, and exits 0 on SIGTERM with the last nextToken saved", async () => {
    const { key } = await app();
    await bulk(key, [grant("f1"), grant("f2")]);
    const backlog = (await feedOf(key)).length;
    const state = join(dir, "follow.json");

    const run = start(["--follow", "--state", state], { key });
    await waitFor("the backlog", () => linesOf(run.out()).length === backlog);
    await waitFor("the state file", () => readFile(state).then(() => true, () => false));

    const written = Date.now();
    await write(key, "late");
    await waitFor("the change written after the start", () => run.out().includes('"resourceId":"late"'), 10_000);
    expect(Date.now() - written).toBeLessThan(10_000);
    // The page's position is saved right after its lines.
    await waitFor("the position past it", async () => (await page(key, JSON.parse(await readFile(state, "utf8")).nextToken)).changes.length === 0);

    run.child().kill("SIGTERM");
    const done = await run.done;
    expect(done.signal).toBeNull();
    expect(done.code, done.stderr).toBe(0);
    expect(done.stderr).toMatch(new RegExp(`^stopped \\(SIGTERM\\) after ${backlog + 1} changes in [\\d.]+ s; the position is saved in ${state}\\n$`));
    expectLines(done.stdout, await feedOf(key));

    // The state holds the last nextToken: nothing after it, and the next run prints only what came since.
    const saved = JSON.parse(await readFile(state, "utf8")) as { nextToken: string };
    expect((await page(key, saved.nextToken)).changes).toEqual([]);
    await write(key, "later");
    const next = await cli(service, ["changes", "--state", state], { key });
    expect(next.code, next.stderr).toBe(0);
    expect(grantsIn(linesOf(next.stdout))).toEqual(["grant_written later"]);
  }, 60_000);

  it("--follow outlives a service it cannot reach and a connection cut mid-poll, saying so on stderr", async () => {
    const { key } = await app();
    await write(key, "r1");
    const port = await freePort();
    const target = new URL(service.url);
    const sockets = new Set<Socket>();
    // A proxy to the service that the test opens late and cuts at will.
    const proxy: Server = createServer((client) => {
      const upstream = connect(Number(target.port), target.hostname);
      for (const s of [client, upstream]) {
        sockets.add(s);
        s.on("error", () => undefined);
        s.on("close", () => {
          sockets.delete(s);
          client.destroy();
          upstream.destroy();
        });
      }
      client.pipe(upstream).pipe(client);
    });
    const run = start(["--follow"], { key, url: `http://127.0.0.1:${port}` });
    try {
      await waitFor("two retries", () => /trying again in 0\.5 s\n.*trying again in 1 s\n/s.test(run.err()));
      expect(run.err()).toContain(`could not reach http://127.0.0.1:${port}/`);
      await new Promise<void>((resolve) => proxy.listen(port, "127.0.0.1", resolve));
      await waitFor("the backlog", () => run.out().includes('"resourceId":"r1"'), 15_000);
      expect(run.err()).toContain("the service answers again; going on");

      // Cut mid-poll: the follower is waiting on its long poll now.
      await new Promise((r) => setTimeout(r, 300));
      const before = run.err().length;
      for (const s of sockets) s.destroy();
      await waitFor("a retry after the cut", () => run.err().slice(before).includes("trying again in 0.5 s"));
      await write(key, "r2");
      await waitFor("the change after the cut", () => run.out().includes('"resourceId":"r2"'), 15_000);
    } finally {
      run.child().kill("SIGTERM");
      proxy.close();
      for (const s of sockets) s.destroy();
    }
    const done = await run.done;
    expect(done.code, done.stderr).toBe(0);
    expect(grantsIn(linesOf(done.stdout))).toEqual(["grant_written r1", "grant_written r2"]);
  }, 60_000);

  it("a consumer that goes away (EPIPE) ends it quietly", async () => {
    const { key } = await app();
    await write(key, "p1");
    const state = join(dir, "epipe.json");
    const run = start(["--follow", "--state", state], { key });
    await waitFor("the first line", () => run.out().includes("\n"));
    await waitFor("the state file", () => readFile(state).then(() => true, () => false));
    const saved = await readFile(state, "utf8");
    run.child().stdout.destroy();
    await write(key, "p2");
    const done = await run.done;
    expect(done.code).toBe(0);
    expect(done.stderr).toBe("");
    // The page nobody read is not counted as read.
    expect(await readFile(state, "utf8")).toBe(saved);
  }, 30_000);

  it("a bad --after is the API's 400 naming after (exit 3)", async () => {
    const { key } = await app();
    const run = await cli(service, ["changes", "--after", "bm90IGEgdG9rZW4"], { key });
    expect(run.code).toBe(3);
    expect(run.stdout).toBe("");
    expect(run.stderr).toContain("the service refused: 400 invalid_argument: after:");
  });

  it("a position older than the retention: exit 3 saying to start again without it, --follow too", async () => {
    // A service of its own that keeps changes for a second and sweeps often.
    const db = await createTestDatabase("pglite");
    const short = await startTestService(db.db, { grantSweepIntervalMs: 100, changesRetentionMs: 1_000 });
    try {
      expect((await short.call("POST", "/api/v1/applications", { body: { appId: "brief" } })).status).toBe(201);
      expect((await short.call("PUT", "/api/v1/applications/brief/resources", { body: CATALOG })).status).toBe(200);
      const key = (await short.call("POST", "/api/v1/applications/brief/api-keys", { body: { name: "feed" } })).body.key as string;
      const writeThere = async (resourceId: string) => expect((await short.call("POST", "/api/v1/authorization/relationships", { key, body: grant(resourceId) })).status).toBe(201);
      await writeThere("e1");
      const state = join(dir, "expired.json");
      expect((await cli(short, ["changes", "--state", state], { key })).code).toBe(0);
      const { nextToken } = JSON.parse(await readFile(state, "utf8")) as { nextToken: string };

      // A change the state has not seen, swept before it is read.
      await writeThere("e2");
      await waitFor("the sweep", async () => (await short.call("GET", `/api/v1/authorization/changes?after=${nextToken}`, { key })).status === 409);

      for (const follow of [[], ["--follow"]]) {
        const run = await cli(short, ["changes", "--state", state, ...follow], { key });
        expect(run.code, run.stderr).toBe(3);
        expect(run.stdout).toBe("");
        expect(run.stderr).toContain(`the position in --state ${state} is older than the change feed's retention`);
        expect(run.stderr).toContain(`To start again from the oldest change kept, delete ${state}`);
        expect(run.stderr).toContain("409 failed_precondition");
        expect(run.stderr).not.toContain("trying again");
      }
      const withAfter = await cli(short, ["changes", "--after", nextToken], { key });
      expect(withAfter.code).toBe(3);
      expect(withAfter.stderr).toContain("the --after token is older than the change feed's retention");
      expect(withAfter.stderr).toContain("run it again without --after");

      await rm(state);
      const fresh = await cli(short, ["changes", "--state", state], { key });
      expect(fresh.code, fresh.stderr).toBe(0);
      expect(JSON.parse(await readFile(state, "utf8"))).toMatchObject({ appId: "brief" });
    } finally {
      await short.close();
      await db.dispose();
    }
  }, 60_000);

  describe("usage errors (exit 2, naming the flag)", () => {
    it.each([
      { args: ["--page-size", "0"], says: "option '--page-size <changes>' argument '0' is invalid" },
      { args: ["--page-size", "1001"], says: "option '--page-size <changes>' argument '1001' is invalid" },
      { args: ["--page-size", "ten"], says: "option '--page-size <changes>' argument 'ten' is invalid" },
      { args: ["--after", ""], says: "--after: the token is empty" },
      { args: ["--after"], says: "option '--after <token>' argument missing" },
      { args: ["--state", "/nonexistent/folder/feed.json"], says: "--state /nonexistent/folder/feed.json: there is no folder /nonexistent/folder" },
      { args: ["--state", "package.json"], says: "--state package.json: not a state file of portcullis changes" },
      { args: ["--state", "src"], says: "--state src: cannot read it (EISDIR)" },
      { args: ["--wait", "5"], says: "unknown option '--wait'" },
      { args: ["now"], says: "too many arguments" },
    ])("$args: $says", async ({ args, says }) => {
      const { key } = await app();
      const run = await cli(service, ["changes", ...args], { key });
      expect(run.code, run.stderr).toBe(2);
      expect(run.stderr).toContain(says);
      expect(run.stdout).toBe("");
    });

    it("a state file of another application's feed", async () => {
      const one = await app();
      const other = await app();
      const state = join(dir, "other.json");
      expect((await cli(service, ["changes", "--state", state], { key: one.key })).code).toBe(0);
      const before = await readFile(state, "utf8");
      const run = await cli(service, ["changes", "--state", state], { key: other.key });
      expect(run.code).toBe(2);
      expect(run.stderr).toContain(`--state ${state}: it holds a position in application ${one.appId}'s feed, and the key is application ${other.appId}'s`);
      expect(await readFile(state, "utf8")).toBe(before);
    });

    it("the operator key", async () => {
      const run = await cli(service, ["changes"], {});
      expect(run.code).toBe(2);
      expect(run.stderr).toContain("changes needs an application key");
    });

    it("a state file that is not one", async () => {
      const state = join(dir, "garbage.json");
      await writeFile(state, '{"version": 1, "appId": "x"}');
      const { key } = await app();
      const run = await cli(service, ["changes", "--state", state], { key });
      expect(run.code).toBe(2);
      expect(run.stderr).toContain(`--state ${state}: not a state file of portcullis changes`);
    });
  });
});
