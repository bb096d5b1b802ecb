/** The connection cap fitted under the process's descriptor limit. */
import { describe, expect, it } from "vitest";
import { effectiveConnectionCap, openFilesLimit, parseOpenFilesLimit, RESERVED_DESCRIPTORS } from "../src/transport/http/descriptor-limit.js";

const limits = (soft: string, hard: string) =>
  [
    "Limit                     Soft Limit           Hard Limit           Units     ",
    "Max processes             63711                63711                processes ",
    `Max open files            ${soft.padEnd(20)} ${hard.padEnd(20)} files     `,
    "Max locked memory         8388608              8388608              bytes     ",
  ].join("\n");

describe("descriptor limit", () => {
  it.each([
    [limits("1024", "524288"), 1024],
    [limits("20000", "20000"), 20_000],
    [limits("unlimited", "unlimited"), undefined],
    ["", undefined],
    ["Max open files   lots", undefined],
  ])("reads the soft limit of %j", (text, expected) => {
    expect(parseOpenFilesLimit(text)).toBe(expected);
  });

  it.each([
    [10_000, undefined, 10_000],
    [10_000, 1_000_000, 10_000],
    [10_000, 4_096, 4_096 - RESERVED_DESCRIPTORS],
    [100, 1_024, 100],
    [10_000, 100, 1],
  ])("cap %d under a limit of %s is %d", (configured, limit, expected) => {
    expect(effectiveConnectionCap(configured, limit)).toBe(expected);
  });

  it.runIf(process.platform === "linux")("reads this process's limit on Linux", () => {
    expect(openFilesLimit()).toBeGreaterThan(0);
  });
});
