/**
 * A small file replaced atomically: the text goes to a temporary file in the
 * same folder (a rename does not cross file systems), which is flushed to
 * disk before it is renamed over the old one, and the folder is flushed
 * after. A kill or a power cut at any moment leaves the previous text or the
 * new one, never half a file, and a rename that was done stays done.
 */
import { open, rename, rm } from "node:fs/promises";
import { basename, dirname, join } from "node:path";

export async function writeFileAtomically(file: string, text: string): Promise<void> {
  const temp = join(dirname(file), `.${basename(file)}.${process.pid}.tmp`);
  const handle = await open(temp, "w", 0o600);
  try {
    await handle.writeFile(text);
    await handle.sync();
  } catch (error) {
    await handle.close();
    await rm(temp, { force: true });
    throw error;
  }
  await handle.close();
  await rename(temp, file);
  await syncFolder(dirname(file));
}

/** The rename is an entry of the folder: without this a power cut can undo it, leaving a position many writes old. */
async function syncFolder(folder: string): Promise<void> {
  let handle;
  try {
    handle = await open(folder, "r");
    await handle.sync();
  } catch {
    // Not every platform opens or flushes a folder (Windows does neither): the rename is then as durable as the platform makes it.
  } finally {
    await handle?.close();
  }
}
