/**
 * Deadlines and cancellation down to the database on Postgres, end to end on a real port
 * (test/support/deadline-cases.ts; the other engine's file runs beside this one).
 */
import { describe } from "vitest";
import { deadlineCases } from "./support/deadline-cases.js";
import { engines } from "./support/engines.js";

describe.skipIf(!engines.includes("postgres"))("deadlines and cancellation on postgres", () => deadlineCases("postgres"));
