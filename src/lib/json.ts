/** A plain JSON value and object: error details, audit event data, user properties. */
export type JsonObject = { [key: string]: JsonValue };
export type JsonValue = string | number | boolean | null | JsonValue[] | JsonObject;

/**
 * Whether a parsed JSON value nests arrays and objects deeper than `max`
 * levels (the value itself is the first). The recursion stops at `max`, so
 * a body nested 10,000 deep cannot overflow the stack here; the readers and
 * JSON.stringify, which recurse without a bound, run only after it.
 */
export function jsonDepthExceeds(value: unknown, max: number): boolean {
  return typeof value === "object" && value !== null && deeper(value, max - 1);
}

/** Whether `node` (at a level that leaves `left` more) has a child object or array beyond them. */
function deeper(node: object, left: number): boolean {
  if (Array.isArray(node)) {
    for (let i = 0; i < node.length; i++) {
      const child: unknown = node[i];
      if (typeof child === "object" && child !== null && (left === 0 || deeper(child, left - 1))) return true;
    }
    return false;
  }
  for (const key in node) {
    const child: unknown = (node as Record<string, unknown>)[key];
    if (typeof child === "object" && child !== null && (left === 0 || deeper(child, left - 1))) return true;
  }
  return false;
}
