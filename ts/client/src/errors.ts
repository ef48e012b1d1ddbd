// Typed errors of the client. Every error a call rejects with is a
// StrataError (or a subclass); a failure the server reported carries its
// Connect code, its Kafka-level reason and the server's one-line message.

import { Code, ConnectError } from "@connectrpc/connect";
import { common } from "./api.js";

type ErrorDetail = common.ErrorDetail;
const { Reason, ErrorDetailSchema } = common;

/** Options shared by the error constructors. */
export interface StrataErrorOptions {
  /** Connect code; Code.Unknown when not from a server. */
  code?: Code;
  /** Strata reason (common.v1.Reason); Reason.UNSPECIFIED when none. */
  reason?: common.Reason;
  /** The structured error as the server sent it, with its hint. */
  detail?: ErrorDetail;
  /** Whether retrying the same call may succeed. */
  retriable?: boolean;
  /** The underlying error. */
  cause?: unknown;
}

/**
 * StrataError is the base of every error the client rejects with. `reason`
 * is the server's Kafka-level reason (for example `"NOT_LEADER"`), `code`
 * the Connect code name (for example `"unavailable"`), and `message` the
 * server's one line.
 */
export class StrataError extends Error {
  override name = "StrataError";
  /** Connect code of the failure (numeric, as @connectrpc/connect's Code). */
  readonly code: Code;
  /** Strata reason (common.v1.Reason); 0 (UNSPECIFIED) when the code says everything. */
  readonly reasonCode: common.Reason;
  /** The structured error detail as sent, with its hint; undefined when none. */
  readonly detail?: ErrorDetail;
  /** True when retrying the same call may succeed (kafkajs' `retriable`). */
  readonly retriable: boolean;

  constructor(message: string, opts: StrataErrorOptions = {}) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.code = opts.code ?? Code.Unknown;
    this.reasonCode = opts.reason ?? Reason.UNSPECIFIED;
    this.detail = opts.detail;
    this.retriable = opts.retriable ?? false;
  }

  /** The reason's name without its prefix, for example "NOT_LEADER"; "" when unspecified. */
  get reason(): string {
    if (this.reasonCode === Reason.UNSPECIFIED) return "";
    return (Reason[this.reasonCode] as string | undefined) ?? String(this.reasonCode);
  }

  /** The Connect code's name, for example "unavailable". */
  get codeName(): string {
    return codeName(this.code);
  }
}

/** UnknownTopicError: the cluster does not know the topic (the gateway answered, and listed it as unknown). */
export class UnknownTopicError extends StrataError {
  override name = "UnknownTopicError";
  constructor(readonly topic: string) {
    super(`topic "${topic}" does not exist`, { code: Code.NotFound, reason: Reason.UNKNOWN_TOPIC_OR_PARTITION });
  }
}

/**
 * UnknownPartitionError: the client's metadata has fewer partitions than
 * asked for, as after partitions were added and before a refresh shows
 * them. Retriable: the caller refreshes metadata and tries again.
 */
export class UnknownPartitionError extends StrataError {
  override name = "UnknownPartitionError";
  constructor(
    readonly topic: string,
    readonly partition: number,
  ) {
    super(`topic "${topic}" has no partition ${partition} in the client's metadata`, { code: Code.NotFound, reason: Reason.UNKNOWN_TOPIC_OR_PARTITION, retriable: true });
  }
}

/**
 * StrataConnectionError: a node could not be reached (refused, reset, timed
 * out connecting, DNS), as kafkajs' KafkaJSConnectionError. `address` is the
 * base URL that failed and `cause` the runtime's error. Retriable; a gateway
 * outage is reported as this, never as an unknown topic.
 */
export class StrataConnectionError extends StrataError {
  override name = "StrataConnectionError";
  constructor(
    readonly address: string,
    message: string,
    cause?: unknown,
  ) {
    super(`${address}: ${message}`, { code: Code.Unavailable, retriable: true, cause });
  }
}

/** InvalidOffsetError: an offset given to the client is not a non-negative integer (as a number or decimal string). */
export class InvalidOffsetError extends StrataError {
  override name = "InvalidOffsetError";
  constructor(readonly offset: unknown) {
    super(`bad offset ${JSON.stringify(typeof offset === "bigint" ? String(offset) : offset)}: want a non-negative integer or its decimal string`, { code: Code.InvalidArgument });
  }
}

/**
 * HandlerError: a consumer's eachMessage or eachBatch kept throwing for one
 * partition after its retries. `cause` is the handler's last error; the
 * partition's position stayed at `offset`. It reaches restartOnFailure and
 * the crash event.
 */
export class HandlerError extends StrataError {
  override name = "HandlerError";
  constructor(
    readonly topic: string,
    readonly partition: number,
    readonly offset: string,
    readonly attempts: number,
    cause: unknown,
  ) {
    super(`handler failed ${attempts} time(s) at ${topic}/${partition} offset ${offset}: ${messageOf(cause)}`, { cause, retriable: true });
  }
}

/** parseOffset reads an offset the application gave (number, bigint or decimal string); InvalidOffsetError when it is none. */
export function parseOffset(v: unknown): number {
  let n = NaN;
  if (typeof v === "number") n = v;
  else if (typeof v === "bigint") n = v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : NaN;
  else if (typeof v === "string" && /^[0-9]+$/.test(v.trim())) n = Number(v.trim());
  if (!Number.isSafeInteger(n) || n < 0) throw new InvalidOffsetError(v);
  return n;
}

/** ClosedError: the producer or consumer was closed. */
export class ClosedError extends StrataError {
  override name = "ClosedError";
  constructor(what: string) {
    super(`${what} is closed`, { code: Code.Canceled });
  }
}

/** DeliveryTimeoutError: a batch was not acknowledged within the delivery timeout; `cause` is the last error. */
export class DeliveryTimeoutError extends StrataError {
  override name = "DeliveryTimeoutError";
  constructor(cause: unknown) {
    super(`delivery timeout: ${messageOf(cause)}`, { code: Code.DeadlineExceeded, cause, reason: reasonOf(cause) });
  }
}

/**
 * OutcomeUnknownError: a batch that may already be in the log could not be
 * sent again under its producer id, which was dropped (the leader forgot
 * the producer, or another batch of the partition failed for good). An
 * attempt of it was sent and its answer never said it was not appended (a
 * timeout, a lost connection, NOT_LEADER under acks "all"); sent under a
 * new id, the leader could not tell it from the copy that may be in the
 * log and would append its records twice, so it fails instead, as Kafka's
 * idempotent producer does. Its records may or may not be in the log.
 * `cause` is the last attempt's error, whose reason it carries. Not
 * retriable.
 */
export class OutcomeUnknownError extends StrataError {
  override name = "OutcomeUnknownError";
  constructor(cause: unknown) {
    super(`outcome unknown: the records may or may not have been written, and cannot be sent again under their producer id: ${messageOf(cause)}`, {
      code: Code.Unknown,
      cause,
      reason: reasonOf(cause),
    });
  }
}

/** NoLeaderError: a partition has no live leader right now (retriable). */
export class NoLeaderError extends StrataError {
  override name = "NoLeaderError";
  constructor(topic: string, partition: number) {
    super(`${topic}/${partition} has no leader`, { code: Code.Unavailable, retriable: true });
  }
}

/**
 * FencedError: the group coordinator rejected a commit or heartbeat because
 * this member's epoch is stale or it was removed. The consumer has given up
 * its partitions and joins again; uncommitted records are delivered again.
 */
export class FencedError extends StrataError {
  override name = "FencedError";
}

/**
 * ProducerFencedError: a newer producer with the same transactionalId has
 * started (its InitTransactionalProducer bumped the epoch), or the
 * coordinator aborted this producer's transaction and moved the epoch on
 * (Kafka's PRODUCER_FENCED, INVALID_PRODUCER_EPOCH to a transactional
 * producer). It is final: the producer can neither commit nor start
 * another transaction, and is to be closed; a new producer with the same
 * transactionalId takes over.
 */
export class ProducerFencedError extends StrataError {
  override name = "ProducerFencedError";
  constructor(
    readonly transactionalId: string,
    cause: unknown,
  ) {
    const c = cause instanceof StrataError ? cause : undefined;
    super(`producer with transactionalId "${transactionalId}" is fenced: a newer producer with the same id has started${c ? ` (${c.message})` : ""}`, {
      code: Code.Aborted,
      reason: c?.reasonCode ?? Reason.PRODUCER_FENCED,
      detail: c?.detail,
      cause,
    });
  }
}

/**
 * StrataAuthenticationError: the cluster did not accept the client's
 * credentials (code unauthenticated): none given, a token it does not know
 * or that was revoked, an expired OIDC token, a certificate it does not
 * trust. `message` is the server's one line, which never contains the
 * token. Never retried: the same credentials fail again.
 */
export class StrataAuthenticationError extends StrataError {
  override name = "StrataAuthenticationError";
}

/**
 * StrataAuthorizationError: the principal may not do this (code
 * permission_denied); `message` is the server's one line naming the
 * principal, the operation and the resource, for example
 * "permission denied: User:alice may not write topic orders". Never
 * retried: an ACL must change first.
 */
export class StrataAuthorizationError extends StrataError {
  override name = "StrataAuthorizationError";
}

/** isAuthError reports a failure that credentials or ACLs must fix, which no retry can. */
export function isAuthError(e: unknown): e is StrataAuthenticationError | StrataAuthorizationError {
  return e instanceof StrataAuthenticationError || e instanceof StrataAuthorizationError;
}

/** Kinds of CorruptBatchError, as the Go codec's sentinels. */
export type CorruptKind = "short" | "length" | "magic" | "crc" | "codec" | "corrupt" | "too-large";

/** CorruptBatchError: bytes that are not a valid RecordBatch v2; never retried. */
export class CorruptBatchError extends StrataError {
  override name = "CorruptBatchError";
  constructor(readonly kind: CorruptKind, message: string, cause?: unknown) {
    super(`recordbatch: ${message}`, { code: Code.DataLoss, reason: Reason.CORRUPT_RECORD, cause });
  }
}

/** UnsupportedCodecError: a batch uses a compression codec this client cannot decode or encode. */
export class UnsupportedCodecError extends StrataError {
  override name = "UnsupportedCodecError";
  constructor(readonly codec: string) {
    super(`recordbatch: codec ${codec} is not supported by this client (supported: none, gzip, snappy, lz4, zstd)`, {
      code: Code.Unimplemented,
    });
  }
}

const codeNames: Record<number, string> = {
  [Code.Canceled]: "canceled",
  [Code.Unknown]: "unknown",
  [Code.InvalidArgument]: "invalid_argument",
  [Code.DeadlineExceeded]: "deadline_exceeded",
  [Code.NotFound]: "not_found",
  [Code.AlreadyExists]: "already_exists",
  [Code.PermissionDenied]: "permission_denied",
  [Code.ResourceExhausted]: "resource_exhausted",
  [Code.FailedPrecondition]: "failed_precondition",
  [Code.Aborted]: "aborted",
  [Code.OutOfRange]: "out_of_range",
  [Code.Unimplemented]: "unimplemented",
  [Code.Internal]: "internal",
  [Code.Unavailable]: "unavailable",
  [Code.DataLoss]: "data_loss",
  [Code.Unauthenticated]: "unauthenticated",
};

function codeName(c: Code): string {
  return codeNames[c] ?? String(c);
}

function messageOf(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

function reasonOf(e: unknown): common.Reason {
  return e instanceof StrataError ? e.reasonCode : Reason.UNSPECIFIED;
}

/** detailOf returns the ErrorDetail attached to a Connect error, if any. */
export function detailOf(err: unknown): ErrorDetail | undefined {
  if (err instanceof StrataError) return err.detail;
  if (err instanceof ConnectError) return err.findDetails(ErrorDetailSchema)[0];
  return undefined;
}

/**
 * fromConnect turns a failed call into a StrataError with the server's code,
 * reason and message; a call that never reached the server at address
 * becomes a StrataConnectionError. Aborts (the caller's signal) pass
 * through unchanged; any other error is wrapped, so callers always get a
 * StrataError with the original as its cause.
 */
export function fromConnect(err: unknown, address?: string): unknown {
  if (err instanceof StrataError) return err;
  if (isAbort(err)) return err;
  if (err instanceof ConnectError) {
    if (address !== undefined && isTransportFailure(err)) return new StrataConnectionError(address, transportMessage(err), err);
    const d = err.findDetails(ErrorDetailSchema)[0];
    const e = newError(d?.message || err.rawMessage || codeName(err.code), {
      code: err.code,
      reason: d?.reason ?? Reason.UNSPECIFIED,
      detail: d,
      cause: err,
    });
    (e as { retriable: boolean }).retriable = classify(e) !== Action.Fail;
    return e;
  }
  if (err instanceof TypeError && /token function/.test(err.message)) return err; // the application's own mistake, said as such
  return new StrataError(messageOf(err), { cause: err });
}

/** isAbort reports an abort by the caller's own signal (not a failure). */
export function isAbort(err: unknown): boolean {
  return err instanceof Error && err.name === "AbortError";
}

/**
 * isTransportFailure reports a call that failed below Connect: no answer
 * from a server, only the runtime's error (Node's ECONNREFUSED and kin,
 * HTTP/2 session errors, a browser's failed fetch).
 */
export function isTransportFailure(err: unknown): boolean {
  if (!(err instanceof ConnectError)) return false;
  if (err.findDetails(ErrorDetailSchema).length > 0) return false;
  if (err.code !== Code.Unavailable && err.code !== Code.Unknown && err.code !== Code.Internal && err.code !== Code.DeadlineExceeded && err.code !== Code.Canceled) return false;
  const c = err.cause as { code?: unknown; name?: unknown; message?: unknown } | undefined;
  if (c && typeof c.code === "string" && /^(E[A-Z]+|ERR_HTTP2_|ERR_SSL|ERR_TLS|UND_ERR|CERT_|DEPTH_|UNABLE_TO_|SELF_SIGNED|ERR_STREAM_PREMATURE)/.test(c.code)) return true;
  if (c && c.name === "TypeError" && typeof c.message === "string" && /fetch|network/i.test(c.message)) return true;
  return false;
}

function transportMessage(err: ConnectError): string {
  return err.rawMessage || codeName(err.code);
}

/** newError makes the StrataError class that fits the code: the auth errors get their own. */
function newError(message: string, opts: StrataErrorOptions): StrataError {
  if (opts.code === Code.Unauthenticated) return new StrataAuthenticationError(message, opts);
  if (opts.code === Code.PermissionDenied) return new StrataAuthorizationError(message, opts);
  return new StrataError(message, opts);
}

/** fromDetail turns a per-partition ErrorDetail into a StrataError. */
export function fromDetail(d: ErrorDetail): StrataError {
  const e = newError(d.message || codeName(d.code as number as Code), {
    code: d.code as number as Code,
    reason: d.reason,
    detail: d,
  });
  (e as { retriable: boolean }).retriable = classify(e) !== Action.Fail;
  return e;
}

/**
 * unwritten reports whether a failed Produce certainly did not append its
 * batch, as the Go client's unwritten (client/errors.go): nothing was sent
 * (no leader known), or the leader refused the batch before appending it.
 * A storage node answers NOT_LEADER before the append, and under acks
 * "all" also after it: leadership lost, the replica closed, or the log
 * failed while the produce waited for the high watermark
 * (services/storage: ErrLeadershipLost, ErrClosed, partlog.ErrFailed).
 * A refusal of the principal, or of the producer's sequence, epoch or
 * batch, comes before any append too, and so does a call whose
 * connection was never made.
 * Anything else (a timeout, a lost connection, NOT_ENOUGH_REPLICAS_AFTER_APPEND,
 * an error without a reason) leaves the outcome unknown.
 */
export function unwritten(err: unknown, acks: common.Acks): boolean {
  if (err instanceof NoLeaderError || isAuthError(err) || neverConnected(err)) return true;
  if (!(err instanceof StrataError)) return false;
  switch (err.reasonCode) {
    case Reason.FENCED_LEADER_EPOCH:
    case Reason.UNKNOWN_LEADER_EPOCH:
    case Reason.UNKNOWN_TOPIC_OR_PARTITION:
    case Reason.NOT_ENOUGH_REPLICAS:
    // Idempotence and batch checks, all made before the append.
    case Reason.OUT_OF_ORDER_SEQUENCE:
    case Reason.UNKNOWN_PRODUCER_ID:
    case Reason.INVALID_PRODUCER_EPOCH:
    case Reason.DUPLICATE_SEQUENCE:
    case Reason.CORRUPT_RECORD:
    case Reason.RECORD_TOO_LARGE:
    // A topic's rule broken (a keyless record in a compacted topic, a
    // timestamp out of range): also refused before the append.
    case Reason.INVALID_RECORD:
    case Reason.INVALID_TIMESTAMP:
      return true;
    case Reason.NOT_LEADER:
      return acks !== common.Acks.ALL;
  }
  return false;
}

/**
 * neverConnected reports a call whose connection was never made (refused,
 * or the host not found), so its request never left: the Go client's
 * dial error. A reset or a timeout may come after the request left.
 */
function neverConnected(err: unknown): boolean {
  if (!(err instanceof StrataConnectionError)) return false;
  const runtime = (err.cause as { cause?: { code?: unknown } } | undefined)?.cause;
  return typeof runtime?.code === "string" && /^(ECONNREFUSED|ENOTFOUND|EAI_AGAIN)$/.test(runtime.code);
}

/** What a client does about an error of Produce, Fetch or ListOffsets. */
export enum Action {
  Fail,
  Retry,
  Refresh,
  NewProducerId,
}

/** classify maps an error to an Action, as the Go client's classify (client/errors.go). */
export function classify(err: unknown): Action {
  if (err instanceof NoLeaderError || err instanceof UnknownPartitionError || err instanceof StrataConnectionError) return Action.Refresh;
  if (err instanceof UnknownTopicError || err instanceof ClosedError || err instanceof CorruptBatchError || err instanceof UnsupportedCodecError || err instanceof InvalidOffsetError || isAuthError(err)) {
    return Action.Fail;
  }
  let code: Code;
  let reason: common.Reason = Reason.UNSPECIFIED;
  if (err instanceof StrataError) {
    code = err.code;
    reason = err.reasonCode;
  } else if (err instanceof ConnectError) {
    code = err.code;
    reason = err.findDetails(ErrorDetailSchema)[0]?.reason ?? Reason.UNSPECIFIED;
  } else if (isTimeout(err)) {
    return Action.Refresh;
  } else {
    return Action.Fail;
  }
  switch (reason) {
    case Reason.NOT_LEADER:
    case Reason.FENCED_LEADER_EPOCH:
    case Reason.UNKNOWN_LEADER_EPOCH:
    case Reason.UNKNOWN_TOPIC_OR_PARTITION:
      return Action.Refresh;
    case Reason.NOT_ENOUGH_REPLICAS:
    case Reason.NOT_ENOUGH_REPLICAS_AFTER_APPEND:
    case Reason.REQUEST_TIMED_OUT:
      return Action.Retry;
    case Reason.UNKNOWN_PRODUCER_ID:
      return Action.NewProducerId;
    case Reason.OUT_OF_ORDER_SEQUENCE:
    case Reason.INVALID_PRODUCER_EPOCH:
    case Reason.PRODUCER_FENCED:
    case Reason.CORRUPT_RECORD:
    case Reason.RECORD_TOO_LARGE:
    case Reason.INVALID_RECORD:
    case Reason.INVALID_TIMESTAMP:
      return Action.Fail;
  }
  switch (code) {
    case Code.Canceled: // a stream reset by a dying node (our own aborts are never classified)
    case Code.Unavailable:
    case Code.Unknown:
    case Code.DeadlineExceeded:
    case Code.Aborted:
    case Code.Internal: // a connection reset mid-call surfaces as internal in some runtimes
      return Action.Refresh;
  }
  return Action.Fail;
}

function isTimeout(err: unknown): boolean {
  return err instanceof Error && (err.name === "TimeoutError" || err.name === "AbortError");
}
