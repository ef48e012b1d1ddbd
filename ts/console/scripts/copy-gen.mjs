// Copies the generated API code (gen/ts/strata, written by `make generate`
// from proto/) into src/gen so that Vite bundles it with the page. src/gen
// is not committed: gen/ts is the one home of generated code.
import { cpSync, existsSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const from = join(here, "..", "..", "..", "gen", "ts", "strata");
const to = join(here, "..", "src", "gen", "strata");
if (!existsSync(from)) {
  console.error(`copy-gen: ${from} is missing; run 'make generate' at the repository root`);
  process.exit(1);
}
rmSync(to, { recursive: true, force: true });
cpSync(from, to, { recursive: true });
