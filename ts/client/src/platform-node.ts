// The Node runtime: Connect over HTTP/2 (one session per base URL, kept
// alive and multiplexed, as the Go client's transport: h2c for http://,
// TLS with ALPN h2 for https://, with the client's CA bundle and
// certificate), gzip from node:zlib, and Buffers for decoded bytes.

import { create, type DescMethod, type DescMethodUnary } from "@bufbuild/protobuf";
import { EmptySchema } from "@bufbuild/protobuf/wkt";
import { createNodeHttpClient, Http2SessionManager } from "@connectrpc/connect-node";
import { Code, ConnectError, type Transport } from "@connectrpc/connect";
import { createAsyncIterable, type UniversalClientFn } from "@connectrpc/connect/protocol";
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
import { encodeProduce, encodeProducePartitions } from "./producewire.js";

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

/**
 * The request header by which a produce call's transport hands its own
 * encoding of the request to the HTTP client (see withProduceBodies); the
 * HTTP client takes it off, so it never reaches the wire.
 */
const PRODUCE_BODY_HEADER = "strata-produce-body";

/** produceEncoder returns the encoder of a produce method's request (producewire.ts), undefined for any other method. */
function produceEncoder(method: DescMethod): ((m: unknown) => Uint8Array) | undefined {
  if (method.parent.typeName !== storage.StorageService.typeName) return undefined;
  if (method.name === "ProducePartitions") return encodeProducePartitions as (m: unknown) => Uint8Array;
  if (method.name === "Produce") return encodeProduce as (m: unknown) => Uint8Array;
  return undefined;
}

/**
 * withProduceBodies returns a Connect transport (the Connect protocol, as
 * createConnectTransport's) whose Produce and ProducePartitions requests
 * are encoded by producewire.ts, which copies each record batch once,
 * rather than by the generic encoder, which copies it three or four times.
 * Everything else about the call is Connect's own: the request goes
 * through the transport as an empty message, under a header naming its
 * body, and the HTTP client sends that body in the empty one's place.
 */
function withProduceBodies(baseUrl: string, http: UniversalClientFn): Transport {
  const bodies = new Map<string, Uint8Array>();
  let next = 0;
  const httpClient: UniversalClientFn = (req) => {
    const id = req.header.get(PRODUCE_BODY_HEADER);
    if (id === null) return http(req);
    req.header.delete(PRODUCE_BODY_HEADER);
    const body = bodies.get(id);
    if (body === undefined) return Promise.reject(new ConnectError("produce request body missing", Code.Internal));
    return http({ ...req, body: createAsyncIterable([body]) });
  };
  const inner = createTransport({
    baseUrl,
    httpClient,
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
  return {
    async unary(method, signal, timeoutMs, header, input, contextValues) {
      const encode = produceEncoder(method);
      if (!encode) return inner.unary(method, signal, timeoutMs, header, input, contextValues);
      const id = String(next++);
      bodies.set(id, encode(input));
      const h = new Headers(header);
      h.set(PRODUCE_BODY_HEADER, id);
      const empty = { ...method, input: EmptySchema } as unknown as DescMethodUnary<typeof EmptySchema, typeof method.output>;
      try {
        return (await inner.unary(empty, signal, timeoutMs, h, create(EmptySchema), contextValues)) as unknown as Awaited<ReturnType<Transport["unary"]>>;
      } finally {
        bodies.delete(id);
      }
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
    const transport = withProduceBodies(baseUrl, createNodeHttpClient({ httpVersion: "2", sessionProvider: () => sessionManager }));
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
