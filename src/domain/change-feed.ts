/**
 * The change feed (API.md, "Change feed"; docs/change-feed.md): an
 * application's changes in commit order from any token, as pages (ListChanges,
 * with a wait for the next) and as a stream (Watch).
 *
 * The exactness lives in the storage (store/changes-store.ts: a number per
 * commit, taken under a lock held to the commit); here are the tokens, the wait, the stream's bounds and
 * the changes' shapes. Reads are shared and take a place only while their
 * statements run (feed-reads.ts); waiting reads and streams are admitted
 * and bounded per key and per application, and end with their key
 * (feed-readers.ts).
 */
import type { Db } from "../store/db.js";
import { fromStored } from "../store/all-users.js";
import { changesStore, type ChangeKind, type ChangePosition, type StoredChange } from "../store/changes-store.js";
import type { RelationshipRow, Subject } from "../store/relationships-store.js";
import type { AssignmentRow } from "../store/roles-store.js";
import { actorNames, type AuditEventView } from "./audit-log.js";
import type { ChangeSignals } from "./change-signals.js";
import { decodeChangeToken, encodeChangeToken } from "./change-tokens.js";
import { failedPrecondition, invalidArgument, unauthenticated } from "./errors.js";
import type { FeedCaller, FeedReader, FeedReaders } from "./feed-readers.js";
import { FeedReads } from "./feed-reads.js";
import { REVOKED_KEY } from "./keys.js";
import type { Places } from "./places.js";
import { pageSize } from "./formats.js";
import type { JsonObject } from "../lib/json.js";

/** The longest a read may wait for a change (API.md: waitMs up to 30,000). */
export const WAIT_MS_MAX = 30_000;

/** Changes a Watch reads per statement: what one stream holds in memory at most, beside what the transport buffers. */
export const WATCH_PAGE = 100;

export interface ChangeView {
  kind: ChangeKind;
  token: string;
  changedAt: Date;
  grant?: RelationshipRow;
  assignment?: AssignmentRow;
  modelEvent?: AuditEventView;
}

export interface ChangePage {
  changes: ChangeView[];
  nextToken: string;
}

/**
 * The change feed's waits, inside the transports' limits: a read waits at
 * most 0.9 of the request timeout (HTTP/2 resets a stream open longer), and
 * a Watch with nothing to send ends after 0.8 of the idle timeout (HTTP/1.1
 * closes a socket silent that long).
 */
export function feedBounds(requestTimeoutMs: number, idleTimeoutMs: number): ChangeFeedOptions {
  return { maxWaitMs: Math.min(WAIT_MS_MAX, Math.floor(requestTimeoutMs * 0.9)), maxSilenceMs: Math.floor(idleTimeoutMs * 0.8) };
}

export interface ChangeFeedOptions {
  /** How long a waiting read may wait at most, below the transport's own limits (HTTP/2's request timeout). */
  readonly maxWaitMs: number;
  /** A Watch that has sent nothing this long ends (OK): no idle stream outlives the transports' idle limits. */
  readonly maxSilenceMs: number;
}

const reordered = () =>
  failedPrecondition(
    "after: this token was given before the change feed took its commit order, and the changes it had read are not the first ones of that order, so no place in it resumes exactly. Start again from a fresh read (without after) and rebuild what you keep from it",
    [{ field: "after", reason: "given before the commit order; cannot be placed in it" }],
  );

const expired = () =>
  failedPrecondition(
    "after: this token is older than the change feed's retention (CHANGES_RETENTION): changes it had not seen were deleted. Start again from a fresh read (without after) and rebuild what you keep from it",
    [{ field: "after", reason: "older than the retention" }],
  );

/** Whether the call's client went away (read anew each time: it changes while a read waits). */
const gone = (signal: AbortSignal | undefined) => signal?.aborted === true;

/** The position a request's `after` names: from the oldest change kept when empty. */
function positionOf(after: string): ChangePosition {
  return after === "" ? { seq: undefined } : decodeChangeToken(after, "after");
}

/** A read's page: its changes as the API gives them, where the next read starts, and whether its position was refused. */
interface ReadPage {
  changes: ChangeView[];
  next: ChangePosition;
  refused: "retention" | "order" | undefined;
}

export class ChangeFeed {
  private readonly reads: FeedReads<ReadPage>;

  constructor(
    private readonly db: Db,
    private readonly signals: ChangeSignals,
    private readonly options: ChangeFeedOptions,
    private readonly readers: FeedReaders,
    places: Places,
  ) {
    this.reads = new FeedReads(places, (appId, from, limit) => this.load(appId, from, limit));
  }

  /**
   * A page of changes after `after`; when there is none and `waitMs` > 0,
   * waits up to that long for one. The next token is given even for an
   * empty page: it has seen what committed before the read.
   */
  async page(caller: FeedCaller, after: string, size: number | undefined, waitMs: number | undefined, signal?: AbortSignal): Promise<ChangePage> {
    const limit = pageSize(size);
    const wait = waitMs ?? 0;
    if (!Number.isInteger(wait) || wait < 0 || wait > WAIT_MS_MAX) {
      throw invalidArgument(`waitMs: must be between 0 and ${WAIT_MS_MAX}, got ${wait}`, [{ field: "waitMs", reason: `0 to ${WAIT_MS_MAX} milliseconds` }]);
    }
    let position = positionOf(after);
    const appId = caller.appId;
    const deadline = Date.now() + Math.min(wait, this.options.maxWaitMs);
    // Admitted the first time it waits: a read that answers at once is no waiting reader.
    let reader: FeedReader | undefined;
    try {
      for (;;) {
        const since = this.signals.generation(appId);
        const read = await this.read(appId, position, limit, reader?.signal ?? signal);
        position = read.next;
        const left = deadline - Date.now();
        if (read.changes.length > 0 || left <= 0 || signal?.aborted === true || position.seq === undefined || this.signals.isClosed) {
          return { changes: read.changes, nextToken: encodeChangeToken(position) };
        }
        reader ??= this.readers.admit("wait", caller, signal);
        await this.signals.wait(appId, position.seq, left, reader.signal, since);
        if (reader.revoked) throw unauthenticated(REVOKED_KEY);
        // The client went away: nobody reads an answer.
        if (gone(signal)) return { changes: [], nextToken: encodeChangeToken(position) };
      }
    } catch (error) {
      if (reader?.revoked === true) throw unauthenticated(REVOKED_KEY);
      throw error;
    } finally {
      reader?.release();
    }
  }

  /**
   * Every change after `after`, as it commits, until `signal` aborts or
   * nothing was sent for maxSilenceMs. The consumer pulls: a stream holds
   * one page of WATCH_PAGE at most, whatever its reader's pace.
   */
  async *watch(caller: FeedCaller, after: string, signal?: AbortSignal): AsyncGenerator<ChangeView> {
    let position = positionOf(after);
    const appId = caller.appId;
    const reader = this.readers.admit("stream", caller, signal);
    try {
      let lastSent = Date.now();
      while (!reader.signal.aborted) {
        const since = this.signals.generation(appId);
        const read = await this.read(appId, position, WATCH_PAGE, reader.signal);
        for (const change of read.changes) {
          if (reader.signal.aborted) break;
          yield change;
          lastSent = Date.now();
        }
        position = read.next;
        if (read.changes.length === WATCH_PAGE) continue;
        const silence = lastSent + this.options.maxSilenceMs - Date.now();
        if (silence <= 0 || this.signals.isClosed) return;
        // A position always has a number after a read of an application that exists.
        if (position.seq === undefined) return;
        await this.signals.wait(appId, position.seq, silence, reader.signal, since);
      }
      if (reader.revoked) throw unauthenticated(REVOKED_KEY);
    } catch (error) {
      if (reader.revoked) throw unauthenticated(REVOKED_KEY);
      // The client went away during a read: the stream just ends.
      if (signal?.aborted === true) return;
      throw error;
    } finally {
      reader.release();
    }
  }

  private async read(appId: string, position: ChangePosition, limit: number, signal: AbortSignal | undefined): Promise<ReadPage> {
    const read = await this.reads.read(appId, position, limit, signal);
    if (read.refused === "retention") throw expired();
    if (read.refused === "order") throw reordered();
    return read;
  }

  /** One read's statements: the changes after `from`, and the names of the model events' actors. */
  private async load(appId: string, from: ChangePosition, limit: number): Promise<ReadPage> {
    // The primary: a standby answers as of what it has replayed, behind the tokens the primary gave (docs/change-feed.md).
    const page = await changesStore.read(this.db, appId, from, limit);
    return { changes: await this.views(page.changes), next: page.next, refused: page.refused };
  }

  /** The stored changes as the API gives them, the model events with their actors' names. */
  private async views(changes: StoredChange[]): Promise<ChangeView[]> {
    const nameOf = await actorNames(
      this.db,
      changes.filter((c) => c.kind === "model_changed").map((c) => (c.body as ModelEventBody).actorKeyId),
    );
    return changes.map((c) => {
      const view: ChangeView = { kind: c.kind, token: encodeChangeToken(c.after), changedAt: c.createdAt };
      if (c.kind === "grant_written" || c.kind === "grant_deleted") view.grant = grantOf(c.body as GrantBody);
      else if (c.kind === "assignment_added" || c.kind === "assignment_removed") view.assignment = assignmentOf(c.body as AssignmentBody);
      else view.modelEvent = modelEventOf(c.body as ModelEventBody, nameOf);
      return view;
    });
  }
}

/** The bodies as store/changes-store.ts's CHANGE_BODY and audit-store's MODEL_EVENT_BODY build them (timestamps as JSON text). */
interface GrantBody {
  /** The stored user_id: "" for an allUsers grant (store/all-users.ts). */
  userId?: string;
  resource: string;
  resourceId: string;
  relation: string;
  subject?: Subject;
  createdAt: string;
  expiresAt: string | null;
  /** Absent from changes recorded before migration 013. */
  condition?: string | null;
}

interface AssignmentBody {
  roleId: string;
  userId: string;
  createdAt: string;
  /** Absent from changes recorded before migration 013. */
  condition?: string | null;
}

interface ModelEventBody {
  eventId: string;
  type: string;
  occurredAt: string;
  actorKeyId: string;
  targetType: string;
  targetId: string;
  data: JsonObject;
}

function grantOf(b: GrantBody): RelationshipRow {
  const row: RelationshipRow = {
    userId: b.userId ?? "",
    resource: b.resource,
    resourceId: b.resourceId,
    relation: b.relation,
    createdAt: new Date(b.createdAt),
    expiresAt: b.expiresAt === null ? null : new Date(b.expiresAt),
    condition: b.condition ?? null,
  };
  if (b.subject !== undefined) row.subject = b.subject;
  // An allUsers grant's body says userId "" (its stored user_id) and no subject.
  return fromStored(row);
}

const assignmentOf = (b: AssignmentBody): AssignmentRow => ({ roleId: b.roleId, userId: b.userId, createdAt: new Date(b.createdAt), condition: b.condition ?? null });

function modelEventOf(b: ModelEventBody, nameOf: (keyId: string) => string): AuditEventView {
  return {
    seq: 0,
    eventId: b.eventId,
    type: b.type,
    occurredAt: new Date(b.occurredAt),
    actorKeyId: b.actorKeyId,
    actorKeyName: nameOf(b.actorKeyId),
    targetType: b.targetType,
    targetId: b.targetId,
    data: b.data,
  };
}
