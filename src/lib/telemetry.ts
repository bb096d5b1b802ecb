import { Metrics } from "./metrics.js";
import { Tracing } from "./tracing.js";

/**
 * What the service records of itself: its metrics and its traces, each of
 * which may be off. Made once in app.ts and passed down to the parts that
 * record something (transport, coalescers, the access model, the store).
 */
export interface Telemetry {
  readonly metrics: Metrics;
  readonly tracing: Tracing;
}

/** Neither metrics nor traces: the default of every part that takes telemetry. */
export const NO_TELEMETRY: Telemetry = { metrics: Metrics.off, tracing: Tracing.off };
