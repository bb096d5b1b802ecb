/** A loopback port nobody listens on right now (for a service started as its own process): the bench's own. */
export { freePort } from "../../bench/pg-server.js";
