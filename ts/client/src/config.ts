// Client-wide options: what `new Strata({...})` takes, with defaults.

import type { Transport } from "@connectrpc/connect";
import { checkToken, checkTlsShape, Credentials, type TlsOptions, type TokenSource } from "./credentials.js";
import { consoleLogCreator, logLevel, newLogger, type LogCreator, type Logger, type LogLevel } from "./logger.js";
import { platform } from "./platform.js";

/** Options of `new Strata(...)`. Every duration is in milliseconds. */
export interface StrataConfig {
  /**
   * Base URL of a gateway, for example "http://127.0.0.1:9092", or
   * "https://gateway.example.com:9092" for a cluster with TLS; or a list
   * of them (kafkajs' brokers): the client bootstraps from the first that
   * answers and moves to the next when the one it uses cannot be reached.
   * Required.
   */
  gateway: string | string[];
  /** Reported to the group coordinator (DescribeGroup). Default "strata-ts". */
  clientId?: string;
  /** Per-RPC timeout, also the acks=all wait asked of the leader. Default 30000. */
  requestTimeout?: number;
  /**
   * Node only: how long opening a connection to a node may take before the
   * call fails with StrataConnectionError (kafkajs' connectionTimeout).
   * Default 3000. Browsers open connections themselves and ignore it.
   */
  connectionTimeout?: number;
  /**
   * Retries of calls that may succeed when repeated (a node unreachable, no
   * leader, a coordinator loading), as kafkajs' retry: the backoff doubles
   * (multiplier) from initialRetryTime to maxRetryTime, with up to
   * `factor` of random jitter, for at most `retries` retries. Defaults:
   * retries 5, initialRetryTime 100, maxRetryTime 1000, factor 0.2,
   * multiplier 2. Admin calls, metadata and coordinator calls use it; a
   * producer's batches retry until deliveryTimeout instead.
   */
  retry?: RetryOptions;
  /** Periodic metadata refresh. Default 300000 (5 min). */
  metadataMaxAge?: number;
  /** How long a topic the gateway does not know is asked for again before UnknownTopicError. Default 2000. */
  unknownTopicWait?: number;
  /**
   * Makes the Connect transport for a base URL (gateway, storage node or
   * coordinator), for example to add interceptors. Default: HTTP/2 in Node
   * (@connectrpc/connect-node), fetch in browsers (@connectrpc/connect-web).
   * The token is added to the transports it makes; `tls` and
   * `connectionTimeout` are not applied to them.
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
  /** Which entries are logged (kafkajs' logLevel). Default logLevel.WARN. */
  logLevel?: LogLevel;
  /**
   * Where entries go (kafkajs' logCreator). Default: one JSON line per
   * entry on the console (console.error for ERROR and WARN).
   */
  logCreator?: LogCreator;
}

/** Retry options (kafkajs' names). */
export interface RetryOptions {
  /** Most retries of one call. Default 5. */
  retries?: number;
  /** First backoff. Default 100. */
  initialRetryTime?: number;
  /** Largest backoff. Default 1000. */
  maxRetryTime?: number;
  /** Random jitter, as a fraction of the backoff (0 to 1). Default 0.2. */
  factor?: number;
  /** Growth of the backoff per retry. Default 2. */
  multiplier?: number;
}

/** Resolved retry options. */
export interface ResolvedRetry {
  retries: number;
  initialRetryTime: number;
  maxRetryTime: number;
  factor: number;
  multiplier: number;
}

/** Resolved client config. */
export interface ResolvedConfig {
  /** The first gateway (the others are in gateways). */
  gateway: string;
  /** Every gateway, in the order given. */
  gateways: string[];
  clientId: string;
  requestTimeout: number;
  connectionTimeout: number;
  retry: ResolvedRetry;
  retryBackoff: number;
  maxRetryBackoff: number;
  metadataMaxAge: number;
  unknownTopicWait: number;
  transport?: (baseUrl: string) => Transport;
  /** Token and TLS material; prints redacted. */
  credentials: Credentials;
  /** The client's logger (root namespace). */
  logger: Logger;
}

/** resolveRetry applies defaults to retry options and records problems. */
export function resolveRetry(problems: string[], prefix: string, r: RetryOptions | undefined, base?: ResolvedRetry): ResolvedRetry {
  const out: ResolvedRetry = {
    retries: r?.retries ?? base?.retries ?? 5,
    initialRetryTime: r?.initialRetryTime ?? base?.initialRetryTime ?? 100,
    maxRetryTime: r?.maxRetryTime ?? base?.maxRetryTime ?? 1_000,
    factor: r?.factor ?? base?.factor ?? 0.2,
    multiplier: r?.multiplier ?? base?.multiplier ?? 2,
  };
  if (!(Number.isInteger(out.retries) && out.retries >= 0) && out.retries !== Infinity) problems.push(`${prefix}.retries ${out.retries}: want a whole number, 0 or more`);
  positive(problems, `${prefix}.initialRetryTime`, out.initialRetryTime);
  if (out.maxRetryTime < out.initialRetryTime) problems.push(`${prefix}.maxRetryTime ${out.maxRetryTime}: below ${prefix}.initialRetryTime`);
  if (!(out.factor >= 0 && out.factor <= 1)) problems.push(`${prefix}.factor ${out.factor}: want 0 to 1`);
  if (!(out.multiplier >= 1)) problems.push(`${prefix}.multiplier ${out.multiplier}: want 1 or more`);
  return out;
}

/** resolveConfig applies defaults and checks every option, reporting all problems at once. */
export function resolveConfig(c: StrataConfig): ResolvedConfig {
  const problems: string[] = [];
  const given = c?.gateway;
  const list = (Array.isArray(given) ? given : [given ?? ""]).map((g) => (typeof g === "string" ? g.replace(/\/+$/, "") : ""));
  if (list.length === 0) problems.push("gateway: want a base URL such as http://127.0.0.1:9092, or a list of them");
  for (let i = 0; i < list.length; i++) {
    if (!/^https?:\/\//.test(list[i]!)) problems.push(`gateway ${JSON.stringify(Array.isArray(given) ? given[i] : given)}: want a base URL such as http://127.0.0.1:9092`);
  }
  const retry = resolveRetry(problems, "retry", c?.retry);
  const level = c?.logLevel ?? logLevel.WARN;
  if (!Object.values(logLevel).includes(level)) problems.push(`logLevel ${JSON.stringify(level)}: want one of logLevel's values`);
  if (c?.logCreator !== undefined && typeof c.logCreator !== "function") problems.push("logCreator: want a function");
  const r: ResolvedConfig = {
    gateway: list[0] ?? "",
    gateways: [...new Set(list)],
    clientId: c?.clientId ?? "strata-ts",
    requestTimeout: c?.requestTimeout ?? 30_000,
    connectionTimeout: c?.connectionTimeout ?? 3_000,
    retry,
    retryBackoff: retry.initialRetryTime,
    maxRetryBackoff: retry.maxRetryTime,
    metadataMaxAge: c?.metadataMaxAge ?? 300_000,
    unknownTopicWait: c?.unknownTopicWait ?? 2_000,
    transport: c?.transport,
    credentials: new Credentials(c?.token, c?.tls),
    logger: newLogger(level, c?.logCreator ?? consoleLogCreator),
  };
  checkToken(problems, c?.token);
  const shape = problems.length;
  checkTlsShape(problems, c?.tls);
  if (c?.tls !== undefined && problems.length === shape) problems.push(...platform().checkTls(c.tls));
  positive(problems, "requestTimeout", r.requestTimeout);
  positive(problems, "connectionTimeout", r.connectionTimeout);
  positive(problems, "metadataMaxAge", r.metadataMaxAge);
  if (!(r.unknownTopicWait >= 0)) problems.push(`unknownTopicWait ${r.unknownTopicWait}: must not be negative`);
  if (problems.length) throw new TypeError(`@strata-mq/client: bad config: ${problems.join("; ")}`);
  return r;
}

/** positive records a problem when v is not a positive finite number. */
export function positive(problems: string[], name: string, v: number): void {
  if (!(typeof v === "number" && v > 0 && Number.isFinite(v))) problems.push(`${name} ${v}: must be a positive number`);
}
