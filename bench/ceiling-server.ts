/**
 * The ceiling: a bare Fastify route that parses the same JSON body as the
 * check and answers {"allowed":true}. What a Node HTTP service can do on this
 * machine at all; every REST figure is also reported as a share of it.
 */
import Fastify from "fastify";

const app = Fastify({ logger: false });
app.post("/api/v1/authorization/check", async (req) => {
  const body = req.body as { userId?: unknown };
  if (typeof body.userId !== "string") throw new Error("bad body");
  return { allowed: true };
});
const address = await app.listen({ port: Number(process.env.PORT ?? 0), host: "127.0.0.1" });
process.stdout.write(`${JSON.stringify({ url: address })}\n`);
