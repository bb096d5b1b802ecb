/**
 * The change feed's tokens (domain/change-tokens.ts): every position a read
 * can give comes back from its token exactly (the change feed's storage
 * test also pages through its tokens), and anything else a client can send
 * is a 400 naming `after`, before any statement sees it.
 */
import { describe, expect, it } from "vitest";
import { decodeChangeToken, encodeChangeToken } from "../src/domain/change-tokens.js";
import { DomainError } from "../src/domain/errors.js";
import type { ChangePosition } from "../src/store/changes-store.js";

const b64 = (text: string) => Buffer.from(text, "latin1").toString("base64url");

describe("change tokens", () => {
  it.each<[string, ChangePosition]>([
    ["after a commit", { seq: "755" }],
    ["before the first commit", { seq: "0" }],
    ["inside a commit", { seq: "755", within: { stmt: "81", ord: 3 } }],
    ["at the largest number, statement and ord", { seq: "9223372036854775807", within: { stmt: "9223372036854775807", ord: 2_147_483_647 } }],
    // Tokens given before the commit order (snapshots): read as legacy positions, given back as they were.
    ["from before the commit order, after a window", { seq: undefined, legacy: { seen: "755:755:" } }],
    ["from before the commit order, with transactions in progress", { seq: undefined, legacy: { seen: "700:760:701,733,759" } }],
    ["from before the commit order, inside a window", { seq: undefined, legacy: { seen: "700:760:701", window: { upTo: "701:790:788", xid: "745", stmt: "81", ord: 3 } } }],
    ["from before the commit order, inside the first window", { seq: undefined, legacy: { seen: undefined, window: { upTo: "90:90:", xid: "12", stmt: "1", ord: 0 } } }],
  ])("round-trips a position %s", (_, position) => {
    const token = encodeChangeToken(position);
    expect(token).toMatch(/^[A-Za-z0-9_-]+$/);
    expect(decodeChangeToken(token)).toEqual(position);
  });

  it.each<[string, string]>([
    ["empty", ""],
    ["not base64url", "s|755:755:"],
    ["padding", `${b64("s|755:755:")}=`],
    ["a character base64url decoding would skip", `${b64("s|755:755:").slice(0, 4)}.${b64("s|755:755:").slice(4)}`],
    ["from the oldest, which is no token", b64("s|-")],
    ["an unknown kind", b64("x|755:755:")],
    ["a missing part", b64("w|700:760:|790:790:|745|0")],
    ["an extra part", b64("s|755:755:|1")],
    ["a snapshot Postgres refuses (xmin 0)", b64("s|0:5:")],
    ["a snapshot whose xmin passes its xmax", b64("s|20:10:")],
    ["an xip outside its snapshot", b64("s|10:20:25")],
    ["an xip list out of order", b64("s|10:20:15,12")],
    ["an xid past the window", b64("w|700:760:|790:790:|790|7|0")],
    ["an xid that is not a number", b64("w|700:760:|790:790:|7a|7|0")],
    ["a negative ord", b64("w|700:760:|790:790:|745|7|-1")],
    ["an ord past int4", b64("w|700:760:|790:790:|745|7|2147483648")],
    ["a statement number that is not a number", b64("w|700:760:|790:790:|745|x|0")],
    ["a statement number past int8", b64("w|700:760:|790:790:|745|9223372036854775808|0")],
    ["a negative statement number", b64("w|700:760:|790:790:|745|-7|0")],
    ["an ord with a leading zero", b64("w|700:760:|790:790:|745|7|01")],
    ["a window below what was seen", b64("w|700:760:|700:700:|650|7|0")],
    ["a NUL", b64("s|755:755:\u0000")],
    ["bytes that are not ASCII", b64("s|755:755:\u00e9")],
    ["far too long", "A".repeat(20_000)],
    ["a commit number that is not a number", b64("c|7a")],
    ["a negative commit number", b64("c|-1")],
    ["a commit number past int8", b64("c|9223372036854775808")],
    ["a commit number with a leading zero", b64("c|07")],
    ["a position inside a commit without its ord", b64("c|7|3")],
    ["an ord past int4 inside a commit", b64("c|7|3|2147483648")],
    ["an extra part after a commit", b64("c|7|3|1|1")],
  ])("refuses %s: 400 naming after", (_, token) => {
    let error: unknown;
    try {
      decodeChangeToken(token);
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(DomainError);
    expect((error as DomainError).code).toBe("invalid_argument");
    expect((error as Error).message).toMatch(/^after: .* is not a change token of this feed$/);
  });
});
