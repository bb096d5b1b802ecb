import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { ServiceImpl } from "@connectrpc/connect";
import { RelationshipService, type ListRelationshipsRequest } from "../../gen/authz/v1/relationships_pb.js";
import { invalidArgument } from "../domain/errors.js";
import type { ListQuery, Relationships } from "../domain/relationships.js";
import type { RelationshipRow, Tuple } from "../store/relationships-store.js";
import { markCreated, ownAppOf } from "../transport/auth.js";
import { callLimits } from "./call-limits.js";

const relationshipMessage = (row: RelationshipRow) => ({
  userId: row.userId,
  resource: row.resource,
  resourceId: row.resourceId,
  relation: row.relation,
  createdAt: timestampFromDate(row.createdAt),
});

const tuple = (t: Tuple): Tuple => ({ userId: t.userId, resource: t.resource, resourceId: t.resourceId, relation: t.relation });

/**
 * The two list modes, told apart by which fields are given; any other
 * combination is a 400 naming the accepted ones.
 */
function listQuery(req: ListRelationshipsRequest): ListQuery {
  const relation = req.relation === "" ? undefined : req.relation;
  const has = { userId: req.userId !== "", resource: req.resource !== "", resourceId: req.resourceId !== "" };
  if (has.resource && has.resourceId && !has.userId) {
    return { mode: "instance", resource: req.resource, resourceId: req.resourceId, relation };
  }
  if (has.userId && has.resource && !has.resourceId) {
    return { mode: "user", userId: req.userId, resource: req.resource, relation };
  }
  const given = Object.entries(has).filter(([, v]) => v).map(([k]) => k);
  throw invalidArgument(
    `list grants with resource and resourceId (who has a relation on that instance), or with userId and resource (what that user has); optionally relation, pageSize, pageToken. Given: ${given.length === 0 ? "none" : given.join(", ")}`,
    [{ field: "query", reason: "accepted combinations: resource+resourceId, or userId+resource" }],
  );
}

export function relationshipService(relationships: Relationships): ServiceImpl<typeof RelationshipService> {
  return {
    async writeRelationship(req, ctx) {
      const { row, created } = await relationships.write(ownAppOf(ctx), tuple(req), callLimits(ctx));
      if (created) markCreated(ctx);
      return { relationship: relationshipMessage(row), created };
    },
    async listRelationships(req, ctx) {
      const { items, nextPageToken } = await relationships.list(ownAppOf(ctx), listQuery(req), req.pageSize, req.pageToken);
      return { relationships: items.map(relationshipMessage), nextPageToken };
    },
    async deleteRelationship(req, ctx) {
      return { deleted: await relationships.delete(ownAppOf(ctx), tuple(req), callLimits(ctx)) };
    },
    async bulkWriteRelationships(req, ctx) {
      return relationships.bulk(ownAppOf(ctx), req.writes.map(tuple), req.deletes.map(tuple), callLimits(ctx));
    },
  };
}
