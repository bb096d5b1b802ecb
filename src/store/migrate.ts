import { readdir, readFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import { installCheckFunctions, type CheckFunction } from "./check-functions.js";
import { CHECK_FUNCTIONS } from "./check-store.js";
import type { Db } from "./db.js";

const MIGRATIONS_DIR = fileURLToPath(new URL("./migrations/", import.meta.url));

// Any fixed number: every replica of every version takes the same lock.
export const MIGRATION_LOCK_KEY = 0x70637573; // "pcus"

export interface Migration {
  version: number;
  name: string;
  sql: string;
}

/** The numbered SQL files, `NNN_name.sql`, in order. */
export async function loadMigrations(dir = MIGRATIONS_DIR): Promise<Migration[]> {
  const files = (await readdir(dir)).filter((f) => f.endsWith(".sql")).sort();
  const migrations: Migration[] = [];
  for (const file of files) {
    const match = /^(\d+)_([a-z0-9_]+)\.sql$/.exec(file);
    if (!match) throw new Error(`migration file name must be NNN_name.sql: ${file}`);
    migrations.push({ version: Number(match[1]), name: match[2]!, sql: await readFile(dir + file, "utf8") });
  }
  migrations.forEach((m, i) => {
    if (m.version !== i + 1) throw new Error(`migrations must be numbered 1, 2, 3...; found ${m.version} at place ${i + 1}`);
  });
  return migrations;
}

/**
 * Applies the migrations not applied yet, all in one transaction under an
 * advisory lock, so replicas starting at once apply each exactly once: the
 * second waits for the first, then finds nothing left to do. Then, in the
 * same transaction, creates this build's check functions where they are
 * missing and drops those of builds two generations older
 * (check-functions.ts). Returns the versions it applied.
 */
export async function migrate(db: Db, migrations?: Migration[], functions: readonly CheckFunction[] = CHECK_FUNCTIONS): Promise<number[]> {
  const all = migrations ?? (await loadMigrations());
  return db.transaction(async (tx) => {
    await tx.query("SELECT pg_advisory_xact_lock($1)", [MIGRATION_LOCK_KEY]);
    await tx.query(`CREATE TABLE IF NOT EXISTS schema_migrations (
      version    integer PRIMARY KEY,
      name       text NOT NULL,
      applied_at timestamptz NOT NULL DEFAULT now()
    )`);
    const { rows } = await tx.query<{ version: number }>("SELECT version FROM schema_migrations");
    const done = new Set(rows.map((r) => r.version));
    const newest = Math.max(0, ...done);
    if (newest > all.length) {
      // A newer replica migrated this database; running old code on it is unsafe.
      throw new Error(`the database is at schema version ${newest}, newer than this build knows (${all.length})`);
    }
    const applied: number[] = [];
    for (const m of all) {
      if (done.has(m.version)) continue;
      // Statement by statement: the pg extended protocol takes one per call.
      for (const statement of splitStatements(m.sql)) await tx.query(statement);
      await tx.query("INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", [m.version, m.name]);
      applied.push(m.version);
    }
    await installCheckFunctions(tx, functions);
    return applied;
  });
}

/**
 * Splits a migration script on the semicolons that end statements. Migrations
 * are plain DDL and trigger functions: no semicolons inside strings or
 * comments, and a function's body quoted with plain $$ (no $tag$), whose
 * semicolons stay in it.
 */
export function splitStatements(sql: string): string[] {
  const withoutComments = sql.replace(/--[^\n]*/g, "");
  // A function body is one dollar-quoted string ($$ ... $$): its semicolons
  // are the body's, not ends of statements.
  const statements: string[] = [];
  let current = "";
  const parts = withoutComments.split("$$");
  if (parts.length % 2 === 0) throw new Error("a migration's $$ quotes must come in pairs");
  parts.forEach((part, i) => {
    if (i % 2 === 1) {
      current += `$$${part}$$`;
      return;
    }
    const pieces = part.split(";");
    current += pieces[0];
    for (const piece of pieces.slice(1)) {
      statements.push(current);
      current = piece;
    }
  });
  statements.push(current);
  return statements.map((s) => s.trim()).filter((s) => s.length > 0);
}
