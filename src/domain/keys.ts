import { timingSafeEqual } from "node:crypto";
import type { Db } from "../store/db.js";
import { Coalescer } from "../lib/coalescer.js";
import { NO_TELEMETRY, type Telemetry } from "../lib/telemetry.js";
import { applicationsStore, type ApiKeyRow } from "../store/applications-store.js";
import { unauthenticated } from "./errors.js";
import { hashKey, newId, newKeySecret } from "../lib/ids.js";
import { ENV_OPERATOR_KEY_ID, type Principal } from "./principal.js";
import { ALL_SCOPES, storedScopes } from "./scopes.js";

const KNOWN_KEYS_MAX = 10_000;

/** What a call with a key that is unknown or revoked is told, whenever it is found out. */
export const REVOKED_KEY = "the API key is not valid: it is unknown or revoked";

/**
 * Turns an X-API-Key value into a Principal. authenticate() looks the key up
 * in the database on every call, so a key revoked on any replica fails on its
 * very next call. identify() may answer from memory, for calls whose own
 * query verifies the key in the same statement (the check: see check-store),
 * which keeps that guarantee at no extra round trip.
 */
export class KeyAuthenticator {
  private readonly envOperatorHash: Buffer | undefined;
  /** Lookups arriving together share one query (many requests, few keys). */
  private readonly lookup: Coalescer<string, ApiKeyRow | undefined>;
  /** Application keys seen valid, by hash: who they belong to, never whether they still hold. */
  private readonly known = new Map<string, Principal>();

  constructor(
    private readonly db: Db,
    adminKey: string | undefined,
    telemetry: Telemetry = NO_TELEMETRY,
  ) {
    this.envOperatorHash = adminKey === undefined ? undefined : Buffer.from(hashKey(adminKey), "hex");
    this.lookup = new Coalescer(
      async (hashes) => {
        const rows = await applicationsStore.findKeysByHashes(db, [...new Set(hashes)]);
        const byHash = new Map(rows.map((r) => [r.secretHash, r]));
        return hashes.map((h): ApiKeyRow | undefined => byHash.get(h));
      },
      { maxBatch: 1000, ...db.reads, reads: "keys", telemetry },
    );
  }

  /**
   * Who the key belongs to, possibly from memory. Only for calls that verify
   * the key in their own statement: the answer does not prove the key is
   * still live.
   */
  async identify(key: string | undefined): Promise<Principal> {
    if (key !== undefined && key !== "") {
      const known = this.known.get(hashKey(key));
      if (known !== undefined) return known;
    }
    return this.authenticate(key);
  }

  async authenticate(key: string | undefined): Promise<Principal> {
    if (key === undefined || key === "") throw unauthenticated("the X-API-Key header is missing");
    const hash = hashKey(key);
    if (this.envOperatorHash !== undefined && timingSafeEqual(Buffer.from(hash, "hex"), this.envOperatorHash)) {
      return { kind: "operator", keyId: ENV_OPERATOR_KEY_ID, scopes: ALL_SCOPES };
    }
    const row = await this.lookup.call(hash);
    // With AUTHZ_ADMIN_KEY set, it is the only operator key: a generated one
    // from an earlier start no longer opens anything.
    if (row === undefined || (row.kind === "operator" && this.envOperatorHash !== undefined)) {
      throw unauthenticated(REVOKED_KEY);
    }
    if (row.kind === "operator") return { kind: "operator", keyId: row.keyId, scopes: ALL_SCOPES };
    const principal: Principal = {
      kind: "application",
      keyId: row.keyId,
      appId: row.appId!,
      keyHash: hash,
      scopes: storedScopes(row.scopes),
    };
    if (this.known.size >= KNOWN_KEYS_MAX) this.known.delete(this.known.keys().next().value!);
    this.known.set(hash, principal);
    return principal;
  }

  /**
   * Which of these application key hashes are still stored, read on the
   * primary in one statement, not from memory: the change feed's lasting
   * readers ask it of their keys (domain/feed-readers.ts).
   */
  async live(hashes: readonly string[]): Promise<ReadonlySet<string>> {
    if (hashes.length === 0) return new Set();
    const rows = await applicationsStore.findKeysByHashes(this.db, [...hashes]);
    return new Set(rows.filter((r) => r.kind === "application").map((r) => r.secretHash));
  }

  /**
   * With no AUTHZ_ADMIN_KEY, makes sure a stored operator key exists, creating
   * one on the first start. Returns the new secret (to print once) when this
   * replica created it; undefined otherwise, including when another replica
   * starting at the same moment won the race.
   */
  async ensureOperatorKey(): Promise<string | undefined> {
    if (this.envOperatorHash !== undefined) return undefined;
    if (await applicationsStore.hasOperatorKey(this.db)) return undefined;
    const secret = newKeySecret();
    const row = await applicationsStore.insertKey(this.db, {
      keyId: newId("key"),
      appId: null,
      kind: "operator",
      name: "operator",
      secretHash: hashKey(secret),
      scopes: ALL_SCOPES,
    });
    return row === undefined ? undefined : secret;
  }
}
