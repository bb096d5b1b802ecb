/**
 * Deadlines and cancellation down to the database on PGlite, end to end on a real port
 * (test/support/deadline-cases.ts; the other engine's file runs beside this one).
 */
import { describe } from "vitest";
import { deadlineCases } from "./support/deadline-cases.js";
import { engines } from "./support/engines.js";

describe.skipIf(!engines.includes("pglite"))("deadlines and cancellation on pglite", () => deadlineCases("pglite"));
