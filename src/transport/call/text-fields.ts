/**
 * Every string of every request, whichever protocol brought it, checked in
 * one place (the guard calls this before any implementation runs): no NUL,
 * which Postgres text cannot hold, and well-formed Unicode, so two different
 * inputs never become one stored value (see formats.textProblem; invalid
 * UTF-8 bytes arrive here as an unpaired surrogate, see utf8.ts).
 *
 * The walk is planned once per message type from its descriptor, visiting
 * only the fields that can hold text, and runs as a plain test per string;
 * field paths are built only when something is wrong, in a second walk.
 */
import { ScalarType, type DescField, type DescMessage, type DescOneof } from "@bufbuild/protobuf";
import { Violations } from "../../domain/errors.js";
import { show, textProblem } from "../../domain/formats.js";

type Values = Record<string, unknown>;

interface Plan {
  /** True when every string in the message is good (the hot path: no allocation). */
  clean(message: Values): boolean;
  /** Adds a violation for each bad string, with its field path. */
  collect(message: Values, path: string, v: Violations): void;
}

const plans = new Map<DescMessage, Plan>();

/** Throws one 400 naming every bad string of `message` (a message of `desc`); nothing when all are good. */
export function checkTextFields(desc: DescMessage, message: unknown): void {
  const plan = planOf(desc);
  if (plan.clean(message as Values)) return;
  const v = new Violations();
  plan.collect(message as Values, "", v);
  v.throwIfAny();
}

const join = (path: string, name: string) => (path === "" ? name : `${path}.${name}`);
const ok = (value: unknown) => typeof value !== "string" || textProblem(value) === undefined;

/** How one field's value is checked, or undefined when it cannot hold text. */
interface ValueCheck {
  clean(value: unknown): boolean;
  collect(value: unknown, path: string, v: Violations): void;
}

const stringCheck: ValueCheck = {
  clean: ok,
  collect(value, path, v) {
    const problem = typeof value === "string" ? textProblem(value) : undefined;
    if (problem !== undefined) v.add(path, problem);
  },
};

/**
 * A google.protobuf.Struct held in a field of another message (a question's
 * context and properties, a user's stored properties) is, to protobuf-es,
 * the plain JSON object itself, not a message with `fields`, which the plan
 * of its descriptor would look for and not find: its keys and strings are
 * checked as JSON, at any depth. (Value and ListValue fields stay messages,
 * walked as any other.) Iterative, so that no nesting a decoder let through
 * can overflow the stack here.
 */
const jsonCheck: ValueCheck = {
  clean(value) {
    const stack: unknown[] = [value];
    while (stack.length > 0) {
      const node = stack.pop();
      if (typeof node === "string") {
        if (!ok(node)) return false;
      } else if (Array.isArray(node)) {
        for (let i = 0; i < node.length; i++) stack.push(node[i]);
      } else if (typeof node === "object" && node !== null) {
        for (const key of Object.keys(node)) {
          if (!ok(key)) return false;
          stack.push((node as Values)[key]);
        }
      }
    }
    return true;
  },
  collect(value, path, v) {
    // Pushed in reverse, so that problems are named in the order of the document.
    const stack: { node: unknown; at: string; key?: string }[] = [{ node: value, at: path }];
    while (stack.length > 0) {
      const { node, at, key } = stack.pop()!;
      const keyProblem = key === undefined ? undefined : textProblem(key);
      if (keyProblem !== undefined) v.add(at, `key ${keyProblem}`);
      if (typeof node === "string") {
        const problem = textProblem(node);
        if (problem !== undefined) v.add(at, problem);
      } else if (Array.isArray(node)) {
        for (let i = node.length - 1; i >= 0; i--) stack.push({ node: node[i], at: `${at}[${i}]` });
      } else if (typeof node === "object" && node !== null) {
        const keys = Object.keys(node);
        for (let i = keys.length - 1; i >= 0; i--) stack.push({ node: (node as Values)[keys[i]!], at: `${at}[${show(keys[i]!)}]`, key: keys[i]! });
      }
    }
  },
};

/** Whether protobuf-es holds a field's message as plain JSON: a Struct anywhere but inside a google.protobuf.Value. */
const heldAsJson = (message: DescMessage, parent: DescMessage) =>
  message.typeName === "google.protobuf.Struct" && parent.typeName !== "google.protobuf.Value";

function messageCheck(desc: DescMessage): ValueCheck | undefined {
  if (!holdsText(desc, new Set())) return undefined;
  // Resolved on first use: message types may refer to themselves (Struct, Value).
  let plan: Plan | undefined;
  const get = () => (plan ??= planOf(desc));
  return {
    clean: (value) => value === undefined || value === null || get().clean(value as Values),
    collect(value, path, v) {
      if (value !== undefined && value !== null) get().collect(value as Values, path, v);
    },
  };
}

/** The check of one element of `field`: a scalar or a message, as a singular field, list item or map value has. */
function elementCheck(field: DescField, kind: "scalar" | "enum" | "message", scalar: ScalarType | undefined, message: DescMessage | undefined) {
  if (kind === "scalar") return scalar === ScalarType.STRING ? stringCheck : undefined;
  if (kind === "message") return heldAsJson(message!, field.parent) ? jsonCheck : messageCheck(message!);
  return undefined;
}

function fieldCheck(field: DescField): ValueCheck | undefined {
  switch (field.fieldKind) {
    case "scalar":
      return elementCheck(field, "scalar", field.scalar, undefined);
    case "enum":
      return undefined;
    case "message":
      return elementCheck(field, "message", undefined, field.message);
    case "list": {
      const item = elementCheck(field, field.listKind, field.listKind === "scalar" ? field.scalar : undefined, field.listKind === "message" ? field.message : undefined);
      if (item === undefined) return undefined;
      return {
        clean(value) {
          if (!Array.isArray(value)) return true;
          for (let i = 0; i < value.length; i++) if (!item.clean(value[i])) return false;
          return true;
        },
        collect(value, path, v) {
          if (Array.isArray(value)) value.forEach((x, i) => item.collect(x, `${path}[${i}]`, v));
        },
      };
    }
    case "map": {
      const keyIsText = field.mapKey === ScalarType.STRING;
      const item = elementCheck(field, field.mapKind, field.mapKind === "scalar" ? field.scalar : undefined, field.mapKind === "message" ? field.message : undefined);
      if (!keyIsText && item === undefined) return undefined;
      return {
        clean(value) {
          if (typeof value !== "object" || value === null) return true;
          for (const [key, x] of Object.entries(value)) {
            if ((keyIsText && !ok(key)) || (item !== undefined && !item.clean(x))) return false;
          }
          return true;
        },
        collect(value, path, v) {
          if (typeof value !== "object" || value === null) return;
          for (const [key, x] of Object.entries(value)) {
            const at = `${path}[${show(key)}]`;
            const problem = keyIsText ? textProblem(key) : undefined;
            if (problem !== undefined) v.add(at, `key ${problem}`);
            item?.collect(x, at, v);
          }
        },
      };
    }
  }
}

/** A oneof holds `{case, value}`: the check of whichever member is set. */
function oneofCheck(oneof: DescOneof): ValueCheck | undefined {
  const byCase = new Map<string, { field: DescField; check: ValueCheck }>();
  for (const field of oneof.fields) {
    const check = fieldCheck(field);
    if (check !== undefined) byCase.set(field.localName, { field, check });
  }
  if (byCase.size === 0) return undefined;
  const member = (value: unknown) => {
    const selected = value as { case?: string; value?: unknown } | undefined;
    return selected?.case === undefined ? undefined : { entry: byCase.get(selected.case), value: selected.value };
  };
  return {
    clean(value) {
      const m = member(value);
      return m?.entry === undefined || m.entry.check.clean(m.value);
    },
    collect(value, path, v) {
      const m = member(value);
      if (m?.entry !== undefined) m.entry.check.collect(m.value, join(path, m.entry.field.jsonName), v);
    },
  };
}

function planOf(desc: DescMessage): Plan {
  let plan = plans.get(desc);
  if (plan !== undefined) return plan;
  const members: { localName: string; name: string; check: ValueCheck }[] = [];
  for (const member of desc.members) {
    if (member.kind === "oneof") {
      const check = oneofCheck(member);
      // A oneof's members are reported by their own names, so the oneof adds none.
      if (check !== undefined) members.push({ localName: member.localName, name: "", check });
    } else {
      const check = fieldCheck(member);
      if (check !== undefined) members.push({ localName: member.localName, name: member.jsonName, check });
    }
  }
  plan = {
    clean(message) {
      for (let i = 0; i < members.length; i++) {
        const m = members[i]!;
        if (!m.check.clean(message[m.localName])) return false;
      }
      return true;
    },
    collect(message, path, v) {
      for (const m of members) m.check.collect(message[m.localName], m.name === "" ? path : join(path, m.name), v);
    },
  };
  plans.set(desc, plan);
  return plan;
}

/** Whether any string can be reached from a message of `desc` (each type visited once). */
function holdsText(desc: DescMessage, seen: Set<DescMessage>): boolean {
  if (seen.has(desc)) return false;
  seen.add(desc);
  return desc.fields.some((f) => {
    const kind = f.fieldKind === "list" ? f.listKind : f.fieldKind === "map" ? f.mapKind : f.fieldKind;
    if (f.fieldKind === "map" && f.mapKey === ScalarType.STRING) return true;
    if (kind === "scalar") return f.scalar === ScalarType.STRING;
    if (kind === "message") return holdsText(f.message!, seen);
    return false;
  });
}
