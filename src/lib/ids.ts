import { hash, randomBytes } from "node:crypto";

// Lower-case base32 without padding: URL-safe, case-insensitive, no
// look-alike punctuation, so ids survive paths, logs and copy-paste.
const ALPHABET = "abcdefghijklmnopqrstuvwxyz234567";

export function base32(bytes: Uint8Array): string {
  let out = "";
  let bits = 0;
  let value = 0;
  for (const byte of bytes) {
    value = (value << 8) | byte;
    bits += 8;
    while (bits >= 5) {
      out += ALPHABET[(value >>> (bits - 5)) & 31];
      bits -= 5;
    }
  }
  if (bits > 0) out += ALPHABET[(value << (5 - bits)) & 31];
  return out;
}

/** A new opaque id such as `pol_3zq...`: 80 random bits, with a type prefix for humans. */
export function newId(prefix: "pol" | "rol" | "key" | "evt"): string {
  return `${prefix}_${base32(randomBytes(10))}`;
}

/** A new API key secret: 256 random bits. */
export function newKeySecret(): string {
  return `pcl_${base32(randomBytes(32))}`;
}

/**
 * Keys are stored only as this hash. The secrets are 256-bit random, so a fast
 * hash suffices (no password stretching needed) and lookups stay cheap.
 */
export function hashKey(key: string): string {
  return hash("sha256", key, "hex"); // one-shot: half the cost of createHash, once per call
}
