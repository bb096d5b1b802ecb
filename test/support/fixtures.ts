/**
 * A small catalog shared by the protocol tests, in the form it is written
 * and in the stored form every protocol must answer (built-ins included).
 */
export const sampleResources = [
  {
    resource: "document",
    description: "A text document",
    actions: ["read", "update", "comment"],
    relations: [{ name: "reviewer", actions: ["read", "comment"] }],
  },
  { resource: "invoice", description: "", actions: ["read", "approve"] },
];

/** The stored form of `catalog`, as every protocol must answer it. */
export const sampleEffectiveResources = [
  {
    resource: "document",
    description: "A text document",
    actions: ["read", "update", "comment"],
    relations: [
      { name: "owner", actions: ["read", "update", "comment"], builtIn: true, subjects: ["user"], inherits: [], requires: [], unless: [] },
      { name: "editor", actions: ["read", "update"], builtIn: true, subjects: ["user"], inherits: [], requires: [], unless: [] },
      { name: "viewer", actions: ["read"], builtIn: true, subjects: ["user"], inherits: [], requires: [], unless: [] },
      { name: "commenter", actions: ["read", "comment"], builtIn: true, subjects: ["user"], inherits: [], requires: [], unless: [] },
      { name: "reviewer", actions: ["read", "comment"], builtIn: false, subjects: ["user"], inherits: [], requires: [], unless: [] },
    ],
  },
  {
    resource: "invoice",
    description: "",
    actions: ["read", "approve"],
    relations: [
      { name: "owner", actions: ["read", "approve"], builtIn: true, subjects: ["user"], inherits: [], requires: [], unless: [] },
      { name: "editor", actions: ["read"], builtIn: true, subjects: ["user"], inherits: [], requires: [], unless: [] },
      { name: "viewer", actions: ["read"], builtIn: true, subjects: ["user"], inherits: [], requires: [], unless: [] },
      { name: "commenter", actions: ["read"], builtIn: true, subjects: ["user"], inherits: [], requires: [], unless: [] },
    ],
  },
];
