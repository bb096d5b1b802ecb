-- Conditions on policies (docs/conditions.md): a policy may carry a CEL
-- expression; the permissions it lists count for a role it is attached to
-- only where the expression holds. Stored as its source, checked when written, evaluated by the
-- service. A column with no default: adding it rewrites nothing.
ALTER TABLE policies ADD COLUMN condition text;

-- role_permissions, derived for the check (role-permissions-store.ts),
-- keeps what each role holds by which conditions: NULL when a policy with
-- no condition grants the permission (it then holds whatever the others
-- say), else the distinct conditions of the policies that grant it, any one
-- of which must hold. The check reads the whole model into memory, so
-- the column costs the check's statement nothing.
ALTER TABLE role_permissions ADD COLUMN conditions text[];
