/**
 * The import's progress on stderr: a bar with the rate and the time left
 * (cli-progress) when stderr is a terminal, else a plain line every few
 * seconds (cli-progress's scheduled output for other streams), so a log file
 * or CI shows the import moving without a screenful of redraws.
 */
import cliProgress from "cli-progress";

export interface Progress {
  /** Bytes of the file done, and rows settled by this run. */
  update(bytes: number, rows: number): void;
  stop(): void;
}

const PLAIN_EVERY_MS = 5_000;

export function importProgress(stream: NodeJS.WriteStream, totalBytes: number, startBytes: number, enabled: boolean): Progress {
  if (!enabled) return { update: () => undefined, stop: () => undefined };
  const tty = stream.isTTY === true;
  const started = performance.now();
  const bar = new cliProgress.SingleBar({
    stream,
    format: tty
      ? "import {bar} {percentage}% | {rows} rows | {rate} rows/s | ETA {eta_formatted}"
      : "import: {percentage}% of the file, {rows} rows, {rate} rows/s, about {eta_formatted} left",
    barsize: 30,
    hideCursor: tty ? true : null,
    noTTYOutput: !tty,
    notTTYSchedule: PLAIN_EVERY_MS,
    etaBuffer: 20,
    fps: 5,
    // Other streams: the scheduled line is already a whole line; no blank one after it.
    clearOnComplete: !tty,
  });
  const payload = (rows: number) => {
    const seconds = (performance.now() - started) / 1000;
    return { rows: rows.toLocaleString("en-US"), rate: seconds > 0 ? Math.round(rows / seconds).toLocaleString("en-US") : "0" };
  };
  // The bar counts bytes (the one total known before reading); rows and rate ride along.
  bar.start(Math.max(totalBytes, 1), Math.min(startBytes, totalBytes), payload(0));
  return {
    update: (bytes, rows) => bar.update(Math.min(bytes, totalBytes), payload(rows)),
    stop: () => bar.stop(),
  };
}
