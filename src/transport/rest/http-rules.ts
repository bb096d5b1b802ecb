/**
 * Reads the google.api.http annotations of the services: the REST method,
 * path template and body binding of every RPC. Routes are built from these,
 * never written by hand.
 */
import { getOption, type DescField, type DescMethodUnary, type DescService } from "@bufbuild/protobuf";
import { http } from "../../../gen/google/api/annotations_pb.js";
import { FieldBehavior, field_behavior } from "../../../gen/google/api/field_behavior_pb.js";

export type HttpVerb = "GET" | "PUT" | "POST" | "DELETE" | "PATCH";

export interface HttpBinding {
  method: DescMethodUnary;
  verb: HttpVerb;
  /** The template as annotated: /api/v1/applications/{app_id}. */
  template: string;
  /** The same path in Fastify's syntax: /api/v1/applications/:app_id. */
  routePath: string;
  /** Request fields bound by path variables, in template order. */
  pathFields: DescField[];
  /** The same fields as a set, and their names as JSON may spell them (jsonName and proto name). */
  boundFields: ReadonlySet<DescField>;
  pathNames: ReadonlySet<string>;
  /** "*" (the whole body), a field (the body is that field), or undefined (no body). */
  body: "*" | DescField | undefined;
  /** The response field sent as the whole body, or undefined for the whole response. */
  responseBody: DescField | undefined;
  /** Body fields marked (google.api.field_behavior) = REQUIRED: absent or null is a 400. */
  requiredFields: DescField[];
  /**
   * Body list fields marked NON_EMPTY_DEFAULT: absent means the server's
   * default, so an explicit empty list (which protobuf cannot tell from
   * absent) is a 400 rather than silently the default.
   */
  nonEmptyFields: DescField[];
}

const verbs: Record<string, HttpVerb> = { get: "GET", put: "PUT", post: "POST", delete: "DELETE", patch: "PATCH" };

/** Every annotated RPC of `services`. Throws at start-up on an annotation the gateway cannot serve. */
export function httpBindings(services: DescService[]): HttpBinding[] {
  const bindings: HttpBinding[] = [];
  for (const service of services) {
    for (const method of service.methods) {
      if (method.methodKind !== "unary") continue;
      const rule = getOption(method, http);
      if (rule.pattern.case === undefined) continue;
      const where = `${service.typeName}.${method.name}`;
      const verb = verbs[rule.pattern.case];
      if (verb === undefined || typeof rule.pattern.value !== "string") {
        throw new Error(`${where}: http pattern "${rule.pattern.case}" is not supported`);
      }
      if (rule.additionalBindings.length > 0) throw new Error(`${where}: additional_bindings are not supported`);
      const template = rule.pattern.value;
      const pathFields: DescField[] = [];
      const routePath = template.replace(/\{([^}]*)\}/g, (_, variable: string) => {
        const field = method.input.fields.find((f) => f.name === variable);
        if (field === undefined || field.fieldKind !== "scalar") {
          throw new Error(`${where}: path variable {${variable}} must name a scalar field of ${method.input.typeName}`);
        }
        pathFields.push(field);
        return `:${variable}`;
      });
      const fieldNamed = (name: string, what: string, fields: readonly DescField[]) => {
        const field = fields.find((f) => f.name === name);
        if (field === undefined) throw new Error(`${where}: ${what} "${name}" is not a field`);
        return field;
      };
      bindings.push({
        method: method as DescMethodUnary,
        verb,
        template,
        routePath,
        pathFields,
        boundFields: new Set(pathFields),
        pathNames: new Set(pathFields.flatMap((f) => [f.name, f.jsonName])),
        body: rule.body === "" ? undefined : rule.body === "*" ? "*" : fieldNamed(rule.body, "body", method.input.fields),
        responseBody: rule.responseBody === "" ? undefined : fieldNamed(rule.responseBody, "response_body", method.output.fields),
        requiredFields: method.input.fields.filter(
          (f) => !pathFields.includes(f) && getOption(f, field_behavior).includes(FieldBehavior.REQUIRED),
        ),
        nonEmptyFields: method.input.fields.filter(
          (f) => f.fieldKind === "list" && getOption(f, field_behavior).includes(FieldBehavior.NON_EMPTY_DEFAULT),
        ),
      });
    }
  }
  return bindings;
}
