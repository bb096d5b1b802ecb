/**
 * One RPC (the check) over every protocol the port speaks, with the
 * request's headers chosen and the answer's outcome and x-request-id read
 * back: REST (the fast path, and Fastify's route for a chunked body),
 * Connect, gRPC (HTTP/2) and gRPC-Web, each on plain Node clients so that
 * nothing hides a header. For the metrics, tracing and request-id tests.
 */
import { create, toBinary } from "@bufbuild/protobuf";
import http from "node:http";
import http2 from "node:http2";
import { CheckRequestSchema } from "../../gen/authz/v1/check_pb.js";

export type Protocol = "rest" | "rest-fastify" | "connect" | "grpc" | "grpc-web";
export const PROTOCOLS: Protocol[] = ["rest", "rest-fastify", "connect", "grpc", "grpc-web"];

/** The protocol a request log (and the metrics) name it by. */
export const recordedAs = (p: Protocol): string => (p === "rest-fastify" ? "rest" : p);

export interface CallAnswer {
  /** The HTTP status for REST and Connect; the gRPC status code for gRPC and gRPC-Web. */
  status: number;
  /** The answer's x-request-id header. */
  requestId: string | undefined;
  /** The JSON body (REST, Connect), when there is one. */
  body?: unknown;
}

export interface Question {
  userId: string;
  resource: string;
  resourceId: string;
  action: string;
}

const CHECK_PATH = "/authz.v1.CheckService/Check";

function envelope(message: Uint8Array): Buffer {
  const out = Buffer.alloc(5 + message.length);
  out.writeUInt32BE(message.length, 1);
  out.set(message, 5);
  return out;
}

/** A caller of the check on every protocol; `close` ends its HTTP/2 connection. */
export function checkCaller(url: string) {
  let session: http2.ClientHttp2Session | undefined;
  const h2 = () => {
    if (session === undefined || session.closed || session.destroyed) {
      session = http2.connect(url);
      session.on("error", () => undefined);
    }
    return session;
  };

  function rest(question: Question, headers: Record<string, string>, chunked: boolean): Promise<CallAnswer> {
    const body = JSON.stringify(question);
    return new Promise((resolve, reject) => {
      const all = { "content-type": "application/json", ...headers, ...(chunked ? {} : { "content-length": String(Buffer.byteLength(body)) }) };
      const req = http.request(`${url}/api/v1/authorization/check`, { method: "POST", headers: all, agent: false }, (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () =>
          resolve({ status: res.statusCode!, requestId: res.headers["x-request-id"] as string | undefined, body: JSON.parse(Buffer.concat(chunks).toString("utf8")) }),
        );
      });
      req.on("error", reject);
      if (chunked) {
        req.write(body.slice(0, 5));
        req.end(body.slice(5));
      } else req.end(body);
    });
  }

  async function connect(question: Question, headers: Record<string, string>): Promise<CallAnswer> {
    const res = await fetch(url + CHECK_PATH, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(question) });
    return { status: res.status, requestId: res.headers.get("x-request-id") ?? undefined, body: await res.json() };
  }

  async function grpcWeb(question: Question, headers: Record<string, string>): Promise<CallAnswer> {
    const res = await fetch(url + CHECK_PATH, {
      method: "POST",
      headers: { "content-type": "application/grpc-web+proto", "x-grpc-web": "1", ...headers },
      body: envelope(toBinary(CheckRequestSchema, create(CheckRequestSchema, question))),
    });
    const bytes = Buffer.from(await res.arrayBuffer());
    let status = res.headers.get("grpc-status");
    // The trailer frame (flag 0x80) holds the status when the headers do not.
    for (let at = 0; at + 5 <= bytes.length; ) {
      const length = bytes.readUInt32BE(at + 1);
      if (bytes[at]! & 0x80) status = /grpc-status:\s*(\d+)/i.exec(bytes.subarray(at + 5, at + 5 + length).toString("latin1"))?.[1] ?? status;
      at += 5 + length;
    }
    return { status: Number(status), requestId: res.headers.get("x-request-id") ?? undefined };
  }

  function grpc(question: Question, headers: Record<string, string>): Promise<CallAnswer> {
    return new Promise((resolve, reject) => {
      const stream = h2().request({ ":method": "POST", ":path": CHECK_PATH, "content-type": "application/grpc", te: "trailers", ...headers });
      let requestId: string | undefined;
      let status: string | undefined;
      stream.on("response", (h) => {
        requestId = h["x-request-id"] as string | undefined;
        status = (h["grpc-status"] as string | undefined) ?? status;
      });
      stream.on("trailers", (h) => (status = h["grpc-status"] as string | undefined));
      stream.on("end", () => resolve({ status: Number(status), requestId }));
      stream.on("error", reject);
      stream.resume();
      stream.end(envelope(toBinary(CheckRequestSchema, create(CheckRequestSchema, question))));
    });
  }

  return {
    check(protocol: Protocol, question: Question, headers: Record<string, string> = {}): Promise<CallAnswer> {
      switch (protocol) {
        case "rest":
          return rest(question, headers, false);
        case "rest-fastify":
          return rest(question, headers, true);
        case "connect":
          return connect(question, headers);
        case "grpc-web":
          return grpcWeb(question, headers);
        case "grpc":
          return grpc(question, headers);
      }
    },
    close(): void {
      session?.close();
    },
  };
}
export type CheckCaller = ReturnType<typeof checkCaller>;
