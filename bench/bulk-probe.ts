import { BulkWriteRelationshipsRequestSchema } from "../gen/authz/v1/relationships_pb.js";
import { messageFromJson } from "../src/transport/json-input.js";
import { PgDb } from "../src/store/pg-db.js";
import { Relationships } from "../src/domain/relationships.js";
import * as data from "./dataset.js";

const db = new PgDb("postgres://postgres@127.0.0.1:5432/pcx", { max: 4, onError: () => {} });
const rel = new Relationships(db);
for (let round = 0; round < 4; round++) {
  const start = 2_000_000 + round * 5000;
  const writes = Array.from({ length: 5000 }, (_, k) => data.grant(start + k));
  const text = JSON.stringify({ writes });
  let t = performance.now();
  const json = JSON.parse(text);
  const t1 = performance.now() - t; t = performance.now();
  const msg = messageFromJson(BulkWriteRelationshipsRequestSchema, json);
  const t2 = performance.now() - t; t = performance.now();
  const tuples = msg.writes.map((w) => ({ userId: w.userId, resource: w.resource, resourceId: w.resourceId, relation: w.relation }));
  await rel.bulk("bench", tuples, []);
  const t3 = performance.now() - t;
  console.log(`parse ${t1.toFixed(1)} ms, messageFromJson ${t2.toFixed(1)} ms, domain+SQL ${t3.toFixed(1)} ms`);
}
await db.close();
{
  const db2 = new PgDb("postgres://postgres@127.0.0.1:5432/pcx", { max: 2, onError: () => {} });
  const { relationshipsStore } = await import("../src/store/relationships-store.js");
  for (let round = 0; round < 3; round++) {
    const writes = Array.from({ length: 5000 }, (_, k) => data.grant(3_000_000 + round * 5000 + k));
    let t = performance.now();
    await db2.transaction(async (tx) => { await relationshipsStore.writeMany(tx, "bench", writes); });
    const a = performance.now() - t; t = performance.now();
    await db2.transaction(async (tx) => { await relationshipsStore.relationsOf(tx, "bench"); });
    console.log(`insert 5000 in tx ${a.toFixed(1)} ms, relationsOf ${(performance.now() - t).toFixed(1)} ms`);
  }
  await db2.close();
}
