/**
 * The build's template of the embedded database: a migrated, empty PGlite
 * database dumped as a gzipped tarball (`writeTemplate` in embedded.ts, run
 * by scripts/build.mjs) beside the compiled modules, in
 * `dist/src/embedded-template.tgz`. A PGlite started from it skips initdb,
 * which takes seconds: the command line's in-memory instance does, and so
 * does a new data folder of the service (app.ts hands the file to
 * PgliteDb.open). Run from the sources there is no such file, and both run
 * initdb.
 */
import { readFile } from "node:fs/promises";
import { promisify } from "node:util";
import { gunzip } from "node:zlib";

/** `embedded-template.tgz` in the folder of the compiled `src/` modules (this module is in `src/store/`). */
export const TEMPLATE_FILE = new URL("../embedded-template.tgz", import.meta.url);

/**
 * The template in `file` as PGlite's `loadDataDir` takes it: the tar,
 * unzipped here. Given the gzipped bytes, PGlite unzips them itself, and a
 * truncated file's error then also escapes as an unhandled rejection, which
 * ends the process; here it rejects this promise alone.
 */
export async function readTemplate(file: string | URL): Promise<Blob> {
  return new Blob([await promisify(gunzip)(await readFile(file))]);
}
