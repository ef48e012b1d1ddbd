// The producer, as the Go client's (client/producer.go): records are
// routed by key with Kafka's murmur2 partitioner (or to an explicit
// partition, or sticky for unkeyed records), batched per partition for up to
// `linger` ms or `maxBatchBytes`, encoded as RecordBatch v2 here and sent to
// the partition's leader directly, in one Produce per leader node for every
// partition ready for it (NodeSender). At most one batch per partition is in
// flight and a batch is retried (the same bytes, so the leader's idempotence
// check recognizes a duplicate) until it succeeds, fails for good or its
// delivery timeout passes, so a partition's records land in send order.
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
  StrataError,
  UnknownTopicError,
} from "./errors.js";
import type { Logger } from "./logger.js";
import { Cluster, type StorageClient, type TopicInfo } from "./metadata.js";
import { partitionForKey } from "./murmur2.js";
import { buildBatch, Codec, type CodecName, type RecordHeader, type RecordInput } from "./recordbatch.js";
import { traceHeaders, type TracePropagator } from "./tracing.js";
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
  maxBufferedBytes: number;
  propagator: TracePropagator | undefined;
  /** The custom partitioner; undefined for the default (sticky) one. */
  partitioner: Partitioner | undefined;
}

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
    idempotent: c.idempotent ?? acks === common.Acks.ALL,
    linger: c.linger ?? 5,
    maxBatchBytes: c.maxBatchBytes ?? 1 << 20,
    compression: c.compression ?? "none",
    deliveryTimeout: c.deliveryTimeout ?? 120_000,
    maxRetries: c.maxRetries ?? Infinity,
    maxBufferedBytes: c.maxBufferedBytes ?? 64 << 20,
    propagator: c.propagator,
    partitioner,
  };
  if (!(r.linger >= 0)) problems.push(`linger ${r.linger}: must not be negative`);
  positive(problems, "maxBatchBytes", r.maxBatchBytes);
  positive(problems, "deliveryTimeout", r.deliveryTimeout);
  if (!(r.maxRetries >= 0)) problems.push(`maxRetries ${r.maxRetries}: must not be negative`);
  if (r.propagator !== undefined && typeof r.propagator?.inject !== "function") problems.push("propagator: needs an inject(carrier) method");
  positive(problems, "maxBufferedBytes", r.maxBufferedBytes);
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

/** A buffered record. */
interface Pending {
  rec: RecordInput;
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

interface ProducerId {
  id: bigint;
  epoch: number;
  gen: number;
}

/** Producer sends messages to partition leaders in batches. Create it with `strata.producer()`. */
export class Producer {
  private readonly cfg: ResolvedProducerConfig;
  private readonly cluster: Cluster;
  private readonly log: Logger;
  private readonly sinks = new Map<string, Sink>();
  private readonly senders = new Map<string, NodeSender>();
  private readonly sticky = new Map<string, number>();
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

  /** @internal use strata.producer() */
  constructor(
    /** @internal */
    readonly client: ResolvedConfig,
    cfg?: ProducerConfig,
  ) {
    this.cfg = resolveProducerConfig(cfg);
    this.log = client.logger.namespace("Producer");
    this.cluster = new Cluster(client, "Producer.Cluster");
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
  }

  /**
   * send buffers the messages and resolves once every one is acknowledged,
   * with one RecordMetadata per message in order; it rejects with the first
   * failure (the other messages of the call may still have landed). When
   * the buffer is full it waits for room first (see maxBufferedBytes).
   */
  send(record: ProducerRecord): Promise<RecordMetadata[]> {
    return new Promise((resolve, reject) => {
      if (this.closed) {
        reject(new ClosedError("producer"));
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
      const recs: RecordInput[] = new Array(messages.length);
      let bytes = 0;
      try {
        const trace = traceHeaders(this.cfg.propagator); // tracing.ts
        for (let i = 0; i < messages.length; i++) {
          recs[i] = toRecord(messages[i]!, now, trace);
          bytes += recordSize(recs[i]!);
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
            this.done(1, recordSize(rec));
            op.fail(e);
            continue;
          }
          this.sinkFor(topic, part).add({ rec, size: recordSize(rec), at: now, op, index: i, topic, acks, codec });
        }
      };
      const failAll = (e: unknown) => {
        this.done(messages.length, bytes);
        op.fail(e);
      };
      const go = () => {
        const known = this.cluster.known(topic);
        if (known) route(known);
        else this.cluster.topic(topic).then(route, failAll);
      };
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

  /** sendBatch sends to several topics (kafkajs compatibility); results in order, topic by topic. */
  async sendBatch(batch: { topicMessages: ProducerRecord[]; acks?: Acks; compression?: CodecName }): Promise<RecordMetadata[]> {
    const all = await Promise.all(batch.topicMessages.map((tm) => this.send({ acks: batch.acks, compression: batch.compression, ...tm })));
    return all.flat();
  }

  /** flush sends every buffered record now and resolves once all sent so far are done. */
  async flush(): Promise<void> {
    this.flushing++;
    try {
      for (const s of this.sinks.values()) s.kick();
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
      for (const s of this.sinks.values()) {
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
      s = new NodeSender(this, this.cluster, addr, acks, client);
      this.senders.set(k, s);
    }
    return s;
  }

  private sinkFor(topic: string, partition: number): Sink {
    const k = tpKey(topic, partition);
    let s = this.sinks.get(k);
    if (!s) {
      s = new Sink(this, this.cluster, this.cfg, this.log, topic, partition);
      this.sinks.set(k, s);
    }
    return s;
  }

  /** @internal the idempotent producer id, asked of the gateway once per generation. */
  producerId(): Promise<ProducerId> {
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

  /** @internal forgets the id of generation gen: every partition restarts at sequence 0 under a new id. */
  dropProducerId(gen: number): void {
    if (this.pid && this.pidGen === gen) {
      this.pid = undefined;
      this.pidGen++;
    }
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
 * one call in flight, carrying every partition's batch queued for the node
 * meanwhile (ProducePartitions; Produce for a single one, and one Produce
 * per partition to a node of a version without ProducePartitions), each
 * partition with its own answer. A call leaves on the next
 * turn of the event loop after the first batch is queued, so the
 * partitions answered together, whose next batches are built in the
 * continuations of that answer, go together again. Each partition still
 * has one batch in flight, as with one Produce per partition.
 */
class NodeSender {
  private queue: Queued[] = [];
  private busy = false;
  private scheduled = false;
  private legacy = false; // the node has no ProducePartitions: one Produce per partition

  constructor(
    private readonly p: Producer,
    private readonly cluster: Cluster,
    readonly addr: string,
    private readonly acks: common.Acks,
    private readonly client: StorageClient,
  ) {}

  submit(q: Queued): void {
    this.queue.push(q);
    this.schedule();
  }

  private schedule(): void {
    if (this.busy || this.scheduled || this.queue.length === 0) return;
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
          partitions: reqs.map((q) => ({ topic: q.topic, partition: q.partition, leaderEpoch: q.epoch, records: q.records })),
        },
        { timeoutMs: this.p.client.requestTimeout + 5_000, signal: this.p.abort.signal },
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
            { acks: this.acks, timeoutMs: this.p.client.requestTimeout, topic: q.topic, partition: q.partition, leaderEpoch: q.epoch, records: q.records },
            { timeoutMs: this.p.client.requestTimeout + 5_000, signal: this.p.abort.signal },
          );
          this.cluster.throttles.note(this.addr, resp.throttleTimeMs);
          return { ok: true, base: resp.baseOffset, appendTime: resp.logAppendTimeMs };
        } catch (e) {
          return { ok: false, error: e };
        }
      }),
    );
  }

  private async call(): Promise<void> {
    if (this.busy) return;
    const reqs = this.queue.splice(0).filter((q) => !q.abandoned);
    if (reqs.length === 0) return;
    this.busy = true;
    let answers: Answer[] | undefined;
    try {
      if (reqs.length > 1 && !this.legacy) answers = await this.callMany(reqs);
      answers ??= await this.callEach(reqs);
    } finally {
      this.busy = false;
    }
    reqs.forEach((q, i) => q.answer(answers![i]!));
    this.schedule();
  }
}

/** One partition's buffer and sender. */
class Sink {
  /**
   * Aborted by close: ends this sink's waits and its call in flight. One
   * per sink rather than the producer's signal, so a signal never carries
   * more than a listener or two, however many partitions are in flight.
   */
  readonly abort = new AbortController();
  private buf: Pending[] = [];
  private bytes = 0;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private sending = false;
  private seq = 0;
  private seqGen = -1;

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
    if (this.sending) return;
    if (this.bytes >= this.cfg.maxBatchBytes || this.cfg.linger === 0 || this.p.flushing > 0) this.kick();
    else if (this.timer === undefined) this.timer = setTimeout(() => this.kick(), this.cfg.linger);
  }

  /** kick sends the next batch now unless one is in flight. */
  kick(): void {
    if (this.timer !== undefined) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
    if (this.sending || this.buf.length === 0) return;
    const batch = this.take();
    this.sending = true;
    this.p.batchTaken(this.topic, this.partition);
    void this.send(batch).finally(() => {
      this.sending = false;
      if (this.buf.length === 0) return;
      const wait = this.buf[0]!.at + this.cfg.linger - Date.now();
      if (wait <= 0 || this.bytes >= this.cfg.maxBatchBytes || this.p.flushing > 0) this.kick();
      else if (this.timer === undefined) this.timer = setTimeout(() => this.kick(), wait);
    });
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

  /** take cuts the next batch: records of the first one's acks and codec, up to maxBatchBytes. */
  private take(): Pending[] {
    let n = 0;
    let size = 0;
    const first = this.buf[0]!;
    while (n < this.buf.length) {
      const b = this.buf[n]!;
      if (n > 0 && (size + b.size > this.cfg.maxBatchBytes || b.acks !== first.acks || b.codec !== first.codec)) break;
      size += b.size;
      n++;
    }
    const batch = this.buf.splice(0, n);
    this.bytes -= size;
    return batch;
  }

  private async send(batch: Pending[]): Promise<void> {
    const p = this.p;
    const cfg = this.cfg;
    const deadline = batch[0]!.at + cfg.deliveryTimeout;
    const recs = batch.map((b) => b.rec);
    const { acks, codec } = batch[0]!;
    const size = batch.reduce((a, b) => a + b.size, 0);
    const idempotent = cfg.idempotent && acks === common.Acks.ALL;
    const bo = Backoff.of(p.client.retry);
    let bytes: Uint8Array | undefined;
    let builtAt = -1; // producer id generation the bytes carry
    let lastErr: unknown;
    const fail = (e: unknown) => {
      if (idempotent && builtAt >= 0) p.dropProducerId(builtAt); // sequences spent, outcome unknown
      for (const b of batch) b.op.fail(e);
      p.done(batch.length, size);
    };
    const closed = () => (this.abort.signal.aborted ? new ClosedError("producer") : undefined);
    for (let attempt = 0; ; attempt++) {
      if (attempt > 0) {
        if (attempt > cfg.maxRetries) return fail(lastErr);
        const d = bo.next();
        if (Date.now() + d > deadline) return fail(new DeliveryTimeoutError(lastErr));
        this.log.debug("produce failed; retrying", { topic: this.topic, partition: this.partition, attempt, retryInMs: Math.round(d), error: lastErr });
        try {
          await sleep(d, this.abort.signal);
        } catch {
          return fail(closed() ?? new DeliveryTimeoutError(lastErr));
        }
      }
      try {
        let pid: ProducerId | undefined;
        if (idempotent) pid = await p.producerId();
        if (!bytes || (pid && pid.gen !== builtAt)) {
          if (pid) {
            if (this.seqGen !== pid.gen) {
              this.seq = 0;
              this.seqGen = pid.gen;
            }
            bytes = await buildBatch({ codec, idempotent: true, producerId: pid.id, producerEpoch: pid.epoch, baseSequence: this.seq }, recs);
            this.seq = (this.seq + recs.length) % 0x80000000;
            builtAt = pid.gen;
          } else {
            bytes = await buildBatch({ codec }, recs);
          }
        }
      } catch (e) {
        lastErr = e;
        if (classify(e) === Action.Fail) return fail(e);
        continue;
      }
      let info;
      let client;
      try {
        ({ info, client } = await this.cluster.leader(this.topic, this.partition));
      } catch (e) {
        lastErr = e;
        if (e instanceof UnknownTopicError || classify(e) === Action.Fail) return fail(e);
        await this.cluster.refreshQuietly(`no leader for ${this.topic}/${this.partition}`);
        continue;
      }
      // A node that throttled this producer (its produce quota) gets
      // nothing more until the time it asked for has passed.
      try {
        await this.cluster.throttles.wait(info.addr, this.abort.signal);
      } catch (e) {
        return fail(closed() ?? e);
      }
      const timeLeft = deadline - Date.now();
      if (timeLeft <= 0) return fail(new DeliveryTimeoutError(lastErr ?? new StrataError(`no time left to produce to ${info.addr} before the delivery timeout`, { code: Code.DeadlineExceeded })));
      try {
        // The batch goes in its leader node's next Produce, with every
        // other partition ready for that node (NodeSender).
        const sender = p.senderFor(info.addr, acks, client);
        const ans = await this.await(sender, info.epoch, bytes!, timeLeft);
        if (!ans.ok) throw ans.error;
        this.succeed(batch, size, ans.base, ans.appendTime);
        return;
      } catch (e0) {
        if (isAbort(e0) || this.abort.signal.aborted) return fail(closed() ?? e0);
        const e = fromConnect(e0, info.addr);
        lastErr = e;
        if (Date.now() >= deadline) return fail(new DeliveryTimeoutError(e));
        switch (classify(e)) {
          case Action.Fail:
            return fail(e);
          case Action.NewProducerId:
            p.dropProducerId(builtAt);
            break;
          case Action.Refresh:
            if (!this.cluster.applyHint(e)) await this.cluster.refreshQuietly(`produce to ${this.topic}/${this.partition} failed`);
            if (this.cluster.isMissing(this.topic)) return fail(new UnknownTopicError(this.topic));
            break;
        }
      }
    }
  }

  /**
   * await queues the batch with its node's sender and waits for its answer,
   * at most timeLeft ms (then it fails as a timed-out call would) and until
   * close aborts this sink. A batch given up on before its call left is not
   * sent.
   */
  private await(sender: NodeSender, epoch: number, records: Uint8Array, timeLeft: number): Promise<Answer> {
    return new Promise<Answer>((resolve, reject) => {
      const signal = this.abort.signal;
      let timer: ReturnType<typeof setTimeout> | undefined;
      const q: Queued = { topic: this.topic, partition: this.partition, epoch, records, abandoned: false, answer: (a) => done(() => resolve(a)) };
      const onAbort = () => done(() => reject(signal.reason ?? new ClosedError("producer")));
      const done = (settle: () => void) => {
        if (q.abandoned) return;
        q.abandoned = true;
        clearTimeout(timer);
        signal.removeEventListener("abort", onAbort);
        settle();
      };
      if (signal.aborted) return onAbort();
      signal.addEventListener("abort", onAbort);
      timer = setTimeout(
        () => done(() => reject(new StrataError(`produce to ${sender.addr} timed out`, { code: Code.DeadlineExceeded }))),
        Math.max(1, Math.min(this.p.client.requestTimeout + 5_000, timeLeft)),
      );
      sender.submit(q);
    });
  }

  private succeed(batch: Pending[], size: number, base: bigint, appendTime: bigint): void {
    const b = Number(base);
    for (let i = 0; i < batch.length; i++) {
      const pr = batch[i]!;
      pr.op.ack(pr.index, {
        topic: this.topic,
        partition: this.partition,
        offset: b >= 0 ? String(b + i) : "-1",
        timestamp: String(appendTime > 0n ? Number(appendTime) : pr.rec.timestamp),
      });
    }
    this.p.done(batch.length, size);
  }
}

function toRecord(m: Message, now: number, trace: [string, string][] = []): RecordInput {
  if (m === null || typeof m !== "object") throw new TypeError("@strata-mq/client: a message must be an object");
  const headers: RecordHeader[] = [];
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
  let ts = now;
  if (m.timestamp !== undefined && m.timestamp !== null) {
    ts = Number(m.timestamp);
    if (!Number.isSafeInteger(ts)) throw new TypeError(`@strata-mq/client: bad timestamp ${JSON.stringify(m.timestamp)}`);
  }
  return { key: toBytes(m.key), value: toBytes(m.value), headers, timestamp: ts };
}

function recordSize(r: RecordInput): number {
  let n = 21 + (r.key?.length ?? 0) + (r.value?.length ?? 0);
  for (const h of r.headers) n += h.key.length + (h.value?.length ?? 0) + 4;
  return n;
}
