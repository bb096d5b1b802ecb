/**
 * Derives HPACK's Huffman code (RFC 7541, Appendix B) from Node's own HPACK
 * encoder (nghttp2) and writes src/transport/h2/huffman-lengths.ts.
 *
 * The code is canonical, so the length of each symbol's code is all a decoder
 * needs. For each byte X, a Node HTTP/2 client sends a header whose value is
 * "a" x 20, X, "a"; nghttp2 Huffman-codes a value whenever that is shorter,
 * which this one always is. The script captures the HEADERS frame, finds the
 * value's bits, strips the known "a" codes and the padding (all ones), and
 * what is left is X's code. NUL, CR and LF cannot be sent, and EOS (256) is
 * never sent (it is the 30-bit all-ones code): their lengths are those for
 * which the canonical code reproduces every code observed.
 *
 *   node scripts/derive-huffman.mjs
 */
import http2 from "node:http2";
import { Duplex } from "node:stream";
import { writeFileSync } from "node:fs";

/** The bytes of the value of the last header field of the first HEADERS frame a client writes. */
async function capture(value) {
  let out = Buffer.alloc(0);
  const sink = new Duplex({
    read() {},
    write(chunk, _enc, done) {
      out = Buffer.concat([out, chunk]);
      done();
    },
  });
  const session = http2.connect("http://probe", { createConnection: () => sink });
  session.on("error", () => {});
  const req = session.request({ ":method": "GET", ":path": "/", "x-probe": value }, { endStream: true });
  req.on("error", () => {});
  await new Promise((r) => setTimeout(r, 5));
  session.destroy();
  let at = 24; // the connection preface
  for (;;) {
    const len = out.readUIntBE(at, 3);
    const type = out[at + 3];
    if (type === 1) return lastValue(out.subarray(at + 9, at + 9 + len));
    at += 9 + len;
  }
}

function int(buf, at, prefix) {
  const max = (1 << prefix) - 1;
  let v = buf[at] & max;
  at++;
  if (v < max) return [v, at];
  let m = 0;
  for (;;) {
    const b = buf[at++];
    v += (b & 127) * 2 ** m;
    m += 7;
    if ((b & 128) === 0) return [v, at];
  }
}

function lastValue(block) {
  let at = 0;
  let last;
  const str = () => {
    const huff = (block[at] & 0x80) !== 0;
    const [len, next] = int(block, at, 7);
    at = next + len;
    return { huff, bytes: block.subarray(next, next + len) };
  };
  while (at < block.length) {
    const b = block[at];
    if (b & 0x80) [, at] = int(block, at, 7);
    else if ((b & 0xe0) === 0x20) [, at] = int(block, at, 5);
    else {
      const [index, next] = int(block, at, (b & 0xc0) === 0x40 ? 6 : 4);
      at = next;
      if (index === 0) str();
      last = str();
    }
  }
  return last;
}

const bits = (bytes) => [...bytes].map((b) => b.toString(2).padStart(8, "0")).join("");

const aRun = await capture("a".repeat(40));
if (!aRun.huff) throw new Error("nghttp2 did not Huffman-code the probe");
const aBits = bits(aRun.bytes);
const aLen = Math.floor(aBits.length / 40);
const aCode = aBits.slice(0, aLen);

// NUL, CR and LF cannot go in a header value, so they cannot be probed;
// their lengths are the only ones for which the canonical code of all 257
// symbols reproduces every code observed.
const UNPROBED = [0, 10, 13];
const observed = new Map();
for (let x = 0; x < 256; x++) {
  if (UNPROBED.includes(x)) continue;
  const v = await capture(Buffer.from([...Buffer.from("a".repeat(20)), x, 0x61]).toString("latin1"));
  if (!v.huff) throw new Error(`byte ${x}: not Huffman-coded`);
  const rest = bits(v.bytes).slice(20 * aLen);
  const fits = [];
  for (let l = 5; l <= 30; l++) {
    const tail = rest.slice(l + aLen);
    if (rest.slice(l, l + aLen) === aCode && tail.length < 8 && /^1*$/.test(tail)) fits.push(l);
  }
  if (fits.length !== 1) throw new Error(`byte ${x}: ${fits.length} possible code lengths`);
  observed.set(x, rest.slice(0, fits[0]));
}
observed.set(256, "1".repeat(30)); // EOS

/** The canonical code for the given lengths, or undefined if the lengths cannot form a prefix code. */
function canonical(lengths) {
  const order = [...lengths.keys()].sort((p, q) => lengths[p] - lengths[q] || p - q);
  const codes = [];
  let code = 0;
  let prev = lengths[order[0]];
  for (const [i, sym] of order.entries()) {
    if (i > 0) code = (code + 1) * 2 ** (lengths[sym] - prev);
    prev = lengths[sym];
    if (code >= 2 ** lengths[sym]) return undefined;
    codes[sym] = code.toString(2).padStart(lengths[sym], "0");
  }
  return codes;
}

const base = Array.from({ length: 257 }, (_, s) => observed.get(s)?.length ?? 0);
const solutions = [];
for (let l0 = 5; l0 <= 30; l0++)
  for (let l1 = 5; l1 <= 30; l1++)
    for (let l2 = 5; l2 <= 30; l2++) {
      const lengths = base.slice();
      [lengths[0], lengths[10], lengths[13]] = [l0, l1, l2];
      const codes = canonical(lengths);
      if (codes !== undefined && [...observed].every(([s, c]) => codes[s] === c)) solutions.push(lengths);
    }
// The candidates differ only in which of NUL, LF and CR takes the one free
// 13-bit code (the other two take the 30-bit codes before byte 22's): the
// observed codes cannot tell them apart, and RFC 7541 gives it to NUL. A
// decoded NUL, LF or CR makes the header field invalid anyway.
const lengths = solutions.find((l) => l[0] === 13 && l[10] === 30 && l[13] === 30);
if (solutions.length !== 3 || lengths === undefined) throw new Error(`unexpected candidates: ${solutions.map((l) => [l[0], l[10], l[13]]).join(" | ")}`);

const rows = [];
for (let i = 0; i < lengths.length; i += 32) rows.push(`  ${lengths.slice(i, i + 32).join(", ")},`);
writeFileSync(
  new URL("../src/transport/h2/huffman-lengths.ts", import.meta.url),
  `/**
 * The length in bits of each symbol's code in HPACK's Huffman code (RFC 7541,
 * Appendix B): symbols 0-255 are bytes, 256 is EOS. The code is canonical, so
 * these lengths define it. Generated by scripts/derive-huffman.mjs, which
 * derives them from Node's own HPACK encoder; do not edit by hand.
 */
export const HUFFMAN_LENGTHS: readonly number[] = [
${rows.join("\n")}
];
`,
);
console.log(`derived ${lengths.length} code lengths; 'a' is ${aCode}`);
