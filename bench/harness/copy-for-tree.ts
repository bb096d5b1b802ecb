import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import pg from "pg";

/**
 * A copy of the loaded bench database for the service of another tree
 * (--compare-tree), its schema_migrations cut to the migrations that tree
 * has: a build refuses a database migrated by a newer one. What a later
 * migration added stays in the copy, unread by the older build (a column,
 * an index); the functions it replaced are the tree's own again.
 */
export async function copyForTree(db: { admin: string; name: string }, tree: string): Promise<{ name: string; url: string }> {
  const known = readdirSync(join(tree, "src", "store", "migrations")).filter((f) => /^\d+_.*\.sql$/.test(f)).length;
  const name = `${db.name}_tree`;
  const admin = new pg.Client({ connectionString: db.admin });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE ${name} TEMPLATE ${db.name}`);
  } finally {
    await admin.end();
  }
  const u = new URL(db.admin);
  u.pathname = `/${name}`;
  const copy = new pg.Client({ connectionString: u.toString() });
  await copy.connect();
  try {
    await copy.query("DELETE FROM schema_migrations WHERE version > $1", [known]);
    // A later migration may have replaced a function the tree's statements
    // call (the check's, planned once): the copy gets the tree's own back,
    // its migrations' function definitions run again in order, so the
    // tree's figures are of its own SQL.
    for (const file of readdirSync(join(tree, "src", "store", "migrations")).filter((f) => /^\d+_.*\.sql$/.test(f)).sort()) {
      const sql = readFileSync(join(tree, "src", "store", "migrations", file), "utf8");
      for (const [definition] of sql.matchAll(/CREATE (?:OR REPLACE )?FUNCTION[\s\S]*?\$\$[\s\S]*?\$\$;/g)) {
        await copy.query(definition.replace(/^CREATE (?:OR REPLACE )?FUNCTION/, "CREATE OR REPLACE FUNCTION"));
      }
    }
  } finally {
    await copy.end();
  }
  return { name, url: u.toString() };
}
