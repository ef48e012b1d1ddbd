// What differs between Node and browsers: the Connect transport (HTTP/2 in
// Node, fetch in browsers), gzip, and how bytes are handed to the
// application (Buffers in Node, so `message.value.toString()` works as in
// kafkajs; Uint8Arrays in browsers). The entry points index.ts (Node) and
// browser.ts install one Platform before anything else runs.

import type { Transport } from "@connectrpc/connect";
import type { TlsMaterial, TlsOptions } from "./credentials.js";

/** What a platform transport is made with. */
export interface TransportOptions {
  /** TLS material for https URLs (Node only). */
  tls?: TlsMaterial;
  /** Longest wait for a new connection, in ms (Node only); default none. */
  connectionTimeout?: number;
}

/** The runtime services the client needs. */
export interface Platform {
  /**
   * transport returns a Connect transport to a base URL, speaking the binary
   * protobuf Connect protocol, and a close function that releases its
   * connections. opts.tls applies to https URLs and opts.connectionTimeout
   * to opening a connection (both Node only).
   */
  transport(baseUrl: string, opts?: TransportOptions): { transport: Transport; close(): void };
  /**
   * checkTls returns the problems with a tls option, one line each (never
   * quoting a key): unreadable PEM, a key that does not match its
   * certificate, or (browsers) that the option is not supported.
   */
  checkTls(tls: TlsOptions): string[];
  /**
   * zstd compresses a records section as one zstd frame with the runtime's
   * own encoder, or returns undefined when the runtime has none (the
   * client's portable encoder is used then).
   */
  zstd?(data: Uint8Array): Promise<Uint8Array> | undefined;
  /** gzip compresses a records section (one gzip member). */
  gzip(data: Uint8Array): Promise<Uint8Array>;
  /** gunzip decompresses one or more gzip members, refusing output past limit bytes. */
  gunzip(data: Uint8Array, limit: number): Promise<Uint8Array>;
  /** bytes wraps decoded bytes for the application without copying. */
  bytes(b: Uint8Array): Uint8Array;
}

let current: Platform | undefined;

/** setPlatform installs the runtime; called once by the entry point. */
export function setPlatform(p: Platform): void {
  current = p;
}

/** platform returns the installed runtime. */
export function platform(): Platform {
  if (!current) throw new Error("@strata-mq/client: no platform installed; import the package entry point");
  return current;
}
