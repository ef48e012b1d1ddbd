// Builds the CommonJS copy of the package (dist/cjs/src) from tsc's ESM
// output (dist/src), for `require("@strata-mq/client")`: esbuild turns each
// module into CommonJS on its own (no bundling, so the files and their
// relative requires match the ESM build one for one), the declarations are
// copied beside them, and a package.json marks the directory CommonJS so
// Node and TypeScript read both as such. Runs after tsc (npm run build).
import { build } from "esbuild";
import { cpSync, mkdirSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const from = join(root, "dist", "src");
const to = join(root, "dist", "cjs", "src");

function walk(dir) {
  return readdirSync(dir).flatMap((n) => {
    const p = join(dir, n);
    return statSync(p).isDirectory() ? walk(p) : [p];
  });
}

rmSync(join(root, "dist", "cjs"), { recursive: true, force: true });
const files = walk(from);
await build({
  entryPoints: files.filter((f) => f.endsWith(".js")),
  outdir: to,
  outbase: from,
  format: "cjs",
  platform: "neutral",
  target: "es2022",
  bundle: false,
  sourcemap: false,
  logLevel: "warning",
});
for (const f of files.filter((f) => f.endsWith(".d.ts"))) {
  const out = join(to, relative(from, f));
  mkdirSync(dirname(out), { recursive: true });
  cpSync(f, out);
}
writeFileSync(join(root, "dist", "cjs", "package.json"), JSON.stringify({ type: "commonjs" }) + "\n");
