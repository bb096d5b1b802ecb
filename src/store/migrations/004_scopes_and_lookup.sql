-- Key scopes (docs/decisions.md): what a key may call. A key stored without
-- scopes gets all three, so it keeps working.
ALTER TABLE api_keys ADD COLUMN scopes text[] NOT NULL DEFAULT '{check,read,write}';
ALTER TABLE api_keys ADD CONSTRAINT api_keys_scopes_check
  CHECK (cardinality(scopes) > 0 AND scopes <@ '{check,read,write}'::text[]);

-- Lookup: the instances of a type where a user holds one relation, in
-- resource_id order. With relation before resource_id, a page is one short
-- range per relation that implies the action, however many grants of other
-- relations the user holds (relationships_user_idx, resource_id first,
-- would read past all of them). The check keeps relationships_user_idx.
CREATE INDEX relationships_user_relation_idx ON relationships (app_id, user_id, resource, relation, resource_id);
