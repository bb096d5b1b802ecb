/**
 * Bytes as the readers take them: chunks with exact offsets, a UTF-8 byte
 * order mark skipped across chunk boundaries, and text that must be UTF-8
 * (bytes that are not make a row error, as the service refuses them, rather
 * than turning into U+FFFD and a different id).
 */

/** Where the bytes a reader is given begin: offset 0, line 1 for a whole file; elsewhere when resuming. */
export interface ReadStart {
  offset: number;
  line: number;
}

export const CR = 0x0d;
export const LF = 0x0a;
export const COMMA = 0x2c;
export const QUOTE = 0x22;
export const BOM = [0xef, 0xbb, 0xbf] as const;

const strict = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
export const lenient = new TextDecoder("utf-8", { ignoreBOM: true });

/** Bytes as text, or undefined when they are not UTF-8. */
export function utf8(bytes: Uint8Array): string | undefined {
  try {
    return strict.decode(bytes);
  } catch {
    return undefined;
  }
}

export const NOT_UTF8 = "not UTF-8 text";

/** A growable byte buffer for one field or line. */
export class Bytes {
  private data = new Uint8Array(256);
  length = 0;
  push(b: number): void {
    if (this.length === this.data.length) {
      const bigger = new Uint8Array(this.data.length * 2);
      bigger.set(this.data);
      this.data = bigger;
    }
    this.data[this.length++] = b;
  }
  view(): Uint8Array {
    return this.data.subarray(0, this.length);
  }
}

/**
 * Skips a UTF-8 byte order mark at offset 0, across chunk boundaries: the
 * first bytes are held until three have come (or the input ends).
 */
export class BomSkipper {
  private held: number[] | undefined;
  constructor(atStart: boolean) {
    this.held = atStart ? [] : undefined;
  }
  /** The bytes to read, and how many bytes of the input were a BOM (so offsets stay true). */
  take(bytes: Uint8Array, end: boolean): { bytes: Uint8Array; skipped: number } {
    if (this.held === undefined) return { bytes, skipped: 0 };
    const all = Uint8Array.from([...this.held, ...bytes.subarray(0, 3)]);
    if (all.length < 3 && !end) {
      this.held = [...all];
      return { bytes: new Uint8Array(0), skipped: 0 };
    }
    const heldCount = this.held.length;
    this.held = undefined;
    const isBom = all.length >= 3 && BOM.every((b, i) => all[i] === b);
    const rest = concat(Uint8Array.from(all.subarray(0, heldCount)), bytes);
    return isBom ? { bytes: rest.subarray(3), skipped: 3 } : { bytes: rest, skipped: 0 };
  }
}

export function concat(a: Uint8Array, b: Uint8Array): Uint8Array {
  if (a.length === 0) return b;
  const out = new Uint8Array(a.length + b.length);
  out.set(a);
  out.set(b, a.length);
  return out;
}

export const bytesOf = (input: string | Uint8Array): Uint8Array => (typeof input === "string" ? new TextEncoder().encode(input) : input);
