/**
 * The check driven by independent C load generators, when they are installed:
 * `wrk` for REST and `h2load` (nghttp2) for gRPC. The grpc-js generator costs
 * several times the service's own CPU per call, so on a small shared machine
 * it measures itself; these two cost little, so the service's REST and gRPC
 * paths can be compared with each other. One check body each (h2load sends
 * one body), 50 requests in flight.
 */
import { spawn, spawnSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join } from "node:path";

export interface ExternalResult {
  requests: number;
  rps: number;
  errors: number;
  /** wrk reports percentiles; h2load does not (NaN). */
  p50: number;
  p99: number;
}

export function installed(tool: "wrk" | "h2load"): boolean {
  return spawnSync(tool, ["--version"], { stdio: "ignore" }).error === undefined;
}

function run(command: string, args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    child.stdout.on("data", (c: Buffer) => (out += c.toString()));
    child.stderr.on("data", (c: Buffer) => (out += c.toString()));
    child.once("error", reject);
    child.once("exit", (code) => (code === 0 ? resolve(out) : reject(new Error(`${command} exited with ${code}: ${out.slice(-500)}`))));
  });
}

/** wrk's "50%    1.23ms" lines, in milliseconds. */
function wrkPercentile(out: string, p: string): number {
  const m = new RegExp(`^\\s*${p}%\\s+([\\d.]+)(us|ms|s)\\s*$`, "m").exec(out);
  if (m === null) return Number.NaN;
  const scale = { us: 0.001, ms: 1, s: 1000 }[m[2] as "us" | "ms" | "s"];
  return Number(m[1]) * scale;
}

export async function wrkCheck(tmp: string, url: string, key: string, body: unknown, seconds: number, connections: number): Promise<ExternalResult> {
  const script = join(tmp, "check.lua");
  writeFileSync(
    script,
    [
      `wrk.method = "POST"`,
      `wrk.body = ${JSON.stringify(JSON.stringify(body))}`,
      `wrk.headers["Content-Type"] = "application/json"`,
      `wrk.headers["X-API-Key"] = ${JSON.stringify(key)}`,
      "",
    ].join("\n"),
  );
  const out = await run("wrk", ["-t2", `-c${connections}`, `-d${seconds}s`, "--latency", "-s", script, `${url}/api/v1/authorization/check`]);
  const requests = Number(/(\d+) requests in/.exec(out)?.[1] ?? 0);
  const errors = Number(/Non-2xx or 3xx responses: (\d+)/.exec(out)?.[1] ?? 0) + Number(/Socket errors:.*?(\d+) timeout/.exec(out)?.[1] ?? 0);
  return { requests, rps: requests / seconds, errors, p50: wrkPercentile(out, "50"), p99: wrkPercentile(out, "99") };
}

/** h2load with one framed protobuf CheckRequest; `connections` streams over 5 connections. */
export async function h2loadCheck(tmp: string, url: string, key: string, message: Uint8Array, seconds: number, connections: number): Promise<ExternalResult> {
  const file = join(tmp, "check.grpc");
  const framed = Buffer.alloc(5 + message.length);
  framed.writeUInt32BE(message.length, 1);
  framed.set(message, 5);
  writeFileSync(file, framed);
  const clients = 5;
  const out = await run("h2load", [
    `-c${clients}`,
    `-m${Math.max(1, Math.round(connections / clients))}`,
    `-D${seconds}`,
    "-t1",
    "-d",
    file,
    "-H",
    "content-type: application/grpc",
    "-H",
    "te: trailers",
    "-H",
    `x-api-key: ${key}`,
    `${url}/authz.v1.CheckService/Check`,
  ]);
  const requests = Number(/(\d+) succeeded/.exec(out)?.[1] ?? 0);
  const errors = Number(/(\d+) failed/.exec(out)?.[1] ?? 0);
  return { requests, rps: requests / seconds, errors, p50: Number.NaN, p99: Number.NaN };
}
