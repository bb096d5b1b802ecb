/**
 * HPACK: the decoder reads what Node's own encoder (nghttp2) writes, request
 * after request on one connection (static and dynamic table, Huffman on every
 * symbol); hand-made blocks cover the errors and table rules; what the encoder
 * writes decodes back.
 */
import http2 from "node:http2";
import { Duplex } from "node:stream";
import { describe, expect, it } from "vitest";
import { HUFFMAN_LENGTHS } from "../src/transport/h2/huffman-lengths.js";
import { HpackDecoder, HpackError, encodeHeaders, type HeaderList } from "../src/transport/h2/hpack.js";

/** The header blocks of the HEADERS frames a Node client writes for these requests, in order. */
async function nghttp2Blocks(requests: Record<string, string>[]): Promise<Buffer[]> {
  let out = Buffer.alloc(0);
  const sink = new Duplex({
    read() {},
    write(chunk: Buffer, _encoding, done) {
      out = Buffer.concat([out, chunk]);
      done();
    },
  });
  const session = http2.connect("http://hpack.test", { createConnection: () => sink });
  session.on("error", () => undefined);
  for (const headers of requests) session.request(headers, { endStream: true }).on("error", () => undefined);
  await new Promise((resolve) => setTimeout(resolve, 20));
  session.destroy();
  const blocks: Buffer[] = [];
  for (let at = 24; at + 9 <= out.length; ) {
    const length = out.readUIntBE(at, 3);
    if (out[at + 3] === 1) blocks.push(out.subarray(at + 9, at + 9 + length));
    at += 9 + length;
  }
  return blocks;
}

const decoder = () => new HpackDecoder({ tableSize: 4096, maxListSize: 1 << 20 });
const regular = (list: HeaderList) => list.filter(([name]) => !name.startsWith(":"));

/** Every byte that may stand in a header value, each between runs of "a" so that nghttp2 Huffman-codes it. */
const everyByte: Record<string, string> = {};
for (let b = 1; b < 256; b++) {
  if (b === 10 || b === 13) continue;
  everyByte[`x-byte-${b}`] = `${"a".repeat(20)}${String.fromCharCode(b)}a`;
}

describe("decoding what nghttp2 encodes", () => {
  it("reads every static-table entry, the dynamic table across requests, and every Huffman-coded symbol", async () => {
    const staticFields: Record<string, string> = {
      "accept-encoding": "gzip, deflate",
      "accept-charset": "utf-8",
      accept: "*/*",
      "cache-control": "no-cache",
      "content-type": "application/grpc",
      "user-agent": "grpc-node-js/1.14.7",
      "x-api-key": "pcl_iqef4svzrah6xbigg2dzjnlvj5quowlpqlba2pcubamnt4tk4zpq",
    };
    const requests = [
      { ":method": "POST", ":path": "/authz.v1.CheckService/Check", ...staticFields },
      { ":method": "POST", ":path": "/authz.v1.CheckService/Check", ...staticFields }, // now from the dynamic table
      { ":method": "GET", ":path": "/", ...everyByte },
      { ":method": "POST", ":path": "/authz.v1.CheckService/BatchCheck", ...staticFields, "x-changed": "yes" },
    ];
    const blocks = await nghttp2Blocks(requests);
    expect(blocks).toHaveLength(requests.length);
    expect(blocks[1]!.length).toBeLessThan(blocks[0]!.length / 4); // the second request is mostly table references
    const d = decoder();
    blocks.forEach((block, i) => {
      const { headers, tooLarge } = d.decode(block);
      expect(tooLarge).toBe(false);
      const sent = requests[i]!;
      expect(Object.fromEntries(headers.filter(([n]) => n === ":method" || n === ":path"))).toEqual({ ":method": sent[":method"], ":path": sent[":path"] });
      expect(Object.fromEntries(regular(headers))).toEqual(Object.fromEntries(Object.entries(sent).filter(([n]) => !n.startsWith(":"))));
    });
  });

  it("the Huffman code lengths form a complete prefix code", () => {
    expect(HUFFMAN_LENGTHS).toHaveLength(257);
    const kraft = HUFFMAN_LENGTHS.reduce((sum, length) => sum + 2 ** -length, 0);
    expect(kraft).toBe(1);
  });
});

/** A block from its octets. */
const block = (...bytes: number[]) => Uint8Array.from(bytes);
const lit = (s: string) => [s.length, ...Buffer.from(s, "latin1")];

describe("hand-made header blocks", () => {
  it("an incrementally indexed field is found in the table by the next block, newest entry first", () => {
    const d = decoder();
    expect(d.decode(block(0x40, ...lit("x-a"), ...lit("1"), 0x40, ...lit("x-b"), ...lit("2"))).headers).toEqual([
      ["x-a", "1"],
      ["x-b", "2"],
    ]);
    // 62 is the newest dynamic entry (x-b), 63 the one before (x-a).
    expect(d.decode(block(0x80 | 62, 0x80 | 63)).headers).toEqual([
      ["x-b", "2"],
      ["x-a", "1"],
    ]);
  });

  it("a table size update evicts the oldest entries; an entry larger than the table empties it", () => {
    const d = new HpackDecoder({ tableSize: 100, maxListSize: 1 << 20 });
    d.decode(block(0x40, ...lit("x-a"), ...lit("1"), 0x40, ...lit("x-b"), ...lit("2"))); // 36 octets each
    expect(d.decode(block(0x80 | 63)).headers).toEqual([["x-a", "1"]]);
    d.decode(block(0x20 | 20)); // can no longer hold either
    expect(() => d.decode(block(0x80 | 62))).toThrow(HpackError);
    const e = new HpackDecoder({ tableSize: 100, maxListSize: 1 << 20 });
    e.decode(block(0x40, ...lit("x-a"), ...lit("1")));
    e.decode(block(0x40, ...lit("x-big"), ...lit("v".repeat(80))));
    expect(() => e.decode(block(0x80 | 62))).toThrow(HpackError);
  });

  it.each([
    ["index 0", block(0x80)],
    ["an index beyond the tables", block(0x80 | 70)],
    ["a size update after a field", block(0x82, 0x20)],
    ["a size update above the limit", block(0x3f, 0xe2, 0x1f)],
    ["a string longer than the block", block(0x00, 0x05, 0x61)],
    ["a block ending inside an integer", block(0xff, 0x80)],
    ["an integer too large", block(0xff, 0xff, 0xff, 0xff, 0xff, 0x7f)],
    ["Huffman padding of zeros", block(0x00, 0x81, 0x00, ...lit("v"))],
    ["Huffman padding longer than 7 bits", block(0x00, ...lit("x"), 0x82, 0x1f, 0xff)],
    ["EOS in a Huffman string", block(0x00, ...lit("x"), 0x84, 0xff, 0xff, 0xff, 0xff)],
  ])("rejects %s", (_label, bytes) => {
    expect(() => decoder().decode(bytes)).toThrow(HpackError);
  });

  it("reports a list over the limit, and still indexes what it carried", () => {
    const d = new HpackDecoder({ tableSize: 4096, maxListSize: 40 });
    const { tooLarge } = d.decode(block(0x40, ...lit("x-a"), ...lit("1"), 0x40, ...lit("x-b"), ...lit("2")));
    expect(tooLarge).toBe(true);
    expect(d.decode(block(0x80 | 63)).headers).toEqual([["x-a", "1"]]);
  });
});

describe("encoding", () => {
  it("decodes back to the same fields, long values and non-ASCII octets included", () => {
    const fields: [string, string][] = [
      [":status", "200"],
      [":status", "404"],
      ["content-type", "application/grpc+proto"],
      ["grpc-status", "3"],
      ["grpc-message", "x".repeat(300)],
      ["x-latin1", "caf\u00e9"],
      ["set-cookie", "a=1"],
    ];
    expect(decoder().decode(encodeHeaders(fields)).headers).toEqual(fields);
    expect(encodeHeaders([[":status", "200"]])).toEqual(Buffer.from([0x88]));
  });
});
