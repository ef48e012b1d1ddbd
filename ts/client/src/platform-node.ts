// The Node runtime: Connect over HTTP/2 (one session per base URL, kept
// alive and multiplexed, as the Go client's transport: h2c for http://,
// TLS with ALPN h2 for https://, with the client's CA bundle and
// certificate), gzip from node:zlib, and Buffers for decoded bytes.

import type { DescMethod } from "@bufbuild/protobuf";
import { createNodeHttpClient, Http2SessionManager } from "@connectrpc/connect-node";
import { Code, ConnectError, type Transport } from "@connectrpc/connect";
import { createMethodUrl } from "@connectrpc/connect/protocol";
import { createTransport } from "@connectrpc/connect/protocol-connect";
import type { Http2Session, SecureClientSessionOptions } from "node:http2";
import { X509Certificate } from "node:crypto";
import { createSecureContext } from "node:tls";
import * as zlib from "node:zlib";
import { gunzip, gzip } from "node:zlib";
import { promisify } from "node:util";
import type { Pem, TlsMaterial } from "./credentials.js";
import type { Platform, TransportOptions } from "./platform.js";
import { storage } from "./api.js";
import { produceCall, responseHeaders } from "./producecall.js";
import { producePartitionsPieces, producePieces } from "./producewire.js";

const gzipAsync = promisify(gzip);

/**
 * Receive windows, as the Go client's (lib/serve): 4 MiB per stream, 16
 * MiB per connection. At HTTP/2's default of 64 KiB a Fetch answer of a
 * few MiB stops every 64 KiB until a WINDOW_UPDATE comes back, and Node
 * sends one only once JavaScript has read the data, so a consumer busy
 * decoding one leader's answer held up the others' transfers.
 */
export const STREAM_WINDOW = 4 << 20;
export const CONNECTION_WINDOW = 16 << 20;

/** WindowedSessionManager widens each new session's connection window (its stream window is a setting of the handshake). */
class WindowedSessionManager extends Http2SessionManager {
  private readonly widened = new WeakSet<Http2Session>();
  override async request(...a: Parameters<Http2SessionManager["request"]>): ReturnType<Http2SessionManager["request"]> {
    const stream = await super.request(...a);
    const s = stream.session;
    if (s && !this.widened.has(s)) {
      this.widened.add(s);
      try {
        s.setLocalWindowSize(CONNECTION_WINDOW);
      } catch {
        // A session closing under the call: the call fails on its own.
      }
    }
    return stream;
  }
}
const gunzipAsync = promisify(gunzip);

/** produceEncoder returns the encoder of a produce method's request (producewire.ts), undefined for any other method. */
function produceEncoder(method: DescMethod): ((m: unknown) => Uint8Array[]) | undefined {
  if (method.parent.typeName !== storage.StorageService.typeName) return undefined;
  if (method.name === "ProducePartitions") return producePartitionsPieces as (m: unknown) => Uint8Array[];
  if (method.name === "Produce") return producePieces as (m: unknown) => Uint8Array[];
  return undefined;
}

/**
 * withProduceCalls returns the transport inner, except that its Produce
 * and ProducePartitions calls are made by produceCall on sm's connection:
 * the request encoded by producewire.ts, whose record batches are written
 * to the stream as they are, and none of Connect's per-call layers (see
 * producecall.ts). Every other call is inner's own.
 */
function withProduceCalls(baseUrl: string, inner: Transport, sm: Http2SessionManager): Transport {
  const paths = new Map<DescMethod, string>();
  return {
    async unary(method, signal, timeoutMs, header, input, contextValues) {
      const encode = produceEncoder(method);
      if (!encode) return inner.unary(method, signal, timeoutMs, header, input, contextValues);
      let path = paths.get(method);
      if (path === undefined) {
        const u = new URL(createMethodUrl(baseUrl, method));
        path = u.pathname + u.search;
        paths.set(method, path);
      }
      // As Connect's transport: no timeout given or one at or below zero means none.
      const deadline = timeoutMs === undefined || timeoutMs <= 0 ? undefined : timeoutMs;
      const a = await produceCall(sm, path, method.output, encode(input), header, deadline, signal);
      let split: [Headers, Headers] | undefined;
      return {
        stream: false,
        service: method.parent,
        method,
        message: a.message,
        // Made only when the caller asks (a call option's onHeader or onTrailer).
        get header() {
          return (split ??= responseHeaders(a.headers))[0];
        },
        get trailer() {
          return (split ??= responseHeaders(a.headers))[1];
        },
      } as Awaited<ReturnType<Transport["unary"]>>;
    },
    stream: (...a) => inner.stream(...a),
  } as Transport;
}

export const nodePlatform: Platform = {
  transport(baseUrl: string, opts?: TransportOptions): { transport: Transport; close(): void } {
    const tls = opts?.tls;
    const secure = tls && baseUrl.startsWith("https:") ? secureOptions(tls) : undefined;
    const sessionManager = new WindowedSessionManager(
      baseUrl,
      { pingIntervalMs: 15_000, pingTimeoutMs: 15_000, idleConnectionTimeoutMs: 300_000 },
      { ...secure, settings: { initialWindowSize: STREAM_WINDOW } },
    );
    const connect = createTransport({
      baseUrl,
      httpClient: createNodeHttpClient({ httpVersion: "2", sessionProvider: () => sessionManager }),
      useBinaryFormat: true,
      interceptors: [],
      // Record batches are already compressed as their producer chose;
      // gzip on top of every Fetch answer costs both ends CPU for nothing.
      acceptCompression: [],
      sendCompression: null,
      compressMinBytes: 1024,
      readMaxBytes: 0xffffffff,
      writeMaxBytes: 0xffffffff,
    });
    const transport = withProduceCalls(baseUrl, connect, sessionManager);
    const limit = opts?.connectionTimeout;
    if (!limit) return { transport, close: () => sessionManager.abort() };
    // Opening the connection gets its own, shorter deadline: a node that
    // does not answer at all is reported in connectionTimeout, not after a
    // whole requestTimeout.
    const ready = async () => {
      const st = sessionManager.state();
      if (st === "open" || st === "idle") return;
      let timer: ReturnType<typeof setTimeout> | undefined;
      const timedOut = new Promise<"timeout">((r) => (timer = setTimeout(() => r("timeout"), limit)));
      const got = await Promise.race([sessionManager.connect(), timedOut]);
      clearTimeout(timer);
      if (got === "timeout") {
        sessionManager.abort();
        const cause = Object.assign(new Error(`connection not established within ${limit} ms`), { code: "ETIMEDOUT" });
        throw new ConnectError(cause.message, Code.Unavailable, undefined, undefined, cause);
      }
    };
    return {
      transport: {
        unary: async (...a) => {
          await ready();
          return transport.unary(...a);
        },
        stream: async (...a) => {
          await ready();
          return transport.stream(...a);
        },
      },
      close: () => sessionManager.abort(),
    };
  },
  checkTls(tls) {
    const problems: string[] = [];
    const certs = (name: string, pem: Pem | Pem[] | undefined) => {
      for (const p of pem === undefined ? [] : Array.isArray(pem) ? pem : [pem]) {
        const text = typeof p === "string" ? p : Buffer.from(p.buffer, p.byteOffset, p.byteLength).toString("utf8");
        const blocks = text.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g);
        if (!blocks) problems.push(`${name}: no PEM certificate (-----BEGIN CERTIFICATE-----) in it`);
        for (const b of blocks ?? []) {
          try {
            new X509Certificate(b);
          } catch (e) {
            problems.push(`${name}: ${oneLine(e)}`);
          }
        }
      }
    };
    certs("tls.ca", tls.ca);
    certs("tls.cert", tls.cert);
    if (problems.length) return problems;
    try {
      createSecureContext(secureOptions(tls));
    } catch (e) {
      // OpenSSL's reason ("key values mismatch", "bad decrypt"), which
      // names the problem and never quotes the PEM.
      problems.push(`tls: ${oneLine(e)}`);
    }
    return problems;
  },
  zstd(data) {
    // node:zlib has zstd from Node 22.15 and 23.8 on.
    const z = zlib as unknown as { zstdCompress?: (b: Uint8Array, cb: (e: Error | null, r: Buffer) => void) => void };
    if (typeof z.zstdCompress !== "function") return undefined;
    const compress = z.zstdCompress;
    return new Promise<Uint8Array>((resolve, reject) => compress(data, (e, r) => (e ? reject(e) : resolve(r))));
  },
  async gzip(data) {
    return await gzipAsync(data);
  },
  async gunzip(data, limit) {
    return await gunzipAsync(data, { maxOutputLength: limit });
  },
  bytes(b) {
    return Buffer.from(b.buffer, b.byteOffset, b.byteLength);
  },
};

/** secureOptions turns the client's TLS material into Node's options (Buffers for bytes). */
function secureOptions(tls: TlsMaterial): SecureClientSessionOptions {
  const buf = (p: Pem) => (typeof p === "string" ? p : Buffer.from(p.buffer, p.byteOffset, p.byteLength));
  return {
    ca: tls.ca === undefined ? undefined : Array.isArray(tls.ca) ? tls.ca.map(buf) : buf(tls.ca),
    cert: tls.cert === undefined ? undefined : buf(tls.cert),
    key: tls.key === undefined ? undefined : buf(tls.key),
  };
}

function oneLine(e: unknown): string {
  return (e instanceof Error ? e.message : String(e)).replace(/\s+/g, " ");
}
