import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    globalSetup: ["test/support/global-setup.ts"],
    // Each file starts its own engines (PGlite takes seconds to open).
    testTimeout: 30_000,
    hookTimeout: 60_000,
    pool: "forks",
  },
});
