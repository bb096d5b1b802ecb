/**
 * The change feed's tokens (API.md, "Change feed"): a reader's position
 * (store/changes-store.ts: the snapshot it has seen, and inside a window the
 * window's upper snapshot and the last change returned), as opaque text.
 *
 * Opaque is not trusted, as with page tokens (paging.ts): a token is decoded
 * and checked completely here, before any statement sees it. A snapshot
 * Postgres would refuse, an xid out of range, a statement number that is no
 * int8 or an ord that is no int4 is a
 * 400 naming `after`, never a cast error from the database.
 *
 * The text is "s|SEEN" after a window and "w|SEEN|UPTO|XID|STMT|ORD" inside one,
 * SEEN being "-" for a reader that started from the oldest change kept;
 * base64url of it, so that it is one URL-safe word.
 */
import { isSnapshotText, type ChangePosition } from "../store/changes-store.js";
import { invalidArgument } from "./errors.js";
import { show } from "./formats.js";

/**
 * A snapshot lists the transactions in progress: a few hundred at most with
 * Postgres's connection limits, each up to 20 digits. Tokens this service
 * gives stay far below this.
 */
const TOKEN_MAX = 16_384;
const BASE64URL = /^[A-Za-z0-9_-]+$/;
const XID = /^\d{1,20}$/;
const INT4_MAX = 2_147_483_647;
const STMT = /^(0|[1-9]\d{0,18})$/;
const INT8_MAX = (1n << 63n) - 1n;

export function encodeChangeToken(position: ChangePosition): string {
  const seen = position.seen ?? "-";
  const w = position.window;
  const text = w === undefined ? `s|${seen}` : `w|${seen}|${w.upTo}|${w.xid}|${w.stmt}|${w.ord}`;
  return Buffer.from(text, "ascii").toString("base64url");
}

/** The position a token names; a 400 naming `field` for anything this service did not give. */
export function decodeChangeToken(token: string, field = "after"): ChangePosition {
  const bad = () => invalidArgument(`${field}: ${show(token)} is not a change token of this feed`, [{ field, reason: "not a change token of this feed" }]);
  if (token.length === 0 || token.length > TOKEN_MAX || !BASE64URL.test(token)) throw bad();
  const text = Buffer.from(token, "base64url").toString("latin1");
  // base64url decoding skips what it cannot read: the round trip must give the token back.
  if (Buffer.from(text, "latin1").toString("base64url") !== token) throw bad();
  const parts = text.split("|");
  const seenText = parts[1];
  if (seenText === undefined || (seenText !== "-" && !isSnapshotText(seenText))) throw bad();
  const seen = seenText === "-" ? undefined : seenText;
  if (parts[0] === "s" && parts.length === 2) {
    if (seen === undefined) throw bad(); // "from the oldest" is no token: the request leaves `after` out
    return { seen };
  }
  if (parts[0] !== "w" || parts.length !== 6) throw bad();
  const [, , upTo, xid, stmt, ordText] = parts as [string, string, string, string, string, string];
  if (!isSnapshotText(upTo) || !XID.test(xid) || !STMT.test(stmt) || !/^(0|[1-9]\d{0,9})$/.test(ordText)) throw bad();
  if (BigInt(stmt) > INT8_MAX) throw bad();
  const ord = Number(ordText);
  // The last change read lies inside the window: below its xmax, and past what SEEN had seen.
  const window = { upTo, xid, stmt, ord };
  if (ord > INT4_MAX || BigInt(xid) >= BigInt(upTo.split(":")[1]!)) throw bad();
  if (seen !== undefined && BigInt(upTo.split(":")[1]!) < BigInt(seen.split(":")[1]!)) throw bad();
  return { seen, window };
}
