/**
 * PGlite's settings reach Postgres (docs/embedded-memory.md): shared_buffers
 * on a new folder created in a child process, on the same folder opened
 * again, and in memory; a folder that cannot be made is refused naming it;
 * and a child that cannot create the folder fails the open with its reason.
 * A new folder made from the build's template (`templateFile`), in a child
 * and in this process, is migrated already and keeps its writes; one whose
 * template fails is made by initdb, the lock kept.
 */
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { gunzipSync, gzipSync } from "node:zlib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { writeTemplate } from "../src/embedded.js";
import { LOCK_FILE } from "../src/store/data-dir-lock.js";
import { loadMigrations, migrate } from "../src/store/migrate.js";
import { PgliteDb, type PgliteSettings } from "../src/store/pglite-db.js";
import { distIsCurrent, ROOT } from "./support/entry-points.js";

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

describe("a new folder from the build's template (templateFile)", () => {
  /**
   * What the build writes to dist/src/embedded-template.tgz: that file when
   * dist/ holds the current sources (CI builds first), else made here the
   * build's way (an initdb: seconds of CPU).
   */
  const built = join(ROOT, "dist", "src", "embedded-template.tgz");
  const template = join(tmp, "template.tgz");
  beforeAll(async () => {
    if (existsSync(built) && distIsCurrent()) copyFileSync(built, template);
    else await writeTemplate(pathToFileURL(template));
  }, 120_000);

  it.each([
    { where: "in a child", initInChild: true },
    { where: "in this process", initInChild: false },
  ])("$where: opens migrated, at the settings' shared_buffers, and a write survives a reopen", { timeout: 120_000 }, async ({ initInChild }) => {
    const dir = join(tmp, `from-template-${initInChild ? "child" : "here"}`);
    const settings: PgliteSettings = { sharedBuffersMb: 16, initInChild, templateFile: template };
    const db = await PgliteDb.open(dir, settings);
    try {
      expect(db.created).toMatchObject({ from: "template", inChild: initInChild });
      expect(db.created!.templateError).toBeUndefined();
      // The template's postgresql.conf says PGlite's own 128MB: the start setting wins.
      expect(readFileSync(join(dir, "postgresql.conf"), "utf8")).toMatch(/^shared_buffers = 128MB/m);
      expect(await sharedBuffers(db)).toBe("16MB");
      expect(await migrate(db), "migrations applied").toEqual([]);
      await db.query("INSERT INTO applications (app_id, name) VALUES ('kept', 'Kept')");
    } finally {
      await db.close();
    }
    const again = await PgliteDb.open(dir, settings);
    try {
      expect(again.created).toBeUndefined();
      expect(await migrate(again)).toEqual([]);
      expect((await again.query<{ app_id: string }>("SELECT app_id FROM applications")).rows).toEqual([{ app_id: "kept" }]);
    } finally {
      await again.close();
    }
  });

  const files = (dir: string) => readdirSync(dir, { recursive: true, encoding: "utf8" }).filter((f) => !f.startsWith(LOCK_FILE)).sort();
  /** A new folder whose template file is missing, and its files once open: made once, for whichever test asks first. */
  let withoutTemplate: Promise<{ created: PgliteDb["created"]; files: string[] }> | undefined;
  const initdbFolder = () =>
    (withoutTemplate ??= (async () => {
      const dir = join(tmp, "no-template");
      const db = await PgliteDb.open(dir, { sharedBuffersMb: 16, initInChild: true, templateFile: join(tmp, "missing.tgz") });
      try {
        return { created: db.created, files: files(dir) };
      } finally {
        await db.close();
      }
    })());

  it("a missing file: initdb, with no complaint", { timeout: 120_000 }, async () => {
    const { created } = await initdbFolder();
    expect(created).toMatchObject({ from: "initdb", inChild: true });
    expect(created!.templateError).toBeUndefined();
  });

  /** The template whole, but with its control file zeroed: every file is written, PG_VERSION too, and Postgres refuses to start. */
  const zeroedControlFile = () => {
    const tar = gunzipSync(readFileSync(template));
    for (let at = 0; at < tar.length; at += 512) {
      if (tar.subarray(at, at + 100).toString("latin1").replace(/\0.*$/s, "") !== "/global/pg_control") continue;
      const size = parseInt(tar.subarray(at + 124, at + 136).toString("latin1"), 8);
      return gzipSync(tar.fill(0, at + 512, at + 512 + size));
    }
    throw new Error("no /global/pg_control in the template");
  };

  // Each case is an initdb (seconds of CPU): the truncated file fails in this process's unzipping, the
  // database Postgres cannot start fails in the child after every file was written; the removal of what a
  // failed attempt wrote is one function (createDataDir) for both ways of making a folder.
  it.each([
    // Given these bytes, PGlite's own unzipping would also fail outside the promise it returns, and end the process.
    { what: "a truncated file", where: "in this process", initInChild: false, bytes: () => readFileSync(template).subarray(0, 1_000_000) },
    { what: "a database Postgres cannot start", where: "in a child", initInChild: true, bytes: zeroedControlFile },
  ])("$what, $where: initdb makes the folder, what the template wrote removed, the lock kept", { timeout: 120_000 }, async ({ initInChild, bytes }) => {
    const broken = mkdtempSync(join(tmp, "broken-"));
    const templateFile = join(broken, "template.tgz");
    writeFileSync(templateFile, bytes());
    const dir = join(broken, "data");
    const db = await PgliteDb.open(dir, { sharedBuffersMb: 16, initInChild, templateFile });
    try {
      expect(db.created).toMatchObject({ from: "initdb", inChild: initInChild });
      expect(db.created!.templateError).toBeTruthy();
      expect(JSON.parse(readFileSync(join(dir, LOCK_FILE), "utf8"))).toMatchObject({ pid: process.pid });
      // Nothing of the template is left among initdb's files (its tables' files would be in the way of new ones).
      expect(files(dir)).toEqual((await initdbFolder()).files);
      // initdb's folder: its postgresql.conf has the setting, the template's does not.
      expect(readFileSync(join(dir, "postgresql.conf"), "utf8")).toMatch(/^shared_buffers = 16MB/m);
      expect(await migrate(db)).toEqual((await loadMigrations()).map((m) => m.version));
      await db.query("INSERT INTO applications (app_id, name) VALUES ('kept', 'Kept')");
    } finally {
      await db.close();
    }
    expect(readdirSync(dir)).not.toContain(LOCK_FILE);
    const again = await PgliteDb.open(dir, { sharedBuffersMb: 16, initInChild, templateFile });
    try {
      expect(again.created).toBeUndefined();
      expect((await again.query<{ app_id: string }>("SELECT app_id FROM applications")).rows).toEqual([{ app_id: "kept" }]);
    } finally {
      await again.close();
    }
  });
});
