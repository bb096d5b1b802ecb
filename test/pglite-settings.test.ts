/**
 * PGlite's settings reach Postgres (docs/embedded-memory.md): shared_buffers
 * on a new folder created in a child process, on the same folder opened
 * again, and in memory; a folder that cannot be made is refused naming it;
 * and a child that cannot create the folder fails the open with its reason.
 */
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { PgliteDb, type PgliteSettings } from "../src/store/pglite-db.js";

const tmp = mkdtempSync(join(tmpdir(), "portcullis-pglite-settings-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

async function sharedBuffers(db: PgliteDb): Promise<string> {
  const { rows } = await db.query<{ shared_buffers: string }>("SHOW shared_buffers");
  return rows[0]!.shared_buffers;
}

describe("PgliteDb.open with settings", () => {
  const dataDir = join(tmp, "data");

  it.each<{ when: string; dir: string | undefined; settings: PgliteSettings; createdInChild: boolean; expected: string }>([
    { when: "a new folder, created in a child", dir: dataDir, settings: { sharedBuffersMb: 16, initInChild: true }, createdInChild: true, expected: "16MB" },
    { when: "the same folder, another value", dir: dataDir, settings: { sharedBuffersMb: 32, initInChild: true }, createdInChild: false, expected: "32MB" },
    // initdb wrote the value it was created with into the folder's postgresql.conf.
    { when: "the same folder, nothing set", dir: dataDir, settings: {}, createdInChild: false, expected: "16MB" },
    { when: "in memory (no child: nothing to create on disk)", dir: undefined, settings: { sharedBuffersMb: 8, initInChild: true }, createdInChild: false, expected: "8MB" },
  ])("$when: shared_buffers $expected", { timeout: 120_000 }, async ({ dir, settings, createdInChild, expected }) => {
    const db = await PgliteDb.open(dir, settings);
    try {
      expect(await sharedBuffers(db)).toBe(expected);
      expect(db.created !== undefined).toBe(createdInChild);
      if (createdInChild) {
        expect(db.created!.peakRssMb).toBeGreaterThan(0);
        expect(readFileSync(join(dataDir, "postgresql.conf"), "utf8")).toMatch(/^shared_buffers = 16MB/m);
      }
    } finally {
      await db.close();
    }
  });

  it("a folder that cannot be made is refused before the child starts, naming it", { timeout: 60_000 }, async () => {
    const file = join(tmp, "a-file");
    writeFileSync(file, "not a folder");
    await expect(PgliteDb.open(join(file, "data"), { sharedBuffersMb: 16, initInChild: true })).rejects.toThrow(
      /^the data folder .*a-file\/data cannot be made \(ENOTDIR.*\): set AUTHZ_DATA_DIR/s,
    );
    expect(existsSync(join(file, "data"))).toBe(false);
  });

  it("fails with the child's reason when the child cannot create the folder", { timeout: 60_000 }, async () => {
    const blocked = join(tmp, "blocked");
    // A file where initdb makes its first folder.
    mkdirSync(blocked, { recursive: true });
    writeFileSync(join(blocked, "base"), "not a folder");
    await expect(PgliteDb.open(blocked, { sharedBuffersMb: 16, initInChild: true })).rejects.toThrow(/^creating the PGlite data folder .*blocked failed \(exit 1\)/s);
    expect(existsSync(join(blocked, "PG_VERSION"))).toBe(false);
  });
});
