/**
 * Pure rules, no database: catalog validation, effective relations, catalog
 * diffs, and the formats table of the API contract.
 */
import { describe, expect, it } from "vitest";
import {
  diffCatalog,
  effectiveCatalog,
  validateCatalog,
  type CatalogChange,
  type CatalogEntry,
  type CatalogEntryInput,
  type RelationInput,
} from "../src/domain/catalog-rules.js";
import { DomainError } from "../src/domain/errors.js";
import {
  appIdProblem,
  descriptionProblem,
  identifierProblem,
  LIMITS,
  nameProblem,
  pageSize,
  tokenProblem,
} from "../src/domain/formats.js";

// ---------------------------------------------------------------- helpers

const entry = (resource: string, actions: string[], relations: RelationInput[] = [], description = ""): CatalogEntryInput => ({
  resource,
  description,
  actions,
  relations,
});
const custom = (name: string, actions: string[]): RelationInput => ({ name, actions, builtIn: false });
const builtIn = (name: string, actions: string[] = []): RelationInput => ({ name, actions, builtIn: true });
const range = <T>(n: number, f: (i: number) => T): T[] => Array.from({ length: n }, (_, i) => f(i));
/** Distinct valid tokens: a, b, ..., z, ba, bb, ... */
const token = (i: number): string => {
  let out = "";
  let n = i;
  do {
    out = String.fromCharCode(97 + (n % 26)) + out;
    n = Math.floor(n / 26);
  } while (n > 0);
  return out.length > 1 ? `r${out}` : out;
};

/** The invalid_argument error `fn` throws, or a failure when it does not throw one. */
function invalidArgumentOf(fn: () => void): DomainError {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(DomainError);
    expect((error as DomainError).code).toBe("invalid_argument");
    return error as DomainError;
  }
  throw new Error("expected an invalid_argument error, but nothing was thrown");
}

const fieldsOf = (error: DomainError) => error.details.map((d) => d.field);

// ---------------------------------------------------------------- validateCatalog

describe("validateCatalog", () => {
  it.each<{ name: string; catalog: CatalogEntryInput[] }>([
    { name: "an empty catalog", catalog: [] },
    { name: "one resource without actions", catalog: [entry("doc", [])] },
    {
      name: "custom relations over the resource's actions",
      catalog: [entry("doc", ["read", "comment"], [custom("reviewer", ["read", "comment"]), custom("reader", ["read"])])],
    },
    { name: "a custom relation reusing a built-in name", catalog: [entry("doc", ["read"], [custom("viewer", ["read"])])] },
    { name: "a custom relation implying no actions", catalog: [entry("doc", ["read"], [custom("nobody", [])])] },
    {
      name: "built-ins as a GET returned them (their actions are ignored)",
      catalog: [entry("doc", ["read"], [builtIn("owner", ["anything", "Not Valid"]), builtIn("commenter", ["comment"])])],
    },
    { name: "a built-in and a custom redefinition of it side by side", catalog: [entry("doc", ["read"], [builtIn("viewer"), custom("viewer", ["read"])])] },
    { name: "the same action and relation names on different resources", catalog: [entry("a", ["read"], [custom("r", ["read"])]), entry("b", ["read"], [custom("r", ["read"])])] },
    { name: "64-character names", catalog: [entry("a".repeat(64), ["b".repeat(64)], [custom("c".repeat(64), ["b".repeat(64)])])] },
    { name: `exactly ${LIMITS.catalogResources} resources`, catalog: range(LIMITS.catalogResources, (i) => token(i)).map((r) => entry(r, ["read"])) },
    { name: `exactly ${LIMITS.actionsPerResource} actions`, catalog: [entry("doc", range(LIMITS.actionsPerResource, token))] },
    { name: `exactly ${LIMITS.relationsPerResource} custom relations`, catalog: [entry("doc", ["read"], range(LIMITS.relationsPerResource, (i) => custom(token(i), ["read"])))] },
    { name: `a ${LIMITS.descriptionMax}-character description`, catalog: [entry("doc", [], [], "d".repeat(LIMITS.descriptionMax))] },
    { name: `a description of ${LIMITS.descriptionMax} astral characters`, catalog: [entry("doc", [], [], "😀".repeat(LIMITS.descriptionMax))] },
  ])("accepts $name", ({ catalog }) => {
    expect(() => validateCatalog(catalog)).not.toThrow();
  });

  it.each<{ name: string; catalog: CatalogEntryInput[]; fields: string[]; message?: RegExp }>([
    { name: "an empty resource name", catalog: [entry("", ["read"])], fields: ["resources[0].resource"], message: /is required/ },
    { name: "an upper-case resource", catalog: [entry("Doc", ["read"])], fields: ["resources[0].resource"], message: /"Doc"/ },
    { name: "a resource starting with a digit", catalog: [entry("1doc", ["read"])], fields: ["resources[0].resource"] },
    { name: "a resource with a hyphen", catalog: [entry("my-doc", ["read"])], fields: ["resources[0].resource"] },
    { name: "a 65-character resource", catalog: [entry("a".repeat(65), ["read"])], fields: ["resources[0].resource"] },
    {
      name: "a duplicated resource",
      catalog: [entry("doc", ["read"]), entry("file", []), entry("doc", ["write"])],
      fields: ["resources[2].resource"],
      message: /"doc" is already defined by resources\[0\]/,
    },
    { name: "a bad action", catalog: [entry("doc", ["read", "Write"])], fields: ["resources[0].actions[1]"], message: /"Write"/ },
    { name: "an empty action", catalog: [entry("doc", [""])], fields: ["resources[0].actions[0]"], message: /is required/ },
    {
      name: "a duplicated action",
      catalog: [entry("doc", ["read", "write", "read"])],
      fields: ["resources[0].actions[2]"],
      message: /"read" is listed twice/,
    },
    {
      name: "a relation action the resource does not have",
      catalog: [entry("doc", ["read"], [custom("reviewer", ["read", "comment"])])],
      fields: ["resources[0].relations[0].actions[1]"],
      message: /"comment" is not an action of resource "doc"/,
    },
    {
      name: "a relation action listed twice",
      catalog: [entry("doc", ["read"], [custom("reviewer", ["read", "read"])])],
      fields: ["resources[0].relations[0].actions[1]"],
      message: /listed twice/,
    },
    {
      name: "a relation defined twice",
      catalog: [entry("doc", ["read"], [custom("reviewer", ["read"]), custom("reviewer", [])])],
      fields: ["resources[0].relations[1].name"],
      message: /defined twice/,
    },
    { name: "a bad relation name", catalog: [entry("doc", ["read"], [custom("Reviewer", ["read"])])], fields: ["resources[0].relations[0].name"] },
    { name: "an empty relation name", catalog: [entry("doc", ["read"], [custom("", ["read"])])], fields: ["resources[0].relations[0].name"] },
    {
      name: "a relation marked built-in that is not one",
      catalog: [entry("doc", ["read"], [builtIn("approver", ["read"])])],
      fields: ["resources[0].relations[0].builtIn"],
      message: /not a built-in relation/,
    },
    {
      name: `a description of ${LIMITS.descriptionMax + 1} characters`,
      catalog: [entry("doc", [], [], "d".repeat(LIMITS.descriptionMax + 1))],
      fields: ["resources[0].description"],
    },
    {
      name: `${LIMITS.catalogResources + 1} resources`,
      catalog: range(LIMITS.catalogResources + 1, token).map((r) => entry(r, [])),
      fields: ["resources"],
      message: new RegExp(`at most ${LIMITS.catalogResources} resources`),
    },
    {
      name: `${LIMITS.actionsPerResource + 1} actions`,
      catalog: [entry("doc", range(LIMITS.actionsPerResource + 1, token))],
      fields: ["resources[0].actions"],
    },
    {
      name: `${LIMITS.relationsPerResource + 1} custom relations`,
      catalog: [entry("doc", ["read"], range(LIMITS.relationsPerResource + 1, (i) => custom(token(i), ["read"])))],
      fields: ["resources[0].relations"],
    },
    {
      name: "several problems at once (all named, in order)",
      catalog: [entry("Doc", ["read", "read"]), entry("file", ["x"], [custom("r", ["y"])], "d".repeat(2001))],
      fields: ["resources[0].resource", "resources[0].actions[1]", "resources[1].description", "resources[1].relations[0].actions[0]"],
      message: /^resources\[0\]\.resource: .*\(and 3 more\)$/,
    },
  ])("rejects $name", ({ catalog, fields, message }) => {
    const error = invalidArgumentOf(() => validateCatalog(catalog));
    expect(fieldsOf(error)).toEqual(fields);
    expect(error.message.startsWith(`${fields[0]}: `)).toBe(true);
    if (message !== undefined) expect(error.message).toMatch(message);
  });

  it("names at most 100 violations in the details but counts all of them in the message", () => {
    const badActions = range(LIMITS.actionsPerResource, (i) => `Bad${i}`);
    const catalog = [entry("doc", badActions), entry("file", badActions)];
    const error = invalidArgumentOf(() => validateCatalog(catalog));
    expect(error.details).toHaveLength(100);
    expect(error.details[99]).toEqual({ field: "resources[0].actions[99]", reason: expect.any(String) });
    expect(error.message).toMatch(/\(and 199 more\)$/);
  });
});

// ---------------------------------------------------------------- effectiveCatalog

describe("effectiveCatalog", () => {
  const builtInsOf = (actions: string[]) => effectiveCatalog([entry("x", actions)])[0]!.relations;

  it.each([
    {
      name: "a resource with every built-in action",
      actions: ["create", "read", "update", "delete", "comment", "list"],
      expected: [
        { name: "owner", actions: ["create", "read", "update", "delete", "comment", "list"], builtIn: true, subjects: ["user"], inherits: [], requires: [], unless: [] },
        { name: "editor", actions: ["create", "read", "update"], builtIn: true, subjects: ["user"], inherits: [], requires: [], unless: [] },
        { name: "viewer", actions: ["read", "list"], builtIn: true, subjects: ["user"], inherits: [], requires: [], unless: [] },
        { name: "commenter", actions: ["read", "comment"], builtIn: true, subjects: ["user"], inherits: [], requires: [], unless: [] },
      ],
    },
    {
      name: "commenter without comment implies read only; owner implies everything the resource has",
      actions: ["read", "send", "approve"],
      expected: [
        { name: "owner", actions: ["read", "send", "approve"], builtIn: true, subjects: ["user"], inherits: [], requires: [], unless: [] },
        { name: "editor", actions: ["read"], builtIn: true, subjects: ["user"], inherits: [], requires: [], unless: [] },
        { name: "viewer", actions: ["read"], builtIn: true, subjects: ["user"], inherits: [], requires: [], unless: [] },
        { name: "commenter", actions: ["read"], builtIn: true, subjects: ["user"], inherits: [], requires: [], unless: [] },
      ],
    },
    {
      name: "built-in actions follow the resource's order, not the built-in's",
      actions: ["list", "update", "comment", "read", "create"],
      expected: [
        { name: "owner", actions: ["list", "update", "comment", "read", "create"], builtIn: true, subjects: ["user"], inherits: [], requires: [], unless: [] },
        { name: "editor", actions: ["update", "read", "create"], builtIn: true, subjects: ["user"], inherits: [], requires: [], unless: [] },
        { name: "viewer", actions: ["list", "read"], builtIn: true, subjects: ["user"], inherits: [], requires: [], unless: [] },
        { name: "commenter", actions: ["comment", "read"], builtIn: true, subjects: ["user"], inherits: [], requires: [], unless: [] },
      ],
    },
    {
      name: "no actions: every built-in implies nothing",
      actions: [],
      expected: ["owner", "editor", "viewer", "commenter"].map((name) => ({ name, actions: [], builtIn: true, subjects: ["user"], inherits: [], requires: [], unless: [] })),
    },
  ])("built-ins: $name", ({ actions, expected }) => {
    expect(builtInsOf(actions)).toEqual(expected);
  });

  it("a custom relation with a built-in name takes its place; other custom ones follow in the order given", () => {
    const [doc] = effectiveCatalog([
      entry("doc", ["read", "comment", "delete"], [custom("zeta", ["read"]), custom("viewer", ["comment"]), custom("alpha", ["delete", "read"])], "Docs"),
    ]);
    expect(doc).toEqual({
      resource: "doc",
      description: "Docs",
      actions: ["read", "comment", "delete"],
      relations: [
        { name: "owner", actions: ["read", "comment", "delete"], builtIn: true, subjects: ["user"], inherits: [], requires: [], unless: [] },
        { name: "editor", actions: ["read"], builtIn: true, subjects: ["user"], inherits: [], requires: [], unless: [] },
        { name: "viewer", actions: ["comment"], builtIn: false, subjects: ["user"], inherits: [], requires: [], unless: [] },
        { name: "commenter", actions: ["read", "comment"], builtIn: true, subjects: ["user"], inherits: [], requires: [], unless: [] },
        { name: "zeta", actions: ["read"], builtIn: false, subjects: ["user"], inherits: [], requires: [], unless: [] },
        { name: "alpha", actions: ["delete", "read"], builtIn: false, subjects: ["user"], inherits: [], requires: [], unless: [] },
      ],
    });
  });

  it("ignores built-in entries sent back, whatever actions they carry", () => {
    const [doc] = effectiveCatalog([entry("doc", ["read"], [builtIn("owner", ["delete"]), builtIn("viewer", [])])]);
    expect(doc!.relations).toEqual(builtInsOf(["read"]));
  });

  it("keeps the resources in the order given", () => {
    expect(effectiveCatalog([entry("zeta", []), entry("alpha", []), entry("mid", [])]).map((e) => e.resource)).toEqual(["zeta", "alpha", "mid"]);
  });

  it("is stable when a GET answer is sent back as the next PUT", () => {
    const first = effectiveCatalog([
      entry("doc", ["read", "comment"], [custom("viewer", ["comment"]), custom("reviewer", ["read"])]),
      entry("invoice", ["send"]),
    ]);
    const again = effectiveCatalog(first.map((e) => ({ ...e, relations: e.relations.map((r) => ({ ...r })) })));
    expect(again).toEqual(first);
    expect(() => validateCatalog(first)).not.toThrow();
  });

  it("copies its input: changing the input afterwards does not change the result", () => {
    const input = [entry("doc", ["read"], [custom("reviewer", ["read"])])];
    const result = effectiveCatalog(input);
    input[0]!.actions.push("write");
    input[0]!.relations[0]!.actions.push("write");
    expect(result[0]!.actions).toEqual(["read"]);
    expect(result[0]!.relations.find((r) => r.name === "reviewer")!.actions).toEqual(["read"]);
    expect(result[0]!.relations.find((r) => r.name === "owner")!.actions).toEqual(["read"]);
  });
});

// ---------------------------------------------------------------- diffCatalog

describe("diffCatalog", () => {
  const catalog = (...entries: CatalogEntryInput[]): CatalogEntry[] => effectiveCatalog(entries);
  const none: CatalogChange = {
    resourcesAdded: [],
    resourcesRemoved: [],
    permissionsAdded: [],
    permissionsRemoved: [],
    relationsAdded: [],
    relationsRemoved: [],
    subjectsRemoved: [],
  };
  const base = catalog(entry("doc", ["read", "write"], [custom("reviewer", ["read"])]), entry("invoice", ["send"]));

  it.each<{ name: string; before: CatalogEntry[]; after: CatalogEntry[]; expected: Partial<CatalogChange> }>([
    { name: "identical catalogs", before: base, after: base, expected: {} },
    { name: "empty to empty", before: [], after: [], expected: {} },
    {
      name: "from empty",
      before: [],
      after: base,
      expected: { resourcesAdded: ["doc", "invoice"], permissionsAdded: ["doc:read", "doc:write", "invoice:send"] },
    },
    {
      name: "to empty (relations of removed resources are not listed as removed relations)",
      before: base,
      after: [],
      expected: { resourcesRemoved: ["doc", "invoice"], permissionsRemoved: ["doc:read", "doc:write", "invoice:send"] },
    },
    {
      name: "reordering resources and actions changes nothing",
      before: base,
      after: catalog(entry("invoice", ["send"]), entry("doc", ["write", "read"], [custom("reviewer", ["read"])])),
      expected: {},
    },
    {
      name: "dropping an action",
      before: base,
      after: catalog(entry("doc", ["read"], [custom("reviewer", ["read"])]), entry("invoice", ["send"])),
      expected: { permissionsRemoved: ["doc:write"] },
    },
    {
      name: "dropping a custom relation and adding another",
      before: base,
      after: catalog(entry("doc", ["read", "write"], [custom("approver", ["write"])]), entry("invoice", ["send"])),
      expected: {
        relationsRemoved: [{ resource: "doc", relation: "reviewer" }],
        relationsAdded: [{ resource: "doc", relation: "approver" }],
      },
    },
    {
      name: "redefining a built-in keeps the relation (only its actions change)",
      before: base,
      after: catalog(entry("doc", ["read", "write"], [custom("reviewer", ["read"]), custom("viewer", ["write"])]), entry("invoice", ["send"])),
      expected: {},
    },
    {
      name: "replacing a resource by another",
      before: base,
      after: catalog(entry("doc", ["read", "write"], [custom("reviewer", ["read"])]), entry("receipt", ["send"])),
      expected: {
        resourcesAdded: ["receipt"],
        resourcesRemoved: ["invoice"],
        permissionsAdded: ["receipt:send"],
        permissionsRemoved: ["invoice:send"],
      },
    },
  ])("$name", ({ before, after, expected }) => {
    expect(diffCatalog(before, after)).toEqual({ ...none, ...expected });
  });
});

// ---------------------------------------------------------------- formats

/** Table rows: the value, and undefined when valid or a pattern its problem must match. */
type FormatCase = [label: string, value: string, problem: RegExp | undefined];

function formatTable(name: string, check: (value: string) => string | undefined, cases: FormatCase[]) {
  describe(name, () => {
    it.each(cases)("%s", (_label, value, problem) => {
      const got = check(value);
      if (problem === undefined) expect(got).toBeUndefined();
      else {
        expect(got).toBeTypeOf("string");
        expect(got).toMatch(problem);
      }
    });
  });
}

const controlCharacters: FormatCase[] = [
  ["NUL", "a\u0000b", /control characters/],
  ["tab", "a\tb", /control characters/],
  ["newline", "a\nb", /control characters/],
  ["carriage return", "ab\r", /control characters/],
  ["unit separator U+001F", "a\u001fb", /control characters/],
  ["DEL U+007F", "a\u007fb", /control characters/],
  ["C1 U+0080", "a\u0080b", /control characters/],
  ["C1 NEL U+0085", "a\u0085b", /control characters/],
  ["C1 U+009F", "a\u009fb", /control characters/],
  ["no-break space U+00A0 (not a control character)", "a\u00a0b", undefined],
  ["space", "a b", undefined],
];

/** The app id's and the names' rules, in words (the console shows the API's reasons as they are). */
const APP_ID_WORDS = /^".*" must start with a lowercase letter or digit and use only lowercase letters, digits, "_" and "-", at most 64 characters$/;
const TOKEN_WORDS = /^".*" must start with a lowercase letter and use only lowercase letters, digits and "_", at most 64 characters$/;

formatTable("appIdProblem", appIdProblem, [
  ["one letter", "a", undefined],
  ["one digit", "0", undefined],
  ["letters, digits, _ and -", "my-app_2", undefined],
  ["64 characters", "a".repeat(64), undefined],
  ["65 characters", "a".repeat(65), APP_ID_WORDS],
  ["empty", "", /is required/],
  ["leading hyphen", "-app", APP_ID_WORDS],
  ["leading underscore", "_app", APP_ID_WORDS],
  ["upper case", "App", APP_ID_WORDS],
  ["dot", "my.app", APP_ID_WORDS],
  ["space", "my app", APP_ID_WORDS],
  ["slash", "my/app", APP_ID_WORDS],
  ["non-ASCII letter", "appé", APP_ID_WORDS],
  ["trailing newline", "app\n", APP_ID_WORDS],
]);

formatTable("tokenProblem (resource, action, relation)", tokenProblem, [
  ["one letter", "a", undefined],
  ["letters, digits and _", "read_all2", undefined],
  ["64 characters", "r".repeat(64), undefined],
  ["65 characters", "r".repeat(65), TOKEN_WORDS],
  ["empty", "", /is required/],
  ["leading digit", "2read", TOKEN_WORDS],
  ["leading underscore", "_read", TOKEN_WORDS],
  ["hyphen", "read-all", TOKEN_WORDS],
  ["upper case", "Read", TOKEN_WORDS],
  ["colon", "doc:read", TOKEN_WORDS],
  ["hash", "doc#owner", TOKEN_WORDS],
  ["trailing newline", "read\n", TOKEN_WORDS],
]);

formatTable("identifierProblem (userId, resourceId, tenantId)", identifierProblem, [
  ["one character", "u", undefined],
  ["empty", "", /is required/],
  ["256 ASCII characters", "x".repeat(256), undefined],
  ["257 ASCII characters", "x".repeat(257), /at most 256 characters, got 257/],
  ["256 astral characters (512 UTF-16 units)", "😀".repeat(256), undefined],
  ["257 astral characters", "😀".repeat(257), /at most 256 characters, got 257/],
  ["255 ASCII + 1 astral = 256", `${"x".repeat(255)}😀`, undefined],
  ["256 ASCII + 1 astral = 257", `${"x".repeat(256)}😀`, /got 257/],
  ["256 combining sequences count their code points", "e\u0301".repeat(128), undefined],
  ["URL-ish punctuation", "user:42/doc#1?x=y&z", undefined],
  ["unicode letters", "Zoë-北京", undefined],
  ...controlCharacters,
]);

formatTable("nameProblem (policy, role, key names)", nameProblem, [
  ["one character", "p", undefined],
  ["empty", "", /is required/],
  ["blank", "   ", /is required/],
  ["200 characters", "n".repeat(200), undefined],
  ["201 characters", "n".repeat(201), /at most 200 characters, got 201/],
  ["200 astral characters", "😀".repeat(200), undefined],
  ["201 astral characters", "😀".repeat(201), /got 201/],
  ["spaces and punctuation", "Read-only: docs (EU)", undefined],
  ...controlCharacters,
]);

formatTable("descriptionProblem", descriptionProblem, [
  ["empty", "", undefined],
  ["2000 characters", "d".repeat(2000), undefined],
  ["2001 characters", "d".repeat(2001), /at most 2000 characters, got 2001/],
  ["2000 astral characters", "😀".repeat(2000), undefined],
  ["2001 astral characters", "😀".repeat(2001), /got 2001/],
  ["several lines", "line one\nline two\ttabbed", undefined],
]);

describe("pageSize", () => {
  it.each([
    { value: undefined, expected: LIMITS.pageSizeDefault },
    { value: 1, expected: 1 },
    { value: 100, expected: 100 },
    { value: 1000, expected: 1000 },
  ])("accepts $value as $expected", ({ value, expected }) => {
    expect(pageSize(value)).toBe(expected);
  });

  it.each([0, -1, 1001, 1.5, Number.NaN, Number.POSITIVE_INFINITY])("rejects %s with a 400 naming pageSize", (value) => {
    const error = invalidArgumentOf(() => pageSize(value));
    expect(error.message).toMatch(/^pageSize: must be between 1 and 1000/);
    expect(error.details).toEqual([{ field: "pageSize", reason: expect.stringContaining("between 1 and 1000") }]);
  });

  it("names the field it was given", () => {
    expect(invalidArgumentOf(() => pageSize(0, "limit")).message).toMatch(/^limit: /);
  });

  it("the default is 100 and the maximum 1000, as the contract says", () => {
    expect(LIMITS.pageSizeDefault).toBe(100);
    expect(LIMITS.pageSizeMax).toBe(1000);
  });
});
