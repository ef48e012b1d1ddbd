// One local HTTP/2 server that answers as the gateway, a storage node and
// the coordinator at once, with the handlers a test gives, and records every
// request (method, headers, arrival time). The client's real Node transport
// talks to it, h2c or TLS, so what a test sees on the wire is what a real
// cluster would.
import { connectNodeAdapter } from "@connectrpc/connect-node";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import { createSecureServer, createServer, type Http2Server, type Http2Session, type SecureServerOptions } from "node:http2";
import type { AddressInfo } from "node:net";
import type { TLSSocket } from "node:tls";
import { coordinator, gateway, storage } from "../../src/api.js";

/** One request the server received. */
export interface Seen {
  /** The RPC's name, e.g. "Produce". */
  method: string;
  /** performance.now() when the handler was called. */
  at: number;
  header: Headers;
  request: unknown;
}

/** The handlers of the three services; a method left out answers unimplemented. */
export interface Handlers {
  gateway?: Partial<ServiceImpl<typeof gateway.GatewayService>>;
  storage?: Partial<ServiceImpl<typeof storage.StorageService>>;
  coordinator?: Partial<ServiceImpl<typeof coordinator.CoordinatorService>>;
}

export class FakeServer {
  private readonly sessions = new Set<Http2Session>();
  private constructor(
    private readonly server: Http2Server,
    /** Base URL, http:// or https:// on 127.0.0.1. */
    readonly url: string,
    /** Every request so far, in arrival order. */
    readonly seen: Seen[],
  ) {
    server.on("session", (s: Http2Session) => {
      this.sessions.add(s);
      s.on("close", () => this.sessions.delete(s));
    });
  }

  /** start listens on a free loopback port, with TLS when tls is given. */
  static async start(h: Handlers, tls?: SecureServerOptions): Promise<FakeServer> {
    const seen: Seen[] = [];
    const record = <T extends object>(impl: T | undefined): T => {
      const out: Record<string, unknown> = {};
      for (const [name, fn] of Object.entries(impl ?? {})) {
        out[name] = (req: unknown, ctx: HandlerContext) => {
          seen.push({ method: ctx.method.name, at: performance.now(), header: ctx.requestHeader, request: req });
          return (fn as (r: unknown, c: HandlerContext) => unknown)(req, ctx);
        };
      }
      return out as T;
    };
    const handler = connectNodeAdapter({
      routes: (r) => {
        r.service(gateway.GatewayService, record(h.gateway));
        r.service(storage.StorageService, record(h.storage));
        r.service(coordinator.CoordinatorService, record(h.coordinator));
      },
    });
    const server = tls ? createSecureServer({ ...tls, allowHTTP1: false }, handler) : createServer(handler);
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(0, "127.0.0.1", () => resolve());
    });
    const port = (server.address() as AddressInfo).port;
    return new FakeServer(server as Http2Server, `${tls ? "https" : "http"}://127.0.0.1:${port}`, seen);
  }

  /** onSecureConnection calls f with each TLS connection once its handshake is done (a TLS server only). */
  onSecureConnection(f: (socket: TLSSocket) => void): void {
    this.server.on("secureConnection", f);
  }

  /**
   * peerWindows returns, per open session, the stream window the client
   * asked for in its SETTINGS and the connection window it has given this
   * server (what the server may still send before a WINDOW_UPDATE).
   */
  peerWindows(): { stream: number | undefined; connection: number | undefined }[] {
    return [...this.sessions].map((s) => ({ stream: s.remoteSettings.initialWindowSize, connection: s.state.remoteWindowSize }));
  }

  /** calls returns the requests of one method, in arrival order. */
  calls(method: string): Seen[] {
    return this.seen.filter((x) => x.method === method);
  }

  /** stop closes every session and the listener. */
  async stop(): Promise<void> {
    for (const s of this.sessions) s.destroy();
    await new Promise<void>((r) => this.server.close(() => r()));
  }
}
