/**
 * The bench's lines on stderr. A progress line is redrawn in place on a
 * terminal only; into a file or a pipe (CI logs, `| tee`) go the finished
 * lines, with no escape codes.
 */
const TTY = process.stderr.isTTY === true;

export const progress = (text: string) => {
  if (TTY) process.stderr.write(`\r\x1b[K${text}`);
};

export const say = (text: string) => process.stderr.write(TTY ? `\r\x1b[K${text}\n` : `${text}\n`);

/** CPU µs and latencies in ms as the tables print them (blank when not measured). */
export const micros = (us: number | undefined) => (us === undefined || Number.isNaN(us) ? "" : us.toFixed(1));
export const ms = (value: number) => (Number.isNaN(value) ? "" : value.toFixed(2));
