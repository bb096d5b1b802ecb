/**
 * A statement's parameters written into its text as literals
 * (store/sql-literals.ts), and what sends statements that way: a statement
 * as a transaction of its own (Db.transactionOf) and a transaction's last
 * statements sent with its COMMIT (Transaction.atCommit). The truth for a
 * literal is the parameter: every hostile string, written as a literal,
 * comes back from the database exactly as the same string sent as a
 * parameter does, on each engine.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DeadlinePassedError } from "../src/store/db.js";
import { firstParamBinder, inlineParams } from "../src/store/sql-literals.js";
import { SqlState, sqlState } from "../src/store/sqlstate.js";
import { createTestDatabase, engines, type TestDatabase } from "./support/engines.js";

/** Strings that break naive quoting, escaping, scanning or encoding. */
const HOSTILE = [
  "",
  "'",
  "''",
  "a'b",
  "\\",
  "\\'",
  "\\\\'",
  "E'\\x41'",
  "' OR 1=1 --",
  "'; COMMIT; DROP TABLE t; --",
  "$1",
  "$$ $a$ $1$",
  "/* '",
  "*/ '",
  "-- '\n'",
  '"',
  '""\'"',
  "\t\r\n\u000b\f",
  "\u0001\u001f\u007f",
  "naïve café ﬁ",
  "日本語の文字",
  "emoji 😀👩‍👩‍👧 and a flag 🇫🇷",
  "combining e\u0301 and RTL \u202Eevil\u202C",
  "line sep \u2028 para \u2029 bom \uFEFF zwj \u200D",
  "\uFFFD \uFFFF",
  "max code point \u{10FFFF}",
  '{"a":"\\u0027","b":"\\\\","c":"\\"","d":"\\u00e9"}',
  "x".repeat(20_000) + "'",
];

describe("inlineParams", () => {
  it("writes each $n as a literal, leaving strings, quoted names, comments and names ending in $n alone", () => {
    const sql = `SELECT $1, $10, '$1' AS "x$1", a$1 -- $2\n, /* $2 /* nested $2 */ $2 */ $2, E'\\' $1', $2::text`;
    const params = ["one", "two", 3, 4, 5, 6, 7, 8, 9, "ten"];
    expect(inlineParams(sql, params)).toBe(
      `SELECT  'one' ,  'ten' , '$1' AS "x$1", a$1 -- $2\n, /* $2 /* nested $2 */ $2 */  'two' , E'\\' $1',  'two' ::text`,
    );
  });

  it("writes null, numbers, bigints and booleans as literals Postgres types from where they stand", () => {
    expect(inlineParams("SELECT $1, $2, $3, $4, $5", [null, undefined, 1.5, 12n, false])).toBe("SELECT  NULL ,  NULL ,  '1.5' ,  '12' ,  'false' ");
  });

  it("gives up on what a literal cannot carry exactly: NUL, a lone surrogate, a non-finite number, other types", () => {
    for (const value of ["a\0b", "\uD800", "x\uDC00y", NaN, Infinity, new Date(0), { a: 1 }, [1], [["a"]], ["a", 1], ["a\0b"], ["\uD800"], Buffer.from("a")]) {
      expect(inlineParams("SELECT $1", [value]), String(value)).toBeUndefined();
    }
    expect(inlineParams("SELECT $1", ["\uD83D\uDE00"])).toBe("SELECT  '\uD83D\uDE00' ");
  });

  it("writes an array of strings and nulls in Postgres's array syntax, each string quoted and escaped", () => {
    expect(inlineParams("SELECT $1, $2", [["a", null, 'q"\\'], []])).toBe(`SELECT   E'{"a",NULL,"q\\\\"\\\\\\\\"}' ,  '{}' `);
  });

  it("refuses a statement it cannot scan or fill: a dollar quote, a missing parameter, an open string", () => {
    expect(() => inlineParams("SELECT $$x$$", [])).toThrow(/dollar/);
    expect(() => inlineParams("SELECT $2", ["a"])).toThrow(/\$2 has no parameter/);
    expect(() => inlineParams("SELECT 'open", [])).toThrow(/unterminated/);
    expect(() => inlineParams("SELECT 1 /* open", [])).toThrow(/unterminated/);
  });
});

describe("firstParamBinder", () => {
  it.each([
    { sql: "SELECT $1, $2, $3", value: "app", bound: "SELECT  'app' , $1, $2" },
    { sql: "SELECT $10, $1, $2 WHERE a = $1", value: "a'b", bound: "SELECT $9,  'a''b' , $1 WHERE a =  'a''b' " },
    { sql: `SELECT '$1', "x$1", a$1 -- $1\n, /* $2 */ $2`, value: "v", bound: `SELECT '$1', "x$1", a$1 -- $1\n, /* $2 */ $1` },
    { sql: "SELECT $2", value: "v", bound: "SELECT $1" },
  ])("$sql with $value: $bound", ({ sql, value, bound }) => {
    expect(firstParamBinder(sql)(value)).toBe(bound);
  });

  it("gives up on a value a literal cannot carry, and refuses a statement it cannot scan", () => {
    const bind = firstParamBinder("SELECT $1");
    for (const value of ["a\0b", "\uD800", NaN, { a: 1 }]) expect(bind(value), String(value)).toBeUndefined();
    expect(() => firstParamBinder("SELECT $$x$$")).toThrow(/dollar/);
    expect(() => firstParamBinder("SELECT '\0'")).toThrow(/NUL/);
  });
});

describe.each(engines)("statements with literals on %s", (engine) => {
  let database: TestDatabase;

  beforeAll(async () => {
    database = await createTestDatabase(engine);
    await database.db.exec("CREATE TABLE lit (id int PRIMARY KEY, t text NOT NULL, j jsonb)");
  }, 120_000);
  afterAll(async () => {
    await database?.dispose();
  });

  it("every hostile string comes back as the parameter does, as text and inside jsonb", async () => {
    const sql = "SELECT $1::text AS t, $2::jsonb AS j, length($1) AS n";
    for (const value of HOSTILE) {
      const params = [value, JSON.stringify({ v: value })];
      const inlined = inlineParams(sql, params)!;
      const asLiteral = await database.db.query(inlined);
      const asParameter = await database.db.query(sql, params);
      expect(asLiteral.rows, JSON.stringify(value).slice(0, 80)).toEqual(asParameter.rows);
      expect(asLiteral.rows[0]!.t).toBe(value);
      expect(asLiteral.rows[0]!.j).toEqual({ v: value });
    }
  });

  it("bound: every hostile string as $1 comes back as the parameter does, the other parameters renumbered", async () => {
    const sql = "SELECT $1::text AS t, $2::text AS u, length($1) AS n";
    const bind = firstParamBinder(sql);
    for (const value of HOSTILE) {
      const asBound = await database.db.query(bind(value)!, ["second"]);
      expect(asBound.rows, JSON.stringify(value).slice(0, 80)).toEqual((await database.db.query(sql, [value, "second"])).rows);
      expect(asBound.rows[0]!.t).toBe(value);
    }
  });

  it("every hostile string inside an array of strings comes back as the parameter does", async () => {
    const sql = "SELECT $1::text[] AS a, cardinality($1::text[]) AS n, $2::text = ANY ($1) AS found";
    const values = [...HOSTILE, null, "NULL", "{a,b}", " spaced "];
    const params = [values, HOSTILE[3]];
    const asLiteral = await database.db.query<{ a: (string | null)[] }>(inlineParams(sql, params)!);
    expect(asLiteral.rows).toEqual((await database.db.query(sql, params)).rows);
    expect(asLiteral.rows[0]!.a).toEqual(values);
  });

  it("with standard_conforming_strings off too (backslashes are escapes then)", async () => {
    await database.db.transaction(async (tx) => {
      await tx.query("SET LOCAL standard_conforming_strings = off");
      for (const value of HOSTILE) {
        const { rows } = await tx.query<{ t: string }>(inlineParams("SELECT $1::text AS t", [value])!);
        expect(rows[0]!.t, JSON.stringify(value).slice(0, 80)).toBe(value);
      }
    });
  });

  it("transactionOf: the statement's rows, committed; hostile values written exactly", async () => {
    for (const [i, value] of HOSTILE.entries()) {
      const { rows } = await database.db.transactionOf<{ id: number; t: string }>(
        "INSERT INTO lit (id, t, j) VALUES ($1, $2, $3::jsonb) RETURNING id, t",
        [i, value, JSON.stringify([value])],
        { lock: { space: 990, key: value, shared: true } },
      );
      expect(rows).toEqual([{ id: i, t: value }]);
    }
    const { rows } = await database.db.query<{ id: number; t: string; j: unknown }>("SELECT id, t, j FROM lit ORDER BY id");
    expect(rows).toEqual(HOSTILE.map((value, i) => ({ id: i, t: value, j: [value] })));
  });

  it("transactionOf: a value no literal carries goes as a parameter (Postgres refuses a NUL either way)", async () => {
    const { rows } = await database.db.transactionOf<{ t: string }>("SELECT $1::text AS t", ["\uD800"]);
    expect(rows[0]!.t).toBe("\uFFFD"); // UTF-8 carries no lone surrogate: the driver sends U+FFFD
    const error = await database.db.transactionOf("SELECT $1::text AS t", ["a\0b"]).catch((e: unknown) => e);
    expect(sqlState(error)).toBe("22021"); // character_not_in_repertoire
  });

  it("transactionOf: a failing statement rolls back and fails with its SQLSTATE; the connection serves on", async () => {
    const error = await database.db.transactionOf("INSERT INTO lit (id, t) VALUES ($1, $2)", [0, "again"]).catch((e: unknown) => e);
    expect(sqlState(error)).toBe(SqlState.uniqueViolation);
    for (let i = 0; i < 12; i++) expect((await database.db.transactionOf<{ n: number }>("SELECT $1::int AS n", [i])).rows).toEqual([{ n: i }]);
    const { rows } = await database.db.query<{ n: number }>("SELECT count(*)::int AS n FROM lit WHERE t = 'again'");
    expect(rows[0]!.n).toBe(0);
  });

  it("transactionOf: a caller who gave up (signal, deadline) gets its reason; nothing commits", async () => {
    const aborted = AbortSignal.abort(new Error("gone"));
    await expect(database.db.transactionOf("INSERT INTO lit (id, t) VALUES (-1, 'x')", [], { signal: aborted })).rejects.toThrow("gone");
    const late = await database.db.transactionOf("INSERT INTO lit (id, t) VALUES (-2, 'x')", [], { deadline: Date.now() - 1 }).catch((e: unknown) => e);
    expect(late).toBeInstanceOf(DeadlinePassedError);
    if (engine !== "pglite") {
      // In flight: the cancel interrupts the statement, or its timeout does.
      const controller = new AbortController();
      setTimeout(() => controller.abort(new Error("left")), 100);
      const sql = "INSERT INTO lit (id, t) SELECT -3, 'x' FROM pg_sleep(2)";
      await expect(database.db.transactionOf(sql, [], { signal: controller.signal })).rejects.toThrow("left");
      const timedOut = await database.db.transactionOf(sql, [], { deadline: Date.now() + 150 }).catch((e: unknown) => e);
      expect(timedOut).toBeInstanceOf(DeadlinePassedError);
    }
    const { rows } = await database.db.query<{ n: number }>("SELECT count(*)::int AS n FROM lit WHERE id < 0");
    expect(rows[0]!.n).toBe(0);
  });

  it.skipIf(engine === "pglite")("transactionOf: the statement waits for its lock, taken before it (one connection on PGlite: no one else holds it)", async () => {
    const key = "it's the \\ lock 😀";
    let release!: () => void;
    let held!: () => void;
    const holding = new Promise<void>((resolve) => (held = resolve));
    const holder = database.db.transaction(
      async () => {
        held();
        await new Promise<void>((resolve) => (release = resolve));
      },
      { lock: { space: 991, key, shared: false } },
    );
    await holding;
    let done = false;
    const waiting = database.db
      .transactionOf<{ t: string }>("SELECT $1::text AS t", [key], { lock: { space: 991, key, shared: true } })
      .then((result) => {
        done = true;
        return result;
      });
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(done, "ran while another held the lock exclusively").toBe(false);
    release();
    await holder;
    expect((await waiting).rows).toEqual([{ t: key }]);
  });

  it("atCommit: the last statements run in order with COMMIT; one failing rolls back the whole; nothing runs after them", async () => {
    await database.db.transaction(async (tx) => {
      await tx.query("INSERT INTO lit (id, t) VALUES (1000, 'first')");
      tx.atCommit("UPDATE lit SET t = t || $2 WHERE id = $1", [1000, " + 'second'"]);
      tx.atCommit("UPDATE lit SET t = t || $2 WHERE id = $1", [1000, " + \\third"]);
    });
    expect((await database.db.query("SELECT t FROM lit WHERE id = 1000")).rows).toEqual([{ t: "first + 'second' + \\third" }]);

    const error = await database.db
      .transaction(async (tx) => {
        await tx.query("INSERT INTO lit (id, t) VALUES (1001, 'gone')");
        tx.atCommit("INSERT INTO lit (id, t) VALUES ($1, $2)", [1000, "a duplicate"]);
      })
      .catch((e: unknown) => e);
    expect(sqlState(error)).toBe(SqlState.uniqueViolation);
    expect((await database.db.query("SELECT id FROM lit WHERE id = 1001")).rows).toEqual([]);

    await expect(
      database.db.transaction(async (tx) => {
        tx.atCommit("SELECT 1", []);
        await tx.query("INSERT INTO lit (id, t) VALUES (1002, 'late')");
      }),
    ).rejects.toThrow(/after the transaction's last/);
    expect((await database.db.query("SELECT id FROM lit WHERE id = 1002")).rows).toEqual([]);
  });
});
