/**
 * Every service of the API on a database, guarded: what the transports
 * serve (app.ts), and what the command line's embedded instance
 * (embedded.ts) calls without a port. Its own module so that the embedded
 * instance loads the services and not the transports (the HTTP/2 server,
 * gRPC, tracing's exporters): `model test` starts faster.
 */
import { ApplicationService } from "../gen/authz/v1/applications_pb.js";
import { AuditService } from "../gen/authz/v1/audit_pb.js";
import { ChangeService } from "../gen/authz/v1/changes_pb.js";
import { CatalogService } from "../gen/authz/v1/catalog_pb.js";
import { ModelService } from "../gen/authz/v1/model_pb.js";
import { CheckService } from "../gen/authz/v1/check_pb.js";
import { PolicyService } from "../gen/authz/v1/policies_pb.js";
import { RelationshipService } from "../gen/authz/v1/relationships_pb.js";
import { RoleService } from "../gen/authz/v1/roles_pb.js";
import { UserService } from "../gen/authz/v1/users_pb.js";
import { AccessService } from "../gen/authzen/v1/access_pb.js";
import { Applications } from "./domain/applications.js";
import { AccessEvaluations } from "./domain/authzen-evaluations.js";
import { AccessSearches } from "./domain/authzen-searches.js";
import { AuditLog } from "./domain/audit-log.js";
import { ChangeFeed, feedBounds, type ChangeFeedOptions } from "./domain/change-feed.js";
import { ChangeSignals } from "./domain/change-signals.js";
import { DEFAULT_FEED_READER_LIMITS, FeedReaders } from "./domain/feed-readers.js";
import { UNBOUNDED_PLACES } from "./domain/places.js";
import { Catalog } from "./domain/catalog.js";
import { Models } from "./domain/models.js";
import { Checker } from "./domain/check.js";
import { Explainer } from "./domain/explain.js";
import { Lookup } from "./domain/lookup.js";
import { WhoCan } from "./domain/who-can.js";
import { Policies } from "./domain/policies.js";
import { Relationships } from "./domain/relationships.js";
import { Roles } from "./domain/roles.js";
import { UserProperties } from "./domain/user-properties.js";
import { applicationService } from "./services/application-service.js";
import { authzenService } from "./services/authzen-service.js";
import { auditService } from "./services/audit-service.js";
import { changeService } from "./services/change-service.js";
import { catalogService } from "./services/catalog-service.js";
import { modelService } from "./services/model-service.js";
import { checkService } from "./services/check-service.js";
import { policyService } from "./services/policy-service.js";
import { relationshipService } from "./services/relationship-service.js";
import { roleService } from "./services/role-service.js";
import { userService } from "./services/user-service.js";
import type { Db } from "./store/db.js";
import type { ReadReplicas } from "./store/read-replicas.js";
import { guard, type ServiceBinding } from "./transport/call/guard.js";
import { NO_TELEMETRY, type Telemetry } from "./lib/telemetry.js";

/**
 * The change feed's parts: the readers' wake-ups (app.ts makes them, with
 * their probe's interval), the bounds of its lasting readers per key and per
 * application, and the waits' bounds.
 */
export interface FeedParts extends ChangeFeedOptions {
  signals: ChangeSignals;
  readers: FeedReaders;
}

/** The services, each guarded: authorization, the edge's checks, the one error mapping. */
export function serviceBindings(
  data: Db,
  deps: Parameters<typeof guard>[2],
  reads: { replicas?: ReadReplicas | undefined; telemetry?: Telemetry; feed?: FeedParts } = {},
): ServiceBinding[] {
  const { replicas } = reads;
  const telemetry = reads.telemetry ?? NO_TELEMETRY;
  // Without one (the embedded instance, which has no transport): the bounds of the service's
  // default timeouts (HTTP_REQUEST_TIMEOUT_MS, HTTP_IDLE_TIMEOUT_MS) and CHANGES_POLL_MS.
  const feed = reads.feed ?? {
    ...feedBounds(30_000, 65_000),
    signals: new ChangeSignals(data, { pollMs: 250, onError: (error) => deps.log.warn({ err: error }, "the change feed's probe failed") }),
    readers: new FeedReaders(deps.keys, DEFAULT_FEED_READER_LIMITS),
  };
  const checker = new Checker(data, replicas, telemetry);
  const questions = {
    checker,
    explainer: new Explainer(data, replicas, telemetry, checker),
    // Lookup and who can ask the check's statement which conditions could allow their candidates.
    lookup: new Lookup(data, replicas, telemetry, checker),
    whoCan: new WhoCan(data, replicas, telemetry, checker),
  };
  // Every write that succeeds wakes the feed's readers of its application; a key deleted ends its readers.
  deps = { ...deps, writes: deps.writes ?? feed.signals, keyDeleted: deps.keyDeleted ?? (() => feed.readers.recheckNow()) };
  return [
    guard(ApplicationService, applicationService(new Applications(data)), deps),
    guard(CatalogService, catalogService(new Catalog(data)), deps),
    guard(PolicyService, policyService(new Policies(data)), deps),
    guard(RoleService, roleService(new Roles(data)), deps),
    guard(UserService, userService(new UserProperties(data)), deps),
    guard(RelationshipService, relationshipService(new Relationships(data)), deps),
    guard(CheckService, checkService(questions, telemetry.metrics), deps),
    // AuthZEN asks the same questions, through the same statements (and their coalescing).
    guard(
      AccessService,
      authzenService(new AccessEvaluations(questions.checker), new AccessSearches({ ...questions, db: data, replicas })),
      deps,
    ),
    guard(AuditService, auditService(new AuditLog(data)), deps),
    guard(ModelService, modelService(new Models(data)), deps),
    guard(ChangeService, changeService(new ChangeFeed(data, feed.signals, feed, feed.readers, deps.limiter ?? UNBOUNDED_PLACES)), deps),
  ] as ServiceBinding[];
}
