import type { ServiceImpl } from "@connectrpc/connect";
import type { UserService } from "../../gen/authz/v1/users_pb.js";
import type { UserProperties } from "../domain/user-properties.js";
import { callLimits } from "./call-limits.js";

export function userService(users: UserProperties): ServiceImpl<typeof UserService> {
  return {
    async setUserProperties(req, ctx) {
      return { properties: await users.set(req.appId, req.userId, req.properties, callLimits(ctx)) };
    },
    async getUserProperties(req) {
      return { properties: await users.get(req.appId, req.userId) };
    },
  };
}
