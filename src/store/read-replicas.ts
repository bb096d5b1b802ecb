import { isStopped, type AbortOptions, type Db, type Queryable } from "./db.js";
import { lsnValue, MIXED_INCARNATIONS, replayPosition, type ReplayPosition } from "./lsn.js";
import { REPLAY_POSITION } from "./per-application.js";

/** A hot standby of the primary, as the router sees it. */
export interface Replica {
  /** host:port/database, for logs and /readyz: never the password. */
  readonly name: string;
  readonly db: Pick<Db, "query" | "close">;
}

export interface ReplicaStatus {
  name: string;
  healthy: boolean;
  /** Why it is skipped, while it is. */
  reason?: string;
  /** Reads (coalesced batches of checks) it answered since the service started. */
  answered: number;
  /** Reads it was picked for that the primary answered instead: it lagged beyond the bound, or failed. */
  passedToPrimary: number;
}

export interface ReadReplicasOptions {
  /**
   * The longest a read waits for a replica to replay up to the primary's
   * position; beyond it the primary answers and the replica is skipped
   * until it catches up.
   */
  maxLagMs: number;
  /** How long a statement on a replica may take before the primary answers instead (and the replica is skipped). */
  statementTimeoutMs: number;
  /** How often a skipped replica is tried again. */
  probeIntervalMs: number;
  log: { warn(obj: object, msg: string): void; info(obj: object, msg: string): void };
}

/** What a read on a replica returns beside its value: the replay position its statement read, if it did. */
export interface ReplicaRead<T> {
  value: T;
  /** The replay position and incarnation read by the read's statements (REPLAYED; null on a primary). */
  replayed: string | null;
}

/**
 * Routes reads that must be exact (checks) to hot standbys without ever
 * answering older than a change committed before the read began:
 *
 * 1. The primary's WAL position is read after the read's questions arrived
 *    (pg_current_wal_lsn(): with synchronous_commit on, every acknowledged
 *    commit ends at or before it). One such read is shared by the reads that
 *    asked while none was in flight (see LatestPosition).
 * 2. A replica answers only once it is known to have replayed up to that
 *    position: known from a statement that *finished* before the read's own
 *    statement starts. A position read inside the answering statement would
 *    not do: its snapshot is taken before the function runs, so replay may
 *    have passed the target after the snapshot. Each answering statement
 *    reads the replay position too (`replayed`), so while no writes happen
 *    the next read needs no extra round trip; after writes, a replica is
 *    asked its position (one poll shared by the reads waiting on it).
 *    Positions are known per incarnation of the standby (its postmaster's
 *    start, read with each position): a standby restarted after a crash
 *    reopens once consistent, possibly behind what it had replayed, and an
 *    address may come to reach another standby. So an answer counts only
 *    when its statement ran on the incarnation known to have replayed far
 *    enough; otherwise the primary answers.
 * 3. A replica that has not replayed that far within maxLagMs, or fails, or
 *    takes longer than statementTimeoutMs, is skipped: the primary answers,
 *    and the replica is tried again every probeIntervalMs.
 */
export class ReadReplicas {
  private readonly replicas: ReplicaState[];
  private readonly primaryPosition: LatestPosition;
  private next = 0;

  constructor(
    private readonly primary: Db,
    replicas: readonly Replica[],
    private readonly options: ReadReplicasOptions,
  ) {
    this.replicas = replicas.map((r) => new ReplicaState(r, primary, options));
    this.primaryPosition = new LatestPosition(async () => {
      const { rows } = await primary.query<{ lsn: string }>("SELECT pg_current_wal_lsn()::text AS lsn");
      return rows[0]!.lsn;
    });
  }

  /**
   * Runs `read` on a replica that has replayed everything committed before
   * this call, or on the primary. `read` may run twice (a replica failed
   * mid-way, then the primary): it must only read.
   */
  async read<T>(read: (q: Queryable, onReplica: boolean) => Promise<ReplicaRead<T>>, options?: AbortOptions): Promise<T> {
    const replica = this.pick();
    if (replica === undefined) return (await read(this.primary, false)).value;
    const target = lsnValue(await this.primaryPosition.get());
    const incarnation = await replica.caughtUp(target);
    if (incarnation !== undefined) {
      const answered = await replica.run(read, incarnation, options);
      if (answered !== undefined) return answered.value;
    }
    replica.passedToPrimary++;
    return (await read(this.primary, false)).value;
  }

  status(): ReplicaStatus[] {
    return this.replicas.map((r) => r.status());
  }

  async close(): Promise<void> {
    for (const r of this.replicas) r.stop();
    await Promise.allSettled(this.replicas.map((r) => r.replica.db.close()));
  }

  /** The next healthy replica, round robin. */
  private pick(): ReplicaState | undefined {
    for (let i = 0; i < this.replicas.length; i++) {
      const r = this.replicas[(this.next + i) % this.replicas.length]!;
      if (r.healthy) {
        this.next = (this.next + i + 1) % this.replicas.length;
        return r;
      }
    }
    return undefined;
  }
}

/** Waits between polls of a replica's replay position: short at first, replay usually trails by a millisecond or two. */
const POLL_DELAYS_MS = [0, 1, 2, 4, 8, 16, 32, 64];

class ReplicaState {
  healthy = true;
  private reason: string | undefined;
  private answered = 0;
  passedToPrimary = 0;
  /** The highest replay position read by a statement that finished, of the incarnation read last. */
  private known: ReplayPosition | undefined;
  private readonly position: LatestPosition;
  private probeTimer: NodeJS.Timeout | undefined;
  private stopped = false;

  constructor(
    readonly replica: Replica,
    private readonly primary: Db,
    private readonly options: ReadReplicasOptions,
  ) {
    this.position = new LatestPosition(async () => {
      const { rows } = await this.bounded((limits) =>
        replica.db.query<{ position: string | null }>(`SELECT ${REPLAY_POSITION} AS position`, [], limits),
      );
      const position = rows[0]?.position ?? null;
      if (position === null) throw new NotAStandbyError();
      this.advance(position);
      return position;
    });
  }

  status(): ReplicaStatus {
    const counts = { answered: this.answered, passedToPrimary: this.passedToPrimary };
    const { name } = this.replica;
    return this.healthy ? { name, healthy: true, ...counts } : { name, healthy: false, reason: this.reason!, ...counts };
  }

  /**
   * The incarnation known to have replayed up to `target`, waiting up to
   * maxLagMs; undefined (and the replica marked skipped) when there is none.
   */
  async caughtUp(target: bigint): Promise<string | undefined> {
    if (this.reached(target)) return this.known!.incarnation;
    const giveUpAt = Date.now() + this.options.maxLagMs;
    for (let poll = 0; ; poll++) {
      try {
        await this.position.get();
      } catch (error) {
        this.skip(error instanceof NotAStandbyError ? error.message : "its replay position cannot be read", error);
        return undefined;
      }
      if (this.reached(target)) return this.known!.incarnation;
      const wait = POLL_DELAYS_MS[Math.min(poll + 1, POLL_DELAYS_MS.length - 1)]!;
      if (Date.now() + wait > giveUpAt) {
        this.skip(`it had not replayed the primary's changes within ${this.options.maxLagMs} ms`);
        return undefined;
      }
      await new Promise((resolve) => setTimeout(resolve, wait));
    }
  }

  /**
   * Runs the read here. Undefined when the primary should answer instead:
   * the replica failed (it is then skipped), or the read's statements ran on
   * another incarnation than `incarnation`, the one known to have replayed
   * far enough, so their answer may be older than the read.
   */
  async run<T>(
    read: (q: Queryable, onReplica: boolean) => Promise<ReplicaRead<T>>,
    incarnation: string,
    options: AbortOptions | undefined,
  ): Promise<ReplicaRead<T> | undefined> {
    try {
      const answered = await this.bounded((limits) => read({ query: (sql, params) => this.replica.db.query(sql, params, limits) }, true), options);
      if (answered.replayed == null) {
        this.skip(new NotAStandbyError().message);
        return undefined;
      }
      if (this.advance(answered.replayed).incarnation !== incarnation) return undefined;
      this.answered++;
      return answered;
    } catch (error) {
      if (options !== undefined && isStopped(options)) throw error; // the caller gave up: nobody to answer
      this.skip("a read on it failed", error);
      return undefined;
    }
  }

  /**
   * Runs `work` on this replica for at most statementTimeoutMs: past it, a
   * cancel is sent (through the signal) and the promise rejects at once,
   * whether or not the replica answers the cancel: a replica the network
   * lost would otherwise hold the read until TCP gives up.
   */
  private bounded<T>(work: (limits: AbortOptions) => Promise<T>, caller?: AbortOptions): Promise<T> {
    const timeout = AbortSignal.timeout(this.options.statementTimeoutMs);
    const signal = caller?.signal === undefined ? timeout : AbortSignal.any([timeout, caller.signal]);
    const limits: AbortOptions = caller?.deadline === undefined ? { signal } : { signal, deadline: caller.deadline };
    return new Promise<T>((resolve, reject) => {
      const onAbort = () => reject(signal.reason);
      signal.addEventListener("abort", onAbort, { once: true });
      work(limits).then(resolve, reject).finally(() => signal.removeEventListener("abort", onAbort));
    });
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.probeTimer);
  }

  private reached(target: bigint): boolean {
    return this.known !== undefined && this.known.lsn >= target;
  }

  /**
   * Takes in a position a statement read (the higher one within the known
   * incarnation, or that of another incarnation) and returns it, read.
   */
  private advance(text: string): ReplayPosition {
    const at = replayPosition(text);
    if (at.incarnation === MIXED_INCARNATIONS) return at;
    if (this.known !== undefined && at.incarnation !== this.known.incarnation) {
      this.options.log.info({ replica: this.replica.name }, "read replica restarted or replaced: its positions are read afresh");
    } else if (this.known !== undefined && at.lsn <= this.known.lsn) {
      return at;
    }
    this.known = at;
    return at;
  }

  private skip(reason: string, error?: unknown): void {
    if (!this.healthy) return;
    this.healthy = false;
    this.reason = reason;
    this.options.log.warn({ replica: this.replica.name, reason, err: error }, "read replica skipped: the primary answers its reads");
    this.scheduleProbe();
  }

  private scheduleProbe(): void {
    if (this.stopped) return;
    this.probeTimer = setTimeout(() => void this.probe(), this.options.probeIntervalMs);
    this.probeTimer.unref();
  }

  /** A skipped replica is back once it replays up to the primary's position within maxLagMs. */
  private async probe(): Promise<void> {
    try {
      const { rows } = await this.primary.query<{ lsn: string }>("SELECT pg_current_wal_lsn()::text AS lsn");
      const target = lsnValue(rows[0]!.lsn);
      const giveUpAt = Date.now() + this.options.maxLagMs;
      while (!this.stopped) {
        await this.position.get();
        if (this.reached(target)) {
          this.healthy = true;
          this.reason = undefined;
          this.options.log.info({ replica: this.replica.name }, "read replica caught up: it answers reads again");
          return;
        }
        if (Date.now() >= giveUpAt) break;
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
    } catch (error) {
      this.reason = error instanceof NotAStandbyError ? error.message : "its replay position cannot be read";
    }
    this.scheduleProbe();
  }
}

class NotAStandbyError extends Error {
  constructor() {
    super("it is not a hot standby (pg_last_wal_replay_lsn() is null)");
    this.name = "NotAStandbyError";
  }
}

/**
 * A position read shared by concurrent callers, never older than the call:
 * a caller arriving while a read is in flight waits for the next one, which
 * starts when that one ends and serves everyone who arrived meanwhile. So
 * under load one read serves a whole window of callers, and each of them
 * gets a value read after it asked.
 */
export class LatestPosition {
  private inFlight: Promise<string> | undefined;
  private following: Promise<string> | undefined;

  constructor(private readonly readPosition: () => Promise<string>) {}

  get(): Promise<string> {
    if (this.inFlight === undefined) return this.start();
    this.following ??= this.inFlight.then(
      () => this.startFollowing(),
      () => this.startFollowing(),
    );
    return this.following;
  }

  private startFollowing(): Promise<string> {
    this.following = undefined;
    return this.start();
  }

  private start(): Promise<string> {
    const reading = this.readPosition().finally(() => {
      if (this.inFlight === reading) this.inFlight = undefined;
    });
    this.inFlight = reading;
    return reading;
  }
}
