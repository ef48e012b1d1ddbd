// The Node runtime: Connect over HTTP/2 (one session per base URL, kept
// alive and multiplexed, as the Go client's transport: h2c for http://,
// TLS with ALPN h2 for https://, with the client's CA bundle and
// certificate), gzip from node:zlib, and Buffers for decoded bytes.

import { createConnectTransport, Http2SessionManager } from "@connectrpc/connect-node";
import type { Transport } from "@connectrpc/connect";
import type { SecureClientSessionOptions } from "node:http2";
import { X509Certificate } from "node:crypto";
import { createSecureContext } from "node:tls";
import { gunzip, gzip } from "node:zlib";
import { promisify } from "node:util";
import type { Pem, TlsMaterial } from "./credentials.js";
import type { Platform } from "./platform.js";

const gzipAsync = promisify(gzip);
const gunzipAsync = promisify(gunzip);

export const nodePlatform: Platform = {
  transport(baseUrl: string, tls?: TlsMaterial): { transport: Transport; close(): void } {
    const secure = tls && baseUrl.startsWith("https:") ? secureOptions(tls) : undefined;
    const sessionManager = new Http2SessionManager(baseUrl, { pingIntervalMs: 15_000, pingTimeoutMs: 15_000, idleConnectionTimeoutMs: 300_000 }, secure);
    const transport = createConnectTransport({
      baseUrl,
      httpVersion: "2",
      useBinaryFormat: true,
      // Record batches are already compressed as their producer chose;
      // gzip on top of every Fetch answer costs both ends CPU for nothing.
      acceptCompression: [],
      sessionManager,
    });
    return { transport, close: () => sessionManager.abort() };
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
