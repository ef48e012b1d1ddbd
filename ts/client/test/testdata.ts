// Paths to the repository's shared fixtures (testdata/ at the root), which
// the Go tests write and check too.
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

/** The repository root (tests run from dist/test/...). */
export const repoRoot = (() => {
  let d = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 8; i++) {
    try {
      readFileSync(join(d, "go.work"));
      return d;
    } catch {
      d = dirname(d);
    }
  }
  throw new Error("repository root (go.work) not found above " + fileURLToPath(import.meta.url));
})();

export function readFixture<T>(name: string): T {
  return JSON.parse(readFileSync(join(repoRoot, "testdata", name), "utf8")) as T;
}

export function unhex(s: string): Uint8Array {
  return Uint8Array.from(Buffer.from(s, "hex"));
}

export function hex(b: Uint8Array | null): string | null {
  return b === null ? null : Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString("hex");
}
