// Builds the console into .bundle/, which scripts/install-bundle.mjs then
// copies into the gateway's embed directory, touching only files whose
// bytes changed: a rebuild that changes nothing never empties a directory
// that a go build running beside it is embedding. The output must be the
// same bytes for the same sources (make checkgenerate compares it with what
// is committed): content-hashed names, no source maps, no build time or
// absolute paths in the bundle.
import { defineConfig } from "vite";
import react from "@vitejs/plugin-react";
import { fileURLToPath } from "node:url";

export default defineConfig({
  base: "/console/",
  plugins: [react()],
  logLevel: "warn",
  build: {
    outDir: fileURLToPath(new URL("./.bundle", import.meta.url)),
    emptyOutDir: true,
    sourcemap: false,
    target: "es2022",
    chunkSizeWarningLimit: 1024,
    reportCompressedSize: false,
  },
});
