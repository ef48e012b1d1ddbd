// Client-wide options: what `new Strata({...})` takes, with defaults.

import type { Transport } from "@connectrpc/connect";
import { checkToken, checkTlsShape, Credentials, type TlsOptions, type TokenSource } from "./credentials.js";
import { platform } from "./platform.js";

/** Options of `new Strata(...)`. Every duration is in milliseconds. */
export interface StrataConfig {
  /**
   * Base URL of a gateway, for example "http://127.0.0.1:9092", or
   * "https://gateway.example.com:9092" for a cluster with TLS. Required.
   */
  gateway: string;
  /** Reported to the group coordinator (DescribeGroup). Default "strata-ts". */
  clientId?: string;
  /** Per-RPC timeout, also the acks=all wait asked of the leader. Default 30000. */
  requestTimeout?: number;
  /** Retry backoff: doubles from initialRetryTime to maxRetryTime. Defaults 100 and 1000. */
  retry?: { initialRetryTime?: number; maxRetryTime?: number };
  /** Periodic metadata refresh. Default 300000 (5 min). */
  metadataMaxAge?: number;
  /** How long a topic the gateway does not know is asked for again before UnknownTopicError. Default 2000. */
  unknownTopicWait?: number;
  /**
   * Makes the Connect transport for a base URL (gateway, storage node or
   * coordinator), for example to add interceptors. Default: HTTP/2 in Node
   * (@connectrpc/connect-node), fetch in browsers (@connectrpc/connect-web).
   * The token is added to the transports it makes; `tls` is not given to it.
   */
  transport?: (baseUrl: string) => Transport;
  /**
   * Bearer token (`strata user create`, or an OIDC JWT), sent as
   * `Authorization: Bearer <token>` on every request: the gateway, storage
   * nodes and coordinators. A function is asked once per request, for tokens
   * that are renewed. Never logged or put in an error. Default none. Over
   * an http:// URL the token travels in clear: use https.
   */
  token?: TokenSource;
  /**
   * Node only: TLS for https URLs: `ca` (PEM) for a cluster whose
   * certificates a private CA signs, `cert` and `key` (PEM) for mutual TLS
   * with a client certificate (principal `User:<CN>`). Default: Node's
   * public roots, no client certificate. Browsers use their own TLS and
   * trust store and refuse this option: give them a token.
   */
  tls?: TlsOptions;
}

/** Resolved client config. */
export interface ResolvedConfig {
  gateway: string;
  clientId: string;
  requestTimeout: number;
  retryBackoff: number;
  maxRetryBackoff: number;
  metadataMaxAge: number;
  unknownTopicWait: number;
  transport?: (baseUrl: string) => Transport;
  /** Token and TLS material; prints redacted. */
  credentials: Credentials;
}

/** resolveConfig applies defaults and checks every option, reporting all problems at once. */
export function resolveConfig(c: StrataConfig): ResolvedConfig {
  const r: ResolvedConfig = {
    gateway: (c?.gateway ?? "").replace(/\/+$/, ""),
    clientId: c?.clientId ?? "strata-ts",
    requestTimeout: c?.requestTimeout ?? 30_000,
    retryBackoff: c?.retry?.initialRetryTime ?? 100,
    maxRetryBackoff: c?.retry?.maxRetryTime ?? 1_000,
    metadataMaxAge: c?.metadataMaxAge ?? 300_000,
    unknownTopicWait: c?.unknownTopicWait ?? 2_000,
    transport: c?.transport,
    credentials: new Credentials(c?.token, c?.tls),
  };
  const problems: string[] = [];
  checkToken(problems, c?.token);
  const shape = problems.length;
  checkTlsShape(problems, c?.tls);
  if (c?.tls !== undefined && problems.length === shape) problems.push(...platform().checkTls(c.tls));
  if (!/^https?:\/\//.test(r.gateway)) problems.push(`gateway ${JSON.stringify(c?.gateway)}: want a base URL such as http://127.0.0.1:9092`);
  positive(problems, "requestTimeout", r.requestTimeout);
  positive(problems, "retry.initialRetryTime", r.retryBackoff);
  positive(problems, "metadataMaxAge", r.metadataMaxAge);
  if (r.maxRetryBackoff < r.retryBackoff) problems.push(`retry.maxRetryTime ${r.maxRetryBackoff}: below retry.initialRetryTime`);
  if (!(r.unknownTopicWait >= 0)) problems.push(`unknownTopicWait ${r.unknownTopicWait}: must not be negative`);
  if (problems.length) throw new TypeError(`@strata-mq/client: bad config: ${problems.join("; ")}`);
  return r;
}

/** positive records a problem when v is not a positive finite number. */
export function positive(problems: string[], name: string, v: number): void {
  if (!(typeof v === "number" && v > 0 && Number.isFinite(v))) problems.push(`${name} ${v}: must be a positive number`);
}
