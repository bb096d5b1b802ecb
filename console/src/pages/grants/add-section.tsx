/**
 * Adding one grant: held by a user, every user, a subject set or a linked
 * instance (as the relation's holders in the catalog allow), with an optional
 * expiry and condition.
 */
import { useMutation } from "@connectrpc/connect-query";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { useQueryClient } from "@tanstack/react-query";
import { useState, type FormEvent } from "react";
import type { CatalogResource } from "../../../../gen/authz/v1/catalog_pb.js";
import { RelationshipService } from "../../../../gen/authz/v1/relationships_pb.js";
import { FieldError } from "../../components/error-note";
import { When } from "../../components/timestamp";
import { apiProblem } from "../../lib/errors";
import { ALL_USERS_SUBJECT, effectiveSubjects, holderText, parseSubjectType } from "../../lib/holders";
import { ChoiceField, errorProps, OtherError, RadioChoices, relationsOf, TextField } from "./fields";

type HolderKind = "user" | "all-users" | "set" | "link";
const HOLDER_KINDS: { value: HolderKind; label: string }[] = [
  { value: "user", label: "A user" },
  { value: "all-users", label: "Every user at once (allUsers: public)" },
  { value: "set", label: "A subject set: everyone with a relation on one instance (team:eng#member)" },
  { value: "link", label: "A linked instance (folder:runbooks as a document's parent)" },
];

/** What a relation's grants may name as holder (its subjects; users only when the catalog says nothing), or every choice when no relation is chosen. */
function holderChoices(resources: CatalogResource[], resource: string, relation: string): string[] {
  const stored = resources.find((r) => r.resource === resource)?.relations.find((r) => r.name === relation);
  if (stored !== undefined) return effectiveSubjects(stored.subjects);
  return ["user", ALL_USERS_SUBJECT, ...resources.flatMap((r) => [r.resource, ...r.relations.map((x) => `${r.resource}#${x.name}`)])];
}

const kindOf = (subject: string): HolderKind => parseSubjectType(subject).kind;

export function AddSection({ resources }: { resources: CatalogResource[] }) {
  const queryClient = useQueryClient();
  const write = useMutation(RelationshipService.method.writeRelationship, { onSuccess: () => queryClient.invalidateQueries() });
  const [form, setForm] = useState({ kind: "user" as HolderKind, userId: "", holderType: "", holderId: "", resource: "", resourceId: "", relation: "", expiresAt: "", condition: "" });
  const [expiryProblem, setExpiryProblem] = useState<string | undefined>();
  const problem = write.error ? apiProblem(write.error) : undefined;
  const set = (field: keyof typeof form) => (value: string) => setForm((f) => ({ ...f, [field]: value }));
  const reason = (field: string) => problem?.fields.get(field);

  // The holder kinds and types the chosen relation allows (its subjects in the catalog).
  const choices = holderChoices(resources, form.resource, form.relation);
  const kinds = HOLDER_KINDS.filter((k) => choices.some((c) => kindOf(c) === k.value));
  const kind = kinds.some((k) => k.value === form.kind) ? form.kind : (kinds[0]?.value ?? "user");
  const types = choices.filter((c) => kindOf(c) === kind);
  const holderType = types.includes(form.holderType) ? form.holderType : types.length === 1 ? types[0]! : "";
  const holderError = (kind === "user" ? undefined : reason("userId")) ?? reason("subject") ?? reason("allUsers");

  const submit = (event: FormEvent) => {
    event.preventDefault();
    setExpiryProblem(undefined);
    // datetime-local is the reader's local time, without a zone: new Date reads it as such.
    const expiry = form.expiresAt === "" ? undefined : new Date(form.expiresAt);
    if (expiry !== undefined && Number.isNaN(expiry.getTime())) {
      setExpiryProblem("not a date and time");
      write.reset();
      return;
    }
    const type = kind === "user" || kind === "all-users" ? undefined : parseSubjectType(holderType);
    write.mutate({
      ...(kind === "all-users"
        ? { allUsers: true }
        : type === undefined || type.kind === "user" || type.kind === "all-users"
          ? { userId: form.userId }
          : { subject: { resource: type.resource, resourceId: form.holderId, relation: type.kind === "set" ? type.relation : "" } }),
      resource: form.resource,
      resourceId: form.resourceId,
      relation: form.relation,
      ...(expiry === undefined ? {} : { expiresAt: timestampFromDate(expiry) }),
      ...(form.condition.trim() === "" ? {} : { condition: form.condition }),
    });
  };
  const written = write.isSuccess ? write.data : undefined;
  return (
    <section aria-labelledby="grants-add-heading">
      <h2 id="grants-add-heading">Add a grant</h2>
      <form onSubmit={submit}>
        <div className="grid-form">
          <ChoiceField
            id="grants-add-resource"
            label="Resource"
            value={form.resource}
            onChange={(resource) => setForm((f) => ({ ...f, resource, relation: "" }))}
            options={resources.map((r) => r.resource)}
            reason={reason("resource")}
            required
            anyLabel="Choose a resource"
          />
          <TextField id="grants-add-resourceId" label="Instance" value={form.resourceId} onChange={set("resourceId")} reason={reason("resourceId")} required />
          <ChoiceField
            id="grants-add-relation"
            label="Relation"
            value={form.relation}
            onChange={set("relation")}
            options={relationsOf(resources, form.resource)}
            reason={reason("relation")}
            required
            anyLabel="Choose a relation"
          />
        </div>
        <fieldset className="holder-kind" aria-describedby="grants-add-holder-error">
          <legend>Holder</legend>
          <RadioChoices name="grants-add-kind" choices={kinds} value={kind} onChange={(kind) => setForm((f) => ({ ...f, kind }))} />
          <div className="grid-form">
            {kind === "all-users" ? (
              <p className="muted">Every user holds this grant, now and later: no user to name.</p>
            ) : kind === "user" ? (
              <TextField id="grants-add-userId" label="User" value={form.userId} onChange={set("userId")} reason={reason("userId")} required />
            ) : (
              <>
                <ChoiceField
                  id="grants-add-holderType"
                  label={kind === "set" ? "Subject set" : "Linked resource"}
                  value={holderType}
                  onChange={set("holderType")}
                  options={types}
                  reason={reason("subject.resource") ?? reason("subject.relation")}
                  required
                  anyLabel={kind === "set" ? "Choose a subject set" : "Choose a resource"}
                />
                <TextField
                  id="grants-add-holderId"
                  label={kind === "set" ? "Instance of the set" : "Linked instance"}
                  value={form.holderId}
                  onChange={set("holderId")}
                  reason={reason("subject.resourceId")}
                  required
                />
              </>
            )}
          </div>
          <FieldError id="grants-add-holder-error" reason={holderError} />
        </fieldset>
        <div className="grid-form">
          <div className="field">
            <label htmlFor="grants-add-expiresAt">Expires (optional, your local time)</label>
            <input
              id="grants-add-expiresAt"
              type="datetime-local"
              value={form.expiresAt}
              onChange={(e) => set("expiresAt")(e.target.value)}
              {...errorProps("grants-add-expiresAt", expiryProblem ?? reason("expiresAt"))}
            />
            <FieldError id="grants-add-expiresAt-error" reason={expiryProblem ?? reason("expiresAt")} />
          </div>
          <div className="field">
            <label htmlFor="grants-add-condition">Condition (optional, CEL: it must hold for the grant to count)</label>
            <textarea
              id="grants-add-condition"
              rows={2}
              spellCheck={false}
              placeholder="resource.properties.ownerID == subject.id"
              value={form.condition}
              onChange={(e) => set("condition")(e.target.value)}
              {...errorProps("grants-add-condition", reason("condition"))}
            />
            <FieldError id="grants-add-condition-error" reason={reason("condition")} />
          </div>
          <button type="submit" disabled={write.isPending}>
            Add grant
          </button>
        </div>
      </form>
      <OtherError
        error={write.error}
        problem={problem}
        fields={["userId", "allUsers", "resource", "resourceId", "relation", "expiresAt", "condition", "subject", "subject.resource", "subject.resourceId", "subject.relation"]}
      />
      <div aria-live="polite">
        {written !== undefined && written.relationship !== undefined && (
          <p className="grants-done">
            {written.created ? "Grant added" : "Already existed (expiry replaced)"}: {holderText(written.relationship)} is {written.relationship.relation} of {written.relationship.resource}{" "}
            {written.relationship.resourceId}
            {written.relationship.expiresAt === undefined ? ", with no expiry" : <>, until <When ts={written.relationship.expiresAt} /></>}
            {written.relationship.condition === undefined ? "." : <>, where <code>{written.relationship.condition}</code> holds.</>}
          </p>
        )}
      </div>
    </section>
  );
}
