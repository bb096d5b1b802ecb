/**
 * One of a relation's rule lists on the Catalog page: what it inherits,
 * what it requires too (intersection) and what takes it away (exclusion),
 * API.md's `inherits`, `requires` and `unless`. Each rule names a relation
 * on this same instance or on the instances a link of the resource leads
 * to, and shows the API's errors for its path beside it.
 */
import { DangerButton } from "../../components/danger-button";
import { FieldError } from "../../components/error-note";
import type { ApiProblem } from "../../lib/errors";
import {
  inheritableRelations,
  nextKey,
  sameInstanceRelations,
  type RelationDraft,
  type ResourceDraft,
  type RuleListName,
} from "../../lib/catalog-draft";

/** What each list says: its legend, its empty state, a rule's group label, sentence and buttons. */
const TEXTS: Record<
  RuleListName,
  { legend: string; empty: string; rule: (n: number, label: string) => string; who: string; sentence: (label: string) => string; add: string }
> = {
  inherits: {
    legend: "Inherits",
    empty: "Nothing: only its own grants give it.",
    rule: (n, label) => `Inheritance rule ${n} of ${label}`,
    who: "Whoever holds",
    sentence: (label) => `holds ${label} here.`,
    add: "Add an inheritance rule",
  },
  requires: {
    legend: "Requires (and)",
    empty: "Nothing more: whoever its grants and inherits give holds it.",
    rule: (n, label) => `Requirement ${n} of ${label}`,
    who: "Only who also holds",
    sentence: (label) => `holds ${label}.`,
    add: "Add a requirement",
  },
  unless: {
    legend: "Unless (but not)",
    empty: "Nothing takes it away.",
    rule: (n, label) => `Exclusion ${n} of ${label}`,
    who: "Whoever holds",
    sentence: (label) => `does not hold ${label}.`,
    add: "Add an exclusion",
  },
};

/** A select's options, with the current value kept (and marked) when the draft no longer offers it, so what is stored stays visible. */
export function withCurrent(options: string[], current: string): { value: string; stale: boolean }[] {
  const all = options.map((value) => ({ value, stale: false }));
  return current === "" || options.includes(current) ? all : [...all, { value: current, stale: true }];
}

export function RuleList({
  list,
  idPrefix: rid,
  at: rat,
  label,
  relation,
  resource,
  catalog,
  links,
  problem,
  onChange,
}: {
  list: RuleListName;
  idPrefix: string;
  at: string;
  label: string;
  relation: RelationDraft;
  resource: ResourceDraft;
  catalog: readonly ResourceDraft[];
  /** The resource's link relations other than this one: what a rule may go through. */
  links: RelationDraft[];
  problem: ApiProblem | undefined;
  onChange: (change: Partial<RelationDraft>) => void;
}) {
  const text = TEXTS[list];
  const rules = relation[list];
  const setRule = (n: number, change: Partial<RelationDraft[RuleListName][number]>) => onChange({ [list]: rules.map((x, j) => (j === n ? { ...x, ...change } : x)) });
  // The inherits list keeps its ids (rid-inherit-…, rid-inherits-error); the others are named after their list.
  const one = list === "inherits" ? "inherit" : list;
  return (
    <fieldset className="inherits" aria-describedby={`${rid}-${list}-error`}>
      <legend>{text.legend}</legend>
      {rules.length === 0 && <p className="muted">{text.empty}</p>}
      {rules.map((rule, n) => {
        const iid = `${rid}-${one}-${rule.key}`;
        const iat = `${rat}.${list}[${n}]`;
        const throughOptions = withCurrent(
          links.map((x) => x.name.trim()),
          rule.through,
        );
        const sameInstance = rule.through === "";
        const relationOptions = withCurrent(sameInstance ? sameInstanceRelations(resource, relation) : inheritableRelations(catalog, resource, rule.through), rule.relation);
        const throughError = problem?.fields.get(`${iat}.through`) ?? problem?.fields.get(iat);
        const relationError = problem?.fields.get(`${iat}.relation`);
        return (
          <div key={rule.key} className="inherit-rule inline-form" role="group" aria-label={text.rule(n + 1, label)}>
            <div className="field">
              <label htmlFor={`${iid}-relation`}>{text.who}</label>
              <select
                id={`${iid}-relation`}
                value={rule.relation}
                onChange={(e) => setRule(n, { relation: e.target.value })}
                aria-invalid={relationError !== undefined}
                aria-describedby={`${iid}-relation-error`}
              >
                <option value="">Choose a relation</option>
                {relationOptions.map((o) => (
                  <option key={o.value} value={o.value}>
                    {o.stale ? `${o.value} (not in the catalog)` : o.value}
                  </option>
                ))}
              </select>
              <FieldError id={`${iid}-relation-error`} reason={relationError} />
            </div>
            <div className="field">
              <label htmlFor={`${iid}-through`}>on</label>
              <select
                id={`${iid}-through`}
                value={rule.through}
                onChange={(e) => setRule(n, { through: e.target.value, relation: "" })}
                aria-invalid={throughError !== undefined}
                aria-describedby={`${iid}-through-error`}
              >
                <option value="">this instance</option>
                {throughOptions.map((o) => (
                  <option key={o.value} value={o.value}>
                    {list === "inherits" ? "the instance" : "an instance"} linked by {o.stale ? `${o.value} (not a link of ${resource.resource || "this resource"})` : o.value}
                  </option>
                ))}
              </select>
              <FieldError id={`${iid}-through-error`} reason={throughError} />
            </div>
            <span className="muted inherit-sentence">{text.sentence(label)}</span>
            <DangerButton
              aria-label={`Remove the rule: ${rule.relation || "?"} ${sameInstance ? "on this instance" : `through ${rule.through}`}, from ${list === "inherits" ? label : `${label}'s ${list}`}`}
              onClick={() => onChange({ [list]: rules.filter((_, j) => j !== n) })}
            >
              Remove rule
            </DangerButton>
          </div>
        );
      })}
      <button
        type="button"
        className="secondary"
        // The one link when there is one; else this instance (the select offers the links).
        onClick={() => onChange({ [list]: [...rules, { key: nextKey(), through: links.length === 1 ? links[0]!.name.trim() : "", relation: "" }] })}
      >
        {text.add}
      </button>
      <FieldError id={`${rid}-${list}-error`} reason={problem?.fields.get(`${rat}.${list}`)} />
    </fieldset>
  );
}
