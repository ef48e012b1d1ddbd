// What the client presents to a secure cluster: a bearer token, sent on
// every request to every node (gateway, storage nodes, coordinators), and in
// Node the TLS material for https URLs (a CA bundle for a private CA, and a
// client certificate for mutual TLS). The token and the private key live
// in private fields and print as "[REDACTED]": they never reach a log line,
// an error message, JSON.stringify or util.inspect of a client object.

import type { Transport } from "@connectrpc/connect";

/** PEM text, or its bytes (a Node Buffer is a Uint8Array). */
export type Pem = string | Uint8Array;

/**
 * A bearer token: the text itself, or a function that returns the current
 * one (for OIDC tokens that expire; it is called once per request, so it
 * should return a cached token).
 */
export type TokenSource = string | (() => string | Promise<string>);

/**
 * TLS for https URLs, in Node only (a browser uses its own TLS and trust
 * store). Every field defaults to none.
 */
export interface TlsOptions {
  /** CA bundle that verifies the servers' certificates. Default: Node's bundled public roots. */
  ca?: Pem | Pem[];
  /** Client certificate (chain, leaf first), presented when a server asks: mutual TLS. Needs key. */
  cert?: Pem;
  /** Private key of cert (unencrypted PEM). Needs cert. */
  key?: Pem;
}

/** The TLS material as Node's tls options take it; key is never printed. */
export interface TlsMaterial {
  ca?: Pem | Pem[];
  cert?: Pem;
  key?: Pem;
}

const redacted = "[REDACTED]";

/**
 * Credentials holds a client's token and TLS material. It is immutable and
 * safe to share between the transports of one client.
 */
export class Credentials {
  readonly #token: TokenSource | undefined;
  readonly #tls: TlsMaterial | undefined;

  constructor(token: TokenSource | undefined, tls: TlsOptions | undefined) {
    this.#token = token;
    this.#tls = tls && (tls.ca !== undefined || tls.cert !== undefined || tls.key !== undefined) ? { ...tls } : undefined;
  }

  /** hasToken reports whether requests carry a bearer token. */
  get hasToken(): boolean {
    return this.#token !== undefined;
  }

  /** tls returns the TLS material for Node's https connections; undefined when none was given. */
  tls(): TlsMaterial | undefined {
    return this.#tls;
  }

  /**
   * authorize returns a transport that sends `Authorization: Bearer <token>`
   * on every call through t, or t itself without a token.
   */
  authorize(t: Transport): Transport {
    const token = this.#token;
    if (token === undefined) return t;
    const header = async (h: HeadersInit | undefined): Promise<Headers> => {
      const out = new Headers(h);
      const v = typeof token === "function" ? await token() : token;
      if (typeof v !== "string" || !tokenPattern.test(v)) {
        // The message says what is wrong, never what the function returned.
        throw new TypeError("@strata-mq/client: the token function returned no usable token (want a non-empty string of visible ASCII)");
      }
      out.set("Authorization", `Bearer ${v}`);
      return out;
    };
    return {
      unary: async (method, signal, timeoutMs, h, input, ctx) => t.unary(method, signal, timeoutMs, await header(h), input, ctx),
      stream: async (method, signal, timeoutMs, h, input, ctx) => t.stream(method, signal, timeoutMs, await header(h), input, ctx),
    };
  }

  /** toString never shows the token or the key. */
  toString(): string {
    return `Credentials(token: ${this.#token === undefined ? "none" : redacted}, tls: ${this.#tls ? "given" : "none"})`;
  }

  /** toJSON never shows the token or the key. */
  toJSON(): object {
    return {
      token: this.#token === undefined ? undefined : redacted,
      tls: this.#tls && { ca: this.#tls.ca === undefined ? undefined : "given", cert: this.#tls.cert === undefined ? undefined : "given", key: this.#tls.key === undefined ? undefined : redacted },
    };
  }

  /** What util.inspect and console.log show in Node. */
  [Symbol.for("nodejs.util.inspect.custom")](): string {
    return this.toString();
  }
}

/**
 * A token as an HTTP header carries it: visible ASCII (RFC 9110 field
 * value without spaces), so it cannot smuggle a second header line.
 */
const tokenPattern = /^[\x21-\x7e]+$/;

/** checkToken records a problem with a token option; the message never quotes the token. */
export function checkToken(problems: string[], token: unknown): void {
  if (token === undefined || typeof token === "function") return;
  if (typeof token !== "string" || !tokenPattern.test(token)) {
    problems.push("token: want a non-empty string of visible ASCII (no spaces or line breaks), or a function returning one");
  }
}

/** checkTlsShape records problems with the shape of a tls option (contents are checked by the platform). */
export function checkTlsShape(problems: string[], tls: unknown): void {
  if (tls === undefined) return;
  if (tls === null || typeof tls !== "object") {
    problems.push("tls: want {ca?, cert?, key?}");
    return;
  }
  const t = tls as TlsOptions;
  const pem = (v: unknown) => typeof v === "string" || v instanceof Uint8Array;
  if (t.ca !== undefined && !(pem(t.ca) || (Array.isArray(t.ca) && t.ca.length > 0 && t.ca.every(pem)))) problems.push("tls.ca: want PEM text or bytes, or a list of them");
  if (t.cert !== undefined && !pem(t.cert)) problems.push("tls.cert: want PEM text or bytes");
  if (t.key !== undefined && !pem(t.key)) problems.push("tls.key: want PEM text or bytes");
  if ((t.cert === undefined) !== (t.key === undefined)) problems.push("tls: give cert and key together");
}
