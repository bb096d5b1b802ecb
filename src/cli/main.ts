/**
 * `portcullis`, the command line's entry point (bin/portcullis.mjs runs the
 * compiled file). It is its own program, so this is where it reads its
 * environment: PORTCULLIS_KEY and PORTCULLIS_URL, nothing else, and nowhere
 * below.
 */
import { run } from "./program.js";

process.setSourceMapsEnabled(true);

const code = await run(process.argv.slice(2), { key: process.env.PORTCULLIS_KEY, url: process.env.PORTCULLIS_URL }, {
  out: process.stdout,
  err: process.stderr,
  stdin: process.stdin,
}).catch((error: unknown) => {
  process.stderr.write(`portcullis: unexpected error: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  return 3;
});
// Exit once stdout has taken everything: idle keep-alive sockets of fetch must not hold the process open.
process.stdout.write("", () => process.exit(code));
