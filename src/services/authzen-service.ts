/**
 * authzen.v1.AccessService: AuthZEN's messages to the domain's requests and
 * back. Each call acts on the calling key's own application.
 */
import type { JsonObject } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import type { Action, AccessService, PageRequest, Resource, Subject } from "../../gen/authzen/v1/access_pb.js";
import type { AccessEvaluations } from "../domain/authzen-evaluations.js";
import type { SearchPage } from "../domain/authzen-paging.js";
import type { ActionInput, EntityInput, RequestParts } from "../domain/authzen-requests.js";
import type { AccessSearches, SearchInput } from "../domain/authzen-searches.js";
import { USER_TYPE } from "../domain/authzen-requests.js";
import { callerKeyOf } from "./call-values.js";

interface Parts {
  subject?: Subject | undefined;
  action?: Action | undefined;
  resource?: Resource | undefined;
  context?: JsonObject | undefined;
}

const entity = (e: Subject | Resource | undefined): EntityInput | undefined => e && { type: e.type, id: e.id, properties: e.properties };
const action = (a: Action | undefined): ActionInput | undefined => a && { name: a.name, properties: a.properties };
const parts = (p: Parts): RequestParts => ({ subject: entity(p.subject), action: action(p.action), resource: entity(p.resource), context: p.context });
const search = (p: Parts & { page?: PageRequest | undefined }): SearchInput => ({ ...parts(p), page: p.page && { token: p.page.token, limit: p.page.limit } });
const page = (answer: SearchPage) => ({ nextToken: answer.nextToken, count: answer.ids.length });

export function authzenService(evaluations: AccessEvaluations, searches: AccessSearches): ServiceImpl<typeof AccessService> {
  return {
    async evaluation(req, ctx) {
      return { decision: await evaluations.evaluation(callerKeyOf(ctx), parts(req)) };
    },
    async evaluations(req, ctx) {
      const answer = await evaluations.evaluations(callerKeyOf(ctx), {
        ...parts(req),
        evaluations: req.evaluations.map(parts),
        semantic: req.options?.evaluationsSemantic ?? "",
      });
      if ("decision" in answer) return { decision: answer.decision };
      return {
        evaluations: answer.evaluations.map((item) =>
          item.error === undefined ? { decision: item.decision } : { decision: item.decision, context: { error: { ...item.error } } },
        ),
      };
    },
    async searchSubject(req, ctx) {
      const answer = await searches.subjects(callerKeyOf(ctx), search(req));
      return { page: page(answer), results: answer.ids.map((id) => ({ type: USER_TYPE, id })) };
    },
    async searchResource(req, ctx) {
      const answer = await searches.resources(callerKeyOf(ctx), search(req));
      const type = req.resource?.type ?? "";
      return { page: page(answer), results: answer.ids.map((id) => ({ type, id })) };
    },
    async searchAction(req, ctx) {
      const answer = await searches.actions(callerKeyOf(ctx), search(req));
      return { page: page(answer), results: answer.ids.map((name) => ({ name })) };
    },
  };
}
