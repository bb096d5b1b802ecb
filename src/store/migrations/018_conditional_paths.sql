-- Conditional grants on hierarchy paths (docs/conditions.md): a membership,
-- a grant to a subject set, a link or a grant on a node on the way may carry
-- a condition, and the path counts where every condition on it holds. The
-- check's walk follows only rows with no condition, with no CEL; it also
-- says, per question, whether a conditional row could lie on a path. Only
-- then, and when nothing else allowed, does the service ask a second statement for
-- the conditional paths (src/store/conditional-paths-store.ts).
--
-- "Could" is one probe of this partial index per statement (does the
-- application have a live subject set or link with a condition?) and two
-- of relationships_conditional_user_idx (017) per question (does the user,
-- or every user, have a live conditional grant other than those on the
-- instance the check already reads?). An application with no conditional
-- rows probes two empty ranges and never asks the second statement. Rows
-- with a condition are few: the index stays small, and building it reads
-- the table once.
CREATE INDEX subject_relationships_conditional_idx ON subject_relationships (app_id, resource, resource_id, relation)
  WHERE condition IS NOT NULL;

