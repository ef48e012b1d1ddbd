// The Node runtime: Connect over HTTP/2 (one session per base URL, kept
// alive and multiplexed, as the Go client's h2c transport), gzip from
// node:zlib, and Buffers for decoded bytes.

import { createConnectTransport, Http2SessionManager } from "@connectrpc/connect-node";
import type { Transport } from "@connectrpc/connect";
import { gunzip, gzip } from "node:zlib";
import { promisify } from "node:util";
import type { Platform } from "./platform.js";

const gzipAsync = promisify(gzip);
const gunzipAsync = promisify(gunzip);

export const nodePlatform: Platform = {
  transport(baseUrl: string): { transport: Transport; close(): void } {
    const sessionManager = new Http2SessionManager(baseUrl, { pingIntervalMs: 15_000, pingTimeoutMs: 15_000, idleConnectionTimeoutMs: 300_000 });
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
