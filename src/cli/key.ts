/**
 * The API key: from the file --key-file names, else from PORTCULLIS_KEY.
 * Never from a plain argument: a command line is visible to every user of the
 * machine (ps, /proc) and stays in shell history. The key is never printed,
 * not even in an error (only where it came from).
 */
import { readFile } from "node:fs/promises";
import { usageError } from "./errors.js";

/** What an HTTP header value can carry: visible ASCII. A key is pcl_ and base32. */
const HEADER_SAFE = /^[\x21-\x7e]+$/;

export async function resolveKey(keyFile: string | undefined, fromEnv: string | undefined): Promise<string> {
  let key: string;
  let source: string;
  if (keyFile !== undefined) {
    source = `--key-file ${keyFile}`;
    try {
      key = (await readFile(keyFile, "utf8")).trim();
    } catch (error) {
      throw usageError(`${source}: cannot read it (${(error as NodeJS.ErrnoException).code ?? String(error)})`);
    }
  } else if (fromEnv !== undefined && fromEnv !== "") {
    source = "PORTCULLIS_KEY";
    key = fromEnv.trim();
  } else {
    throw usageError("no API key: set PORTCULLIS_KEY, or pass --key-file FILE (a file holding the key)");
  }
  if (key === "") throw usageError(`${source}: the key is empty`);
  if (!HEADER_SAFE.test(key)) throw usageError(`${source}: the key has characters an HTTP header cannot carry (spaces, line breaks or non-ASCII)`);
  return key;
}
