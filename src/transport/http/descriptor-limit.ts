/**
 * The connection cap must sit below the process's file descriptor limit:
 * a cap of 10,000 on a process allowed 4,096 descriptors does nothing, and
 * the connections an attacker holds open then take the descriptors that
 * /healthz, checks and the database pool need (accept fails, EMFILE). Node
 * raises the soft limit to the hard one at start; this reads what it got.
 */
import { readFileSync } from "node:fs";

/** Descriptors kept back from connections: the database pool, PGlite's files, logs, the listener. */
export const RESERVED_DESCRIPTORS = 256;

/** The soft "Max open files" of /proc/<pid>/limits, or undefined when unlimited or unknown. */
export function parseOpenFilesLimit(limits: string): number | undefined {
  const line = /^Max open files\s+(\S+)/m.exec(limits);
  if (line === null || !/^\d+$/.test(line[1]!)) return undefined;
  return Number(line[1]);
}

/** This process's descriptor limit (Linux); undefined elsewhere. */
export function openFilesLimit(): number | undefined {
  try {
    return parseOpenFilesLimit(readFileSync("/proc/self/limits", "utf8"));
  } catch {
    return undefined;
  }
}

/** The cap to enforce: the configured one, lowered to fit the descriptors the process has. */
export function effectiveConnectionCap(configured: number, limit: number | undefined): number {
  if (limit === undefined) return configured;
  return Math.max(1, Math.min(configured, limit - RESERVED_DESCRIPTORS));
}
