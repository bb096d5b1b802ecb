// The console's build: `npm run build` runs it (scripts/build.mjs) into
// dist/console, which the service serves at /console/.
import react from "@vitejs/plugin-react";
import { fileURLToPath } from "node:url";
import { defineConfig } from "vite";

export default defineConfig({
  root: fileURLToPath(new URL(".", import.meta.url)),
  base: "/console/",
  plugins: [react()],
  build: {
    outDir: fileURLToPath(new URL("../dist/console/", import.meta.url)),
    emptyOutDir: true,
    // Marks a build (the service serves only a folder that has one) and lists the initial chunks.
    manifest: true,
    target: "es2022",
    reportCompressedSize: true,
  },
});
