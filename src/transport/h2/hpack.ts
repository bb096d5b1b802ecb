/**
 * HPACK (RFC 7541) for the unary-gRPC HTTP/2 server: a full decoder (static
 * and dynamic tables, table size updates, Huffman-coded strings) and a
 * deliberately small encoder. The encoder never indexes and never
 * Huffman-codes, so it keeps no state and the peer's table size does not
 * matter to it; the answers it writes are a few short fields.
 *
 * Strings are read and written as latin1, one character per octet, as Node's
 * own HTTP/2 does.
 */
import { HUFFMAN_LENGTHS } from "./huffman-lengths.js";

/** A header block that cannot be decoded: the connection must end with COMPRESSION_ERROR. */
export class HpackError extends Error {}

/** RFC 7541 Appendix A. */
const STATIC: readonly (readonly [string, string])[] = [
  [":authority", ""],
  [":method", "GET"],
  [":method", "POST"],
  [":path", "/"],
  [":path", "/index.html"],
  [":scheme", "http"],
  [":scheme", "https"],
  [":status", "200"],
  [":status", "204"],
  [":status", "206"],
  [":status", "304"],
  [":status", "400"],
  [":status", "404"],
  [":status", "500"],
  ["accept-charset", ""],
  ["accept-encoding", "gzip, deflate"],
  ["accept-language", ""],
  ["accept-ranges", ""],
  ["accept", ""],
  ["access-control-allow-origin", ""],
  ["age", ""],
  ["allow", ""],
  ["authorization", ""],
  ["cache-control", ""],
  ["content-disposition", ""],
  ["content-encoding", ""],
  ["content-language", ""],
  ["content-length", ""],
  ["content-location", ""],
  ["content-range", ""],
  ["content-type", ""],
  ["cookie", ""],
  ["date", ""],
  ["etag", ""],
  ["expect", ""],
  ["expires", ""],
  ["from", ""],
  ["host", ""],
  ["if-match", ""],
  ["if-modified-since", ""],
  ["if-none-match", ""],
  ["if-range", ""],
  ["if-unmodified-since", ""],
  ["last-modified", ""],
  ["link", ""],
  ["location", ""],
  ["max-forwards", ""],
  ["proxy-authenticate", ""],
  ["proxy-authorization", ""],
  ["range", ""],
  ["referer", ""],
  ["refresh", ""],
  ["retry-after", ""],
  ["server", ""],
  ["set-cookie", ""],
  ["strict-transport-security", ""],
  ["transfer-encoding", ""],
  ["user-agent", ""],
  ["vary", ""],
  ["via", ""],
  ["www-authenticate", ""],
];

/** Static table index of each name (its first entry), for the encoder. */
const STATIC_NAME = new Map<string, number>();
STATIC.forEach(([name], i) => {
  if (!STATIC_NAME.has(name)) STATIC_NAME.set(name, i + 1);
});

// ------------------------------------------------------------------ Huffman

/**
 * Canonical decoding tables: for each code length, the first code of that
 * length, how many codes have it, and where its symbols start in SYMBOLS
 * (all symbols ordered by code length, then value).
 */
const SYMBOLS: number[] = [...HUFFMAN_LENGTHS.keys()].sort((a, b) => HUFFMAN_LENGTHS[a]! - HUFFMAN_LENGTHS[b]! || a - b);
const FIRST_CODE = new Array<number>(31).fill(0);
const COUNT = new Array<number>(31).fill(0);
const FIRST_INDEX = new Array<number>(31).fill(0);
{
  for (const length of HUFFMAN_LENGTHS) COUNT[length]!++;
  let code = 0;
  let index = 0;
  for (let length = 1; length <= 30; length++) {
    FIRST_CODE[length] = code;
    FIRST_INDEX[length] = index;
    code = (code + COUNT[length]!) * 2;
    index += COUNT[length]!;
  }
}
const EOS = 256;

function huffmanDecode(data: Uint8Array): string {
  let out = "";
  let code = 0;
  let length = 0;
  for (let i = 0; i < data.length; i++) {
    const byte = data[i]!;
    for (let bit = 7; bit >= 0; bit--) {
      code = code * 2 + ((byte >> bit) & 1);
      length++;
      const offset = code - FIRST_CODE[length]!;
      if (offset >= 0 && offset < COUNT[length]!) {
        const symbol = SYMBOLS[FIRST_INDEX[length]! + offset]!;
        if (symbol === EOS) throw new HpackError("a Huffman-coded string contains EOS");
        out += String.fromCharCode(symbol);
        code = 0;
        length = 0;
      } else if (length >= 30) {
        throw new HpackError("invalid Huffman code");
      }
    }
  }
  // Padding is the shortest prefix of EOS (all ones) that fills the last octet.
  if (length > 7 || code !== 2 ** length - 1) throw new HpackError("invalid Huffman padding");
  return out;
}

// ------------------------------------------------------------------ decoder

interface Entry {
  name: string;
  value: string;
  size: number;
}

export interface DecodeLimits {
  /** Largest dynamic table the peer may ask for (our SETTINGS_HEADER_TABLE_SIZE). */
  tableSize: number;
  /** Largest decoded header list (names + values + 32 per field), as SETTINGS_MAX_HEADER_LIST_SIZE. */
  maxListSize: number;
}

/** A decoded header list, in order; names as sent (lowercase is checked by the caller). */
export type HeaderList = [name: string, value: string][];

export class HpackDecoder {
  /** Newest first. */
  private readonly table: Entry[] = [];
  private tableBytes = 0;
  private maxTableBytes: number;

  constructor(private readonly limits: DecodeLimits) {
    this.maxTableBytes = limits.tableSize;
  }

  /**
   * Decodes one whole header block. Throws HpackError when the block is
   * malformed; a list over maxListSize is decoded to the end (the table must
   * stay in step with the peer's) and reported by `tooLarge`.
   */
  decode(block: Uint8Array): { headers: HeaderList; tooLarge: boolean } {
    const headers: HeaderList = [];
    let listSize = 0;
    let at = 0;
    let fieldSeen = false;
    const int = (prefix: number): number => {
      if (at >= block.length) throw new HpackError("header block ends inside an integer");
      const max = (1 << prefix) - 1;
      let value = block[at++]! & max;
      if (value < max) return value;
      let shift = 0;
      for (;;) {
        if (at >= block.length) throw new HpackError("header block ends inside an integer");
        const b = block[at++]!;
        value += (b & 0x7f) * 2 ** shift;
        shift += 7;
        if (value > 0x7fffffff) throw new HpackError("integer too large");
        if ((b & 0x80) === 0) return value;
      }
    };
    const str = (): string => {
      if (at >= block.length) throw new HpackError("header block ends before a string");
      const huffman = (block[at]! & 0x80) !== 0;
      const length = int(7);
      if (at + length > block.length) throw new HpackError("string longer than the header block");
      const bytes = block.subarray(at, at + length);
      at += length;
      return huffman ? huffmanDecode(bytes) : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length).toString("latin1");
    };
    const add = (name: string, value: string) => {
      listSize += name.length + value.length + 32;
      if (listSize <= this.limits.maxListSize) headers.push([name, value]);
    };
    while (at < block.length) {
      const b = block[at]!;
      if (b & 0x80) {
        // Indexed field.
        const entry = this.lookup(int(7));
        add(entry[0], entry[1]);
      } else if (b & 0x40) {
        // Literal with incremental indexing.
        const index = int(6);
        const name = index === 0 ? str() : this.lookup(index)[0];
        const value = str();
        this.insert(name, value);
        add(name, value);
      } else if (b & 0x20) {
        // Dynamic table size update: only before the first field of a block.
        if (fieldSeen) throw new HpackError("table size update after a header field");
        const size = int(5);
        if (size > this.limits.tableSize) throw new HpackError(`table size update to ${size}, above the ${this.limits.tableSize} allowed`);
        this.maxTableBytes = size;
        this.evict(0);
        continue;
      } else {
        // Literal without indexing (0000) or never indexed (0001).
        const index = int(4);
        const name = index === 0 ? str() : this.lookup(index)[0];
        add(name, str());
      }
      fieldSeen = true;
    }
    return { headers, tooLarge: listSize > this.limits.maxListSize };
  }

  private lookup(index: number): readonly [string, string] {
    if (index === 0) throw new HpackError("index 0");
    if (index <= STATIC.length) return STATIC[index - 1]!;
    const entry = this.table[index - STATIC.length - 1];
    if (entry === undefined) throw new HpackError(`index ${index} is beyond the table`);
    return [entry.name, entry.value];
  }

  private insert(name: string, value: string): void {
    const size = name.length + value.length + 32;
    this.evict(size);
    // An entry larger than the table empties it and is not added (RFC 7541 4.4).
    if (size > this.maxTableBytes) return;
    this.table.unshift({ name, value, size });
    this.tableBytes += size;
  }

  private evict(room: number): void {
    while (this.tableBytes + room > this.maxTableBytes && this.table.length > 0) {
      this.tableBytes -= this.table.pop()!.size;
    }
  }
}

// ------------------------------------------------------------------ encoder

function pushInt(out: number[], value: number, prefix: number, first: number): void {
  const max = (1 << prefix) - 1;
  if (value < max) {
    out.push(first | value);
    return;
  }
  out.push(first | max);
  value -= max;
  while (value >= 0x80) {
    out.push((value & 0x7f) | 0x80);
    value = Math.floor(value / 0x80);
  }
  out.push(value);
}

function pushString(out: number[], value: string): void {
  const bytes = Buffer.from(value, "latin1");
  pushInt(out, bytes.length, 7, 0);
  for (const b of bytes) out.push(b);
}

/**
 * Encodes fields as literals without indexing (a static name index where
 * there is one), and ":status: 200" as its static entry. Names must be
 * lowercase; values are written as given.
 */
export function encodeHeaders(fields: Iterable<readonly [string, string]>): Buffer {
  const out: number[] = [];
  for (const [name, value] of fields) {
    if (name === ":status" && value === "200") {
      out.push(0x88);
      continue;
    }
    const index = STATIC_NAME.get(name);
    if (index === undefined) {
      out.push(0);
      pushString(out, name);
    } else {
      pushInt(out, index, 4, 0);
    }
    pushString(out, value);
  }
  return Buffer.from(out);
}
