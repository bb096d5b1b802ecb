/**
 * The incremental readers of src/lib/grant-import.ts, as the command line
 * streams a file through them: the same records whatever the chunking, exact
 * byte offsets (the resumable position) and line numbers, a resumed read that
 * matches the whole one, bytes that are not UTF-8 and runaway records as row
 * errors that leave the next row alone; grant rows held by subject sets and
 * links read streamed as the whole file reads them.
 */
import { describe, expect, it } from "vitest";
import {
  csvColumns,
  csvGrant,
  CsvRecordReader,
  LineReader,
  MAX_RECORD_BYTES,
  ndjsonGrant,
  parseCsv,
  parseNdjson,
  readCsvRecords,
  type CsvRecord,
  type ReadStart,
  type TextLine,
} from "../src/lib/grant-import/index.js";

const encode = (text: string) => new TextEncoder().encode(text);
const bytesOf = (input: string | Uint8Array) => (typeof input === "string" ? encode(input) : input);

/** Every record, the input pushed in pieces of `size` bytes. */
function csvInChunks(input: Uint8Array, size: number, start?: ReadStart): CsvRecord[] {
  const reader = new CsvRecordReader(start);
  const out: CsvRecord[] = [];
  for (let i = 0; i < input.length; i += size) out.push(...reader.push(input.subarray(i, i + size)));
  return [...out, ...reader.end()];
}

function linesInChunks(input: Uint8Array, size: number, start?: ReadStart): TextLine[] {
  const reader = new LineReader(start);
  const out: TextLine[] = [];
  for (let i = 0; i < input.length; i += size) out.push(...reader.push(input.subarray(i, i + size)));
  return [...out, ...reader.end()];
}

const csvTexts: { name: string; input: string | Uint8Array; lines: number[] }[] = [
  { name: "LF", input: "a,b\n1,2\n3,4\n", lines: [1, 2, 3] },
  { name: "CRLF, a blank line, no final break", input: "a,b\r\n1,2\r\n\r\n3,4", lines: [1, 2, 4] },
  { name: "lone CRs", input: "a,b\r1,2\r\r3,4\r", lines: [1, 2, 4] },
  { name: "CRLF inside quotes counts once", input: 'a,b\r\n"x\r\ny",2\r\n3,4\r\n', lines: [1, 2, 4] },
  { name: "LF and lone CR inside quotes", input: 'a,b\n"x\ny\rz",2\n3,4\n', lines: [1, 2, 5] },
  { name: "a byte order mark", input: "\uFEFFa,b\n1,2\n", lines: [1, 2] },
  { name: "multi-byte characters and doubled quotes", input: 'a,b\n"é ""ü""",ß€😀\n3,4\n', lines: [1, 2, 3] },
  { name: "stray text after a closing quote, then a good row", input: 'a,b\n"x"yz,2\n3,4\n', lines: [1, 2, 3] },
  { name: "an unclosed quote runs to the end", input: 'a,b\n1,2\n"x,2\n3,4\n', lines: [1, 2, 3] },
  { name: "not UTF-8, then a good row", input: Uint8Array.from([...encode("a,b\nu\xff"), 0xff, ...encode(",2\n3,4\n")]), lines: [1, 2, 3] },
];

describe("CsvRecordReader", () => {
  it.each(csvTexts)("$name: the same records in chunks of any size, each ending where its bytes do", ({ input, lines }) => {
    const bytes = bytesOf(input);
    const whole = csvInChunks(bytes, bytes.length || 1);
    expect(whole.map((r) => r.line)).toEqual(lines);
    for (let size = 1; size <= Math.min(bytes.length, 40); size++) {
      expect(csvInChunks(bytes, size), `chunks of ${size}`).toEqual(whole);
    }
    // Offsets are increasing, the last is the end of the input, and each record's bytes end with a line break.
    expect(whole.at(-1)!.end).toBe(bytes.length);
    for (const r of whole.slice(0, -1)) {
      expect([0x0a, 0x0d]).toContain(bytes[r.end - 1]);
      expect(r.nextLine, `the line after line ${r.line}`).toBe(lineAt(bytes, r.end));
    }
    // Resuming after any record reads the rest exactly as the whole read did.
    for (const [i, r] of whole.entries()) {
      const nextLine = whole[i + 1]?.line ?? 0;
      if (nextLine === 0) continue;
      const resumed = csvInChunks(bytes.subarray(r.end), 3, { offset: r.end, line: r.nextLine });
      expect(resumed, `resumed after line ${r.line}`).toEqual(whole.slice(i + 1));
    }
  });

  it("reads the fields as the console's tests expect", () => {
    const records = readCsvRecords(Uint8Array.from([...encode('a,b\n"é ""ü""",ß€😀\n"x"yz,2\nu'), 0xff, ...encode(",2\n")]));
    expect(records.map(({ fields, problem }) => ({ fields, problem }))).toEqual([
      { fields: ["a", "b"], problem: undefined },
      { fields: ['é "ü"', "ß€😀"], problem: undefined },
      { fields: ["xyz", "2"], problem: 'text after a closing quote: "yz"' },
      { fields: ["u\uFFFD", "2"], problem: "not UTF-8 text" },
    ]);
  });

  it("a record over the limit is one row error, not kept; the next row is read", () => {
    const long = "x".repeat(MAX_RECORD_BYTES + 10);
    const records = csvInChunks(encode(`a,b\n${long},1\n3,4\n"${long}\n`), 4096);
    expect(records.map((r) => [r.line, r.problem])).toEqual([
      [1, undefined],
      [2, `the record is over ${MAX_RECORD_BYTES} bytes`],
      [3, undefined],
      [4, `the quoted field opened on line 4 runs over ${MAX_RECORD_BYTES} bytes (is it closed?)`],
    ]);
    expect(records[1]!.fields.join("").length).toBeLessThanOrEqual(MAX_RECORD_BYTES);
    expect(records[2]!.fields).toEqual(["3", "4"]);
  });
});

/** The line a byte offset is on: 1 + the line breaks before it (CRLF once), as the readers count. */
function lineAt(bytes: Uint8Array, offset: number): number {
  let line = 1;
  for (let i = 0; i < offset; i++) {
    if (bytes[i] === 0x0a && bytes[i - 1] !== 0x0d) line++;
    else if (bytes[i] === 0x0d) line++;
  }
  return line;
}

const ndjsonTexts: { name: string; input: string | Uint8Array; lines: [number, string][] }[] = [
  { name: "LF with a final break", input: '{"a":1}\n{"b":2}\n', lines: [[1, '{"a":1}'], [2, '{"b":2}']] },
  { name: "CRLF, CR, blank lines, no final break", input: '{"a":1}\r\n\r\n{"b":2}\r{"c":3}', lines: [[1, '{"a":1}'], [2, ""], [3, '{"b":2}'], [4, '{"c":3}']] },
  { name: "a byte order mark", input: '\uFEFF{"a":"é"}\n', lines: [[1, '{"a":"é"}']] },
];

describe("LineReader", () => {
  it.each(ndjsonTexts)("$name: the same lines in chunks of any size", ({ input, lines }) => {
    const bytes = bytesOf(input);
    const whole = linesInChunks(bytes, bytes.length);
    expect(whole.map((l) => [l.line, l.text])).toEqual(lines);
    expect(whole.at(-1)!.end).toBe(bytes.length);
    for (let size = 1; size <= bytes.length; size++) expect(linesInChunks(bytes, size), `chunks of ${size}`).toEqual(whole);
    for (const [i, l] of whole.entries()) {
      if (i === whole.length - 1) continue;
      expect(linesInChunks(bytes.subarray(l.end), 2, { offset: l.end, line: l.line + 1 })).toEqual(whole.slice(i + 1));
    }
  });

  it("bytes that are not UTF-8 and an over-long line are that line's problem only", () => {
    const input = Uint8Array.from([...encode('{"a":"'), 0xc0, ...encode('"}\n'), ...encode(`${"x".repeat(MAX_RECORD_BYTES + 1)}\n{"ok":1}\n`)]);
    expect(linesInChunks(input, 1000).map((l) => [l.line, l.problem ?? l.text])).toEqual([
      [1, "not UTF-8 text"],
      [2, `the line is over ${MAX_RECORD_BYTES} bytes`],
      [3, '{"ok":1}'],
    ]);
  });
});

describe("grant rows held by subjects, streamed as the command line reads them", () => {
  const csv = [
    "userId,subjectResource,subjectResourceId,subjectRelation,resource,resourceId,relation,expiresAt",
    "alice,,,,team,eng,member,",
    ',team,"eng, ""core""",member,folder,runbooks,viewer,2030-01-31T12:00:00Z',
    ",folder,root,,folder,runbooks,parent,",
    "bob,team,eng,member,folder,x,viewer,",
    ",,,,folder,x,viewer,",
    ',folder,"multi\nline",,document,42,parent,',
  ].join("\r\n");
  const ndjson = [
    '{"userId":"alice","resource":"team","resourceId":"eng","relation":"member"}',
    '{"subjectResource":"team","subjectResourceId":"eng","subjectRelation":"member","resource":"folder","resourceId":"runbooks","relation":"viewer"}',
    '{"userId":"","subject":{"resource":"folder","resourceId":"root","relation":""},"resource":"folder","resourceId":"runbooks","relation":"parent","createdAt":"2026-01-01T00:00:00Z"}',
    '{"userId":"bob","subject":{"resource":"team","resourceId":"eng"},"resource":"folder","resourceId":"x","relation":"viewer"}',
    '{"resource":"folder","resourceId":"x","relation":"viewer"}',
  ].join("\n");

  it("CSV: the header read alone, the rest in chunks of any size from after it, the same rows and errors as the whole file", () => {
    const bytes = encode(csv);
    const [header] = readCsvRecords(bytes);
    const columns = csvColumns(header!);
    if (!Array.isArray(columns)) throw new Error(columns.reason);
    const whole = parseCsv(bytes);
    expect(whole.rows.map((r) => [r.line, r.userId || `${r.subject!.resource}:${r.subject!.resourceId}#${r.subject!.relation}`])).toEqual([
      [2, "alice"],
      [3, 'team:eng, "core"#member'],
      [4, "folder:root#"],
      [7, "folder:multi\nline#"],
    ]);
    expect(whole.errors.map((e) => e.line)).toEqual([5, 6]);
    for (const size of [1, 7, 64, bytes.length]) {
      const read = csvInChunks(bytes.subarray(header!.end), size, { offset: header!.end, line: header!.nextLine }).map((r) => csvGrant(columns, r));
      expect(read.filter((r) => !("reason" in r)), `chunks of ${size}`).toEqual(whole.rows);
      expect(read.filter((r) => "reason" in r), `chunks of ${size}`).toEqual(whole.errors);
    }
  });

  it("NDJSON: flat and nested subjects line by line in chunks of any size, the same rows and errors as the whole file", () => {
    const bytes = encode(ndjson);
    const whole = parseNdjson(bytes);
    expect(whole.rows.map((r) => r.line)).toEqual([1, 2, 3]);
    expect(whole.errors.map((e) => e.line)).toEqual([4, 5]);
    for (const size of [1, 13, bytes.length]) {
      const read = linesInChunks(bytes, size).map(ndjsonGrant);
      expect(read.filter((r) => r !== null && !("reason" in r)), `chunks of ${size}`).toEqual(whole.rows);
      expect(read.filter((r) => r !== null && "reason" in r), `chunks of ${size}`).toEqual(whole.errors);
    }
  });
});
