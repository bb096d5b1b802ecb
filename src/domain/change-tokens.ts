/**
 * The change feed's tokens (API.md, "Change feed"): a reader's position
 * (store/changes-store.ts: the number of the last commit it read, and inside
 * a commit the last change read of it), as opaque text.
 *
 * Opaque is not trusted, as with page tokens (paging.ts): a token is decoded
 * and checked completely here, before any statement sees it. A number that
 * is no int8 or an ord that is no int4 is a 400 naming `after`, never a cast
 * error from the database.
 *
 * The text is "c|SEQ" after a commit and "c|SEQ|STMT|ORD" inside one;
 * base64url of it, so that it is one URL-safe word. Tokens given before the
 * commit order ("s|SEEN" and "w|SEEN|UPTO|XID|STMT|ORD", snapshots of
 * transaction ids) are still read, as legacy positions, which the first read
 * places in the order or refuses (store/legacy-change-positions.ts).
 */
import type { ChangePosition } from "../store/changes-store.js";
import { isSnapshotText, type LegacyPosition } from "../store/legacy-change-positions.js";
import { invalidArgument } from "./errors.js";
import { show } from "./formats.js";

/**
 * A legacy token's snapshots list the transactions in progress: a few
 * hundred at most with Postgres's connection limits, each up to 20 digits.
 * Tokens this service gives stay far below this.
 */
const TOKEN_MAX = 16_384;
const BASE64URL = /^[A-Za-z0-9_-]+$/;
const XID = /^\d{1,20}$/;
const INT4 = /^(0|[1-9]\d{0,9})$/;
const INT4_MAX = 2_147_483_647;
const INT8 = /^(0|[1-9]\d{0,18})$/;
const INT8_MAX = (1n << 63n) - 1n;

const isInt8 = (text: string) => INT8.test(text) && BigInt(text) <= INT8_MAX;
const isInt4 = (text: string) => INT4.test(text) && Number(text) <= INT4_MAX;

export function encodeChangeToken(position: ChangePosition): string {
  const text = position.legacy !== undefined ? legacyText(position.legacy) : position.within === undefined ? `c|${position.seq ?? "0"}` : `c|${position.seq ?? "0"}|${position.within.stmt}|${position.within.ord}`;
  return Buffer.from(text, "ascii").toString("base64url");
}

/** A legacy position as its token said it (a read that refuses it answers with it unchanged). */
function legacyText(legacy: LegacyPosition): string {
  const seen = legacy.seen ?? "-";
  const w = legacy.window;
  return w === undefined ? `s|${seen}` : `w|${seen}|${w.upTo}|${w.xid}|${w.stmt}|${w.ord}`;
}

/** The position a token names; a 400 naming `field` for anything this service did not give. */
export function decodeChangeToken(token: string, field = "after"): ChangePosition {
  const bad = () => invalidArgument(`${field}: ${show(token)} is not a change token of this feed`, [{ field, reason: "not a change token of this feed" }]);
  if (token.length === 0 || token.length > TOKEN_MAX || !BASE64URL.test(token)) throw bad();
  const text = Buffer.from(token, "base64url").toString("latin1");
  // base64url decoding skips what it cannot read: the round trip must give the token back.
  if (Buffer.from(text, "latin1").toString("base64url") !== token) throw bad();
  const parts = text.split("|");
  if (parts[0] === "c") {
    const [, seq, stmt, ord] = parts;
    if (seq === undefined || !isInt8(seq)) throw bad();
    if (parts.length === 2) return { seq };
    if (parts.length !== 4 || !isInt8(stmt!) || !isInt4(ord!)) throw bad();
    return { seq, within: { stmt: stmt!, ord: Number(ord) } };
  }
  const legacy = decodeLegacy(parts);
  if (legacy === undefined) throw bad();
  return { seq: undefined, legacy };
}

/** A token of the snapshot order's forms, checked as that order checked them; undefined when it is none. */
function decodeLegacy(parts: string[]): LegacyPosition | undefined {
  const seenText = parts[1];
  if (seenText === undefined || (seenText !== "-" && !isSnapshotText(seenText))) return undefined;
  const seen = seenText === "-" ? undefined : seenText;
  if (parts[0] === "s" && parts.length === 2) return seen === undefined ? undefined : { seen }; // "from the oldest" is no token
  if (parts[0] !== "w" || parts.length !== 6) return undefined;
  const [, , upTo, xid, stmt, ordText] = parts as [string, string, string, string, string, string];
  if (!isSnapshotText(upTo) || !XID.test(xid) || !isInt8(stmt) || !isInt4(ordText)) return undefined;
  // The last change read lies inside the window: below its xmax, and past what SEEN had seen.
  if (BigInt(xid) >= BigInt(upTo.split(":")[1]!)) return undefined;
  if (seen !== undefined && BigInt(upTo.split(":")[1]!) < BigInt(seen.split(":")[1]!)) return undefined;
  return { seen, window: { upTo, xid, stmt, ord: Number(ordText) } };
}
