import { timestampFromDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import type { ServiceImpl } from "@connectrpc/connect";
import {
  RelationshipService,
  type DeleteRelationshipRequest,
  type DeleteRelationshipsRequest,
  type ListRelationshipsRequest,
} from "../../gen/authz/v1/relationships_pb.js";
import type { Subject } from "../domain/subjects.js";
import { invalidArgument } from "../domain/errors.js";
import type { DeleteFilter, GrantInput, ListQuery, Relationships } from "../domain/relationships.js";
import type { RelationshipRow, Tuple } from "../store/relationships-store.js";
import { markCreated, ownAppOf } from "./call-values.js";
import { callLimits } from "./call-limits.js";
import { grantInputOf as grant, subjectOf } from "./grant-inputs.js";

export const relationshipMessage = (row: RelationshipRow) => ({
  userId: row.userId,
  allUsers: row.allUsers === true,
  resource: row.resource,
  resourceId: row.resourceId,
  relation: row.relation,
  ...(row.subject === undefined ? {} : { subject: row.subject }),
  createdAt: timestampFromDate(row.createdAt),
  ...(row.expiresAt === null ? {} : { expiresAt: timestampFromDate(row.expiresAt) }),
  ...(row.condition === null || row.condition === undefined ? {} : { condition: row.condition }),
});

/** The single delete names a subject by query parameters: any of them given means a subject. */
const tuple = (t: DeleteRelationshipRequest): Tuple => ({
  userId: t.userId,
  allUsers: t.allUsers,
  resource: t.resource,
  resourceId: t.resourceId,
  relation: t.relation,
  subject:
    t.subjectResource === "" && t.subjectResourceId === "" && t.subjectRelation === ""
      ? undefined
      : { resource: t.subjectResource, resourceId: t.subjectResourceId, relation: t.subjectRelation },
});

/** The fields given (non-empty) of a delete by filter. */
function filterOf(req: DeleteRelationshipsRequest): DeleteFilter {
  const filter: DeleteFilter = {};
  if (req.userId !== "") filter.userId = req.userId;
  if (req.allUsers) filter.allUsers = true;
  if (req.resource !== "") filter.resource = req.resource;
  if (req.resourceId !== "") filter.resourceId = req.resourceId;
  if (req.relation !== "") filter.relation = req.relation;
  if (req.subject !== undefined) filter.subject = { resource: req.subject.resource, resourceId: req.subject.resourceId };
  return filter;
}

/**
 * The three list modes, told apart by which fields are given; any other
 * combination is a 400 naming the accepted ones.
 */
function listQuery(req: ListRelationshipsRequest): ListQuery {
  const relation = req.relation === "" ? undefined : req.relation;
  if (req.subjectResource !== "" || req.subjectResourceId !== "" || req.subjectRelation !== "") {
    if (req.userId !== "" || req.allUsers || req.resourceId !== "" || req.resource === "") {
      throw invalidArgument("list the grants a subject holds with subjectResource, subjectResourceId (subjectRelation for a set) and resource; no userId, allUsers or resourceId", [
        { field: "query", reason: "a subject's grants take subjectResource, subjectResourceId, optional subjectRelation, and resource" },
      ]);
    }
    return {
      mode: "subject",
      subject: { resource: req.subjectResource, resourceId: req.subjectResourceId, relation: req.subjectRelation },
      resource: req.resource,
      relation,
      includeExpired: req.includeExpired,
    };
  }
  if (req.allUsers) {
    // The allUsers grants on a type: the user mode with the reserved holder (the domain refuses a userId beside it).
    if (req.resourceId !== "" || req.resource === "") {
      throw invalidArgument("list the allUsers grants with allUsers and resource (the type's public instances); no resourceId", [
        { field: "allUsers", reason: "allUsers lists with resource alone (and optionally relation)" },
      ]);
    }
    return { mode: "user", userId: req.userId, allUsers: true, resource: req.resource, relation, includeExpired: req.includeExpired };
  }
  const has = { userId: req.userId !== "", resource: req.resource !== "", resourceId: req.resourceId !== "" };
  if (has.resource && has.resourceId && !has.userId) {
    return { mode: "instance", resource: req.resource, resourceId: req.resourceId, relation, includeExpired: req.includeExpired };
  }
  if (has.userId && has.resource && !has.resourceId) {
    return { mode: "user", userId: req.userId, resource: req.resource, relation, includeExpired: req.includeExpired };
  }
  if (has.resource && !has.userId && !has.resourceId) {
    return { mode: "resource", resource: req.resource, relation, includeExpired: req.includeExpired };
  }
  const given = Object.entries(has).filter(([, v]) => v).map(([k]) => k);
  throw invalidArgument(
    `list grants with resource and resourceId (who has a relation on that instance), with userId and resource (what that user has; allUsers and resource: the allUsers grants), or with resource alone (every grant on that type); optionally relation, includeExpired, pageSize, pageToken. Given: ${given.length === 0 ? "none" : given.join(", ")}`,
    [{ field: "query", reason: "accepted combinations: resource+resourceId, userId+resource, allUsers+resource, or resource alone" }],
  );
}

export function relationshipService(relationships: Relationships): ServiceImpl<typeof RelationshipService> {
  return {
    async writeRelationship(req, ctx) {
      const { row, created } = await relationships.write(ownAppOf(ctx), grant(req), callLimits(ctx));
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
    async deleteRelationships(req, ctx) {
      return { deleted: await relationships.deleteMatching(ownAppOf(ctx), filterOf(req), callLimits(ctx)) };
    },
    async bulkWriteRelationships(req, ctx) {
      return relationships.bulk(ownAppOf(ctx), req.writes.map(grant), req.deletes.map(grant), callLimits(ctx));
    },
  };
}
