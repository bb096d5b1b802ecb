import { lowerReplay } from "./lsn.js";

/** Rows answering some inputs, in their order, and the standby replay position the statements read (null on a primary). */
export interface ReadRows<R> {
  rows: R[];
  replayed: string | null;
}

/**
 * Runs a coalesced read as one statement per application, side by side
 * (docs/scale-out.md: a statement names one application, so on Citus it goes
 * whole to one shard), and puts the answers back in input order. The replay
 * position kept is the lowest any statement read: the point every answer is
 * at least as fresh as (see read-replicas.ts).
 */
export async function perApplication<I extends { appId: string }, R>(
  inputs: readonly I[],
  read: (appId: string, inputs: I[]) => Promise<ReadRows<R>>,
): Promise<ReadRows<R>> {
  const byApp = new Map<string, number[]>();
  inputs.forEach((input, i) => {
    const at = byApp.get(input.appId);
    if (at === undefined) byApp.set(input.appId, [i]);
    else at.push(i);
  });
  const out = new Array<R>(inputs.length);
  let replayed: string | null = null;
  await Promise.all(
    [...byApp].map(async ([appId, at]) => {
      const answer = await read(appId, at.map((i) => inputs[i]!));
      at.forEach((i, j) => (out[i] = answer.rows[j]!));
      replayed = lowerReplay(replayed, answer.replayed);
    }),
  );
  return { rows: out, replayed };
}

/**
 * A statement's answer for the keys of distinctKeys (its $2; the
 * application is $1): a JSON array, in their order, of whether each still
 * holds for the application (known, not revoked).
 */
export const KEYS_VALID = `(SELECT json_agg(EXISTS (SELECT 1 FROM api_keys k
                                   WHERE k.secret_hash = c.key_hash AND k.app_id = $1 AND k.revoked_at IS NULL) ORDER BY c.n)
           FROM unnest($2::text[]) WITH ORDINALITY AS c(key_hash, n))`;

/**
 * A standby's replay position and incarnation (its postmaster's start), as
 * lsn.ts's replayPosition reads them; null on a server that never recovered.
 */
export const REPLAY_POSITION = "pg_last_wal_replay_lsn()::text || ' ' || extract(epoch FROM pg_postmaster_start_time())::text";

/** The standby's replay position, read beside a statement's rows on a replica (read-replicas.ts). */
export const REPLAYED = `,\n    ${REPLAY_POSITION} AS replayed`;

/**
 * The distinct calling keys of a batch (a batch has one, a coalesced one a
 * few), each verified once in the statement, and which of them each input used.
 */
export function distinctKeys(inputs: readonly { keyHash: string }[]): { keys: string[]; keyOf: number[] } {
  const keys: string[] = [];
  const keyOf = inputs.map((input) => {
    const at = keys.indexOf(input.keyHash);
    return at >= 0 ? at : keys.push(input.keyHash) - 1;
  });
  return { keys, keyOf };
}

/**
 * The distinct questions of a coalesced batch, as the JSON array a
 * statement reads, and which of them each input asked: fifty callers asking
 * the same page (a dashboard's lookup, the same who-can) cost one question's
 * work, not fifty. Identical questions in one statement read one snapshot,
 * so sharing the answer changes none.
 */
export function distinctQuestions(questions: readonly unknown[]): { json: string; at: number[] } {
  const index = new Map<string, number>();
  const texts: string[] = [];
  const at = questions.map((question) => {
    const text = JSON.stringify(question);
    let i = index.get(text);
    if (i === undefined) {
      i = texts.push(text) - 1;
      index.set(text, i);
    }
    return i;
  });
  return { json: `[${texts.join(",")}]`, at };
}
