/**
 * The grant import of the console and the command line (src/lib/grant-import.ts):
 * CSV and NDJSON parsing with source lines, holders that are users, subject
 * sets or links, chunking at the bulk limit, and the runner that works
 * around the bulk route's all-or-nothing rule; `send` is a fake that keeps
 * the real route's rules. Last, the console's import of a file of subject
 * sets and links in Chromium, through a real service (PGlite). The
 * incremental readers' own cases are in grant-import-stream.test.ts.
 */
import type { Browser } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { accessibilityProblems, chromiumAvailable, openTab, startConsoleRig, type ConsoleRig } from "./support/browser.js";
import { createApp } from "./helpers/authz.js";
import { GRAPH_CATALOG, set, text, user, type AnyGrant } from "./support/graph.js";
import {
  BULK_LIMIT,
  chunk,
  describeRejection,
  formatIssue,
  holderEntry,
  importGrants,
  lineRanges,
  parseCsv,
  parseExpiry,
  parseGrantFile,
  parseNdjson,
  type BulkChunk,
  type BulkCounts,
  type GrantRow,
  type ImportProgress,
} from "../src/lib/grant-import/index.js";

const HEADER = "userId,resource,resourceId,relation";
const plain = (r: GrantRow) => ({
  line: r.line,
  op: r.op,
  userId: r.userId,
  resource: r.resource,
  resourceId: r.resourceId,
  relation: r.relation,
  ...(r.expiresAt === undefined ? {} : { expiresAt: r.expiresAt.toISOString() }),
  ...(r.condition === undefined ? {} : { condition: r.condition }),
});

describe("parseCsv", () => {
  const cases: {
    name: string;
    text: string;
    rows?: ReturnType<typeof plain>[];
    errors?: string[];
  }[] = [
    {
      name: "LF, no trailing newline",
      text: `${HEADER}\nalice,doc,d1,viewer\nbob,doc,d2,editor`,
      rows: [
        { line: 2, op: "write", userId: "alice", resource: "doc", resourceId: "d1", relation: "viewer" },
        { line: 3, op: "write", userId: "bob", resource: "doc", resourceId: "d2", relation: "editor" },
      ],
      errors: [],
    },
    {
      name: "CRLF with a trailing CRLF",
      text: `${HEADER}\r\nalice,doc,d1,viewer\r\nbob,doc,d2,editor\r\n`,
      rows: [
        { line: 2, op: "write", userId: "alice", resource: "doc", resourceId: "d1", relation: "viewer" },
        { line: 3, op: "write", userId: "bob", resource: "doc", resourceId: "d2", relation: "editor" },
      ],
      errors: [],
    },
    {
      name: "quotes: commas, \"\" escapes and a line break inside; lines after it still count",
      text: `${HEADER}\n"Smith, Jane",doc,"say ""hi""",viewer\n"multi\r\nline",doc,d3,viewer\ncarol,doc,d4,viewer\n`,
      rows: [
        { line: 2, op: "write", userId: "Smith, Jane", resource: "doc", resourceId: 'say "hi"', relation: "viewer" },
        { line: 3, op: "write", userId: "multi\r\nline", resource: "doc", resourceId: "d3", relation: "viewer" },
        { line: 5, op: "write", userId: "carol", resource: "doc", resourceId: "d4", relation: "viewer" },
      ],
      errors: [],
    },
    {
      name: "columns in another order, header names in any case, a byte order mark",
      text: `\uFEFFRelation, resourceId ,userid,RESOURCE\nviewer,d1,alice,doc\n`,
      rows: [{ line: 2, op: "write", userId: "alice", resource: "doc", resourceId: "d1", relation: "viewer" }],
      errors: [],
    },
    {
      name: "blank lines are skipped and line numbers kept",
      text: `${HEADER}\n\nalice,doc,d1,viewer\n   \n\r\nbob,doc,d2,viewer\n\n`,
      rows: [
        { line: 3, op: "write", userId: "alice", resource: "doc", resourceId: "d1", relation: "viewer" },
        { line: 6, op: "write", userId: "bob", resource: "doc", resourceId: "d2", relation: "viewer" },
      ],
      errors: [],
    },
    {
      name: "a missing column in the header refuses the file",
      text: `userId,resource,relation\nalice,doc,viewer\n`,
      rows: [],
      errors: ["line 1: header row: missing column resourceId"],
    },
    {
      name: "an unknown or repeated column refuses the file",
      text: `userId,resource,resourceId,relation,expires_at,userId\n`,
      rows: [],
      errors: [
        'line 1: header row: unknown column "expires_at" (columns: userId, allUsers, subjectResource, subjectResourceId, subjectRelation, resource, resourceId, relation, expiresAt, condition, op); column userId appears twice',
      ],
    },
    {
      name: "an empty file",
      text: "",
      rows: [],
      errors: ["line 1: the file is empty: a header row is required (userId,resource,resourceId,relation[,expiresAt][,condition][,op])"],
    },
    {
      name: "missing values and wrong field counts are row errors; the good rows stay",
      text: `${HEADER}\nalice,doc,d1,viewer\nbob,doc,,viewer\n,doc,d2,\ncarol,doc,d3\ndave,doc,d4,viewer,extra\nerin,doc,d5,viewer\n`,
      rows: [
        { line: 2, op: "write", userId: "alice", resource: "doc", resourceId: "d1", relation: "viewer" },
        { line: 7, op: "write", userId: "erin", resource: "doc", resourceId: "d5", relation: "viewer" },
      ],
      errors: ["line 3: missing resourceId", "line 4: missing userId (or allUsers); missing relation", "line 5: 3 fields, the header has 4", "line 6: 5 fields, the header has 4"],
    },
    {
      name: "expiresAt: RFC 3339 with a zone, empty for none; bad dates are row errors",
      text: [
        `${HEADER},expiresAt`,
        "a,doc,d1,viewer,2030-01-31T12:00:00Z",
        "b,doc,d1,viewer,2030-01-31T14:00:00.123456+02:00",
        "c,doc,d1,viewer,",
        "d,doc,d1,viewer,tomorrow",
        "e,doc,d1,viewer,2030-02-30T00:00:00Z",
        "f,doc,d1,viewer,2030-01-31T12:00:00",
        "g,doc,d1,viewer,2030-01-31",
        "h,doc,d1,viewer,2030-01-31t12:00:00z",
      ].join("\n"),
      rows: [
        { line: 2, op: "write", userId: "a", resource: "doc", resourceId: "d1", relation: "viewer", expiresAt: "2030-01-31T12:00:00.000Z" },
        { line: 3, op: "write", userId: "b", resource: "doc", resourceId: "d1", relation: "viewer", expiresAt: "2030-01-31T12:00:00.123Z" },
        { line: 4, op: "write", userId: "c", resource: "doc", resourceId: "d1", relation: "viewer" },
        { line: 9, op: "write", userId: "h", resource: "doc", resourceId: "d1", relation: "viewer", expiresAt: "2030-01-31T12:00:00.000Z" },
      ],
      errors: [
        "line 5: expiresAt is not a date (RFC 3339, e.g. 2030-01-31T12:00:00Z)",
        "line 6: expiresAt is not a date (a field is out of range)",
        "line 7: expiresAt has no time zone (end it with Z or an offset such as +02:00)",
        "line 8: expiresAt is not a date (RFC 3339, e.g. 2030-01-31T12:00:00Z)",
      ],
    },
    {
      name: "the op column: write, delete, empty means write; anything else and a delete with an expiry are errors",
      text: [
        `op,${HEADER},expiresAt`,
        "write,a,doc,d1,viewer,",
        "DELETE,b,doc,d1,viewer,",
        ",c,doc,d1,viewer,",
        "remove,d,doc,d1,viewer,",
        "delete,e,doc,d1,viewer,2030-01-01T00:00:00Z",
      ].join("\r\n"),
      rows: [
        { line: 2, op: "write", userId: "a", resource: "doc", resourceId: "d1", relation: "viewer" },
        { line: 3, op: "delete", userId: "b", resource: "doc", resourceId: "d1", relation: "viewer" },
        { line: 4, op: "write", userId: "c", resource: "doc", resourceId: "d1", relation: "viewer" },
      ],
      errors: ['line 5: op must be write or delete, not "remove"', "line 6: a delete takes no expiresAt"],
    },
    {
      name: "the condition column: as written (quotes, commas and line breaks kept), empty for none; a delete takes none",
      text: [
        `${HEADER},condition,op`,
        'a,doc,d1,viewer,"resource.properties.ownerID == subject.id",',
        "b,doc,d1,viewer,,",
        'c,doc,d1,viewer,"context.tags.exists(t, t == ""x, y"")\n && true",write',
        "d,doc,d1,viewer,context.ok,delete",
      ].join("\r\n"),
      rows: [
        { line: 2, op: "write", userId: "a", resource: "doc", resourceId: "d1", relation: "viewer", condition: "resource.properties.ownerID == subject.id" },
        { line: 3, op: "write", userId: "b", resource: "doc", resourceId: "d1", relation: "viewer" },
        { line: 4, op: "write", userId: "c", resource: "doc", resourceId: "d1", relation: "viewer", condition: 'context.tags.exists(t, t == "x, y")\n && true' },
      ],
      errors: ["line 6: a delete takes no condition"],
    },
    {
      name: "broken quoting is a row error",
      text: `${HEADER}\n"alice"x,doc,d1,viewer\nbob,doc,d2,viewer\n"carol,doc,d3,viewer\n`,
      rows: [{ line: 3, op: "write", userId: "bob", resource: "doc", resourceId: "d2", relation: "viewer" }],
      errors: ['line 2: text after a closing quote: "x"', "line 4: the quoted field opened on line 4 is never closed"],
    },
  ];
  it.each(cases)("$name", ({ text, rows, errors }) => {
    const parsed = parseCsv(text);
    expect(parsed.format).toBe("csv");
    if (rows !== undefined) expect(parsed.rows.map(plain)).toEqual(rows);
    if (errors !== undefined) expect(parsed.errors.map(formatIssue)).toEqual(errors);
  });

  it("keeps spaces and quotes inside values as they are", () => {
    const parsed = parseCsv(`${HEADER}\n a b ,doc,x"y,viewer\n`);
    expect(parsed.rows[0]).toMatchObject({ userId: " a b ", resourceId: 'x"y' });
  });
});

describe("parseNdjson", () => {
  const cases: { name: string; text: string; rows: ReturnType<typeof plain>[]; errors: string[] }[] = [
    {
      name: "objects, blank lines, CRLF, keys in any order, op and expiresAt",
      text: [
        '{"userId":"alice","resource":"doc","resourceId":"d1","relation":"viewer"}',
        "",
        '{"relation":"editor","resourceId":"d2","resource":"doc","userId":"bob","expiresAt":"2030-01-31T12:00:00Z"}',
        '  {"op":"delete","userId":"carol","resource":"doc","resourceId":"d3","relation":"viewer"}  ',
        '{"userId":"dave","resource":"doc","resourceId":"d4","relation":"viewer","expiresAt":null,"createdAt":"2024-01-01T00:00:00Z"}',
      ].join("\r\n"),
      rows: [
        { line: 1, op: "write", userId: "alice", resource: "doc", resourceId: "d1", relation: "viewer" },
        { line: 3, op: "write", userId: "bob", resource: "doc", resourceId: "d2", relation: "editor", expiresAt: "2030-01-31T12:00:00.000Z" },
        { line: 4, op: "delete", userId: "carol", resource: "doc", resourceId: "d3", relation: "viewer" },
        { line: 5, op: "write", userId: "dave", resource: "doc", resourceId: "d4", relation: "viewer" },
      ],
      errors: [],
    },
    {
      name: "bad JSON, not objects, wrong types, missing and unknown keys, bad dates",
      text: [
        '{"userId":"alice","resource":"doc","resourceId":"d1","relation":"viewer"}',
        '{"userId":"bob",',
        "[1,2]",
        "null",
        '{"userId":42,"resource":"doc","resourceId":"d1","relation":"viewer"}',
        '{"userId":"erin","resource":"doc","relation":"viewer"}',
        '{"userId":"fay","resource":"doc","resourceId":"d1","relation":"viewer","expires_at":"2030-01-01T00:00:00Z"}',
        '{"userId":"gus","resource":"doc","resourceId":"d1","relation":"viewer","expiresAt":"soon"}',
        '{"userId":"hal","resource":"doc","resourceId":"d1","relation":"viewer","expiresAt":1893456000}',
        '{"userId":"ida","resource":"doc","resourceId":"d1","relation":"viewer","op":"upsert"}',
        '{"userId":"jon","resource":"doc","resourceId":"d9","relation":"viewer"}',
      ].join("\n"),
      rows: [
        { line: 1, op: "write", userId: "alice", resource: "doc", resourceId: "d1", relation: "viewer" },
        { line: 11, op: "write", userId: "jon", resource: "doc", resourceId: "d9", relation: "viewer" },
      ],
      errors: [
        "line 2: not JSON",
        "line 3: not a JSON object",
        "line 4: not a JSON object",
        "line 5: userId is not a string",
        "line 6: missing resourceId",
        'line 7: unknown key "expires_at" (keys: userId, allUsers, subjectResource, subjectResourceId, subjectRelation, resource, resourceId, relation, expiresAt, condition, op, subject)',
        "line 8: expiresAt is not a date (RFC 3339, e.g. 2030-01-31T12:00:00Z)",
        "line 9: expiresAt is not a string",
        'line 10: op must be write or delete, not "upsert"',
      ],
    },
  ];
  it.each(cases)("$name", ({ text, rows, errors }) => {
    const parsed = parseNdjson(text);
    expect(parsed.format).toBe("ndjson");
    expect(parsed.rows.map(plain)).toEqual(rows);
    expect(parsed.errors.map(formatIssue)).toEqual(errors);
  });
});

describe("parseGrantFile", () => {
  it.each([
    { fileName: "grants.csv", text: `${HEADER}\na,doc,d1,viewer`, format: "csv" },
    { fileName: "grants.ndjson", text: '{"userId":"a","resource":"doc","resourceId":"d1","relation":"viewer"}', format: "ndjson" },
    { fileName: "GRANTS.JSONL", text: '{"userId":"a","resource":"doc","resourceId":"d1","relation":"viewer"}', format: "ndjson" },
    { fileName: "export.txt", text: '\n {"userId":"a","resource":"doc","resourceId":"d1","relation":"viewer"}', format: "ndjson" },
    { fileName: "", text: `${HEADER}\na,doc,d1,viewer`, format: "csv" },
  ])("$fileName → $format", ({ fileName, text, format }) => {
    const parsed = parseGrantFile(text, fileName);
    expect(parsed.format).toBe(format);
    expect(parsed.rows).toHaveLength(1);
    expect(parsed.errors).toEqual([]);
  });
});

/* ------------------------------------------------------------------------ */
/* Holders other than users: subject sets and links                          */
/* ------------------------------------------------------------------------ */

/** A row with its holder as text: "alice", "team:eng#member", "folder:runbooks". */
const held = (r: GrantRow) => ({
  line: r.line,
  op: r.op,
  holder:
    r.allUsers === true
      ? "*all*"
      : r.subject === undefined
        ? r.userId
        : `${r.subject.resource}:${r.subject.resourceId}${r.subject.relation === "" ? "" : `#${r.subject.relation}`}`,
  grant: `${r.relation} of ${r.resource}:${r.resourceId}`,
  ...(r.expiresAt === undefined ? {} : { expiresAt: r.expiresAt.toISOString() }),
});

describe("subjects in CSV", () => {
  const SUBJECT_HEADER = "userId,subjectResource,subjectResourceId,subjectRelation,resource,resourceId,relation,expiresAt";
  it("a row names its holder by userId, or by subjectResource and subjectResourceId (subjectRelation empty for a link)", () => {
    const parsed = parseCsv(
      [
        SUBJECT_HEADER,
        "alice,,,,team,eng,member,",
        ",team,eng,member,folder,runbooks,viewer,2030-01-31T12:00:00Z",
        ",folder,runbooks,,document,42,parent,",
        ',team,"eng, platform",member,document,42,editor,',
      ].join("\r\n"),
    );
    expect(parsed.errors).toEqual([]);
    expect(parsed.rows.map(held)).toEqual([
      { line: 2, op: "write", holder: "alice", grant: "member of team:eng" },
      { line: 3, op: "write", holder: "team:eng#member", grant: "viewer of folder:runbooks", expiresAt: "2030-01-31T12:00:00.000Z" },
      { line: 4, op: "write", holder: "folder:runbooks", grant: "parent of document:42" },
      { line: 5, op: "write", holder: "team:eng, platform#member", grant: "editor of document:42" },
    ]);
    // A user's row carries no subject; a subject's row has userId "" (as the list route says it).
    expect(parsed.rows[0]).not.toHaveProperty("subject");
    expect(parsed.rows[2]).toMatchObject({ userId: "", subject: { resource: "folder", resourceId: "runbooks", relation: "" } });
  });

  it("both holders, or neither, or half a subject: a row error naming the line; the good rows stay", () => {
    const parsed = parseCsv(
      [
        SUBJECT_HEADER,
        "alice,team,eng,member,folder,f1,viewer,", // both
        ",,,,folder,f1,viewer,", // neither
        ",team,,member,folder,f1,viewer,", // no subjectResourceId
        ",,eng,,folder,f1,viewer,", // no subjectResource
        "bob,,,member,folder,f1,viewer,", // a userId and a subject relation
        ",,,,folder,,viewer,", // neither, and more
        ",folder,f0,,folder,f1,parent,",
      ].join("\n"),
    );
    expect(parsed.errors.map(formatIssue)).toEqual([
      "line 2: a row names its holder by userId, by allUsers or by subjectResource and subjectResourceId, exactly one: given userId and subjectResource and subjectResourceId",
      "line 3: missing the holder: userId, allUsers, or subjectResource and subjectResourceId",
      "line 4: missing subjectResourceId",
      "line 5: missing subjectResource",
      "line 6: a row names its holder by userId, by allUsers or by subjectResource and subjectResourceId, exactly one: given userId and subjectResource and subjectResourceId",
      "line 7: missing the holder: userId, allUsers, or subjectResource and subjectResourceId; missing resourceId",
    ]);
    expect(parsed.rows.map(held)).toEqual([{ line: 8, op: "write", holder: "folder:f0", grant: "parent of folder:f1" }]);
  });

  it("a header may leave userId out when it names a subject; a subject needs both its resource and its id", () => {
    const subjectsOnly = parseCsv("subjectResource,subjectResourceId,resource,resourceId,relation,op\nfolder,f0,document,d1,parent,delete\n");
    expect(subjectsOnly.errors).toEqual([]);
    expect(subjectsOnly.rows.map(held)).toEqual([{ line: 2, op: "delete", holder: "folder:f0", grant: "parent of document:d1" }]);
    expect(parseCsv("subjectResource,subjectRelation,resource,resourceId,relation\n").errors.map(formatIssue)).toEqual([
      "line 1: header row: missing column subjectResourceId (a subject holder takes subjectResource and subjectResourceId)",
    ]);
    expect(parseCsv("resource,resourceId,relation\n").errors.map(formatIssue)).toEqual([
      "line 1: header row: missing column userId (or allUsers, or subjectResource and subjectResourceId)",
    ]);
  });
});

describe("subjects in NDJSON", () => {
  it("the flat keys, and the list route's own nested subject (userId \"\" and createdAt beside it) as is", () => {
    const parsed = parseNdjson(
      [
        '{"userId":"alice","resource":"team","resourceId":"eng","relation":"member"}',
        '{"subjectResource":"team","subjectResourceId":"eng","subjectRelation":"member","resource":"folder","resourceId":"runbooks","relation":"viewer"}',
        '{"subjectResource":"folder","subjectResourceId":"runbooks","resource":"document","resourceId":"42","relation":"parent","expiresAt":"2030-01-31T12:00:00Z"}',
        '{"subjectResource":"folder","subjectResourceId":"runbooks","subjectRelation":"","resource":"document","resourceId":"43","relation":"parent"}',
        '{"userId":"","resource":"folder","resourceId":"f","relation":"viewer","createdAt":"2026-01-01T00:00:00.000Z","subject":{"resource":"team","resourceId":"eng","relation":"member"}}',
        '{"userId":"","resource":"document","resourceId":"d","relation":"parent","createdAt":"2026-01-01T00:00:00.000Z","expiresAt":"2030-01-31T12:00:00Z","subject":{"resource":"folder","resourceId":"f","relation":""}}',
        '{"subject":{"resource":"folder","resourceId":"f"},"resource":"document","resourceId":"e","relation":"parent","op":"delete"}',
        '{"subject":{"resource":"folder","resourceId":"f","relation":null},"userId":"","resource":"document","resourceId":"e2","relation":"parent","subject2":1}',
      ].join("\n"),
    );
    expect(parsed.rows.map(held)).toEqual([
      { line: 1, op: "write", holder: "alice", grant: "member of team:eng" },
      { line: 2, op: "write", holder: "team:eng#member", grant: "viewer of folder:runbooks" },
      { line: 3, op: "write", holder: "folder:runbooks", grant: "parent of document:42", expiresAt: "2030-01-31T12:00:00.000Z" },
      { line: 4, op: "write", holder: "folder:runbooks", grant: "parent of document:43" },
      { line: 5, op: "write", holder: "team:eng#member", grant: "viewer of folder:f" },
      { line: 6, op: "write", holder: "folder:f", grant: "parent of document:d", expiresAt: "2030-01-31T12:00:00.000Z" },
      { line: 7, op: "delete", holder: "folder:f", grant: "parent of document:e" },
    ]);
    expect(parsed.errors.map(formatIssue)).toEqual([
      'line 8: unknown key "subject2" (keys: userId, allUsers, subjectResource, subjectResourceId, subjectRelation, resource, resourceId, relation, expiresAt, condition, op, subject)',
    ]);
  });

  it("both holders, neither, both forms of a subject, wrong types: row errors naming the line", () => {
    const grant = '"resource":"folder","resourceId":"f1","relation":"viewer"';
    const parsed = parseNdjson(
      [
        `{"userId":"alice","subjectResource":"team","subjectResourceId":"eng",${grant}}`,
        `{"userId":"alice","subject":{"resource":"team","resourceId":"eng","relation":"member"},${grant}}`,
        `{${grant}}`,
        `{"userId":"",${grant}}`,
        `{"subject":{"resource":"team","resourceId":"eng","relation":"member"},"subjectResource":"team",${grant}}`,
        `{"subject":{"resource":"team","relation":"member"},${grant}}`,
        `{"subjectRelation":"member","subjectResourceId":"eng",${grant}}`,
        `{"subject":"team:eng#member",${grant}}`,
        `{"subject":{"resource":"team","resourceId":7,"kind":"set"},${grant}}`,
        `{"subjectResource":["team"],"subjectResourceId":"eng",${grant}}`,
        `{"subject":{"resource":"team","resourceId":"eng","relation":"member"},${grant}}`,
      ].join("\n"),
    );
    expect(parsed.errors.map(formatIssue)).toEqual([
      "line 1: a row names its holder by userId, by allUsers or by subjectResource and subjectResourceId, exactly one: given userId and subjectResource and subjectResourceId",
      "line 2: a row names its holder by userId, by allUsers or by subject, exactly one: given userId and subject",
      "line 3: missing the holder: userId, allUsers, or subjectResource and subjectResourceId",
      "line 4: missing the holder: userId, allUsers, or subjectResource and subjectResourceId",
      "line 5: subject and subjectResource, subjectResourceId, subjectRelation are two forms of the same holder: give one of them",
      "line 6: missing subject.resourceId",
      "line 7: missing subjectResource",
      "line 8: subject is not an object ({resource, resourceId, relation})",
      'line 9: subject.resourceId is not a string; unknown key "subject.kind" (subject keys: resource, resourceId, relation)',
      "line 10: subjectResource is not a string",
    ]);
    expect(parsed.rows.map(held)).toEqual([{ line: 11, op: "write", holder: "team:eng#member", grant: "viewer of folder:f1" }]);
  });
});

describe("every user (allUsers) in CSV and NDJSON", () => {
  it("CSV: an allUsers column, true in any case; false or empty is none, so the other holders stay", () => {
    const parsed = parseCsv(
      [
        "userId,allUsers,subjectResource,subjectResourceId,subjectRelation,resource,resourceId,relation,op",
        ",true,,,,doc,d1,viewer,",
        ",TRUE,,,,doc,d2,viewer,delete",
        "ann,false,,,,doc,d3,viewer,",
        ",,team,eng,member,doc,d4,viewer,",
        "ann,true,,,,doc,d5,viewer,", // two holders
        ",true,team,eng,member,doc,d6,viewer,", // two holders
        ",yes,,,,doc,d7,viewer,", // not a boolean
        ",false,,,,doc,d8,viewer,", // none
      ].join("\n"),
    );
    expect(parsed.rows.map(held)).toEqual([
      { line: 2, op: "write", holder: "*all*", grant: "viewer of doc:d1" },
      { line: 3, op: "delete", holder: "*all*", grant: "viewer of doc:d2" },
      { line: 4, op: "write", holder: "ann", grant: "viewer of doc:d3" },
      { line: 5, op: "write", holder: "team:eng#member", grant: "viewer of doc:d4" },
    ]);
    expect(parsed.rows[0]).toMatchObject({ userId: "", allUsers: true });
    expect(parsed.rows[2]).not.toHaveProperty("allUsers");
    expect(parsed.errors.map(formatIssue)).toEqual([
      "line 6: a row names its holder by userId, by allUsers or by subjectResource and subjectResourceId, exactly one: given userId and allUsers",
      "line 7: a row names its holder by userId, by allUsers or by subjectResource and subjectResourceId, exactly one: given allUsers and subjectResource and subjectResourceId",
      'line 8: allUsers must be true or false (or empty), not "yes"',
      "line 9: missing the holder: userId, allUsers, or subjectResource and subjectResourceId",
    ]);
    // A header may name allUsers as its only holder column.
    const only = parseCsv("allUsers,resource,resourceId,relation\ntrue,doc,d1,viewer\n,doc,d2,viewer\n");
    expect(only.rows.map(held)).toEqual([{ line: 2, op: "write", holder: "*all*", grant: "viewer of doc:d1" }]);
    expect(only.errors.map(formatIssue)).toEqual(["line 3: missing userId (or allUsers)"]);
  });

  it("NDJSON: allUsers the boolean, as the list route writes it (false beside every other holder names none)", () => {
    const grant = '"resource":"doc","resourceId":"d","relation":"viewer"';
    const parsed = parseNdjson(
      [
        `{"allUsers":true,${grant}}`,
        `{"userId":"","allUsers":true,${grant},"createdAt":"2026-01-01T00:00:00.000Z"}`,
        `{"userId":"ann","allUsers":false,${grant}}`,
        `{"userId":"","allUsers":false,"subject":{"resource":"team","resourceId":"eng","relation":"member"},${grant}}`,
        `{"allUsers":null,"userId":"bob",${grant}}`,
        `{"allUsers":"true",${grant}}`,
        `{"allUsers":1,"userId":"bob",${grant}}`,
        `{"allUsers":true,"userId":"ann",${grant}}`,
        `{"allUsers":true,"subject":{"resource":"team","resourceId":"eng","relation":"member"},${grant}}`,
        `{"allUsers":false,${grant}}`,
      ].join("\n"),
    );
    expect(parsed.rows.map(held)).toEqual([
      { line: 1, op: "write", holder: "*all*", grant: "viewer of doc:d" },
      { line: 2, op: "write", holder: "*all*", grant: "viewer of doc:d" },
      { line: 3, op: "write", holder: "ann", grant: "viewer of doc:d" },
      { line: 4, op: "write", holder: "team:eng#member", grant: "viewer of doc:d" },
      { line: 5, op: "write", holder: "bob", grant: "viewer of doc:d" },
    ]);
    expect(parsed.errors.map(formatIssue)).toEqual([
      "line 6: allUsers is not a boolean (true or false)",
      "line 7: allUsers is not a boolean (true or false)",
      "line 8: a row names its holder by userId, by allUsers or by subjectResource and subjectResourceId, exactly one: given userId and allUsers",
      "line 9: a row names its holder by userId, by allUsers or by subject, exactly one: given allUsers and subject",
      "line 10: missing the holder: userId, allUsers, or subjectResource and subjectResourceId",
    ]);
  });
});

describe("holderEntry", () => {
  it("a row's holder as the bulk route takes it", () => {
    const [user, set, link] = parseCsv("userId,subjectResource,subjectResourceId,subjectRelation,resource,resourceId,relation\na,,,,doc,d,viewer\n,team,eng,member,doc,d,viewer\n,folder,f,,doc,d,parent\n").rows;
    expect([user, set, link].map((r) => holderEntry(r!))).toEqual([
      { userId: "a" },
      { subject: { resource: "team", resourceId: "eng", relation: "member" } },
      { subject: { resource: "folder", resourceId: "f", relation: "" } },
    ]);
    expect(holderEntry(parseCsv("allUsers,resource,resourceId,relation\ntrue,doc,d,viewer\n").rows[0]!)).toEqual({ allUsers: true });
  });
});

describe("parseExpiry", () => {
  it.each([
    ["2030-01-31T12:00:00Z", "2030-01-31T12:00:00.000Z"],
    ["2030-01-31 12:00:00-05:30", "2030-01-31T17:30:00.000Z"],
    ["2028-02-29T00:00:00Z", "2028-02-29T00:00:00.000Z"],
    ["0050-06-01T00:00:00Z", "0050-06-01T00:00:00.000Z"],
  ])("%s", (text, iso) => {
    const parsed = parseExpiry(text);
    expect(parsed instanceof Date ? parsed.toISOString() : parsed).toBe(iso);
  });
  it.each(["2029-02-29T00:00:00Z", "2030-13-01T00:00:00Z", "2030-01-01T24:00:00Z", "2030-01-01T00:00:00+25:00", "", "2030-01-01T00:00Z"])("refuses %j", (text) => {
    expect(parseExpiry(text)).toHaveProperty("problem");
  });
});

describe("chunk", () => {
  const rows = (n: number) => Array.from({ length: n }, (_, i) => i);
  it.each([
    { n: 0, sizes: [] },
    { n: 1, sizes: [1] },
    { n: 5000, sizes: [5000] },
    { n: 5001, sizes: [5000, 1] },
    { n: 12001, sizes: [5000, 5000, 2001] },
  ])("$n rows → $sizes", ({ n, sizes }) => {
    const chunks = chunk(rows(n));
    expect(BULK_LIMIT).toBe(5000);
    expect(chunks.map((c) => c.length)).toEqual(sizes);
    expect(chunks.flat()).toEqual(rows(n));
  });
  it("refuses a size that is no positive integer", () => {
    expect(() => chunk([1], 0)).toThrow(RangeError);
  });
});

describe("lineRanges", () => {
  it.each([
    [[], ""],
    [[7], "7"],
    [[3, 4, 5, 9], "3–5, 9"],
    [[9, 3, 5, 4, 4], "3–5, 9"],
  ])("%j → %j", (lines, text) => expect(lineRanges(lines)).toBe(text));
});

/* ------------------------------------------------------------------------ */
/* importGrants against a fake of the bulk route                             */
/* ------------------------------------------------------------------------ */

const RELATIONS = new Set(["viewer", "editor", "owner"]);

class RestError extends Error {
  constructor(
    readonly code: string,
    message: string,
    readonly details: { field: string; reason: string }[] = [],
  ) {
    super(message);
  }
}

/**
 * The bulk route's rules, as src/domain/relationships.ts applies them: at
 * most BULK_LIMIT entries; every entry checked; any bad one refuses the whole
 * call, naming the first 100 by index; otherwise everything is applied.
 */
function fakeBulkRoute() {
  const grants = new Map<string, number | undefined>();
  const calls: { writes: number; deletes: number }[] = [];
  const key = (r: GrantRow) => JSON.stringify([r.userId, r.resource, r.resourceId, r.relation]);
  const send = async (body: BulkChunk): Promise<BulkCounts> => {
    calls.push({ writes: body.writes.length, deletes: body.deletes.length });
    const total = body.writes.length + body.deletes.length;
    if (total > BULK_LIMIT) throw new RestError("invalid_argument", `at most ${BULK_LIMIT} entries`, [{ field: "writes", reason: "too many" }]);
    const problems: { field: string; reason: string }[] = [];
    const bad = (field: string, reason: string) => problems.push({ field, reason });
    body.writes.forEach((r, i) => {
      if (!RELATIONS.has(r.relation)) bad(`writes[${i}].relation`, `"${r.relation}" is not a relation of resource "${r.resource}"`);
      if (r.userId.startsWith("bad")) bad(`writes[${i}].userId`, "control characters");
      if (r.expiresAt !== undefined && r.expiresAt.getTime() <= Date.now()) bad(`writes[${i}].expiresAt`, "is not in the future");
    });
    body.deletes.forEach((r, i) => {
      if (!RELATIONS.has(r.relation)) bad(`deletes[${i}].relation`, `"${r.relation}" is not a relation`);
    });
    if (problems.length > 0) {
      throw new RestError("invalid_argument", `${problems.length} problems in the bulk request, nothing was written`, problems.slice(0, 100));
    }
    let written = 0;
    let deleted = 0;
    for (const r of body.deletes) if (grants.delete(key(r))) deleted++;
    for (const r of body.writes) {
      const expiry = r.expiresAt?.getTime();
      if (!grants.has(key(r)) || grants.get(key(r)) !== expiry) written++;
      grants.set(key(r), expiry);
    }
    return { written, unchanged: body.writes.length - written, deleted };
  };
  return { send, calls, grants };
}

const row = (line: number, over: Partial<GrantRow> = {}): GrantRow => ({
  line,
  op: "write",
  userId: `u${line}`,
  resource: "doc",
  resourceId: `d${line}`,
  relation: "viewer",
  ...over,
});

describe("importGrants", () => {
  it("writes every good row of 12,001 across three calls and reports the bad ones with their lines", async () => {
    // Lines start at 2 (after a header). 150 bad rows in the first chunk (more than one answer names),
    // a row with two problems, a past expiry, and a bad delete.
    const badRelation = new Set(Array.from({ length: 150 }, (_, k) => 2 + k * 30));
    const rows = Array.from({ length: 12_001 }, (_, k) => {
      const line = k + 2;
      if (badRelation.has(line)) return row(line, { relation: "watcher" });
      if (line === 6000) return row(line, { relation: "nope", userId: "bad-user" });
      if (line === 9000) return row(line, { expiresAt: new Date(Date.now() - 60_000) });
      if (line === 11_000) return row(line, { op: "delete", relation: "gone" });
      return row(line);
    });
    const route = fakeBulkRoute();
    const progress: ImportProgress[] = [];
    const report = await importGrants(rows, route.send, (p) => progress.push(p));

    const badLines = [...badRelation, 6000, 9000, 11_000].sort((a, b) => a - b);
    expect(report.failed.map((f) => f.line)).toEqual(badLines);
    expect(report.failed.find((f) => f.line === 6000)?.reason).toBe('relation: "nope" is not a relation of resource "doc"; userId: control characters');
    expect(report.failed.find((f) => f.line === 9000)?.reason).toBe("expiresAt: is not in the future");
    expect(report.failed.find((f) => f.line === 2)?.reason).toBe('relation: "watcher" is not a relation of resource "doc"');
    expect(report.written).toBe(12_001 - badLines.length);
    expect(report.written + report.failed.length).toBe(12_001);
    expect(report.unchanged).toBe(0);
    expect(report.deleted).toBe(0);
    expect(report.stoppedReason).toBeUndefined();
    expect(report.notSent).toEqual([]);
    // Every good row is stored.
    for (const r of rows) {
      const stored = route.grants.has(JSON.stringify([r.userId, r.resource, r.resourceId, r.relation]));
      expect(stored).toBe(!badLines.includes(r.line) && r.op === "write");
    }
    // Never more than the limit in one call. Chunk 1 takes 2 retries (150 bad, 100 named per answer),
    // chunk 2 one (lines 6000 and 9000 named together), chunk 3 one.
    expect(route.calls.every((c) => c.writes + c.deletes <= BULK_LIMIT)).toBe(true);
    expect(report.calls).toBe(route.calls.length);
    expect(route.calls).toHaveLength(3 + 2 + 2);
    // Progress only grows and ends at the total.
    expect(progress[0]).toEqual({ done: 0, total: 12_001 });
    expect(progress.at(-1)).toEqual({ done: 12_001, total: 12_001 });
    expect(progress.every((p, i) => i === 0 || p.done >= progress[i - 1]!.done)).toBe(true);
  });

  it("counts unchanged and deleted rows, and sends writes and deletes indexed apart", async () => {
    const route = fakeBulkRoute();
    await importGrants([row(2), row(3)], route.send);
    const report = await importGrants([row(2), row(3, { op: "delete" }), row(4, { op: "delete", relation: "gone" }), row(5, { relation: "gone" })], route.send);
    expect(report).toMatchObject({ written: 0, unchanged: 1, deleted: 1, notSent: [], calls: 2 });
    expect(report.failed).toEqual([
      { line: 4, reason: 'relation: "gone" is not a relation' },
      { line: 5, reason: 'relation: "gone" is not a relation of resource "doc"' },
    ]);
  });

  it("stops on an error other than bad entries and reports the lines not sent", async () => {
    const route = fakeBulkRoute();
    let calls = 0;
    const send = async (body: BulkChunk) => {
      calls++;
      if (calls === 2) throw new RestError("unavailable", "the database cannot be reached");
      return route.send(body);
    };
    const rows = Array.from({ length: 12_001 }, (_, k) => row(k + 1));
    const progress: ImportProgress[] = [];
    const report = await importGrants(rows, send, (p) => progress.push(p));
    expect(calls).toBe(2);
    expect(report.written).toBe(5000);
    expect(report.stoppedReason).toBe("the database cannot be reached");
    expect(report.notSent).toEqual(rows.slice(5000).map((r) => r.line));
    expect(lineRanges(report.notSent)).toBe("5001–12001");
    expect(progress.at(-1)).toEqual({ done: 5000, total: 12_001 });
  });

  it.each([
    { name: "permission_denied (403)", error: new RestError("permission_denied", "this key may not write") },
    { name: "a network failure", error: new TypeError("Failed to fetch") },
    { name: "invalid_argument naming no entry (over the limit)", error: new RestError("invalid_argument", "at most 5000 entries", [{ field: "writes", reason: "too many" }]) },
    { name: "invalid_argument naming an entry the call does not have", error: new RestError("invalid_argument", "bad", [{ field: "writes[7].relation", reason: "?" }]) },
    { name: "invalid_argument with no details", error: new RestError("invalid_argument", "bad request") },
  ])("stops at once on $name", async ({ error }) => {
    let calls = 0;
    const report = await importGrants([row(1), row(2), row(3, { op: "delete" })], async () => {
      calls++;
      throw error;
    });
    expect(calls).toBe(1);
    expect(report.stoppedReason).toBe(error.message);
    expect(report.notSent).toEqual([1, 2, 3]);
    expect(report.failed).toEqual([]);
    expect(report.written).toBe(0);
  });

  it("ends even when the route refuses every call, one entry at a time", async () => {
    let calls = 0;
    const report = await importGrants(
      Array.from({ length: 50 }, (_, k) => row(k + 1)),
      async () => {
        calls++;
        throw new RestError("invalid_argument", "one bad", [{ field: "writes[0]", reason: "refused" }]);
      },
    );
    expect(calls).toBe(50);
    expect(report.failed).toHaveLength(50);
    expect(report.failed[0]).toEqual({ line: 1, reason: "refused" });
    expect(report.stoppedReason).toBeUndefined();
  });

  it("reads refusals through an injected describe (as the page does for ConnectError)", async () => {
    class FakeConnectError extends Error {
      code = 3;
      rawMessage = "1 problem";
    }
    let calls = 0;
    const report = await importGrants(
      [row(10), row(11, { relation: "x" })],
      async (body) => {
        calls++;
        if (body.writes.length === 2) throw new FakeConnectError();
        return { written: body.writes.length, unchanged: 0, deleted: 0 };
      },
      undefined,
      { describe: (e) => ({ invalidArgument: (e as FakeConnectError).code === 3, message: "1 problem", details: [{ field: "writes[1].relation", reason: "not in the catalog" }] }) },
    );
    expect(calls).toBe(2);
    expect(report).toMatchObject({ written: 1, failed: [{ line: 11, reason: "relation: not in the catalog" }] });
  });

  it("stops when its signal is aborted", async () => {
    const controller = new AbortController();
    const route = fakeBulkRoute();
    const report = await importGrants(
      Array.from({ length: 30 }, (_, k) => row(k + 1)),
      async (body) => {
        const counts = await route.send(body);
        controller.abort();
        return counts;
      },
      undefined,
      { chunkSize: 10, signal: controller.signal },
    );
    expect(report.written).toBe(10);
    expect(report.notSent).toEqual(Array.from({ length: 20 }, (_, k) => k + 11));
    expect(report.stoppedReason).toMatch(/stopped/);
  });

  it("sends nothing for no rows", async () => {
    let calls = 0;
    const report = await importGrants([], async () => {
      calls++;
      return { written: 0, unchanged: 0, deleted: 0 };
    });
    expect(calls).toBe(0);
    expect(report).toMatchObject({ total: 0, written: 0, failed: [], notSent: [] });
  });
});

describe("describeRejection", () => {
  it.each([
    { error: { code: "invalid_argument", message: "m", details: [{ field: "writes[1]", reason: "r" }, { list: "x" }] }, want: { invalidArgument: true, message: "m", details: [{ field: "writes[1]", reason: "r" }] } },
    { error: { code: 3, rawMessage: "raw", message: "[invalid_argument] raw", details: [] }, want: { invalidArgument: true, message: "raw", details: [] } },
    { error: new Error("boom"), want: { invalidArgument: false, message: "boom", details: [] } },
    { error: "text", want: { invalidArgument: false, message: "text", details: [] } },
  ])("$error", ({ error, want }) => expect(describeRejection(error)).toEqual(want));
});

/* ------------------------------------------------------------------------ */
/* The console's import of subject sets and links, in Chromium               */
/* ------------------------------------------------------------------------ */

describe.skipIf(!chromiumAvailable)("the console's import, in Chromium: grants held by subject sets and links", { timeout: 180_000 }, () => {
  let rig: ConsoleRig | undefined;
  let browser: Browser;
  beforeAll(async () => {
    rig = await startConsoleRig();
    browser = rig.browser;
  }, 120_000);
  afterAll(async () => {
    await rig?.close();
  });

  it("a CSV and an NDJSON file (flat and nested subjects): written with their holders, bad rows reported by line", async () => {
    const service = rig!.service;
    const key = await createApp(service, "graph-import", GRAPH_CATALOG);
    const tab = await openTab(browser, service.url);
    rig!.tabs.push(tab);
    const { page } = tab;
    await page.goto("/console/");
    await page.getByLabel("API key").fill(key);
    await page.getByRole("button", { name: "Sign in" }).click();
    await expect.poll(() => page.getByRole("heading", { level: 1, name: "Catalog" }).isVisible()).toBe(true);
    await page.goto("/console/apps/graph-import/grants");
    const imports = page.getByRole("region", { name: "Import" });
    const importFile = async (name: string, body: string, rows: number) => {
      await imports.getByLabel("Grants file (CSV or NDJSON)").setInputFiles({ name, mimeType: "text/plain", buffer: Buffer.from(body) });
      await imports.getByRole("button", { name: `Import ${rows} row${rows === 1 ? "" : "s"}` }).click();
      await expect.poll(() => imports.getByRole("heading", { name: "Import finished" }).isVisible()).toBe(true);
    };

    const csv = [
      "userId,subjectResource,subjectResourceId,subjectRelation,resource,resourceId,relation,expiresAt",
      "alice,,,,team,platform,member,",
      ",team,platform,member,team,eng,member,2099-01-01T00:00:00Z",
      ",team,eng,member,folder,runbooks,viewer,",
      ",folder,runbooks,,document,42,parent,",
      ",team,eng,owner,folder,runbooks,editor,", // line 6: refused, team#owner holds nothing here
      "bob,team,eng,member,document,42,viewer,", // line 7: both holders
    ].join("\n");
    await importFile("hierarchy.csv", csv, 5);
    expect(await imports.getByRole("region", { name: "Lines with problems in the file" }).locator("tbody tr td:first-child").allTextContents()).toEqual(["7"]);
    const refused = imports.getByRole("region", { name: "Rows the service refused" });
    expect(await refused.locator("tbody tr td:first-child").allTextContents()).toEqual(["6"]);
    expect(await refused.locator("tbody tr td:nth-child(2)").allTextContents()).toEqual([
      "subject: folder#editor is held by a userId, a subject set team#member (its subjects in the catalog), not a subject set team#owner",
    ]);
    expect(await accessibilityProblems(page)).toEqual([]);

    const ndjson = [
      JSON.stringify({ subjectResource: "folder", subjectResourceId: "root", resource: "folder", resourceId: "runbooks", relation: "parent" }),
      JSON.stringify({ userId: "", subject: { resource: "folder", resourceId: "runbooks", relation: "" }, resource: "document", resourceId: "43", relation: "parent", createdAt: "2026-01-01T00:00:00Z" }),
      JSON.stringify({ subject: { resource: "team", resourceId: "eng", relation: "member" }, resource: "document", resourceId: "44", relation: "editor", expiresAt: "2099-01-01T00:00:00Z" }),
      JSON.stringify({ op: "delete", subjectResource: "folder", subjectResourceId: "runbooks", resource: "document", resourceId: "42", relation: "parent" }),
    ].join("\n");
    await importFile("more.ndjson", ndjson, 4);
    expect(await imports.getByRole("status").filter({ hasText: "Import finished" }).textContent()).toContain("3 written, 0 unchanged, 1 deleted, 0 refused");

    const grants: AnyGrant[] = [];
    for (const resource of ["team", "folder", "document"]) {
      const res = await service.call("GET", `/api/v1/authorization/relationships?resource=${resource}`, { key });
      for (const g of res.body.relationships as (AnyGrant & { userId: string })[]) grants.push(g.userId === "" ? { ...g, userId: undefined } : g);
    }
    const expiring = (g: AnyGrant) => ({ ...g, expiresAt: "2099-01-01T00:00:00Z" });
    const described = (g: AnyGrant) => `${text(g)}${g.expiresAt ? ` until ${new Date(g.expiresAt).toISOString()}` : ""}`;
    expect(grants.map(described).sort()).toEqual(
      [
        user("alice", "team", "platform", "member"),
        expiring(set("team:platform#member", "team", "eng", "member")),
        set("team:eng#member", "folder", "runbooks", "viewer"),
        set("folder:root", "folder", "runbooks", "parent"),
        set("folder:runbooks", "document", "43", "parent"),
        expiring(set("team:eng#member", "document", "44", "editor")),
      ]
        .map(described)
        .sort(),
    );
    expect(tab.problems).toEqual([]);
  });
});
