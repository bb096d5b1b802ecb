import { applicationsStore } from "../store/applications-store.js";
import { changesStore } from "../store/changes-store.js";
import type { Db } from "../store/db.js";
import { expiredGrantsStore } from "../store/expired-grants-store.js";

export interface SweepOptions {
  /** Time between the end of one pass and the start of the next. */
  readonly intervalMs: number;
  /** Grants one statement deletes at most: each is its own short transaction. */
  readonly batchSize: number;
  /** A pass that failed (the next one still runs). */
  readonly onError: (error: unknown) => void;
  /** A pass that deleted grants or changes: how many of each, and how long it took. */
  readonly onSwept?: (deleted: number, ms: number, changes: number) => void;
  /** The change feed's retention: changes older than this go in the same pass (undefined: they stay). */
  readonly changesRetentionMs?: number;
}

/** Applications read per statement while a pass walks them. */
const APPS_PER_PAGE = 500;

/**
 * Deletes expired grants in the background. Nothing waits for it: every
 * answer already ignores a grant once the database's clock passes its expiry
 * (relationships-store LIVE_GRANT). It keeps the table from growing with
 * rows that count nowhere, and frees a relation the catalog wants to drop.
 *
 * A pass walks the applications (one statement per application, as every
 * statement on grants names one) and deletes each one's expired grants in
 * batches of `batchSize`, each batch a statement of its own: row locks held
 * for one short statement, so writers of the same grants wait at most that
 * long, and a grant whose expiry a writer pushed forward meanwhile is kept.
 * Every replica may sweep: two passes over the same rows find them gone.
 */
export class ExpirySweep {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private stopped = false;

  constructor(
    private readonly db: Db,
    private readonly options: SweepOptions,
  ) {}

  /** Schedules passes every intervalMs; the timer does not keep the process alive. */
  start(): void {
    if (this.stopped || this.timer !== undefined) return;
    this.schedule();
  }

  /** Stops scheduling and waits for a pass in progress to end its current batch. */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    await this.running;
  }

  /** One pass over every application; returns how many grants it deleted. */
  async sweepOnce(): Promise<number> {
    return (await this.sweepAll()).grants;
  }

  /** One pass: every application's expired grants, then its changes past the retention. */
  private async sweepAll(): Promise<{ grants: number; changes: number }> {
    const deleted = { grants: 0, changes: 0 };
    let after = "";
    for (;;) {
      const rows = await applicationsStore.list(this.db, after, APPS_PER_PAGE);
      for (const { appId } of rows) {
        if (this.stopped) return deleted;
        deleted.grants += await this.sweepApplication(appId);
        deleted.changes += await this.sweepChanges(appId);
      }
      if (rows.length < APPS_PER_PAGE) return deleted;
      after = rows[rows.length - 1]!.appId;
    }
  }

  /**
   * Deletes one application's changes older than the retention, batch after
   * batch (changesStore.sweep: the oldest transactions first, each batch its
   * own statement). A reader whose token had not seen one is told so (409).
   */
  async sweepChanges(appId: string): Promise<number> {
    const retention = this.options.changesRetentionMs;
    if (retention === undefined) return 0;
    return this.inBatches(() => changesStore.sweep(this.db, appId, retention, this.options.batchSize));
  }

  /** Deletes one application's expired grants, batch after batch. */
  async sweepApplication(appId: string): Promise<number> {
    return this.inBatches(() => expiredGrantsStore.sweep(this.db, appId, this.options.batchSize));
  }

  /** Runs `batch` (one statement deleting at most batchSize) until it deletes fewer; returns how many went. */
  private async inBatches(batch: () => Promise<number>): Promise<number> {
    let deleted = 0;
    for (;;) {
      const n = await batch();
      deleted += n;
      if (n < this.options.batchSize || this.stopped) return deleted;
      // Let the event loop read what arrived meanwhile before the next batch:
      // on PGlite, which runs statements on this very thread, the next batch
      // would otherwise be queued (from a microtask) ahead of every request
      // that came in during this one, and a long sweep would hold them all.
      await new Promise((resolve) => setImmediate(resolve));
    }
  }

  private schedule(): void {
    this.timer = setTimeout(() => {
      this.running = this.pass().finally(() => {
        this.running = undefined;
        if (!this.stopped) this.schedule();
      });
    }, this.options.intervalMs);
    this.timer.unref();
  }

  private async pass(): Promise<void> {
    const started = performance.now();
    try {
      const deleted = await this.sweepAll();
      if (deleted.grants + deleted.changes > 0) this.options.onSwept?.(deleted.grants, performance.now() - started, deleted.changes);
    } catch (error) {
      this.options.onError(error);
    }
  }
}
