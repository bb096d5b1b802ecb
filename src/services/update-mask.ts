import type { FieldMask } from "@bufbuild/protobuf/wkt";
import { Violations } from "../domain/errors.js";
import { show } from "../domain/formats.js";

/**
 * Which fields a PATCH changes. With an update_mask, exactly the fields it
 * names (the REST gateway derives it from the body's keys); without one (a
 * gRPC caller who sent none), the fields that are set, lists when non-empty.
 * `fields` maps each updatable proto field name to its value in the request.
 */
export function maskedFields(
  mask: FieldMask | undefined,
  fields: Record<string, string | string[] | undefined>,
): Set<string> {
  const updatable = Object.keys(fields);
  const paths = mask?.paths ?? [];
  if (paths.length === 0) {
    return new Set(updatable.filter((name) => {
      const value = fields[name];
      return Array.isArray(value) ? value.length > 0 : value !== undefined;
    }));
  }
  const v = new Violations();
  paths.forEach((path, i) => {
    if (!updatable.includes(path)) v.add(`updateMask[${i}]`, `${show(path)} cannot be updated (updatable: ${updatable.join(", ")})`);
  });
  v.throwIfAny();
  return new Set(paths);
}
