// The producer, as the Go client's (client/producer.go): records are
// routed by key with Kafka's murmur2 partitioner (or to an explicit
// partition, or sticky for unkeyed records), batched per partition for up to
// `linger` ms or `maxBatchBytes`, encoded as RecordBatch v2 here and sent to
// the partition's leader directly, in one Produce per leader node for every
// partition ready for it (NodeSender). An idempotent producer keeps up to
// maxInFlight (default 5) batches per partition unanswered, numbered in
// order, and completes them in order (Sink, InFlight in inflight.ts); a
// batch is retried (the same bytes, so the leader's idempotence check
// recognizes a duplicate) until it succeeds, fails for good or its delivery
// timeout passes, and a partition that must retry sends its unacknowledged
// batches again one at a time, in order, so its records land in send order.
// A leader that answers with a throttle time (the principal's produce
// quota) gets no produce from this producer until that time has passed;
// a refusal (StrataAuthenticationError, StrataAuthorizationError) fails the
// batch at once. Buffered records are bounded (maxBufferedBytes): a send
// that finds no room waits for acknowledgements to free it, within its
// delivery timeout. Each send may set its own acks and compression; a
// batch only carries records of one setting.

import { Code, ConnectError } from "@connectrpc/connect";
import { common } from "./api.js";
import { positive, type ResolvedConfig } from "./config.js";
import {
  Action,
  ClosedError,
  classify,
  DeliveryTimeoutError,
  fromConnect,
  fromDetail,
  isAbort,
  OutcomeUnknownError,
  StrataError,
  UnknownTopicError,
  unwritten,
} from "./errors.js";
import type { Logger } from "./logger.js";
import { Cluster, type StorageClient, type TopicInfo } from "./metadata.js";
import { partitionForKey } from "./murmur2.js";
import { type BatchState, InFlight } from "./inflight.js";
import { buildBatch, Codec, type CodecName, type RecordHeader, type RecordInput } from "./recordbatch.js";
import { traceHeaders, type TracePropagator } from "./tracing.js";
import { Transaction, TxnState } from "./transaction.js";
import { Backoff, sleep, toBytes, tpKey, unrefTimer } from "./util.js";

/** When a produce is acknowledged: "all" in-sync replicas (-1), the "leader" (1), or "none" (0). */
export type Acks = "all" | "leader" | "none" | -1 | 1 | 0;

/** A header value as kafkajs takes it: text, bytes, or several of them (the key repeats). */
export type HeaderValue = string | Uint8Array | (string | Uint8Array)[] | null | undefined;

/** One message to send, as kafkajs' Message. */
export interface Message {
  /** Key; records with the same key go to the same partition. Default null. */
  key?: string | Uint8Array | null;
  /** Value; null is a tombstone. */
  value: string | Uint8Array | null;
  /** Headers; an array value repeats the key once per element. */
  headers?: Record<string, HeaderValue>;
  /** Explicit partition; overrides the key. */
  partition?: number;
  /** Unix ms, as a number or decimal string. Default: now. */
  timestamp?: string | number;
}

/** Arguments of Producer.send. */
export interface ProducerRecord {
  topic: string;
  messages: Message[];
  /** This send's acks; default the producer's. An idempotent producer takes only "all". */
  acks?: Acks;
  /** This send's compression; default the producer's. */
  compression?: CodecName;
}

/** What a partitioner is asked (kafkajs' shape). */
export interface PartitionerArgs {
  topic: string;
  /** Every partition of the topic with its leader (-1 when it has none). */
  partitionMetadata: { partitionId: number; leader: number }[];
  message: Message;
}

/** Picks a message's partition: an integer in [0, partitions). */
export type Partitioner = (args: PartitionerArgs) => number;

/** Makes a partitioner (kafkajs' createPartitioner); called once per producer. */
export type PartitionerFactory = () => Partitioner;

/**
 * Built-in partitioners. DefaultPartitioner is Kafka's: murmur2 of the key,
 * and for records without a key one partition per batch (sticky), so the
 * same key lands where the Java, Go and librdkafka clients put it.
 * RoundRobinPartitioner puts keyed records where the default does and
 * unkeyed ones on each partition in turn.
 */
export const Partitioners: { DefaultPartitioner: PartitionerFactory; RoundRobinPartitioner: PartitionerFactory } = {
  DefaultPartitioner: () => {
    // Used as a value only: the producer recognizes this factory and runs
    // its own sticky partitioner, which needs to know when a batch leaves.
    return ({ partitionMetadata, message }) => {
      const key = toBytes(message.key);
      return key === null ? Math.floor(Math.random() * partitionMetadata.length) : partitionForKey(key, partitionMetadata.length);
    };
  },
  RoundRobinPartitioner: () => {
    const next = new Map<string, number>();
    return ({ topic, partitionMetadata, message }) => {
      const n = partitionMetadata.length;
      const key = toBytes(message.key);
      if (key !== null) return partitionForKey(key, n);
      const p = (next.get(topic) ?? Math.floor(Math.random() * n)) % n;
      next.set(topic, p + 1);
      return p;
    };
  },
};

/** Where one message landed. `offset` is a decimal string ("-1" with acks none). */
export interface RecordMetadata {
  topic: string;
  partition: number;
  offset: string;
  /** The log append time in Unix ms when the topic uses it, else the record's timestamp, as a decimal string. */
  timestamp: string;
}

/** Options of `strata.producer(...)`. Every duration is in milliseconds. */
export interface ProducerConfig {
  /** Default "all". */
  acks?: Acks;
  /** Idempotent producer ids and sequences (no duplicates on retry). Default true; requires acks "all". */
  idempotent?: boolean;
  /** How long a partition's first buffered record waits for the batch to fill. Default 5. */
  linger?: number;
  /** Uncompressed record bytes per batch; a bigger record goes alone. Default 1 MiB. */
  maxBatchBytes?: number;
  /** Batch compression: "none", "gzip", "snappy", "lz4" or "zstd". Default "none". */
  compression?: CodecName;
  /** Bound from send to acknowledgement, retries and a wait for buffer room included. Default 120000. */
  deliveryTimeout?: number;
  /** Retries per batch within the delivery timeout. Default Infinity. */
  maxRetries?: number;
  /**
   * Batches of one partition sent and not yet answered at once, and
   * Produce calls in flight to one leader node (each carrying at most one
   * batch per partition), 1 to 5. Default 5, as Kafka's
   * max.in.flight.requests.per.connection. Only an idempotent producer
   * pipelines (its sequences let the leader keep a partition's batches in
   * order and drop duplicates); without idempotence it is always 1, as a
   * retried batch could otherwise land behind a later one. 1 sends a
   * partition's next batch only once the previous one is answered.
   */
  maxInFlight?: number;
  /**
   * Bytes of records buffered or in flight, not yet acknowledged. A send
   * that would go past it waits until acknowledgements free room (a send
   * bigger than the whole buffer waits until the buffer is empty), and
   * fails with DeliveryTimeoutError when its delivery timeout passes first.
   * Default 64 MiB.
   */
  maxBufferedBytes?: number;
  /** Picks partitions (kafkajs' createPartitioner). Default Partitioners.DefaultPartitioner. */
  createPartitioner?: PartitionerFactory;
  /**
   * Makes the producer transactional (Kafka's transactional.id): it writes
   * only in transactions (`producer.transaction()`), and a newer producer
   * with the same id fences this one (ProducerFencedError). Implies
   * idempotent (which may not be false) and acks "all". Default none.
   */
  transactionalId?: string;
  /**
   * How long the coordinator lets a transaction stay open before it aborts
   * it (Kafka's transaction.timeout.ms), at most the coordinator's
   * --transaction-max-timeout. Default 60000. Ignored without transactionalId.
   */
  transactionTimeout?: number;
  /**
   * Writes the caller's trace context (W3C traceparent, tracestate) into each
   * message's headers; see tracing.ts. Default none: records carry no trace
   * context.
   */
  propagator?: TracePropagator;
}

/** The producer's options with defaults applied. */
export interface ResolvedProducerConfig {
  acks: common.Acks;
  idempotent: boolean;
  linger: number;
  maxBatchBytes: number;
  compression: CodecName;
  deliveryTimeout: number;
  maxRetries: number;
  /** 1 when not idempotent. */
  maxInFlight: number;
  maxBufferedBytes: number;
  propagator: TracePropagator | undefined;
  /** The custom partitioner; undefined for the default (sticky) one. */
  partitioner: Partitioner | undefined;
  /** "" when not transactional. */
  transactionalId: string;
  transactionTimeout: number;
}

/**
 * The most batches of a partition in flight: the leader remembers the last
 * five batches of a producer to recognize a duplicate, so a batch sent again
 * must be at most five behind the newest.
 */
const MAX_IN_FLIGHT = 5;

/** deliveryCuts holds the timeouts of attempts the delivery timeout ended. */
const deliveryCuts = new WeakSet<object>();

/**
 * After this long with nothing in flight, a partition's next batch goes
 * alone again, as its first did: the leader may have forgotten the
 * producer, and an unknown producer's batch is appended at any sequence, so
 * the batches after it must not overtake it. @internal settable by tests.
 */
export const pipelining = { aloneAfterIdleMs: 3_600_000 };

/** acksOf reads an Acks option; undefined when it is none of the accepted values. */
function acksOf(a: Acks): common.Acks | undefined {
  if (a === "all" || a === -1) return common.Acks.ALL;
  if (a === "leader" || a === 1) return common.Acks.LEADER;
  if (a === "none" || a === 0) return common.Acks.NONE;
  return undefined;
}

function isCodec(c: unknown): c is CodecName {
  return typeof c === "string" && Object.hasOwn(Codec, c);
}

function resolveProducerConfig(c: ProducerConfig = {}): ResolvedProducerConfig {
  const problems: string[] = [];
  const acksIn = c.acks ?? "all";
  const acks = acksOf(acksIn) ?? (problems.push(`acks ${JSON.stringify(acksIn)}: want "all", "leader" or "none"`), common.Acks.ALL);
  if (c.idempotent === true && acks !== common.Acks.ALL) problems.push(`idempotent: needs acks "all"`);
  const transactionalId = c.transactionalId ?? "";
  if (typeof transactionalId !== "string") problems.push("transactionalId: want a string");
  else if (transactionalId !== "") {
    if (c.idempotent === false) problems.push("idempotent: a transactional producer is idempotent");
    if (acks !== common.Acks.ALL) problems.push(`acks: a transactional producer needs acks "all"`);
  }
  let partitioner: Partitioner | undefined;
  if (c.createPartitioner !== undefined && c.createPartitioner !== Partitioners.DefaultPartitioner) {
    if (typeof c.createPartitioner !== "function") problems.push("createPartitioner: want a function returning a partitioner");
    else {
      partitioner = c.createPartitioner();
      if (typeof partitioner !== "function") problems.push("createPartitioner: returned no function");
    }
  }
  const r: ResolvedProducerConfig = {
    acks,
    idempotent: transactionalId !== "" || (c.idempotent ?? acks === common.Acks.ALL),
    linger: c.linger ?? 5,
    maxBatchBytes: c.maxBatchBytes ?? 1 << 20,
    compression: c.compression ?? "none",
    deliveryTimeout: c.deliveryTimeout ?? 120_000,
    maxRetries: c.maxRetries ?? Infinity,
    maxInFlight: c.maxInFlight ?? MAX_IN_FLIGHT,
    maxBufferedBytes: c.maxBufferedBytes ?? 64 << 20,
    propagator: c.propagator,
    partitioner,
    transactionalId,
    transactionTimeout: c.transactionTimeout ?? 60_000,
  };
  if (!(r.linger >= 0)) problems.push(`linger ${r.linger}: must not be negative`);
  positive(problems, "maxBatchBytes", r.maxBatchBytes);
  positive(problems, "deliveryTimeout", r.deliveryTimeout);
  if (!(r.maxRetries >= 0)) problems.push(`maxRetries ${r.maxRetries}: must not be negative`);
  if (!Number.isInteger(r.maxInFlight) || r.maxInFlight < 1 || r.maxInFlight > MAX_IN_FLIGHT) {
    problems.push(`maxInFlight ${JSON.stringify(r.maxInFlight)}: want an integer from 1 to ${MAX_IN_FLIGHT}`);
  }
  if (!r.idempotent) r.maxInFlight = 1;
  if (r.propagator !== undefined && typeof r.propagator?.inject !== "function") problems.push("propagator: needs an inject(carrier) method");
  positive(problems, "maxBufferedBytes", r.maxBufferedBytes);
  if (!Number.isInteger(r.transactionTimeout) || r.transactionTimeout <= 0 || r.transactionTimeout > 0x7fffffff) problems.push(`transactionTimeout ${r.transactionTimeout}: want a positive integer of ms`);
  if (!isCodec(r.compression)) problems.push(`compression ${JSON.stringify(r.compression)}: want "none", "gzip", "snappy", "lz4" or "zstd"`);
  if (problems.length) throw new TypeError(`@strata-mq/client: bad producer config: ${problems.join("; ")}`);
  return r;
}

/** One send() call: its results and its outcome. */
class SendOp {
  readonly results: RecordMetadata[];
  private remaining: number;
  private done = false;
  constructor(
    n: number,
    private readonly resolve: (r: RecordMetadata[]) => void,
    private readonly reject: (e: unknown) => void,
  ) {
    this.results = new Array(n);
    this.remaining = n;
    if (n === 0) this.finish();
  }
  ack(i: number, md: RecordMetadata): void {
    this.results[i] = md;
    if (--this.remaining === 0) this.finish();
  }
  fail(e: unknown): void {
    if (this.done) return;
    this.done = true;
    this.reject(e);
  }
  private finish(): void {
    if (this.done) return;
    this.done = true;
    this.resolve(this.results);
  }
}

/** A buffered record: the record to encode, and where its outcome goes. One object per record. */
interface Pending extends RecordInput {
  size: number;
  at: number;
  op: SendOp;
  index: number;
  topic: string;
  /** This record's acks and codec: a batch carries records of one setting only. */
  acks: common.Acks;
  codec: CodecName;
}

/** A send waiting for buffer room. */
interface RoomWaiter {
  bytes: number;
  go: () => void;
  fail: (e: unknown) => void;
}

/**
 * A producer id and epoch. gen numbers it: from Producer.producerId, which
 * of the ids the gateway gave the producer; from Sink.chainId, the
 * partition's chain.
 */
interface ProducerId {
  id: bigint;
  epoch: number;
  gen: number;
}

/** The largest producer epoch (an int16); a partition's chain past it needs a fresh id. */
const MAX_EPOCH = 0x7fff;

/** Producer sends messages to partition leaders in batches. Create it with `strata.producer()`. */
export class Producer {
  private readonly cfg: ResolvedProducerConfig;
  private readonly cluster: Cluster;
  private readonly log: Logger;
  /** The sinks of each topic by partition: the per-record lookup, with no key string built per record. */
  private readonly topicSinks = new Map<string, Sink[]>();
  private readonly senders = new Map<string, NodeSender>();
  private readonly sticky = new Map<string, number>();
  /** Per topic being looked up, the sends waiting for its routing, in send order (whenRouted). */
  private readonly unrouted = new Map<string, { route: (t: TopicInfo) => void; fail: (e: unknown) => void }[]>();
  /** Per topic, a batch size its leader refused as too large, halved (Sink.split). */
  private readonly learned = new Map<string, number>();
  private closed = false;
  private outstanding = 0;
  private idleWaiters: (() => void)[] = [];
  /** Bytes of records taken in and not yet acknowledged or failed. */
  private buffered = 0;
  private roomWaiters: RoomWaiter[] = [];
  /** @internal flushes in progress: batches leave at once while it is above 0. */
  flushing = 0;
  private pid: Promise<ProducerId> | undefined;
  private pidGen = 0;
  /** @internal aborted by close: waits and calls in flight end with ClosedError. */
  readonly abort = new AbortController();
  /** @internal the transactions of a producer with a transactionalId; undefined otherwise. */
  readonly txn: TxnState | undefined;

  /** @internal use strata.producer() */
  constructor(
    /** @internal */
    readonly client: ResolvedConfig,
    cfg?: ProducerConfig,
  ) {
    this.cfg = resolveProducerConfig(cfg);
    this.log = client.logger.namespace("Producer");
    this.cluster = new Cluster(client, "Producer.Cluster");
    if (this.cfg.transactionalId !== "") {
      this.txn = new TxnState(this.cluster, this.cfg.transactionalId, this.cfg.transactionTimeout, client.requestTimeout, client.retry, this.log);
    }
  }

  /** The resolved options (for inspection). */
  get config(): Readonly<ResolvedProducerConfig> {
    return this.cfg;
  }

  /** connect checks that the gateway answers (kafkajs compatibility; sending does not need it). */
  async connect(): Promise<void> {
    try {
      await this.cluster.gw.metadata({ topics: [] }, { timeoutMs: this.client.requestTimeout });
    } catch (e) {
      throw fromConnect(e, this.cluster.gatewayUrl);
    }
    // A transactional producer takes its id and epoch now, as kafkajs'
    // does: from here on, an older producer of the same id is fenced.
    await this.txn?.producerId();
  }

  /**
   * transaction starts a transaction (kafkajs' producer.transaction()) on a
   * producer made with a transactionalId: the first call asks the
   * coordinator for the id's producer id and epoch (fencing any older
   * producer of the id). One transaction at a time: commit or abort it
   * before the next. Rejects with ProducerFencedError once fenced.
   */
  async transaction(): Promise<Transaction> {
    const txn = this.txn;
    if (!txn) throw new StrataError("transaction: the producer has no transactionalId", { code: Code.FailedPrecondition });
    if (this.closed) throw new ClosedError("producer");
    if (txn.fenced) throw txn.fenced;
    if (txn.current) throw new StrataError("transaction: a transaction is in progress; commit or abort it first", { code: Code.FailedPrecondition, reason: common.Reason.INVALID_TXN_STATE });
    const tx = new Transaction(this, txn);
    txn.begin(tx);
    try {
      await txn.producerId();
    } catch (e) {
      txn.current = undefined;
      throw e;
    }
    return tx;
  }

  /** @internal send within the transaction in progress (Transaction.send). */
  sendInTxn(record: ProducerRecord): Promise<RecordMetadata[]> {
    return this.sendAny(record, true);
  }

  /**
   * send buffers the messages and resolves once every one is acknowledged,
   * with one RecordMetadata per message in order; it rejects with the first
   * failure (the other messages of the call may still have landed). When
   * the buffer is full it waits for room first (see maxBufferedBytes).
   */
  send(record: ProducerRecord): Promise<RecordMetadata[]> {
    return this.sendAny(record, false);
  }

  private sendAny(record: ProducerRecord, inTxn: boolean): Promise<RecordMetadata[]> {
    return new Promise((resolve, reject) => {
      if (this.closed) {
        reject(new ClosedError("producer"));
        return;
      }
      if (this.txn && !(inTxn && this.txn.inTransaction)) {
        reject(new StrataError("send: a transactional producer sends within a transaction: use (await producer.transaction()).send(...)", { code: Code.FailedPrecondition, reason: common.Reason.INVALID_TXN_STATE }));
        return;
      }
      const { topic, messages } = record ?? ({} as ProducerRecord);
      if (typeof topic !== "string" || topic === "" || !Array.isArray(messages)) {
        reject(new TypeError("@strata-mq/client: send needs {topic, messages: [...]}"));
        return;
      }
      const acks = record.acks === undefined ? this.cfg.acks : acksOf(record.acks);
      if (acks === undefined) {
        reject(new TypeError(`@strata-mq/client: send: acks ${JSON.stringify(record.acks)}: want "all", "leader" or "none"`));
        return;
      }
      if (this.cfg.idempotent && acks !== common.Acks.ALL) {
        reject(new TypeError(`@strata-mq/client: send: acks ${JSON.stringify(record.acks)} on an idempotent producer: it needs acks "all" (make the producer with idempotent: false)`));
        return;
      }
      const codec = record.compression ?? this.cfg.compression;
      if (!isCodec(codec)) {
        reject(new TypeError(`@strata-mq/client: send: compression ${JSON.stringify(codec)}: want "none", "gzip", "snappy", "lz4" or "zstd"`));
        return;
      }
      const op = new SendOp(messages.length, resolve, reject);
      const now = Date.now();
      const recs: Pending[] = new Array(messages.length);
      let bytes = 0;
      try {
        const trace = traceHeaders(this.cfg.propagator); // tracing.ts
        for (let i = 0; i < messages.length; i++) {
          const r = toPending(messages[i]!, now, trace, op, i, topic, acks, codec);
          recs[i] = r;
          bytes += r.size;
        }
      } catch (e) {
        reject(e);
        return;
      }
      this.outstanding += messages.length;
      const route = (t: TopicInfo) => {
        for (let i = 0; i < messages.length; i++) {
          const rec = recs[i]!;
          let part: number;
          try {
            part = this.partitionFor(topic, messages[i]!, rec, t);
          } catch (e) {
            this.done(1, rec.size);
            op.fail(e);
            continue;
          }
          this.sinkFor(topic, part).add(rec);
        }
      };
      const failAll = (e: unknown) => {
        this.done(messages.length, bytes);
        op.fail(e);
      };
      const go = () => this.whenRouted(topic, route, failAll);
      this.buffered += bytes;
      if (this.roomWaiters.length === 0 && (this.buffered === bytes || this.buffered <= this.cfg.maxBufferedBytes)) {
        go();
        return;
      }
      // No room: wait for acknowledgements, within the delivery timeout.
      const w: RoomWaiter = { bytes, go: () => undefined, fail: () => undefined };
      const timer = setTimeout(() => {
        this.roomWaiters = this.roomWaiters.filter((x) => x !== w);
        failAll(new DeliveryTimeoutError(new StrataError(`no room in the producer's buffer (maxBufferedBytes ${this.cfg.maxBufferedBytes}) within the delivery timeout`, { code: Code.ResourceExhausted })));
        this.releaseRoom();
      }, this.cfg.deliveryTimeout);
      unrefTimer(timer);
      w.go = () => {
        clearTimeout(timer);
        go();
      };
      w.fail = (e) => {
        clearTimeout(timer);
        failAll(e);
      };
      this.roomWaiters.push(w);
      this.log.debug("send waits for buffer room", { topic, bytes, buffered: this.buffered - bytes });
    });
  }

  /**
   * whenRouted runs route with the topic's routing, or fail when it cannot
   * be had, in send order: while the topic is being looked up, later sends
   * queue behind the lookup rather than each looking it up on its own
   * (each with its own jittered backoff), so a partition's records keep
   * the order of the sends that made them, as Kafka's producer keeps them
   * by blocking send until the topic's metadata is in.
   */
  private whenRouted(topic: string, route: (t: TopicInfo) => void, fail: (e: unknown) => void): void {
    const queued = this.unrouted.get(topic);
    if (queued) {
      queued.push({ route, fail });
      return;
    }
    const known = this.cluster.known(topic);
    if (known) {
      route(known);
      return;
    }
    const waiting = [{ route, fail }];
    this.unrouted.set(topic, waiting);
    this.cluster.topic(topic).then(
      (t) => {
        this.unrouted.delete(topic);
        for (const w of waiting) w.route(t);
      },
      (e) => {
        this.unrouted.delete(topic);
        for (const w of waiting) w.fail(e);
      },
    );
  }

  /** sendBatch sends to several topics (kafkajs compatibility); results in order, topic by topic. */
  async sendBatch(batch: { topicMessages: ProducerRecord[]; acks?: Acks; compression?: CodecName }): Promise<RecordMetadata[]> {
    const all = await Promise.all(batch.topicMessages.map((tm) => this.send({ acks: batch.acks, compression: batch.compression, ...tm })));
    return all.flat();
  }

  /** flush sends every buffered record now and resolves once all sent so far are done. */
  async flush(): Promise<void> {
    this.flushing++;
    try {
      for (const s of this.allSinks()) s.kick();
      if (this.outstanding > 0) await new Promise<void>((r) => this.idleWaiters.push(r));
    } finally {
      this.flushing--;
    }
  }

  /**
   * close flushes, then stops; later sends reject with ClosedError. With a
   * timeout (ms), records not acknowledged by then fail with ClosedError
   * (those in flight may still land) and close resolves. Safe to call twice.
   */
  async close(opts?: { timeout?: number }): Promise<void> {
    this.closed = true;
    const timeout = opts?.timeout;
    if (timeout !== undefined && !(timeout >= 0)) throw new TypeError(`@strata-mq/client: close: timeout ${timeout}: must not be negative`);
    if (timeout === undefined) await this.flush();
    else {
      let timer: ReturnType<typeof setTimeout> | undefined;
      const flushed = await Promise.race([this.flush().then(() => true), new Promise<boolean>((r) => (timer = setTimeout(() => r(false), timeout)))]);
      clearTimeout(timer);
      if (!flushed) this.log.warn("closing with records not acknowledged; they fail with ClosedError", { outstanding: this.outstanding });
    }
    if (!this.abort.signal.aborted) {
      this.abort.abort(new ClosedError("producer"));
      const closed = new ClosedError("producer");
      for (const w of this.roomWaiters.splice(0)) w.fail(closed);
      for (const s of this.senders.values()) s.abort.abort(closed);
      for (const s of this.allSinks()) {
        s.abort.abort(closed);
        s.failBuffered(closed);
      }
    }
    this.cluster.close();
  }

  /** disconnect is close (kafkajs compatibility). */
  disconnect(): Promise<void> {
    return this.close();
  }

  /** partitions returns the number of partitions of a topic. */
  async partitions(topic: string): Promise<number> {
    return (await this.cluster.topic(topic)).parts.length;
  }

  /** @internal n records of `bytes` bytes are done (acknowledged or failed). */
  done(n: number, bytes: number): void {
    this.outstanding -= n;
    this.buffered -= bytes;
    this.releaseRoom();
    if (this.outstanding === 0) {
      const w = this.idleWaiters;
      this.idleWaiters = [];
      for (const f of w) f();
    }
  }

  /** releaseRoom lets waiting sends go, in order, while there is room (or the buffer is empty). */
  private releaseRoom(): void {
    while (this.roomWaiters.length) {
      const w = this.roomWaiters[0]!;
      const before = this.buffered - this.roomWaiters.reduce((a, x) => a + x.bytes, 0);
      if (before > 0 && before + w.bytes > this.cfg.maxBufferedBytes) return;
      this.roomWaiters.shift();
      w.go();
    }
  }

  private partitionFor(topic: string, m: Message, rec: RecordInput, t: TopicInfo): number {
    const n = t.parts.length;
    if (n === 0) throw new StrataError(`topic "${topic}" has no partitions`);
    if (m.partition !== undefined && m.partition !== null) {
      if (!Number.isInteger(m.partition) || m.partition < 0 || m.partition >= n) {
        throw new StrataError(`topic "${topic}" has no partition ${m.partition}`, { code: Code.InvalidArgument });
      }
      return m.partition;
    }
    if (this.cfg.partitioner) {
      const p = this.cfg.partitioner({ topic, partitionMetadata: t.parts.map((x, i) => ({ partitionId: i, leader: x.leader })), message: m });
      if (!Number.isInteger(p) || p < 0 || p >= n) throw new StrataError(`the partitioner chose partition ${p} of topic "${topic}", which has ${n}`, { code: Code.InvalidArgument });
      return p;
    }
    if (rec.key !== null) return partitionForKey(rec.key, n);
    let p = this.sticky.get(topic);
    if (p === undefined || p >= n) {
      p = this.pickSticky(t, Math.floor(Math.random() * n));
      this.sticky.set(topic, p);
    }
    return p;
  }

  private pickSticky(t: TopicInfo, start: number): number {
    const n = t.parts.length;
    for (let i = 0; i < n; i++) {
      const c = (start + i) % n;
      if (t.parts[c]!.leader >= 0) return c;
    }
    return start;
  }

  /** @internal moves a topic's sticky partition on once a batch of it leaves. */
  batchTaken(topic: string, partition: number): void {
    const t = this.cluster.known(topic);
    if (t && this.sticky.get(topic) === partition) this.sticky.set(topic, this.pickSticky(t, (partition + 1) % t.parts.length));
  }

  /** @internal the sender of a leader node's Produce calls of one acks setting. */
  senderFor(addr: string, acks: common.Acks, client: StorageClient): NodeSender {
    const k = `${addr}|${acks}`;
    let s = this.senders.get(k);
    if (!s) {
      s = new NodeSender(this, this.cluster, addr, acks, client, this.cfg.maxInFlight);
      this.senders.set(k, s);
    }
    return s;
  }

  private sinkFor(topic: string, partition: number): Sink {
    let byPart = this.topicSinks.get(topic);
    if (!byPart) {
      byPart = [];
      this.topicSinks.set(topic, byPart);
    }
    let s = byPart[partition];
    if (!s) {
      s = new Sink(this, this.cluster, this.cfg, this.log, topic, partition);
      byPart[partition] = s;
    }
    return s;
  }

  /** allSinks yields every partition's sink made so far. */
  private *allSinks(): Iterable<Sink> {
    for (const byPart of this.topicSinks.values()) {
      for (const s of byPart) if (s) yield s;
    }
  }

  /**
   * @internal the most record bytes a batch of topic may hold, learned
   * from a batch its leader refused as too large (half of it); undefined
   * when none was.
   */
  learnedLimit(topic: string): number | undefined {
    return this.learned.get(topic);
  }

  /** @internal notes that batches of topic must stay within size bytes of records. */
  learnLimit(topic: string, size: number): void {
    const l = this.learned.get(topic);
    if (l === undefined || size < l) this.learned.set(topic, Math.max(1, size));
  }

  /**
   * @internal the idempotent producer id, asked of the gateway once; each
   * partition bumps its own epoch (Sink.chainId). A transactional
   * producer's is the coordinator's (TxnState.producerId), whose epoch no
   * partition bumps (Sink.txnChainId).
   */
  producerId(): Promise<ProducerId> {
    if (this.txn) return this.txn.producerId();
    if (!this.pid) {
      const gen = this.pidGen;
      const p = this.cluster.gw.initProducerId({}, { timeoutMs: this.client.requestTimeout }).then(
        (r) => ({ id: r.producerId, epoch: r.producerEpoch, gen }),
        (e) => {
          if (this.pid === p) this.pid = undefined;
          throw fromConnect(e, this.cluster.gatewayUrl);
        },
      );
      this.pid = p;
    }
    return this.pid;
  }

  /**
   * @internal a producer id other than old, asked of the gateway when the
   * producer's is still old: a partition whose chain used up old's epochs
   * needs another.
   */
  async freshProducerId(old: bigint): Promise<ProducerId> {
    const cur = await this.producerId();
    if (cur.id === old && this.pidGen === cur.gen) {
      this.pid = undefined;
      this.pidGen++;
    }
    return this.producerId();
  }
}

/** One partition's batch queued for its leader node's next Produce. */
interface Queued {
  topic: string;
  partition: number;
  epoch: number;
  records: Uint8Array;
  answer: (a: Answer) => void;
  abandoned: boolean;
}

/** A partition's answer: where its batch landed, or why it failed (its own error or the whole call's). */
type Answer = { ok: true; base: bigint; appendTime: bigint } | { ok: false; error: unknown };

/**
 * NodeSender sends one leader node's produce calls (of one acks setting):
 * up to maxCalls calls in flight (the producer's maxInFlight), each
 * carrying the next queued batch of every partition queued for the node
 * (ProducePartitions; Produce for a single one, and one Produce per
 * partition to a node of a version without ProducePartitions), each
 * partition with its own answer. A call names a partition once: a
 * partition's next batch waits for the node's next call, which leaves
 * after it, so a leader receives a partition's batches in order (it may
 * still handle concurrent calls in another order: it holds a batch that
 * arrives ahead of its sequence). A call leaves on the next turn of the
 * event loop after the first batch is queued, so the partitions answered
 * together, whose next batches are built in the continuations of that
 * answer, go together again.
 */
class NodeSender {
  /**
   * Aborted by close: ends this node's calls in flight. One per node rather
   * than the producer's signal, so a signal carries at most maxCalls
   * listeners, however many nodes there are.
   */
  readonly abort = new AbortController();
  private queue: Queued[] = [];
  private calls = 0;
  private scheduled = false;
  private legacy = false; // the node has no ProducePartitions: one Produce per partition

  constructor(
    private readonly p: Producer,
    private readonly cluster: Cluster,
    readonly addr: string,
    private readonly acks: common.Acks,
    private readonly client: StorageClient,
    private readonly maxCalls: number,
  ) {}

  submit(q: Queued): void {
    this.queue.push(q);
    this.schedule();
  }

  private schedule(): void {
    if (this.calls >= this.maxCalls || this.scheduled || this.queue.length === 0) return;
    this.scheduled = true;
    setTimeout(() => {
      this.scheduled = false;
      void this.call();
    }, 0);
  }

  /** callMany sends one ProducePartitions; undefined when the node does not serve it. */
  private async callMany(reqs: Queued[]): Promise<Answer[] | undefined> {
    try {
      const resp = await this.client.producePartitions(
        {
          acks: this.acks,
          timeoutMs: this.p.client.requestTimeout,
          transactionalId: this.p.config.transactionalId,
          partitions: reqs.map((q) => ({ topic: q.topic, partition: q.partition, leaderEpoch: q.epoch, records: q.records })),
        },
        { timeoutMs: this.p.client.requestTimeout + 5_000, signal: this.abort.signal },
      );
      this.cluster.throttles.note(this.addr, resp.throttleTimeMs);
      return reqs.map((q, i): Answer => {
        const r = resp.partitions[i];
        if (!r || r.topic !== q.topic || r.partition !== q.partition) {
          return { ok: false, error: new StrataError(`produce to ${this.addr}: the answer does not match the request`, { code: Code.Internal }) };
        }
        if (r.error) return { ok: false, error: fromDetail(r.error) };
        return { ok: true, base: r.baseOffset, appendTime: r.logAppendTimeMs };
      });
    } catch (e) {
      if (e instanceof ConnectError && e.code === Code.Unimplemented) {
        // A node of a version before ProducePartitions: one Produce per partition from now on.
        this.legacy = true;
        return undefined;
      }
      return reqs.map(() => ({ ok: false, error: e }));
    }
  }

  /** callEach sends one Produce per partition, all at once. */
  private callEach(reqs: Queued[]): Promise<Answer[]> {
    return Promise.all(
      reqs.map(async (q): Promise<Answer> => {
        try {
          const resp = await this.client.produce(
            { acks: this.acks, timeoutMs: this.p.client.requestTimeout, topic: q.topic, partition: q.partition, leaderEpoch: q.epoch, records: q.records, transactionalId: this.p.config.transactionalId },
            { timeoutMs: this.p.client.requestTimeout + 5_000, signal: this.abort.signal },
          );
          this.cluster.throttles.note(this.addr, resp.throttleTimeMs);
          return { ok: true, base: resp.baseOffset, appendTime: resp.logAppendTimeMs };
        } catch (e) {
          return { ok: false, error: e };
        }
      }),
    );
  }

  /** take removes the next call's batches from the queue: the oldest queued batch of each partition. */
  private take(): Queued[] {
    const reqs: Queued[] = [];
    const rest: Queued[] = [];
    const named = new Set<string>();
    for (const q of this.queue) {
      if (q.abandoned) continue;
      const k = tpKey(q.topic, q.partition);
      if (named.has(k)) rest.push(q);
      else {
        named.add(k);
        reqs.push(q);
      }
    }
    this.queue = rest;
    return reqs;
  }

  private async call(): Promise<void> {
    if (this.calls >= this.maxCalls) return;
    const reqs = this.take();
    if (reqs.length === 0) return;
    this.calls++;
    this.schedule(); // batches left for the next call go now if a call is free
    let answers: Answer[] | undefined;
    try {
      if (reqs.length > 1 && !this.legacy) answers = await this.callMany(reqs);
      answers ??= await this.callEach(reqs);
    } finally {
      this.calls--;
    }
    reqs.forEach((q, i) => q.answer(answers![i]!));
    this.schedule();
  }
}

/** One batch of a partition, from the buffer to its outcome. */
interface Batch {
  state: BatchState;
  records: Pending[];
  /** Bytes of its records (as the buffer counts them). */
  size: number;
  acks: common.Acks;
  codec: CodecName;
  idempotent: boolean;
  /** Its first record's send time plus the delivery timeout. */
  deadline: number;
  /** Its RecordBatch, once built; sent again unchanged while its chain lasts. */
  bytes: Uint8Array | undefined;
  /**
   * The partition's sequence chain (Sink.chain) the bytes were numbered
   * under; -1 before they are built. A half of a split batch has no bytes
   * yet and the chain its sequences (seq) were taken under.
   */
  builtAt: number;
  /** The base sequence under builtAt; -1 before it is numbered. */
  seq: number;
  /** Attempts made. */
  attempts: number;
  backoff: Backoff;
  /** Whether the next attempt waits out the backoff first (not after a refusal for another batch's gap). */
  backoffFirst: boolean;
  /** Whether the next attempt refreshes the metadata first. */
  refresh: boolean;
  /** An attempt under builtAt ended without a refusal: the batch may be in the log, and may not be rebuilt under another id. */
  maybeLanded: boolean;
  lastErr: unknown;
  /** Where it landed, once acknowledged. */
  base: bigint;
  appendTime: bigint;
  /** Why it failed, once failed for good. */
  error: unknown;
}

/**
 * One partition's buffer and sender. Batches are taken from the buffer in
 * order and sent, up to maxInFlight unanswered at once (InFlight); a
 * partition's first batch of a sequence chain goes alone, as does the
 * first after a long idle spell, since the leader takes an unknown
 * producer's batch at any sequence. Answers complete the batches in order.
 * When a batch fails and will be retried, the partition recovers: it sends
 * nothing new, waits for the answers still due, then sends again each
 * unacknowledged batch, oldest first and one at a time (the same bytes, or
 * rebuilt in order from sequence 0 on a new chain), and then
 * pipelines again. One loop (run) sends, so batches are built, numbered and
 * queued with their node in order.
 */
class Sink {
  /**
   * Aborted by close: ends this sink's waits and its calls in flight. One
   * per sink rather than the producer's signal, so a signal never carries
   * more than a few listeners, however many partitions are in flight.
   */
  readonly abort = new AbortController();
  private buf: Pending[] = [];
  private bytes = 0;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private readonly inflight = new InFlight<Batch>();
  /** The send loop (run) is running. */
  private running = false;
  /** pumpSoon's turn is pending: records added meanwhile wait for it. */
  private soon = false;
  /** A batch failed and is to be sent again: nothing new is sent until the partition's unacknowledged batches are. */
  private recovering = false;
  /**
   * The partition's sequence chain (idempotence): chain numbers it, and
   * batches record the chain they were built under (Batch.builtAt); pid
   * is the producer id and epoch of the latest chain that built a batch,
   * that chain as its gen (the current chain's when gen is chain, else the
   * one the next epoch bumps; undefined before the first); seq is the next
   * base sequence. Each partition has its own, so a failure on one
   * partition never moves another's (see dropChain).
   */
  private chain = 0;
  private pid: ProducerId | undefined;
  private seq = 0;
  /** The chain under which a batch of this partition was acknowledged (its batches may pipeline); -1 for none. */
  private confirmedGen = -1;
  /** When the in-flight queue last became empty. */
  private idleSince = 0;
  /** A transactional producer's: the TxnState gen of the id and epoch the chain is under. */
  private txnGen = -1;

  constructor(
    private readonly p: Producer,
    private readonly cluster: Cluster,
    private readonly cfg: ResolvedProducerConfig,
    private readonly log: Logger,
    readonly topic: string,
    readonly partition: number,
  ) {}

  add(pr: Pending): void {
    if (this.p.abort.signal.aborted) {
      pr.op.fail(new ClosedError("producer"));
      this.p.done(1, pr.size);
      return;
    }
    this.buf.push(pr);
    this.bytes += pr.size;
    if (!this.soon) this.pump();
  }

  /** kick sends what is buffered as soon as the in-flight bound lets it (flush). */
  kick(): void {
    this.pump();
  }

  /** pump starts the send loop unless it is running. */
  private pump(): void {
    if (this.running) return;
    this.running = true;
    void this.run();
  }

  /**
   * pumpSoon runs the send loop on the next turn of the event loop. An
   * answer resolves sends, and the application, in their continuations,
   * sends its next records: they all go in this partition's next batch
   * rather than the first few in a small batch and the rest in another.
   */
  private pumpSoon(): void {
    if (this.soon) return;
    this.soon = true;
    setTimeout(() => {
      this.soon = false;
      this.pump();
    }, 0);
  }

  private async run(): Promise<void> {
    try {
      for (let b = this.next(); b; b = this.next()) await this.dispatch(b);
    } finally {
      this.running = false;
    }
  }

  /** next picks the batch to send now: one to send again while recovering, else a new one when the bound, order and linger allow; undefined for none. */
  private next(): Batch | undefined {
    if (this.recovering) {
      const again = this.inflight.resend();
      if (again) return again;
      if (this.inflight.sending() > 0 || this.inflight.waiting()) return undefined;
      this.recovering = false;
    }
    if (this.buf.length === 0 || this.inflight.length >= this.cfg.maxInFlight) return undefined;
    if (this.inflight.length > 0 && this.confirmedGen !== this.chain) return undefined; // the first batch of a chain goes alone
    const limit = this.batchLimit();
    const wait = this.buf[0]!.at + this.cfg.linger - Date.now();
    if (wait > 0 && this.bytes < limit && this.p.flushing === 0) {
      this.timer ??= setTimeout(() => {
        this.timer = undefined;
        this.pump();
      }, wait);
      return undefined;
    }
    if (this.timer !== undefined) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
    if (this.inflight.length === 0 && Date.now() - this.idleSince >= pipelining.aloneAfterIdleMs) this.confirmedGen = -1;
    const b = this.take(limit);
    this.inflight.push(b);
    this.p.batchTaken(this.topic, this.partition);
    return b;
  }

  /** failBuffered fails every record not yet taken into a batch (close with a timeout). */
  failBuffered(e: unknown): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    const buf = this.buf;
    this.buf = [];
    this.bytes = 0;
    for (const b of buf) {
      b.op.fail(e);
      this.p.done(1, b.size);
    }
  }

  /**
   * batchLimit is the most record bytes a batch takes: maxBatchBytes,
   * capped at the topic's max.message.bytes when the metadata gives it and
   * below any batch size the leader refused as too large (learnLimit), so
   * a batch is not refused again (a record bigger still goes alone).
   */
  private batchLimit(): number {
    let limit = this.cfg.maxBatchBytes;
    const mmb = this.cluster.known(this.topic)?.maxMessageBytes ?? 0;
    if (mmb > 0) limit = Math.min(limit, mmb);
    return Math.min(limit, this.p.learnedLimit(this.topic) ?? limit);
  }

  /** take cuts the next batch: records of the first one's acks and codec, up to limit bytes (batchLimit). */
  private take(limit: number): Batch {
    let n = 0;
    let size = 0;
    const first = this.buf[0]!;
    while (n < this.buf.length) {
      const b = this.buf[n]!;
      if (n > 0 && (size + b.size > limit || b.acks !== first.acks || b.codec !== first.codec)) break;
      size += b.size;
      n++;
    }
    const records = this.buf.splice(0, n);
    this.bytes -= size;
    return {
      state: "sending",
      records,
      size,
      acks: first.acks,
      codec: first.codec,
      idempotent: this.cfg.idempotent && first.acks === common.Acks.ALL,
      deadline: first.at + this.cfg.deliveryTimeout,
      bytes: undefined,
      builtAt: -1,
      seq: -1,
      attempts: 0,
      backoff: Backoff.of(this.p.client.retry),
      backoffFirst: false,
      refresh: false,
      maybeLanded: false,
      lastErr: undefined,
      base: -1n,
      appendTime: -1n,
      error: undefined,
    };
  }

  private closed(): ClosedError | undefined {
    return this.abort.signal.aborted ? new ClosedError("producer") : undefined;
  }

  /**
   * dispatch makes one attempt at a batch: it waits out the backoff of a
   * retry, builds the batch (numbering it) when it has no bytes for the
   * current producer id, finds the leader and queues the batch with the
   * leader node's sender. The answer comes to answered.
   */
  private async dispatch(b: Batch): Promise<void> {
    const p = this.p;
    const cfg = this.cfg;
    b.state = "sending";
    if (b.attempts > 0) {
      if (b.attempts > cfg.maxRetries) return this.fail(b, b.lastErr);
      if (b.backoffFirst) {
        const d = b.backoff.next();
        if (Date.now() + d > b.deadline) return this.fail(b, new DeliveryTimeoutError(b.lastErr));
        this.log.debug("produce failed; retrying", { topic: this.topic, partition: this.partition, attempt: b.attempts, retryInMs: Math.round(d), error: b.lastErr });
        try {
          await sleep(d, this.abort.signal);
        } catch {
          return this.fail(b, this.closed() ?? new DeliveryTimeoutError(b.lastErr));
        }
      }
    }
    b.attempts++;
    if (b.refresh) {
      b.refresh = false;
      await this.cluster.refreshQuietly(`produce to ${this.topic}/${this.partition} failed`);
      if (this.cluster.isMissing(this.topic)) return this.fail(b, new UnknownTopicError(this.topic));
    }
    try {
      let pid: ProducerId | undefined;
      if (b.idempotent) pid = await this.chainId();
      // A transaction's first batch to a partition waits for the
      // coordinator to add the partition (AddPartitionsToTxn).
      if (p.txn) await p.txn.addPartition(this.topic, this.partition);
      if (!b.bytes || (pid && pid.gen !== b.builtAt)) {
        if (pid) {
          if (b.maybeLanded) {
            // Under a new epoch (or id) the leader could not tell it from
            // the copy that may be in the log: failing it is the only way
            // not to risk a duplicate.
            return this.fail(b, new OutcomeUnknownError(b.lastErr));
          }
          if (this.inflight.before(b).some((x) => x.state !== "acked" && x.builtAt !== pid!.gen)) {
            // A batch ahead of this one is still of the old chain: it is to
            // be numbered first, so this one waits for the partition to recover.
            return this.retryLater(b, b.lastErr, false);
          }
          let seq: number;
          if (b.builtAt === pid.gen) {
            seq = b.seq; // a half of a split batch: numbered when that batch was
          } else {
            seq = this.seq;
            this.seq = (this.seq + b.records.length) % 0x80000000;
          }
          b.bytes = await buildBatch({ codec: b.codec, idempotent: true, transactional: p.txn !== undefined, producerId: pid.id, producerEpoch: pid.epoch, baseSequence: seq }, b.records);
          b.builtAt = pid.gen;
          b.seq = seq;
        } else {
          b.bytes = await buildBatch({ codec: b.codec }, b.records);
        }
      }
    } catch (e) {
      return this.failed(b, e, false);
    }
    let info;
    let client;
    try {
      ({ info, client } = await this.cluster.leader(this.topic, this.partition));
    } catch (e) {
      if (!(e instanceof UnknownTopicError) && classify(e) !== Action.Fail) b.refresh = true;
      return this.failed(b, e, false);
    }
    // A node that throttled this producer (its produce quota) gets
    // nothing more until the time it asked for has passed.
    try {
      await this.cluster.throttles.wait(info.addr, this.abort.signal);
    } catch (e) {
      return this.fail(b, this.closed() ?? e);
    }
    const timeLeft = b.deadline - Date.now();
    if (timeLeft <= 0) {
      return this.fail(b, new DeliveryTimeoutError(b.lastErr ?? new StrataError(`no time left to produce to ${info.addr} before the delivery timeout`, { code: Code.DeadlineExceeded })));
    }
    // The batch goes in its leader node's next Produce, with every other
    // partition ready for that node (NodeSender).
    this.submit(p.senderFor(info.addr, b.acks, client), b, info.epoch, timeLeft);
  }

  /**
   * chainId is the current chain's producer id and epoch, with the chain
   * as gen; a new chain starts at sequence 0 under the producer's id at
   * first, then under the next epoch of the previous chain's id, or a
   * fresh id once its epochs are used up. This is Kafka's epoch bump for
   * an idempotent producer (KIP-360,
   * TransactionManager.bumpIdempotentEpochAndResetIdIfNeeded), per
   * partition: the leader takes a newer epoch at sequence 0, forgets the
   * older one's sequences and refuses the older epoch from then on
   * (INVALID_PRODUCER_EPOCH), so a copy of an old batch still on its way
   * cannot land after the new chain's batches.
   */
  private async chainId(): Promise<ProducerId> {
    if (this.p.txn) return this.txnChainId();
    let pid = this.pid;
    while (pid?.gen !== this.chain) {
      const chain = this.chain;
      let next: { id: bigint; epoch: number };
      if (pid === undefined) next = await this.p.producerId();
      else if (pid.epoch >= MAX_EPOCH) next = await this.p.freshProducerId(pid.id);
      else next = { id: pid.id, epoch: pid.epoch + 1 };
      // An answer meanwhile may have ended this chain too, or another
      // call started it: then look again.
      if (this.pid === pid && this.chain === chain) {
        this.pid = { id: next.id, epoch: next.epoch, gen: chain };
        this.seq = 0;
      }
      pid = this.pid;
    }
    return pid;
  }

  /**
   * txnChainId is chainId for a transactional producer: the epoch is the
   * coordinator's, not the partition's to bump, so a chain lasts as long
   * as the producer's id and epoch (TxnState.producerId) and a new one
   * starts at sequence 0 when the producer takes the next epoch after an
   * aborted transaction with a failed batch.
   */
  private async txnChainId(): Promise<ProducerId> {
    const cur = await this.p.producerId();
    if (this.pid === undefined || this.txnGen !== cur.gen) {
      if (this.pid !== undefined) this.chain++;
      this.txnGen = cur.gen;
      this.pid = { id: cur.id, epoch: cur.epoch, gen: this.chain };
      this.seq = 0;
    }
    return this.pid;
  }

  /**
   * dropChain ends the partition's chain when a batch built under it
   * (chain gen) failed for good after its sequences were spent, or the
   * leader lost track of the producer: the batches not yet acknowledged
   * are rebuilt on a new chain from sequence 0, except those that may
   * have landed, which fail (OutcomeUnknownError). Other partitions keep
   * theirs.
   */
  private dropChain(gen: number): void {
    if (this.p.txn) return; // the chain follows the transactional epoch (txnChainId)
    if (gen === this.chain) this.chain++;
  }

  /**
   * submit queues the batch with its node's sender; its answer comes to
   * answered within timeLeft ms (then it fails as a timed-out call would)
   * and before close aborts this sink. A batch given up on before its call
   * left is not sent.
   */
  private submit(sender: NodeSender, b: Batch, epoch: number, timeLeft: number): void {
    const signal = this.abort.signal;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const q: Queued = { topic: this.topic, partition: this.partition, epoch, records: b.bytes!, abandoned: false, answer: (a) => done(a) };
    const onAbort = () => done({ ok: false, error: signal.reason ?? new ClosedError("producer") });
    const done = (a: Answer) => {
      if (q.abandoned) return;
      q.abandoned = true;
      clearTimeout(timer);
      signal.removeEventListener("abort", onAbort);
      this.answered(b, a, sender.addr);
    };
    if (signal.aborted) return onAbort();
    signal.addEventListener("abort", onAbort);
    const wait = this.p.client.requestTimeout + 5_000;
    const cut = timeLeft < wait; // the delivery timeout ends this attempt, not the call's own
    timer = setTimeout(() => {
      const e = new StrataError(`produce to ${sender.addr} timed out`, { code: Code.DeadlineExceeded });
      if (cut) deliveryCuts.add(e);
      done({ ok: false, error: e });
    }, Math.max(1, Math.min(wait, timeLeft)));
    sender.submit(q);
  }

  /** answered takes a batch's answer from its leader. */
  private answered(b: Batch, a: Answer, addr: string): void {
    if (a.ok) {
      b.state = "acked";
      b.base = a.base;
      b.appendTime = a.appendTime;
      if (b.builtAt === this.chain) this.confirmedGen = b.builtAt;
      this.complete();
      return;
    }
    if (isAbort(a.error) || this.abort.signal.aborted) return this.fail(b, this.closed() ?? a.error);
    const e = fromConnect(a.error, addr);
    this.failed(b, e, !unwritten(e, b.acks));
  }

  /**
   * failed decides what a failed attempt leads to: the batch fails for
   * good, or waits to be sent again while the partition recovers. A
   * refusal for its sequence is retriable when a batch ahead of it is not
   * acknowledged or it carries a dropped producer id: the leader held it
   * behind a gap. Otherwise it means the leader lost track of this
   * producer, as with one batch in flight, and fails the batch.
   */
  private failed(b: Batch, e: unknown, mayHaveLanded: boolean): void {
    if (mayHaveLanded) b.maybeLanded = true;
    if (Date.now() >= b.deadline) {
      // An attempt the delivery timeout cut short says nothing new: the
      // cause is what the cluster last answered, when it answered at all.
      const cause = deliveryCuts.has(e as object) && b.lastErr !== undefined ? b.lastErr : e;
      return this.fail(b, new DeliveryTimeoutError(cause));
    }
    if (e instanceof StrataError && e.reasonCode === common.Reason.RECORD_TOO_LARGE && b.records.length > 1 && !b.maybeLanded) return this.split(b, e);
    let action = e instanceof UnknownTopicError ? Action.Fail : classify(e);
    const heldBehindGap = e instanceof StrataError && e.reasonCode === common.Reason.OUT_OF_ORDER_SEQUENCE && (this.inflight.unresolvedBefore(b) || b.builtAt !== this.chain);
    if (heldBehindGap) action = Action.Retry;
    if (this.p.txn && action === Action.NewProducerId) action = Action.Fail; // the transaction can only abort now
    switch (action) {
      case Action.Fail:
        return this.fail(b, this.p.txn ? this.p.txn.fencedOr(e) : e);
      case Action.NewProducerId:
        this.dropChain(b.builtAt);
        break;
      case Action.Refresh:
        if (!this.cluster.applyHint(e)) b.refresh = true;
        break;
    }
    this.retryLater(b, e, !heldBehindGap);
  }

  /**
   * split puts the two halves of a batch the leader refused as too large
   * (RECORD_TOO_LARGE: over the topic's max.message.bytes) in its place,
   * to be sent in order once the partition's answers are in, as Kafka's
   * producer does (KIP-126; Sender.completeBatch splits a batch of more
   * than one record refused with MESSAGE_TOO_LARGE and does not count it
   * as a retry). A half still too large is split again, so only a single
   * record over the limit fails. The halves keep the batch's chain and
   * its sequences, the first from its base sequence and
   * the second after the first, as ProducerBatch.split numbers them: the
   * leader refused the batch before appending it, so it still expects that
   * base sequence, and the batches numbered after it stay valid. A batch
   * that may have landed is not split (its halves would not match the copy
   * that may be in the log); the caller fails it. Half the refused size is
   * remembered for the topic (learnLimit), and the first half refreshes
   * the metadata, which may show the topic's new limit, so the next
   * batches are cut within it.
   */
  private split(b: Batch, e: unknown): void {
    const k = b.records.length >> 1;
    const half = (records: Pending[], seq: number, refresh: boolean): Batch => ({
      ...b,
      state: "waiting",
      records,
      size: records.reduce((n, r) => n + r.size, 0),
      bytes: undefined,
      seq,
      attempts: 0,
      backoff: Backoff.of(this.p.client.retry),
      backoffFirst: false,
      refresh,
      lastErr: e,
    });
    this.p.learnLimit(this.topic, Math.floor(b.size / 2));
    const first = half(b.records.slice(0, k), b.seq, true);
    const second = half(b.records.slice(k), b.seq < 0 ? -1 : (b.seq + k) % 0x80000000, false);
    this.log.debug("batch too large for the topic; sending it again in two halves", { topic: this.topic, partition: this.partition, records: b.records.length, bytes: b.bytes?.length, error: e });
    this.inflight.replace(b, [first, second]);
    this.recovering = true;
    this.pump();
  }

  /** retryLater marks a batch to be sent again once the partition's answers are in. */
  private retryLater(b: Batch, e: unknown, backoff: boolean): void {
    if (!this.recovering) this.log.debug("produce failed; the partition sends its unacknowledged batches again, in order", { topic: this.topic, partition: this.partition, inFlight: this.inflight.length, error: e });
    b.state = "waiting";
    b.lastErr = e;
    b.backoffFirst = backoff;
    this.recovering = true;
    this.pump();
  }

  /**
   * fail fails a batch for good; the partition's batches after it are
   * rebuilt on a new chain. A batch that may have landed fails with
   * OutcomeUnknownError, as the Go producer's with ErrOutcomeUnknown,
   * unless its error already says as much (a delivery timeout, a close).
   */
  private fail(b: Batch, e: unknown): void {
    if (b.maybeLanded && !(e instanceof OutcomeUnknownError || e instanceof DeliveryTimeoutError || e instanceof ClosedError)) e = new OutcomeUnknownError(e);
    b.state = "failed";
    b.error = e;
    if (this.p.txn && b.builtAt >= 0) this.p.txn.batchFailed(e);
    if (b.idempotent && b.builtAt >= 0) this.dropChain(b.builtAt); // sequences spent, outcome unknown
    this.complete();
  }

  /** complete reports the batches at the head of the queue whose outcome is final, in order, and sends on. */
  private complete(): void {
    for (const b of this.inflight.complete()) {
      if (b.state === "acked") this.succeed(b);
      else {
        for (const r of b.records) r.op.fail(b.error);
        this.p.done(b.records.length, b.size);
      }
    }
    if (this.inflight.length === 0) this.idleSince = Date.now();
    this.pumpSoon();
  }

  private succeed(batch: Batch): void {
    const b = Number(batch.base);
    // Records of one send share a timestamp: its text is made once per run of equal ones.
    let ts = NaN;
    let tsText = "";
    const appendTime = batch.appendTime > 0n ? Number(batch.appendTime) : -1;
    for (let i = 0; i < batch.records.length; i++) {
      const pr = batch.records[i]!;
      const t = appendTime > 0 ? appendTime : pr.timestamp;
      if (t !== ts) {
        ts = t;
        tsText = String(t);
      }
      pr.op.ack(pr.index, {
        topic: this.topic,
        partition: this.partition,
        offset: b >= 0 ? String(b + i) : "-1",
        timestamp: tsText,
      });
    }
    this.p.done(batch.records.length, batch.size);
  }
}

/** The headers of a record without any, shared (nothing appends to a record's headers once made). */
const NO_HEADERS: RecordHeader[] = Object.freeze([]) as unknown as RecordHeader[];

/** toPending makes a message into the record to buffer, with its size and where its outcome goes. */
function toPending(m: Message, now: number, trace: [string, string][], op: SendOp, index: number, topic: string, acks: common.Acks, codec: CodecName): Pending {
  if (m === null || typeof m !== "object") throw new TypeError("@strata-mq/client: a message must be an object");
  let ts = now;
  if (m.timestamp !== undefined && m.timestamp !== null) {
    ts = Number(m.timestamp);
    if (!Number.isSafeInteger(ts)) throw new TypeError(`@strata-mq/client: bad timestamp ${JSON.stringify(m.timestamp)}`);
  }
  let headers = NO_HEADERS;
  if (m.headers || trace.length > 0) {
    headers = [];
    if (m.headers) {
      for (const [k, v] of Object.entries(m.headers)) {
        if (v === undefined) continue;
        if (Array.isArray(v)) for (const x of v) headers.push({ key: k, value: toBytes(x) });
        else headers.push({ key: k, value: toBytes(v) });
      }
    }
    // A message that carries its own traceparent keeps its trace context
    // whole: the propagator's tracestate belongs to another trace.
    if (!m.headers || m.headers["traceparent"] === undefined) {
      for (const [k, v] of trace) headers.push({ key: k, value: toBytes(v) });
    }
  }
  const key = toBytes(m.key);
  const value = toBytes(m.value);
  return { key, value, headers, timestamp: ts, size: recordSize(key, value, headers), at: now, op, index, topic, acks, codec };
}

function recordSize(key: Uint8Array | null, value: Uint8Array | null, headers: RecordHeader[]): number {
  let n = 21 + (key?.length ?? 0) + (value?.length ?? 0);
  // Indexed, not for-of: an iterator per record is an allocation per record.
  for (let i = 0; i < headers.length; i++) {
    const h = headers[i]!;
    n += h.key.length + (h.value?.length ?? 0) + 4;
  }
  return n;
}
