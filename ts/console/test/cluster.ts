// Starts a real `strata dev` cluster for the browser tests: the Go
// binaries from bin/ (`make build`, or STRATA_BIN), a temporary directory
// and a random base port (strata dev refuses a busy one; we then pick
// another), so concurrent runs never collide.
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

export const repoRoot = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "..");
export const binDir = process.env.STRATA_BIN ?? join(repoRoot, "bin");

export interface ProcessInfo {
  service: string;
  id: number;
  pid: number;
  argv: string[];
}

/** waitFor polls cond every 50 ms until it returns a truthy value or the deadline passes. */
export async function waitFor<T>(what: string, cond: () => T | Promise<T>, timeoutMs = 30_000): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await cond();
      if (v) return v as NonNullable<T>;
    } catch (e) {
      last = e;
    }
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${last ? `: ${String(last)}` : ""}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

export class DevCluster {
  private readonly restarted: ChildProcess[] = [];
  private constructor(readonly dir: string, private readonly proc: ChildProcess, private readonly output: string[]) {}

  /** start runs `strata dev` with args added and resolves once cluster.json says ready. */
  static async start(storageNodes = 3, args: string[] = []): Promise<DevCluster> {
    const strata = join(binDir, "strata");
    if (!existsSync(strata)) throw new Error(`${strata} is missing: run 'make build' (or set STRATA_BIN)`);
    for (let attempt = 0; attempt < 8; attempt++) {
      // Bases from 28000 to 32490: below the kernel's ephemeral range
      // (the cluster uses up to base+215) and above the Go tests' (20000
      // to 28000, lib/testports), which run beside this suite in make test.
      const base = 28_000 + Math.floor(Math.random() * 450) * 10;
      const dir = mkdtempSync(join(tmpdir(), "strata-console-"));
      const output: string[] = [];
      const proc = spawn(strata, ["dev", "--dir", dir, "--base-port", String(base), "--storage-nodes", String(storageNodes), ...args], { stdio: ["ignore", "pipe", "pipe"] });
      proc.stdout!.on("data", (d) => output.push(String(d)));
      proc.stderr!.on("data", (d) => output.push(String(d)));
      let code: number | undefined;
      proc.on("exit", (c) => (code = c ?? -1));
      const c = new DevCluster(dir, proc, output);
      try {
        // An exit ends the wait at once (waitFor would retry past a throw).
        await waitFor("strata dev to be ready or to exit", () => code !== undefined || c.file().ready, 120_000);
      } catch (e) {
        await c.stop();
        throw e;
      }
      if (code === undefined) return c;
      rmSync(dir, { recursive: true, force: true });
      if (!/in use/.test(output.join(""))) throw new Error(`strata dev exited ${code}: ${output.join("")}`);
      // Another process holds one of the ports: try another base.
    }
    throw new Error("no free base port found for strata dev");
  }

  file(): { gateway: string; ready: boolean; processes: ProcessInfo[] } {
    return JSON.parse(readFileSync(join(this.dir, "cluster.json"), "utf8"));
  }

  get gateway(): string {
    return this.file().gateway;
  }

  /**
   * adminEnv reads the variables DIR/admin.env (written by `strata dev
   * --secure`) exports: the admin's gateway, CA, certificate and key.
   */
  adminEnv(): Record<string, string> {
    const out: Record<string, string> = {};
    for (const line of readFileSync(join(this.dir, "admin.env"), "utf8").split("\n")) {
      const m = /^\s*export\s+([A-Za-z_][A-Za-z0-9_]*)=(.*)$/.exec(line);
      if (!m) continue;
      let v = m[2]!.trim();
      if (v.startsWith("'") && v.endsWith("'") && v.length >= 2) v = v.slice(1, -1).replaceAll("'\\''", "'");
      out[m[1]!] = v;
    }
    return out;
  }

  /** logs is what strata dev printed. */
  logs(): string {
    return this.output.join("");
  }

  /** strata runs the CLI against this cluster and returns its stdout; throws on a non-zero exit. */
  strata(args: string[], input?: string, env?: Record<string, string>): string {
    const r = spawnSync(join(binDir, "strata"), ["--gateway", this.gateway, ...args], { input, encoding: "utf8", timeout: 60_000, env: env ? { ...process.env, ...env } : undefined });
    if (r.status !== 0) throw new Error(`strata ${args.join(" ")}: exit ${r.status}: ${r.stderr}`);
    return r.stdout;
  }

  /** background runs the CLI against this cluster without waiting; stop ends it with SIGTERM if it still runs. */
  background(args: string[]): ChildProcess {
    const child = spawn(join(binDir, "strata"), ["--gateway", this.gateway, ...args], { stdio: "ignore" });
    this.restarted.push(child);
    return child;
  }

  /** kill SIGKILLs one process of the cluster. */
  kill(service: string, id: number): ProcessInfo {
    const p = this.file().processes.find((x) => x.service === service && x.id === id);
    if (!p) throw new Error(`no ${service}-${id}`);
    process.kill(p.pid, "SIGKILL");
    return p;
  }

  /** restart starts a killed process again from its argv in cluster.json. */
  restart(p: ProcessInfo): void {
    this.restarted.push(spawn(p.argv[0]!, p.argv.slice(1), { stdio: "ignore" }));
  }

  async stop(): Promise<void> {
    for (const c of this.restarted) c.kill("SIGTERM");
    if (this.proc.exitCode === null) {
      const done = new Promise((r) => this.proc.on("exit", r));
      this.proc.kill("SIGTERM");
      const t = setTimeout(() => this.proc.kill("SIGKILL"), 20_000);
      await done;
      clearTimeout(t);
    }
    await Promise.all(this.restarted.map((c) => (c.exitCode === null ? new Promise((r) => c.on("exit", r)) : undefined)));
    rmSync(this.dir, { recursive: true, force: true });
  }
}
