/**
 * A question's JSON as the CEL values conditions read (docs/conditions.md,
 * "What a condition sees"), converted as they are read: a JSON object is a
 * CEL map and an array a CEL list, each a view over the JSON itself, whose
 * entries become views in turn only when a condition reaches them. So
 * preparing a question's facts costs nothing however much it carries (a
 * list of 30,000 elements is not copied for a condition that never reads
 * it), and a batch's questions that share the same objects share them.
 *
 * The views answer as the library's own maps and lists of the same JSON
 * would (@bufbuild/cel's NativeMap and ArrayList): `has` is "get is neither
 * undefined nor null", numbers are doubles, a key that is not a string is
 * never found. With `reads`, each key looked up is recorded, in order, with
 * its path and its JSON value (explain's "the values it read"); paths are
 * built only then.
 */
import type { CelList, CelMap, CelValue } from "@bufbuild/cel";
import type { JsonValue } from "../lib/json.js";

/** A value a condition read, for explain: its path, and its JSON value when it was there. */
export interface ConditionRead {
  path: string;
  found: boolean;
  value?: JsonValue;
}

type JsonRecord = { readonly [key: string]: JsonValue };

const MAP = Symbol.for("@bufbuild/cel/map");
const LIST = Symbol.for("@bufbuild/cel/list");

/** A JSON value as a CEL value: scalars as they are, objects and arrays as views. `path` is read only with `reads`. */
export function celOfJson(value: JsonValue, reads: ConditionRead[] | undefined, path: string): CelValue {
  if (value === null || typeof value !== "object") return value;
  if (Array.isArray(value)) return new JsonList(value, reads, path) as unknown as CelList;
  return jsonMap(value as JsonRecord, reads, path);
}

/** A JSON object as a CEL map. */
export function jsonMap(object: JsonRecord, reads: ConditionRead[] | undefined, path: string): CelMap {
  return new JsonMap(object, reads, path) as unknown as CelMap;
}

class JsonMap {
  readonly [MAP] = {};
  private keyList: string[] | undefined;

  constructor(
    private readonly object: JsonRecord,
    private readonly reads: ConditionRead[] | undefined,
    private readonly path: string,
  ) {}

  private get ownKeys(): string[] {
    return (this.keyList ??= Object.keys(this.object));
  }

  get size(): number {
    return this.ownKeys.length;
  }

  get(key: unknown): CelValue | undefined {
    // The library's maps look a number up as an int, and only when it is whole.
    if (typeof key === "number" && !Number.isInteger(key)) return undefined;
    const found = typeof key === "string" && Object.hasOwn(this.object, key);
    if (this.reads !== undefined) {
      const path = `${this.path}.${typeof key === "object" && key !== null ? String((key as { value?: unknown }).value) : String(key)}`;
      this.reads.push(found ? { path, found, value: this.object[key as string]! } : { path, found });
      return found ? celOfJson(this.object[key as string]!, this.reads, path) : undefined;
    }
    return found ? celOfJson(this.object[key as string]!, undefined, "") : undefined;
  }

  has(key: unknown): boolean {
    return this.get(key) != undefined;
  }

  forEach(callback: (value: CelValue, key: string, map: unknown) => void, thisArg?: unknown): void {
    for (const key of this.ownKeys) callback.call(thisArg, this.child(key), key, this);
  }

  *entries(): IterableIterator<[string, CelValue]> {
    for (const key of this.ownKeys) yield [key, this.child(key)];
  }

  keys(): IterableIterator<string> {
    return this.ownKeys[Symbol.iterator]();
  }

  *values(): IterableIterator<CelValue> {
    for (const key of this.ownKeys) yield this.child(key);
  }

  [Symbol.iterator](): IterableIterator<[string, CelValue]> {
    return this.entries();
  }

  /** An entry reached by iterating the map: not a lookup, so not recorded, as the library's iteration records none. */
  private child(key: string): CelValue {
    return celOfJson(this.object[key]!, this.reads, this.reads === undefined ? "" : `${this.path}.${key}`);
  }
}

class JsonList {
  readonly [LIST] = {};

  constructor(
    private readonly array: readonly JsonValue[],
    private readonly reads: ConditionRead[] | undefined,
    private readonly path: string,
  ) {}

  get size(): number {
    return this.array.length;
  }

  get(index: number): CelValue | undefined {
    if (index < 0 || index >= this.array.length) return undefined;
    return this.at(index);
  }

  *values(): IterableIterator<CelValue> {
    for (let i = 0; i < this.array.length; i++) yield this.at(i);
  }

  [Symbol.iterator](): IterableIterator<CelValue> {
    return this.values();
  }

  private at(i: number): CelValue {
    const value = this.array[i]!;
    if (value === null || typeof value !== "object") return value;
    return celOfJson(value, this.reads, this.reads === undefined ? "" : `${this.path}[${i}]`);
  }
}
