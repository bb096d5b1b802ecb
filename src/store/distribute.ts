import type { Db } from "./db.js";
import { MIGRATION_LOCK_KEY } from "./migrate.js";

/**
 * Citus's layout of the schema (AUTHZ_DISTRIBUTE=citus; docs/scale-out.md).
 *
 * Reference tables, copied whole to every node: `api_keys`, because a key is
 * looked up by its secret before the application is known, and
 * `applications`, which every other table's foreign keys name (a foreign key
 * from a distributed table may point at a reference table). Applications
 * are created rarely, so their writes going to every node costs nothing
 * that matters, and the database keeps enforcing both foreign keys.
 */
export const REFERENCE_TABLES = ["applications", "api_keys"] as const;

/**
 * Distributed by app_id, in one colocation group (that of the first), so one
 * application's rows of every table sit on one node and every statement
 * naming one app_id goes whole to it. In foreign-key order: a table is
 * distributed after the tables its foreign keys point at.
 */
export const DISTRIBUTED_TABLES = [
  "model_versions",
  "catalog_resources",
  "catalog_relations",
  "catalog_inherits",
  "catalog_operators",
  "policies",
  "policy_permissions",
  "roles",
  "role_policies",
  "role_permissions",
  "role_assignments",
  "relationships",
  "subject_relationships",
  "audit_events",
  "changes",
  "change_horizons",
  "change_commits",
  "change_clocks",
  "user_properties",
] as const;

/**
 * Tables of the service's own bookkeeping, read and written by migrate()
 * alone: plain tables on the coordinator.
 */
export const COORDINATOR_TABLES = ["schema_migrations", "check_functions"] as const;

export class DistributionError extends Error {}

/**
 * Distributes the tables not distributed yet, in one transaction, under the
 * migrations' advisory lock: replicas starting together distribute once, the
 * others find it done. Run after migrate(); returns the tables it changed.
 */
export async function distributeOnCitus(db: Db): Promise<string[]> {
  return db.transaction(async (tx) => {
    await tx.query("SELECT pg_advisory_xact_lock($1)", [MIGRATION_LOCK_KEY]);
    const citus = await tx.query("SELECT 1 FROM pg_extension WHERE extname = 'citus'");
    if (citus.rows.length === 0) {
      throw new DistributionError(
        "AUTHZ_DISTRIBUTE=citus, but this database has no citus extension: run CREATE EXTENSION citus and add the workers (citus_add_node) first",
      );
    }
    const { rows } = await tx.query<{ name: string; type: string }>(
      "SELECT table_name::text AS name, citus_table_type AS type FROM citus_tables",
    );
    const done = new Map(rows.map((r) => [r.name, r.type]));
    const wanted = [
      ...REFERENCE_TABLES.map((name) => ({ name, type: "reference" })),
      ...DISTRIBUTED_TABLES.map((name) => ({ name, type: "distributed" })),
    ];
    for (const { name, type } of wanted) {
      const found = done.get(name);
      if (found !== undefined && found !== type) {
        throw new DistributionError(
          `table ${name} is a Citus ${found} table, not ${type}: undo it with SELECT undistribute_table('${name}') and start again`,
        );
      }
    }
    // With the default (on), making `applications` a reference table while
    // the tables that reference it are still plain would turn them into
    // Citus local tables, which then cannot be distributed.
    await tx.query("SET LOCAL citus.enable_local_reference_table_foreign_keys = off");
    // Tables with foreign keys to reference tables are distributed in one
    // transaction only in sequential mode.
    await tx.query("SET LOCAL citus.multi_shard_modify_mode = 'sequential'");
    // The change feed's trigger (migration 011) sets each row's transaction
    // id on the node that stores it. Citus refuses triggers on distributed
    // tables unless told otherwise, because a trigger could reach other
    // shards; this one only sets a field of NEW.
    await tx.query("SET LOCAL citus.enable_unsafe_triggers = on");
    const changed: string[] = [];
    for (const name of REFERENCE_TABLES) {
      if (done.has(name)) continue;
      await tx.query("SELECT create_reference_table($1::regclass)", [name]);
      changed.push(name);
    }
    for (const name of DISTRIBUTED_TABLES) {
      if (done.has(name)) continue;
      const colocateWith = name === DISTRIBUTED_TABLES[0] ? "default" : DISTRIBUTED_TABLES[0];
      await tx.query("SELECT create_distributed_table($1::regclass, 'app_id', colocate_with => $2)", [name, colocateWith]);
      changed.push(name);
    }
    return changed;
  });
}
