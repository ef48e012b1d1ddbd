// Runs Debian's haproxy in front of a dev cluster's gateways. HAProxy loads
// deploy/haproxy/gateways.cfg first, which holds every setting of the
// balancer and says why, then this helper's own config: a stats socket, a
// loopback listen address and the servers (as tests/harness/haproxy.go).
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { writeFileSync } from "node:fs";
import { createConnection, createServer } from "node:net";
import { join } from "node:path";
import { repoRoot } from "../testdata.js";
import { waitFor, type DevCluster } from "./devcluster.js";

/** Backend is one gateway behind the balancer. */
export interface Backend {
  name: string; // server name in the config, e.g. "gateway-1"
  addr: string; // API host:port
  adminPort: number; // port of its /readyz, the health check
}

/** gatewaysConfig is the balancer's settings, which every HAProxy in front of gateways loads first. */
const gatewaysConfig = join(repoRoot, "deploy", "haproxy", "gateways.cfg");

/** config is this helper's own part, loaded after gatewaysConfig (which says what it adds). */
const config = (sock: string, listen: string, servers: string) => `global
    stats socket ${sock} mode 600 level operator

frontend gateways from gateways
    bind ${listen}
    default_backend gateways

backend gateways from gateways
${servers}`;

/** backends lists the cluster's gateways (cluster.json) as balancer backends. */
export function backends(cluster: DevCluster): Backend[] {
  return cluster
    .file()
    .processes.filter((p) => p.service === "gateway")
    .sort((a, b) => a.id - b.id)
    .map((p) => {
      if (!p.url || !p.admin_address) throw new Error(`gateway-${p.id} in cluster.json has no url or admin_address`);
      return { name: `gateway-${p.id}`, addr: new URL(p.url).host, adminPort: Number(p.admin_address.split(":").pop()) };
    });
}

/** freePort asks the kernel for a loopback port nobody holds right now. */
async function freePort(): Promise<number> {
  return await new Promise((resolve, reject) => {
    const s = createServer();
    s.on("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

export class LoadBalancer {
  private output: string[] = [];
  private code: number | undefined;
  private constructor(
    readonly url: string,
    private readonly proc: ChildProcess,
    private readonly sock: string,
  ) {
    proc.stdout!.on("data", (d) => this.output.push(String(d)));
    proc.stderr!.on("data", (d) => this.output.push(String(d)));
    proc.on("exit", (c, sig) => (this.code = c ?? (sig ? 128 : -1)));
  }

  /**
   * start runs `haproxy -db -f gateways.cfg -f cfg` with cfg written into dir and
   * resolves once it accepts connections. It throws (never skips) when
   * haproxy is not installed: .ci/run installs it.
   */
  static async start(dir: string, servers: Backend[]): Promise<LoadBalancer> {
    const which = spawnSync("sh", ["-c", "command -v haproxy"], { encoding: "utf8" });
    const bin = which.stdout.trim();
    if (which.status !== 0 || !bin) throw new Error("haproxy is not installed (apt-get install haproxy; .ci/run does)");
    const lines = servers.map((b) => `    server ${b.name} ${b.addr} port ${b.adminPort} inter 300ms\n`).join("");
    for (let attempt = 1; ; attempt++) {
      const listen = `127.0.0.1:${await freePort()}`;
      const cfg = join(dir, `haproxy-${attempt}.cfg`);
      const sock = join(dir, `haproxy-${attempt}.sock`);
      writeFileSync(cfg, config(sock, listen, lines));
      // -db: stay in the foreground and log to stderr; -f: the configs, in order.
      const argv = ["-db", "-f", gatewaysConfig, "-f", cfg];
      const lb = new LoadBalancer(`http://${listen}`, spawn(bin, argv, { stdio: ["ignore", "pipe", "pipe"] }), sock);
      try {
        await waitFor(`haproxy to accept connections on ${listen}`, () => {
          if (lb.code !== undefined) throw new Error(`haproxy exited ${lb.code}: ${lb.logs()}`);
          return lb.dial(listen);
        }, 15_000);
        return lb;
      } catch (e) {
        await lb.stop();
        if (attempt === 3) throw e; // the port may have been taken in between: try another
      }
    }
  }

  private async dial(hostPort: string): Promise<boolean> {
    const [host, port] = [hostPort.slice(0, hostPort.lastIndexOf(":")), Number(hostPort.split(":").pop())];
    return await new Promise((resolve) => {
      const c = createConnection({ host, port }, () => {
        c.destroy();
        resolve(true);
      });
      c.on("error", () => resolve(false));
    });
  }

  /** stat is HAProxy's runtime API "show stat": a row per backend server of column name to value. */
  async stat(): Promise<Map<string, Record<string, string>>> {
    const csv = await new Promise<string>((resolve, reject) => {
      const chunks: string[] = [];
      const c = createConnection(this.sock, () => c.write("show stat\n"));
      c.setTimeout(2_000, () => c.destroy(new Error("show stat timed out")));
      c.on("data", (d) => chunks.push(String(d)));
      c.on("end", () => resolve(chunks.join("")));
      c.on("error", reject);
    });
    // The first row names the columns ("# pxname,svname,...,status,...").
    const [head, ...rows] = csv.trim().split("\n").map((l) => l.split(","));
    const cols = head!.map((c) => c.replace(/^# /, ""));
    const out = new Map<string, Record<string, string>>();
    for (const r of rows) {
      if (r[0] !== "gateways" || r[1] === "FRONTEND" || r[1] === "BACKEND") continue; // servers only
      out.set(r[1]!, Object.fromEntries(cols.map((c, i) => [c, r[i] ?? ""])));
    }
    return out;
  }

  /** serverStatus is the named backend server's status ("UP", "DOWN", ...). */
  async serverStatus(name: string): Promise<string> {
    const row = (await this.stat()).get(name);
    if (!row) throw new Error(`haproxy: no server ${name} in show stat`);
    return row.status!;
  }

  /** waitStatus waits until HAProxy's health checks count the named server as status (a prefix: "UP", "DOWN"). */
  async waitStatus(name: string, status: string, timeoutMs = 30_000): Promise<void> {
    await waitFor(`haproxy to count ${name} ${status}`, async () => {
      if (this.code !== undefined) throw new Error(`haproxy exited ${this.code}: ${this.logs()}`);
      return (await this.serverStatus(name)).startsWith(status);
    }, timeoutMs);
  }

  /** stop ends haproxy (SIGTERM, SIGKILL after 10 s) and waits for it to exit. */
  async stop(): Promise<void> {
    if (this.proc.exitCode !== null || this.proc.signalCode !== null) return;
    const done = new Promise((r) => this.proc.on("exit", r));
    this.proc.kill("SIGTERM");
    const t = setTimeout(() => this.proc.kill("SIGKILL"), 10_000);
    await done;
    clearTimeout(t);
  }

  /** logs returns what haproxy printed (for failure messages). */
  logs(): string {
    return this.output.join("");
  }
}
