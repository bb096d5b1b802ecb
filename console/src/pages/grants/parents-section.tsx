/** An instance's parents: the tree its link relations reach upward (components/parent-tree.tsx). */
import { useState, type FormEvent } from "react";
import type { CatalogResource } from "../../../../gen/authz/v1/catalog_pb.js";
import { MAX_PARENT_DEPTH, ParentTree } from "../../components/parent-tree";
import { ChoiceField, TextField } from "./fields";

export function ParentsSection({ resources }: { resources: CatalogResource[] }) {
  const [form, setForm] = useState({ resource: "", resourceId: "" });
  const [shown, setShown] = useState<{ resource: string; resourceId: string } | undefined>();
  const submit = (event: FormEvent) => {
    event.preventDefault();
    setShown({ ...form });
  };
  return (
    <section aria-labelledby="grants-parents-heading">
      <h2 id="grants-parents-heading">Parents of an instance</h2>
      <p className="grants-hint" id="grants-parents-hint">
        The instances one is linked to by its link relations (a document's parent folder), theirs, and so on upward, {MAX_PARENT_DEPTH} levels at most; an
        instance met again on the way (a cycle in the data) is marked and not followed.
      </p>
      <form onSubmit={submit} className="grid-form" aria-describedby="grants-parents-hint">
        <ChoiceField
          id="grants-parents-resource"
          label="Resource"
          value={form.resource}
          onChange={(resource) => setForm((f) => ({ ...f, resource }))}
          options={resources.map((r) => r.resource)}
          reason={undefined}
          required
          anyLabel="Choose a resource"
        />
        <TextField
          id="grants-parents-resourceId"
          label="Instance"
          value={form.resourceId}
          onChange={(resourceId) => setForm((f) => ({ ...f, resourceId }))}
          reason={undefined}
          required
        />
        <button type="submit">Show parents</button>
      </form>
      {shown !== undefined && <ParentTree key={`${shown.resource}:${shown.resourceId}`} root={shown} resources={resources} />}
    </section>
  );
}
