// Copies the bundle Vite wrote to .bundle/ into the gateway's embed
// directory (services/gateway/internal/console/dist). A file whose bytes
// are already there is left alone, a changed or new one is written beside
// its place and renamed over it, and only then are files the bundle no
// longer has removed. So a rebuild that changes nothing changes nothing on
// disk, and a go build embedding the directory at the same moment (make
// test runs both) never finds it empty.
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const from = join(here, "..", ".bundle");
const to = join(here, "..", "..", "..", "services", "gateway", "internal", "console", "dist");

function files(root) {
  const out = [];
  const walk = (dir) => {
    for (const name of readdirSync(dir)) {
      const path = join(dir, name);
      if (statSync(path).isDirectory()) walk(path);
      else out.push(relative(root, path));
    }
  };
  if (existsSync(root)) walk(root);
  return out;
}

const wanted = files(from);
if (wanted.length === 0) {
  console.error(`install-bundle: ${from} is empty; vite build wrote nothing`);
  process.exit(1);
}
let written = 0;
for (const rel of wanted) {
  const bytes = readFileSync(join(from, rel));
  const dest = join(to, rel);
  if (existsSync(dest) && readFileSync(dest).equals(bytes)) continue;
  mkdirSync(dirname(dest), { recursive: true });
  const tmp = `${dest}.tmp-${process.pid}`;
  writeFileSync(tmp, bytes);
  renameSync(tmp, dest);
  written++;
}
const keep = new Set(wanted);
let removed = 0;
for (const rel of files(to)) {
  if (!keep.has(rel)) {
    rmSync(join(to, rel));
    removed++;
  }
}
if (written > 0 || removed > 0) {
  console.log(`install-bundle: ${written} written, ${removed} removed in ${relative(process.cwd(), to)}`);
}
