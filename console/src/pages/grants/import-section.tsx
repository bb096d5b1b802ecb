/**
 * Importing a CSV or NDJSON file of grants through the bulk route
 * (src/lib/grant-import/ does the parsing, the chunking and the retries
 * around bad entries), with its progress and a summary of what was refused.
 */
import { Code, createClient } from "@connectrpc/connect";
import { useTransport } from "@connectrpc/connect-query";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { useQueryClient } from "@tanstack/react-query";
import { useMemo, useRef, useState, type ChangeEvent } from "react";
import { RelationshipService } from "../../../../gen/authz/v1/relationships_pb.js";
import { ColumnHeads } from "../../components/column-heads";
import { apiProblem } from "../../lib/errors";
import {
  BULK_LIMIT,
  holderEntry,
  importGrants,
  lineRanges,
  parseGrantFile,
  type BulkChunk,
  type ErrorDetail,
  type GrantRow,
  type ImportProgress,
  type ImportReport,
  type LineIssue,
  type ParseResult,
  type Rejection,
} from "../../../../src/lib/grant-import/index.js";

/** Rows of an issue table drawn at most (a file can have thousands of bad lines). */
const SHOWN_ISSUES = 500;

/** A row as a bulk entry: its holder as userId, or as subject (a subject set, or a link with relation ""). */
const toTuple = (r: GrantRow) => ({
  ...holderEntry(r),
  resource: r.resource,
  resourceId: r.resourceId,
  relation: r.relation,
  ...(r.expiresAt === undefined ? {} : { expiresAt: timestampFromDate(r.expiresAt) }),
  ...(r.condition === undefined ? {} : { condition: r.condition }),
});

/** A ConnectError as importGrants reads a refusal: the details as {field, reason}, all of them (not one per field). */
function describeConnectError(error: unknown): Rejection {
  const problem = apiProblem(error);
  const details = problem.details.filter((d): d is Record<string, unknown> & ErrorDetail => typeof d.field === "string" && typeof d.reason === "string");
  return { invalidArgument: problem.code === Code.InvalidArgument, message: problem.message, details };
}

export function ImportSection() {
  const queryClient = useQueryClient();
  const transport = useTransport();
  const client = useMemo(() => createClient(RelationshipService, transport), [transport]);
  const [file, setFile] = useState<{ name: string; parsed: ParseResult } | undefined>();
  const [readProblem, setReadProblem] = useState<string | undefined>();
  const [running, setRunning] = useState(false);
  const [progress, setProgress] = useState<ImportProgress | undefined>();
  const [report, setReport] = useState<ImportReport | undefined>();
  const stopper = useRef<AbortController | undefined>(undefined);

  const choose = async (event: ChangeEvent<HTMLInputElement>) => {
    const chosen = event.target.files?.[0];
    setFile(undefined);
    setReport(undefined);
    setProgress(undefined);
    setReadProblem(undefined);
    if (chosen === undefined) return;
    try {
      // Bytes, not text: a row that is not UTF-8 is reported, never read as U+FFFD.
      const bytes = new Uint8Array(await chosen.arrayBuffer());
      setFile({ name: chosen.name, parsed: parseGrantFile(bytes, chosen.name) });
    } catch (error) {
      setReadProblem(`The file could not be read: ${error instanceof Error ? error.message : String(error)}`);
    }
  };

  const run = async () => {
    if (file === undefined || running) return;
    const controller = new AbortController();
    stopper.current = controller;
    setRunning(true);
    setReport(undefined);
    try {
      const send = async (c: BulkChunk) => {
        const answer = await client.bulkWriteRelationships({ writes: c.writes.map(toTuple), deletes: c.deletes.map(toTuple) });
        return { written: answer.written, unchanged: answer.unchanged, deleted: answer.deleted };
      };
      setReport(await importGrants(file.parsed.rows, send, setProgress, { describe: describeConnectError, signal: controller.signal }));
    } finally {
      stopper.current = undefined;
      setRunning(false);
      void queryClient.invalidateQueries();
    }
  };

  const parsed = file?.parsed;
  return (
    <section aria-labelledby="grants-import-heading">
      <h2 id="grants-import-heading">Import</h2>
      <p className="grants-hint" id="grants-import-hint">
        A CSV file with a header row naming the columns userId, resource, resourceId, relation, and optionally expiresAt (RFC 3339 with a zone, e.g.
        2030-01-31T12:00:00Z) and op (write or delete; write when empty); or NDJSON, one JSON object per line with those keys. A row held by a subject set
        or a linked instance gives subjectResource, subjectResourceId and subjectRelation (empty for a link) instead of userId; in NDJSON also as a subject
        object, as the list returns it. Rows are sent{" "}
        {BULK_LIMIT.toLocaleString()} at a time; rows the service refuses are listed below and the others are still written.
      </p>
      <div className="field">
        <label htmlFor="grants-import-file">Grants file (CSV or NDJSON)</label>
        <input
          id="grants-import-file"
          type="file"
          accept=".csv,.ndjson,.jsonl,text/csv,application/x-ndjson"
          aria-describedby="grants-import-hint"
          onChange={(e) => void choose(e)}
          disabled={running}
        />
      </div>
      {readProblem !== undefined && (
        <div role="alert" className="error-note">
          {readProblem}
        </div>
      )}
      {parsed !== undefined && (
        <>
          <p role="status">
            {file!.name}: {parsed.format === "csv" ? "CSV" : "NDJSON"}, {parsed.rows.length.toLocaleString()} row{parsed.rows.length === 1 ? "" : "s"} ready
            {parsed.errors.length > 0 && (
              <>
                , {parsed.errors.length.toLocaleString()} line{parsed.errors.length === 1 ? "" : "s"} with problems (not sent)
              </>
            )}
            .
          </p>
          {parsed.errors.length > 0 && <IssueTable caption="Lines with problems in the file" issues={parsed.errors} />}
          <button type="button" onClick={() => void run()} disabled={running || parsed.rows.length === 0}>
            {running ? "Importing…" : `Import ${parsed.rows.length.toLocaleString()} row${parsed.rows.length === 1 ? "" : "s"}`}
          </button>
          {running && (
            <button type="button" onClick={() => stopper.current?.abort()}>
              Stop after this call
            </button>
          )}
        </>
      )}
      {progress !== undefined && progress.total > 0 && (
        <div className="field grants-progress">
          <label htmlFor="grants-import-progress">Import progress</label>
          <progress id="grants-import-progress" max={progress.total} value={progress.done}>
            {progress.done} of {progress.total} rows
          </progress>
          <span aria-live="polite">
            {progress.done.toLocaleString()} of {progress.total.toLocaleString()} rows
          </span>
        </div>
      )}
      {report !== undefined && <ImportSummary report={report} />}
    </section>
  );
}

function ImportSummary({ report }: { report: ImportReport }) {
  return (
    <div className="grants-summary">
      <h3>{report.stoppedReason === undefined ? "Import finished" : "Import stopped"}</h3>
      <p role="status" className="visually-hidden">
        Import {report.stoppedReason === undefined ? "finished" : "stopped"}: {report.written} written, {report.unchanged} unchanged, {report.deleted} deleted,{" "}
        {report.failed.length} refused.
      </p>
      <dl>
        <dt>Written</dt>
        <dd>{report.written.toLocaleString()}</dd>
        <dt>Unchanged</dt>
        <dd>{report.unchanged.toLocaleString()}</dd>
        <dt>Deleted</dt>
        <dd>{report.deleted.toLocaleString()}</dd>
        <dt>Refused</dt>
        <dd>{report.failed.length.toLocaleString()}</dd>
      </dl>
      {report.stoppedReason !== undefined && (
        <div className="error-note">
          The import stopped: {report.stoppedReason}.{" "}
          {report.notSent.length > 0 && (
            <>
              {report.notSent.length.toLocaleString()} row{report.notSent.length === 1 ? " was" : "s were"} not sent (line{report.notSent.length === 1 ? "" : "s"}{" "}
              {lineRanges(report.notSent)}).
            </>
          )}
        </div>
      )}
      {report.failed.length > 0 && <IssueTable caption="Rows the service refused" issues={report.failed} />}
    </div>
  );
}

function IssueTable({ caption, issues }: { caption: string; issues: LineIssue[] }) {
  const shown = issues.slice(0, SHOWN_ISSUES);
  return (
    <div className="grants-issues" tabIndex={0} role="region" aria-label={caption}>
      <table>
        <caption>{caption}</caption>
        <ColumnHeads columns={["Line", "Reason"]} />
        <tbody>
          {shown.map((issue, i) => (
            <tr key={`${issue.line}-${i}`}>
              <td>{issue.line}</td>
              <td>{issue.reason}</td>
            </tr>
          ))}
        </tbody>
      </table>
      {issues.length > shown.length && (
        <p>
          And {(issues.length - shown.length).toLocaleString()} more (lines {lineRanges(issues.slice(SHOWN_ISSUES).map((x) => x.line))}).
        </p>
      )}
    </div>
  );
}
