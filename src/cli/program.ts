/**
 * The command line's commands and flags (commander): what each takes, its
 * help, and how its outcome becomes an exit code (see errors.ts). The
 * commands talk to a running service over its REST API (client.ts); main.ts
 * hands in the environment it read.
 */
import { Command, CommanderError, InvalidArgumentError, Option } from "commander";
import { BULK_LIMIT } from "../lib/grant-import/index.js";
import { catalogGet, catalogPut, keysCreate, scopesList } from "./admin.js";
import { changes } from "./changes.js";
import { Api, ApiError, NetworkError } from "./client.js";
import { CliError, EXIT, usageError } from "./errors.js";
import { exportGrants } from "./grants-export.js";
import { modelApply, modelExport, modelPlan, type PlanFormat } from "./model.js";
import { modelTest, type TestFormat } from "./model-test.js";
import { importGrants } from "./grants-import.js";
import { resolveKey } from "./key.js";
import { check, explain, question, whoCan } from "./questions.js";

/** What main read from the environment: the only place the command line looks at it. */
export interface Env {
  /** PORTCULLIS_KEY. */
  key: string | undefined;
  /** PORTCULLIS_URL. */
  url: string | undefined;
}

export interface Io {
  out: NodeJS.WritableStream;
  err: NodeJS.WriteStream;
  stdin: NodeJS.ReadableStream;
}

export const DEFAULT_URL = "http://127.0.0.1:8080";
/** Batches in flight at most with --concurrency: more only queues calls at the service (see docs/limits.md). */
const MAX_CONCURRENCY = 4;
/** The change feed's page size: the route's bounds and default. */
const MAX_CHANGES_PAGE = 1000;
const CHANGES_PAGE = 100;

interface Globals {
  url: string;
  keyFile?: string;
  key?: string;
}

/** A parser for a whole-number flag in [min, max]; commander names the flag in the error. */
const wholeNumber = (min: number, max: number) => (value: string) => {
  const n = /^\d+$/.test(value) ? Number(value) : Number.NaN;
  if (!(n >= min && n <= max)) throw new InvalidArgumentError(`it must be a whole number from ${min} to ${max}.`);
  return n;
};

/** Runs the command line; resolves to the exit code. */
export async function run(argv: readonly string[], env: Env, io: Io): Promise<number> {
  let exitCode: number = EXIT.ok;
  const program = new Command("portcullis");

  /** The API of the service the flags name, with the key. */
  const api = async (command: Command): Promise<Api> => {
    const g = command.optsWithGlobals<Globals>();
    if (g.key !== undefined) {
      throw usageError("--key is not taken: a key on the command line shows in ps and in shell history; set PORTCULLIS_KEY or pass --key-file FILE");
    }
    let url: URL;
    try {
      url = new URL(g.url);
    } catch {
      throw usageError(`--url ${g.url}: not a URL (for example ${DEFAULT_URL})`);
    }
    if (url.protocol !== "http:" && url.protocol !== "https:") throw usageError(`--url ${g.url}: not an http or https URL`);
    return new Api(url.href, await resolveKey(g.keyFile, env.key));
  };

  program
    .description(
      "Portcullis from the command line: import and export grants, ask a check, follow the change feed, keep the catalog and API keys.\n" +
        "It talks to a running service over its REST API, with the key in PORTCULLIS_KEY or the file --key-file names " +
        "(model test alone needs neither: it runs its own embedded instance).",
    )
    .exitOverride()
    .configureOutput({ writeOut: (s) => io.out.write(s), writeErr: (s) => io.err.write(s) })
    .showHelpAfterError("(add --help for usage)")
    .option("--url <url>", "the service's base URL (or PORTCULLIS_URL)", env.url ?? DEFAULT_URL)
    .option("--key-file <file>", "read the API key from this file (default: the PORTCULLIS_KEY variable)")
    .addOption(new Option("--key <key>").hideHelp())
    .addHelpText(
      "after",
      `
Exit codes: 0 done; 1 a negative answer (a check denied, rows an import refused);
2 a usage error; 3 stopped (the service refused or could not be reached).

Examples:
  export PORTCULLIS_KEY=pcl_...                 # an application key (grants, check, explain)
  portcullis grants import grants.csv
  portcullis grants export --out grants.ndjson
  portcullis check alice document:d7 read
  portcullis who-can document:d7 read
  portcullis changes --follow --state feed.json | jq -c 'select(.kind == "grant_deleted")'
  portcullis --key-file ~/.portcullis-operator catalog get --app docs`,
    );

  const grants = program.command("grants").summary("import and export grants").description("import and export the direct grants of the key's application");

  grants
    .command("import")
    .description(
      "import grants from a CSV file (a header row naming userId,resource,resourceId,relation[,expiresAt][,condition][,op], the holder being " +
        "userId, allUsers (true: every user) or subjectResource,subjectResourceId[,subjectRelation] for a team's members or a linked instance) or NDJSON " +
        "(one object a line with those keys, or the list route's subject object), streamed through the bulk route; bad rows go to the error report, the rest is written once",
    )
    .argument("<FILE>", "the CSV or NDJSON file (.csv, .ndjson or .jsonl; otherwise see --format)")
    .addOption(new Option("--format <format>", "the file's format when its name does not say (default: NDJSON if it starts with {)").choices(["csv", "ndjson"]))
    .option("--batch <rows>", `rows per bulk call, 1 to ${BULK_LIMIT}`, wholeNumber(1, BULK_LIMIT), BULK_LIMIT)
    .option(
      "--concurrency <calls>",
      `bulk calls in flight, 1 to ${MAX_CONCURRENCY}; above 1, batches may commit out of file order (keep 1 when a file writes and deletes the same grant)`,
      wholeNumber(1, MAX_CONCURRENCY),
      1,
    )
    .option("--errors <file>", "the error report: one JSON line per bad row, {line, reason, row} (default: FILE.errors.ndjson)")
    .option("--state <file>", "the resumable position, written after each batch (default: FILE.import-state.json)")
    .option("--resume", "continue an import that stopped, from its state file")
    .option("--no-progress", "no progress on stderr")
    .option("--json", "print the summary as JSON")
    .action(async (file: string, options: { format?: "csv" | "ndjson"; batch: number; concurrency: number; errors?: string; state?: string; resume?: boolean; progress: boolean; json?: boolean }, command: Command) => {
      exitCode = await importGrants(await api(command), { file, ...options, resume: options.resume === true, json: options.json === true }, io);
    });

  grants
    .command("export")
    .description(
      "write grants as NDJSON (the keys grants import reads; CSV when --out names a .csv file), paged: every type of the catalog, or what the flags select " +
        "(--resource; --resource with --resource-id; --user or --all-users, with or without --resource; --relation narrows)",
    )
    .option("--resource <type>", "grants on instances of this resource type")
    .option("--resource-id <id>", "grants on this one instance (with --resource)")
    .option("--user <userId>", "this user's grants")
    .option("--all-users", "the allUsers grants (every user holds them: public instances)")
    .option("--relation <relation>", "only this relation")
    .option("--include-expired", "also grants whose expiry has passed and that no sweep has deleted yet")
    .option("--out <file>", "write to this file (whole or not at all) instead of stdout")
    .action(async (options: { resource?: string; resourceId?: string; user?: string; allUsers?: boolean; relation?: string; includeExpired?: boolean; out?: string }, command: Command) => {
      await exportGrants(await api(command), { ...options, allUsers: options.allUsers === true, includeExpired: options.includeExpired === true }, io.out, io.err);
    });

  const ask = (name: "check" | "explain") =>
    program
      .command(name)
      .summary(name === "check" ? "may USER do ACTION on RESOURCE:ID?" : "why: the grants and roles behind the answer")
      .description(
        name === "check"
          ? "may USER perform ACTION on RESOURCE:ID? prints allowed or denied; exit 0 when allowed, 1 when denied"
          : "why the check answers as it does: the grants and roles that allow it, and what the user holds; exit 0 when allowed, 1 when denied",
      )
      .argument("<USER>", "the user's id")
      .argument("<RESOURCE:ID>", "the instance, e.g. document:d7")
      .argument("<ACTION>", "an action of the resource, e.g. read")
      .option("--tenant <tenantId>", "roles of this tenant count too")
      .option("--json", "print the API's answer as JSON")
      .action(async (user: string, instance: string, action: string, options: { tenant?: string; json?: boolean }, command: Command) => {
        const q = question(user, instance, action, options.tenant);
        exitCode = await (name === "check" ? check : explain)(await api(command), q, options.json === true, io.out);
      });
  ask("check");
  ask("explain");

  program
    .command("who-can")
    .summary("who may do ACTION on RESOURCE:ID?")
    .description(
      "every user who may perform ACTION on RESOURCE:ID, through grants, teams, folders or roles, one a line, ascending; where an allUsers grant lets every user, stderr says so; exit 0 when someone may, 1 when no one",
    )
    .argument("<RESOURCE:ID>", "the instance, e.g. document:d7")
    .argument("<ACTION>", "an action of the resource, e.g. read")
    .option("--tenant <tenantId>", "roles of this tenant count too")
    .option("--json", "print one JSON array of user ids")
    .action(async (instance: string, action: string, options: { tenant?: string; json?: boolean }, command: Command) => {
      const { userId: _, ...q } = question("-", instance, action, options.tenant);
      exitCode = await whoCan(await api(command), q, options.json === true, io.out, io.err);
    });

  program
    .command("changes")
    .summary("print the change feed as NDJSON; --follow to keep printing")
    .description(
      "print the changes to the key's application in commit order (grants written and deleted, role assignments added and removed, model changes) " +
        "as NDJSON, one change a line as GET /api/v1/authorization/changes returns it: {kind, token, changedAt, and grant, assignment or modelEvent}. " +
        "It starts after --after TOKEN, else after the --state file's position, else at the oldest change kept. " +
        "Without --follow it prints up to now and exits 0; with --follow it keeps printing each change as it comes until SIGINT or SIGTERM, " +
        "which finish the page in hand and save it, then exits 0",
    )
    .option("--after <token>", "start after this token (a change's token, or the one the last run printed on stderr); wins over the --state file's")
    .option("--state <file>", "the position: read at the start when the file exists, saved atomically after each page's lines are written")
    .option("--page-size <changes>", `changes a call, 1 to ${MAX_CHANGES_PAGE}`, wholeNumber(1, MAX_CHANGES_PAGE), CHANGES_PAGE)
    .option("--follow", "keep going: wait for changes (30 s long polls), retry a lost service (every 0.5 s, doubling to 10 s), stop on SIGINT or SIGTERM")
    .addHelpText(
      "after",
      `
The feed gives every change after a token exactly once. What reaches stdout is at least once at
the page boundary: --state moves after a page's lines have been written, so a kill or a crash in
between prints that one page again on the next run, never more, and skips none. The page comes
again whole and in order: a consumer that applies each change by its key (upsert a grant
written, delete a grant deleted) ends in the same state. A change's token is for resuming from,
not for comparing: the same change read twice may carry two different tokens.
The state file names the application; one file serves one process at a time.
A position older than the feed's retention is refused (409): delete the state file (or leave
--after out) to start again from the oldest change kept.`,
    )
    .action(async (options: { after?: string; state?: string; pageSize: number; follow?: boolean }, command: Command) => {
      exitCode = await changes(await api(command), { ...options, follow: options.follow === true }, io);
    });

  const catalog = program.command("catalog").summary("get or put the catalog").description("read or replace an application's resource catalog");
  catalog
    .command("get")
    .description("print the catalog as JSON (what catalog put takes back)")
    .option("--app <appId>", "the application (default: the key's own)")
    .action(async (options: { app?: string }, command: Command) => {
      await catalogGet(await api(command), options.app, io.out);
    });
  catalog
    .command("put")
    .description("replace the whole catalog with a JSON file's ({\"resources\": [...]}, as catalog get prints it), atomically")
    .argument("<FILE>", "the catalog's JSON file, or - for stdin")
    .requiredOption("--app <appId>", "the application")
    .option("--json", "print the API's answer as JSON")
    .action(async (file: string, options: { app: string; json?: boolean }, command: Command) => {
      await catalogPut(await api(command), file, options.app, options.json === true, io);
    });

  const model = program
    .command("model")
    .summary("export, plan, apply or test the model as a file")
    .description("the whole model (catalog, policies, roles by name) as one YAML or JSON file: export it, plan a change with its access impact, apply it, test it");
  const formatOption = () => new Option("--format <format>", "text (in colour on a terminal), markdown (for a pull request) or json").choices(["text", "markdown", "json"]).default("text");
  model
    .command("export")
    .description("print the model as YAML (or JSON), what plan and apply take back")
    .option("--app <appId>", "the application (default: the key's own)")
    .addOption(new Option("--format <format>", "yaml or json").choices(["yaml", "json"]).default("yaml"))
    .action(async (options: { app?: string; format: "yaml" | "json" }, command: Command) => {
      await modelExport(await api(command), options, io.out);
    });
  model
    .command("plan")
    .description(
      "what applying FILE would create, change and remove, and which users would gain or lose which permission; changes nothing. " +
        "Exit 1 when apply would refuse it (its catalog strands grants: the plan names them)",
    )
    .argument("<FILE>", "the model file (YAML or JSON), or - for stdin")
    .option("--app <appId>", "the application (default: the key's own)")
    .addOption(formatOption())
    .action(async (file: string, options: { app?: string; format: PlanFormat }, command: Command) => {
      exitCode = await modelPlan(await api(command), file, options, io);
    });
  model
    .command("apply")
    .description("make the model FILE, in one transaction; refused whole when it would strand grants or when --expected-version is stale")
    .argument("<FILE>", "the model file (YAML or JSON), or - for stdin")
    .option("--app <appId>", "the application (default: the key's own)")
    .option("--expected-version <version>", "refuse unless the model is still at this version (the plan's)")
    .addOption(formatOption())
    .action(async (file: string, options: { app?: string; expectedVersion?: string; format: PlanFormat }, command: Command) => {
      await modelApply(await api(command), file, options, io);
    });

  model
    .command("test")
    .description(
      "run a test file's assertions (check, lookup, who can; allowed or denied) against its model, grants and role assignments, " +
        "on an embedded in-memory instance: no server, no key. Each failed assertion is printed with its explain. " +
        "Exit 0 when all hold, 1 when one fails, 2 when the file cannot be read or used (its line named)",
    )
    .argument("<FILE>", "the test file (YAML or JSON): {model, grants, assignments, assertions}, or - for stdin")
    .addOption(new Option("--format <format>", "text (for a CI log) or json (for tools)").choices(["text", "json"]).default("text"))
    .action(async (file: string, options: { format: TestFormat }) => {
      exitCode = await modelTest(file, options, io);
    });

  program
    .command("keys")
    .summary("create an API key")
    .description("API keys")
    .command("create")
    .description("create an API key and print its secret, once, alone on stdout (what it is goes to stderr)")
    .requiredOption("--app <appId>", "the application")
    .requiredOption("--name <name>", "the key's name (1 to 200 characters)")
    .option("--scopes <list>", "what it may call, from check, read, write (default: all three)", scopesList)
    .option("--json", "print the API's answer (secret included) as JSON")
    .action(async (options: { app: string; name: string; scopes?: string[]; json?: boolean }, command: Command) => {
      await keysCreate(await api(command), { ...options, json: options.json === true }, io);
    });

  try {
    await program.parseAsync([...argv], { from: "user" });
    return exitCode;
  } catch (error) {
    // Commander has printed its own message (it names the flag or argument).
    if (error instanceof CommanderError) return error.exitCode === 0 ? EXIT.ok : EXIT.usage;
    if (error instanceof CliError) {
      io.err.write(`portcullis: ${error.message}\n`);
      return error.exitCode;
    }
    if (error instanceof ApiError) {
      io.err.write(`portcullis: the service refused: ${error.describe()}\n`);
      return EXIT.stopped;
    }
    if (error instanceof NetworkError) {
      io.err.write(`portcullis: ${error.message}\n`);
      return EXIT.stopped;
    }
    throw error;
  }
}
