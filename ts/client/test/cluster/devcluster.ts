// Starts a real `strata dev` cluster for the tests: the Go binaries from
// bin/ (`make build`, or STRATA_BIN), a temporary directory, and a random
// free base port (strata dev checks every port it needs and refuses a busy
// one; we then pick another), so concurrent test runs never collide.
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { repoRoot } from "../testdata.js";

export interface ProcessInfo {
  service: string;
  id: number;
  pid: number;
  running: boolean;
  url?: string;
  admin_address?: string;
  argv: string[];
}

export interface ClusterFile {
  gateway: string;
  gateways?: string[];
  ready: boolean;
  pid: number;
  processes: ProcessInfo[];
}

export const binDir = process.env.STRATA_BIN ?? join(repoRoot, "bin");

/** waitFor polls cond every 50 ms until it returns a truthy value or the deadline passes. */
export async function waitFor<T>(what: string, cond: () => T | Promise<T>, timeoutMs = 60_000): Promise<NonNullable<T>> {
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
  private constructor(
    readonly dir: string,
    readonly basePort: number,
    private readonly proc: ChildProcess,
    private output: string[],
  ) {}

  /**
   * start runs `strata dev` and resolves once cluster.json says ready.
   * args are extra flags for strata dev, such as ["--gateways", "2"].
   */
  static async start(opts: { storageNodes?: number; env?: Record<string, string>; args?: string[] } = {}): Promise<DevCluster> {
    const strata = join(binDir, "strata");
    if (!existsSync(strata)) throw new Error(`${strata} is missing: run 'make build' (or set STRATA_BIN)`);
    for (let attempt = 0; attempt < 8; attempt++) {
      // Bases from 28000 to 32490: below the kernel's ephemeral range
      // (the cluster uses up to base+215) and above the Go tests' (20000
      // to 28000, lib/testports), which run beside this suite in make test.
      const base = 28_000 + Math.floor(Math.random() * 450) * 10;
      const dir = mkdtempSync(join(tmpdir(), "strata-ts-"));
      const output: string[] = [];
      const proc = spawn(strata, ["dev", "--dir", dir, "--base-port", String(base), "--storage-nodes", String(opts.storageNodes ?? 3), ...(opts.args ?? [])], {
        env: { ...process.env, ...opts.env },
        stdio: ["ignore", "pipe", "pipe"],
      });
      proc.stdout!.on("data", (d) => output.push(String(d)));
      proc.stderr!.on("data", (d) => output.push(String(d)));
      const exited = new Promise<number>((r) => proc.on("exit", (c) => r(c ?? -1)));
      let code: number | undefined;
      void exited.then((c) => (code = c));
      const c = new DevCluster(dir, base, proc, output);
      try {
        // An exit ends the wait at once: waitFor retries past a throw, so
        // a condition that threw on exit would wait out the whole timeout.
        await waitFor("strata dev to be ready or to exit", () => code !== undefined || c.file().ready, 120_000);
      } catch (e) {
        await c.stop();
        throw e;
      }
      if (code === undefined) return c;
      rmSync(dir, { recursive: true, force: true });
      if (!/in use/.test(output.join(""))) throw new Error(`strata dev exited ${code}: ${output.join("")}`);
      // Another run holds one of the ports: try another base.
    }
    throw new Error("no free base port found for strata dev");
  }

  file(): ClusterFile {
    return JSON.parse(readFileSync(join(this.dir, "cluster.json"), "utf8")) as ClusterFile;
  }

  get gateway(): string {
    return this.file().gateway;
  }

  /**
   * adminEnv reads DIR/admin.env, which `strata dev --secure` writes: the
   * variables its `export NAME=value` lines set (STRATA_GATEWAY,
   * STRATA_TLS_CA, STRATA_TLS_CERT, STRATA_TLS_KEY), unquoted as a shell
   * would.
   */
  adminEnv(): Record<string, string> {
    const out: Record<string, string> = {};
    for (const line of readFileSync(join(this.dir, "admin.env"), "utf8").split("\n")) {
      const m = /^\s*export\s+([A-Za-z_][A-Za-z0-9_]*)=(.*)$/.exec(line);
      if (!m) continue;
      let v = m[2]!.trim();
      if (v.startsWith("'") && v.endsWith("'") && v.length >= 2) v = v.slice(1, -1).replaceAll("'\\''", "'");
      else if (v.startsWith('"') && v.endsWith('"') && v.length >= 2) v = v.slice(1, -1).replace(/\\(["\\$`])/g, "$1");
      out[m[1]!] = v;
    }
    return out;
  }

  /** strata runs the CLI against this cluster and returns its stdout; throws on a non-zero exit. */
  strata(args: string[], input?: string, env?: Record<string, string>): string {
    const r = spawnSync(join(binDir, "strata"), ["--gateway", this.gateway, ...args], {
      input,
      encoding: "utf8",
      timeout: 60_000,
      env: env ? { ...process.env, ...env } : undefined,
    });
    if (r.status !== 0) throw new Error(`strata ${args.join(" ")}: exit ${r.status}: ${r.stderr}`);
    return r.stdout;
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
    const child = spawn(p.argv[0]!, p.argv.slice(1), { stdio: "ignore" });
    this.restarted.push(child);
  }

  /** stop ends the cluster (SIGTERM to strata dev, which stops its children) and removes its directory. */
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

  /** logs returns what strata dev printed (for failure messages). */
  logs(): string {
    return this.output.join("");
  }
}
