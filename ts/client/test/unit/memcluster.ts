// An in-memory Strata for unit tests, in the spirit of franz-go's kfake:
// the gateway, the storage nodes and a group coordinator as Connect
// handlers behind createRouterTransport (one per base URL, so each storage
// node knows which node it is), with real partition logs of RecordBatch
// bytes, long-polling fetches, a coordinator that assigns every partition
// of the subscribed topics round robin over its members, committed
// offsets, and a fault API: `fault(method, fn)` runs fn before a handler,
// and whatever fn throws is the call's answer; `after(method, fn)` runs fn
// once the handler is done, before its answer leaves (to answer calls in
// another order than they were handled). A leader checks idempotent
// batches as a storage leader does: a known producer's batch must follow
// its last sequence, a duplicate of one of its last five batches is
// answered with the original offsets, an older producer epoch is refused
// and a newer one must start at sequence 0, and a batch ahead of its sequence is
// held until the gap fills or holdMs passes, then refused with
// OUT_OF_ORDER_SEQUENCE; a batch over the topic's max.message.bytes (plus
// the storage node's 64 KiB of framing) is refused with RECORD_TOO_LARGE.
// A transaction coordinator keeps each transactional id's producer id,
// epoch and open transaction (txns): InitTransactionalProducer gives a new
// id epoch 0 and bumps a known one (aborting its open transaction), the
// calls of an older epoch are refused with PRODUCER_FENCED, and EndTxn
// records the decision and, on commit, makes the staged offsets committed.
// It writes no markers: a test that reads reads with readUncommitted or
// records aborted transactions itself.
// A read_committed fetch answers the aborted transactions a test recorded
// (abortedTxn) that overlap what it returns, as a storage node does; every
// transaction is decided, so the last stable offset is the high watermark.
// Every call is recorded
// (method, node, request, whether the caller aborted it). Nothing touches
// the network or the file system.
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, createRouterTransport, type HandlerContext, type Transport } from "@connectrpc/connect";
import { common, controller, coordinator, gateway, storage } from "../../src/api.js";
import { logLevel, Strata, type LogEntry, type StrataConfig } from "../../src/index.js";
import { buildBatch, decodeBatch, parseHeader } from "../../src/recordbatch.js";

export const GATEWAY = "http://gateway.test";
export const COORDINATOR = "http://coordinator.test";
export const node = (id: number) => `http://node-${id}.test`;

/** One recorded call. */
export interface Call {
  method: string;
  /** The base URL the client sent it to. */
  to: string;
  request: unknown;
  at: number;
  /** Set once the caller aborted the call before its answer. */
  aborted: boolean;
  /** Set once answered (or failed). */
  done: boolean;
}

interface Part {
  leader: number;
  epoch: number;
  /** Batches with their base offsets stamped. */
  batches: { base: number; next: number; bytes: Uint8Array }[];
  hw: number;
  /** Idempotent producers' state, by producer id. */
  producers: Map<bigint, ProducerState>;
  /** Aborted transactions: producer, first offset, and the offset of the abort marker. */
  aborted: { producerId: bigint; firstOffset: number; markerOffset: number }[];
}

/** What a leader remembers of an idempotent producer on a partition. */
interface ProducerState {
  epoch: number;
  /** The last sequence appended. */
  last: number;
  /** The last five batches appended: first and last sequence, base offset. */
  recent: { first: number; last: number; base: number }[];
}

interface Topic {
  id: string;
  parts: Part[];
  configs: Record<string, string>;
}

interface Member {
  epoch: number;
  instanceId: string;
  topics: string[];
  sent: string; // the last assignment sent, as a key
  lastBeat: number;
}

type Fault = (req: unknown, to: string) => void | Promise<void>;

/** A failure as a transport reports a node it cannot reach (Node's ECONNREFUSED). */
export function unreachable(to: string): ConnectError {
  const cause = Object.assign(new Error(`connect ECONNREFUSED ${to}`), { code: "ECONNREFUSED" });
  return new ConnectError(cause.message, Code.Unavailable, undefined, undefined, cause);
}

/** A server error with a Strata reason, as the services send them. */
export function reasonError(code: Code, reason: common.Reason, message: string): ConnectError {
  const d = create(common.ErrorDetailSchema, { code: code as number as common.Code, reason, message });
  return new ConnectError(message, code, undefined, [{ desc: common.ErrorDetailSchema, value: d }]);
}

/** A transactional id at the in-memory coordinator. */
export interface MemTxn {
  producerId: bigint;
  epoch: number;
  timeoutMs: number;
  /** Partitions ("topic/partition") and groups of the open transaction. */
  partitions: Set<string>;
  groups: Set<string>;
  /** Offsets staged by TxnOffsetCommit ("topic/partition" → offset). */
  staged: Map<string, number>;
  /** Each ended transaction's partitions and decision, in order. */
  ended: { commit: boolean; partitions: string[]; groups: string[] }[];
}

export class MemCluster {
  readonly topics = new Map<string, Topic>();
  readonly calls: Call[] = [];
  readonly members = new Map<string, Member>();
  readonly commits = new Map<string, number>();
  /** The transaction coordinator's state, by transactional id. */
  readonly txns = new Map<string, MemTxn>();
  readonly heartbeats: coordinator.ConsumerGroupHeartbeatRequest[] = [];
  /** What the clients made by strata() logged (at DEBUG and above). */
  readonly logs: LogEntry[] = [];
  /** Partitions Metadata reports per topic, when fewer than the topic has (metadata lagging behind a CreatePartitions). */
  readonly metadataLag = new Map<string, number>();
  /** Base URLs whose transport fails as unreachable. */
  readonly down = new Set<string>();
  private readonly faults = new Map<string, Fault>();
  private readonly afters = new Map<string, Fault>();
  private producerIds = 9n;
  /** The epoch InitProducerId gives new ids. */
  producerEpoch = 0;
  /** How long a leader holds an idempotent batch that arrived ahead of its sequence. */
  holdMs = 1000;
  private readonly transports = new Map<string, Transport>();
  private waiters: (() => void)[] = [];
  private groupEpoch = 0;
  private version = 1n;

  /** topic creates a topic whose partition p is led by node (p % nodes) + 1. */
  topic(name: string, partitions: number, nodes = 1): this {
    this.topics.set(name, {
      id: `id-${name}`,
      parts: Array.from({ length: partitions }, (_, p) => ({ leader: (p % nodes) + 1, epoch: 1, batches: [], hw: 0, producers: new Map(), aborted: [] })),
      configs: {},
    });
    this.version++;
    return this;
  }

  /** addPartitions raises a topic's partition count, as CreatePartitions does. */
  addPartitions(name: string, total: number, nodes = 1): void {
    const t = this.topics.get(name)!;
    for (let p = t.parts.length; p < total; p++) t.parts.push({ leader: (p % nodes) + 1, epoch: 1, batches: [], hw: 0, producers: new Map(), aborted: [] });
    this.version++;
    for (const m of this.members.values()) m.sent = "";
  }

  /** Whether Metadata carries each topic's configs (the gateway's do); false plays a gateway whose client cannot see them. */
  metadataConfigs = true;

  /** produceFault, when set, answers a partition of a Produce with the detail it returns instead of appending. */
  produceFault: ((topic: string, partition: number) => common.ErrorDetail | undefined) | undefined;

  /** fault makes fn run before every call of method; what it throws is the answer. Undefined removes it. */
  fault(method: string, fn: Fault | undefined): void {
    if (fn) this.faults.set(method, fn);
    else this.faults.delete(method);
  }

  /** after makes fn run after every call of method is handled, before its answer; what it throws is the answer. Undefined removes it. */
  after(method: string, fn: Fault | undefined): void {
    if (fn) this.afters.set(method, fn);
    else this.afters.delete(method);
  }

  /** values returns a partition's record values in log order. */
  async values(topic: string, partition: number): Promise<(string | null)[]> {
    const out: (string | null)[] = [];
    for (const b of this.topics.get(topic)!.parts[partition]!.batches) for (const r of (await decodeBatch(b.bytes)).records) out.push(text(r.value));
    return out;
  }

  /** produce appends values to a partition directly (one batch), as another producer would. */
  async produce(topic: string, partition: number, values: string[], timestamp = Date.now()): Promise<void> {
    const enc = new TextEncoder();
    const b = await buildBatch({}, values.map((v) => ({ key: null, value: enc.encode(v), headers: [], timestamp })));
    this.append(this.topics.get(topic)!.parts[partition]!, b);
  }

  /** appendBatch appends a batch as it was built (transactional batches, markers) and returns its base offset. */
  appendBatch(topic: string, partition: number, b: Uint8Array): number {
    return this.append(this.topics.get(topic)!.parts[partition]!, b);
  }

  /** abortedTxn records an aborted transaction of a partition, which read_committed fetches answer. */
  abortedTxn(topic: string, partition: number, producerId: bigint, firstOffset: number, markerOffset: number): void {
    this.topics.get(topic)!.parts[partition]!.aborted.push({ producerId, firstOffset, markerOffset });
  }

  /** callsOf returns the recorded calls of one method, in order. */
  callsOf(method: string): Call[] {
    return this.calls.filter((c) => c.method === method);
  }

  /** strata returns a client whose every connection goes to this cluster. */
  strata(cfg: Partial<StrataConfig> = {}): Strata {
    return new Strata({
      gateway: GATEWAY,
      transport: (u) => this.transport(u),
      retry: { initialRetryTime: 20, maxRetryTime: 100 },
      logLevel: logLevel.DEBUG,
      logCreator: () => (e) => void this.logs.push(e),
      ...cfg,
    });
  }

  /** transport returns the in-memory transport of a base URL (what the client's transport option gets). */
  transport(baseUrl: string): Transport {
    let t = this.transports.get(baseUrl);
    if (!t) {
      const inner = createRouterTransport((r) => {
        r.service(gateway.GatewayService, this.wrap(baseUrl, this.gatewayImpl()));
        r.service(storage.StorageService, this.wrap(baseUrl, this.storageImpl(baseUrl)));
        r.service(coordinator.CoordinatorService, this.wrap(baseUrl, this.coordinatorImpl()));
      });
      t = {
        unary: async (...a) => {
          if (this.down.has(baseUrl)) throw unreachable(baseUrl);
          return inner.unary(...a);
        },
        stream: async (...a) => {
          if (this.down.has(baseUrl)) throw unreachable(baseUrl);
          return inner.stream(...a);
        },
      };
      this.transports.set(baseUrl, t);
    }
    return t;
  }

  private wrap<T extends object>(to: string, impl: T): T {
    const out: Record<string, unknown> = {};
    for (const [name, fn] of Object.entries(impl)) {
      const method = name[0]!.toUpperCase() + name.slice(1);
      out[name] = async (req: unknown, ctx: HandlerContext) => {
        const call: Call = { method, to, request: req, at: performance.now(), aborted: false, done: false };
        this.calls.push(call);
        const onAbort = () => {
          if (!call.done) call.aborted = true;
        };
        ctx.signal.addEventListener("abort", onAbort, { once: true });
        try {
          // A network round trip yields to timers; an in-memory call that
          // did not would let a busy loop starve them.
          await new Promise((r) => setImmediate(r));
          await this.faults.get(method)?.(req, to);
          const answer = await (fn as (r: unknown, c: HandlerContext) => unknown)(req, ctx);
          await this.afters.get(method)?.(req, to);
          return answer;
        } finally {
          call.done = true;
          ctx.signal.removeEventListener("abort", onAbort);
        }
      };
    }
    return out as T;
  }

  private append(p: Part, b: Uint8Array): number {
    const h = parseHeader(b);
    const base = p.hw;
    const bytes = b.slice();
    new DataView(bytes.buffer).setBigInt64(0, BigInt(base));
    new DataView(bytes.buffer).setInt32(12, p.epoch);
    const next = base + h.lastOffsetDelta + 1;
    p.batches.push({ base, next, bytes });
    p.hw = next;
    const w = this.waiters;
    this.waiters = [];
    for (const f of w) f();
    return base;
  }

  /**
   * appendChecked appends a batch as a leader does, checking an idempotent
   * producer's sequence: the base offset, or the original one for a
   * duplicate; OUT_OF_ORDER_SEQUENCE for a batch behind, or ahead and not
   * reached within holdMs.
   */
  private async appendChecked(p: Part, b: Uint8Array): Promise<number> {
    const h = parseHeader(b);
    if (h.producerId < 0n) return this.append(p, b);
    const first = h.baseSequence;
    const last = first + h.lastOffsetDelta;
    const holdUntil = Date.now() + this.holdMs;
    for (;;) {
      const st = p.producers.get(h.producerId);
      if (st && h.producerEpoch < st.epoch) {
        throw reasonError(Code.Aborted, common.Reason.INVALID_PRODUCER_EPOCH, `producer ${h.producerId}: epoch ${h.producerEpoch}, partition has seen ${st.epoch}`);
      }
      if (st && h.producerEpoch > st.epoch && first !== 0) {
        throw reasonError(Code.FailedPrecondition, common.Reason.OUT_OF_ORDER_SEQUENCE, `producer ${h.producerId}: new epoch ${h.producerEpoch} must start at sequence 0, got ${first}`);
      }
      const dup = st?.epoch === h.producerEpoch ? st.recent.find((r) => r.first === first && r.last === last) : undefined;
      if (dup) return dup.base;
      if (!st || st.epoch !== h.producerEpoch || first === st.last + 1) {
        const base = this.append(p, b);
        const recent = [...(st?.epoch === h.producerEpoch ? st.recent : []), { first, last, base }].slice(-5);
        p.producers.set(h.producerId, { epoch: h.producerEpoch, last, recent });
        return base;
      }
      const wait = holdUntil - Date.now();
      if (first <= st.last || wait <= 0) {
        throw reasonError(Code.FailedPrecondition, common.Reason.OUT_OF_ORDER_SEQUENCE, `producer ${h.producerId}: sequence ${first}, expected ${st.last + 1}`);
      }
      // Ahead of its sequence: held until the log changes or the bound passes.
      await new Promise<void>((r) => {
        const t = setTimeout(r, wait);
        this.waiters.push(() => {
          clearTimeout(t);
          r();
        });
      });
    }
  }

  /**
   * checkSize refuses a batch over the topic's max.message.bytes plus the
   * 64 KiB of framing a storage node allows, as RECORD_TOO_LARGE, before
   * anything is appended (services/storage: validateRequest).
   */
  private checkSize(topic: string, records: Uint8Array): void {
    const limit = Number(this.topics.get(topic)?.configs["max.message.bytes"] ?? 0);
    if (limit > 0 && records.length > limit + 65536) {
      throw reasonError(Code.ResourceExhausted, common.Reason.RECORD_TOO_LARGE, `partlog: batch too large: batch 0 is ${records.length} bytes, limit ${limit + 65536}`);
    }
  }

  private part(topic: string, partition: number): Part {
    const p = this.topics.get(topic)?.parts[partition];
    if (!p) throw reasonError(Code.NotFound, common.Reason.UNKNOWN_TOPIC_OR_PARTITION, `${topic}/${partition}: unknown`);
    return p;
  }

  private describe(name: string, t: Topic): controller.TopicDescription {
    return create(controller.TopicDescriptionSchema, {
      name,
      topicId: t.id,
      replicationFactor: 1,
      partitions: t.parts.map((p, i) => ({ partition: i, leaderId: p.leader, leaderEpoch: p.epoch, replicas: [p.leader], isr: [p.leader] })),
      configs: Object.entries({ "retention.ms": "604800000", ...t.configs }).map(([key, value]) => ({
        key,
        value,
        source: key in t.configs ? controller.ConfigSource.TOPIC : controller.ConfigSource.DEFAULT,
      })),
    });
  }

  private gatewayImpl() {
    return {
      metadata: async (req: gateway.MetadataRequest) => {
        const nodes = new Set<number>();
        for (const t of this.topics.values()) for (const p of t.parts) nodes.add(p.leader);
        const known = req.topics.filter((n) => this.topics.has(n));
        return {
          nodes: [...nodes].map((id) => ({ nodeId: id, address: node(id) })),
          topics: known.map((name) => {
            const t = this.topics.get(name)!;
            const n = Math.min(t.parts.length, this.metadataLag.get(name) ?? Infinity);
            return { name, topicId: t.id, configs: this.metadataConfigs ? { ...t.configs } : {}, partitions: t.parts.slice(0, n).map((p, i) => ({ partition: i, leaderId: p.leader, leaderEpoch: p.epoch, replicas: [p.leader], isr: [p.leader] })) };
          }),
          unknownTopics: req.topics.filter((n) => !this.topics.has(n)),
          metadataVersion: this.version,
        };
      },
      findCoordinator: async () => ({ coordinatorId: "c1", address: COORDINATOR }),
      initProducerId: async () => ({ producerId: this.producerIds++, producerEpoch: this.producerEpoch }),
      listTopics: async () => ({ topics: [...this.topics.keys()].sort().map((name) => ({ name, topicId: this.topics.get(name)!.id, partitions: this.topics.get(name)!.parts.length })) }),
      describeTopics: async (req: gateway.DescribeTopicsRequest) => {
        const missing = req.names.find((n) => !this.topics.has(n));
        if (missing) throw reasonError(Code.NotFound, common.Reason.UNKNOWN_TOPIC_OR_PARTITION, `topic "${missing}" does not exist`);
        return { topics: req.names.map((n) => this.describe(n, this.topics.get(n)!)) };
      },
      createTopic: async (req: gateway.CreateTopicRequest) => {
        if (this.topics.has(req.name)) throw reasonError(Code.AlreadyExists, common.Reason.TOPIC_ALREADY_EXISTS, `topic "${req.name}" already exists`);
        this.topic(req.name, req.partitions || 1);
        return { topic: this.describe(req.name, this.topics.get(req.name)!) };
      },
      createPartitions: async (req: gateway.CreatePartitionsRequest) => {
        const t = this.topics.get(req.topic);
        if (!t) throw reasonError(Code.NotFound, common.Reason.UNKNOWN_TOPIC_OR_PARTITION, `topic "${req.topic}" does not exist`);
        if (!req.validateOnly) this.addPartitions(req.topic, req.total);
        return { topic: this.describe(req.topic, t) };
      },
      alterTopicConfig: async (req: gateway.AlterTopicConfigRequest) => {
        const t = this.topics.get(req.name)!;
        if (!req.validateOnly) {
          Object.assign(t.configs, req.setConfigs);
          for (const k of req.deleteConfigs) delete t.configs[k];
        }
        return { configs: this.describe(req.name, t).configs };
      },
      resetOffsets: async (req: gateway.ResetOffsetsRequest) => {
        if ([...this.members.values()].length > 0) throw reasonError(Code.FailedPrecondition, common.Reason.GROUP_NOT_EMPTY, `group "${req.groupId}" has live members`);
        const out: { topic: string; partition: number; previousOffset: bigint; newOffset: bigint }[] = [];
        for (const tp of req.topics) {
          const t = this.topics.get(tp.topic)!;
          const parts = tp.partitions.length ? tp.partitions : t.parts.map((_, i) => i);
          for (const p of parts) {
            const k = `${tp.topic}/${p}`;
            const prev = this.commits.get(k) ?? -1;
            const hw = t.parts[p]!.hw;
            const v = req.spec === coordinator.ResetSpec.EARLIEST ? 0 : req.spec === coordinator.ResetSpec.LATEST ? hw : Math.min(Math.max(Number(req.offset), 0), hw);
            if (!req.dryRun) this.commits.set(k, v);
            out.push({ topic: tp.topic, partition: p, previousOffset: BigInt(prev), newOffset: BigInt(v) });
          }
        }
        return { partitions: out };
      },
      deleteGroup: async (req: gateway.DeleteGroupRequest) => {
        if (req.groupId === "busy") throw reasonError(Code.FailedPrecondition, common.Reason.GROUP_NOT_EMPTY, `group "busy" has live members`);
        if (req.groupId === "missing") throw reasonError(Code.NotFound, common.Reason.GROUP_ID_NOT_FOUND, `group "missing" does not exist`);
        return {};
      },
    };
  }

  private storageImpl(self: string) {
    return {
      producePartitions: async (req: storage.ProducePartitionsRequest) => {
        const named = new Set(req.partitions.map((pp) => `${pp.topic}/${pp.partition}`));
        if (named.size !== req.partitions.length) throw new ConnectError("a partition is named twice", Code.InvalidArgument);
        // Each partition answered on its own, as a storage node does.
        return {
          partitions: await Promise.all(req.partitions.map(async (pp) => {
            const p = this.part(pp.topic, pp.partition);
            const injected = this.produceFault?.(pp.topic, pp.partition);
            if (injected) return { topic: pp.topic, partition: pp.partition, baseOffset: -1n, logAppendTimeMs: -1n, error: injected };
            if (node(p.leader) !== self) {
              return { topic: pp.topic, partition: pp.partition, baseOffset: -1n, logAppendTimeMs: -1n, error: create(common.ErrorDetailSchema, { code: common.Code.FAILED_PRECONDITION, reason: common.Reason.NOT_LEADER, message: "not the leader" }) };
            }
            let base: number;
            try {
              this.checkSize(pp.topic, pp.records);
              base = await this.appendChecked(p, pp.records);
            } catch (e) {
              const d = (e as ConnectError).findDetails(common.ErrorDetailSchema)[0]!;
              return { topic: pp.topic, partition: pp.partition, baseOffset: -1n, logAppendTimeMs: -1n, error: d };
            }
            return { topic: pp.topic, partition: pp.partition, baseOffset: req.acks === common.Acks.NONE ? -1n : BigInt(base), logAppendTimeMs: -1n };
          })),
        };
      },
      produce: async (req: storage.ProduceRequest) => {
        const p = this.part(req.topic, req.partition);
        const injected = this.produceFault?.(req.topic, req.partition);
        if (injected) throw reasonError(injected.code as number as Code, injected.reason, injected.message);
        if (node(p.leader) !== self) throw reasonError(Code.FailedPrecondition, common.Reason.NOT_LEADER, "not the leader");
        this.checkSize(req.topic, req.records);
        const base = await this.appendChecked(p, req.records);
        return { baseOffset: req.acks === common.Acks.NONE ? -1n : BigInt(base), logAppendTimeMs: -1n };
      },
      fetch: async (req: storage.FetchRequest, ctx: HandlerContext) => {
        const deadline = Date.now() + req.maxWaitMs;
        for (;;) {
          const out = req.partitions.map((fp) => {
            const p = this.part(fp.topic, fp.partition);
            if (node(p.leader) !== self) return { topic: fp.topic, partition: fp.partition, error: create(common.ErrorDetailSchema, { code: common.Code.FAILED_PRECONDITION, reason: common.Reason.NOT_LEADER }) };
            const from = Number(fp.fetchOffset);
            if (from > p.hw) {
              return {
                topic: fp.topic,
                partition: fp.partition,
                error: create(common.ErrorDetailSchema, {
                  code: common.Code.OUT_OF_RANGE,
                  reason: common.Reason.OFFSET_OUT_OF_RANGE,
                  hint: { case: "offsetRange", value: { logStartOffset: 0n, highWatermark: BigInt(p.hw) } },
                }),
              };
            }
            const chunks: Uint8Array[] = [];
            let size = 0;
            let end = from;
            const max = fp.maxBytes || 1 << 20;
            for (const b of p.batches) {
              if (b.next <= from) continue;
              if (chunks.length && size + b.bytes.length > max) break;
              chunks.push(b.bytes);
              size += b.bytes.length;
              end = b.next;
            }
            // As a storage node: the aborted transactions whose marker is at
            // or after the fetch offset and which begin below the end of
            // what is returned; none under read_uncommitted.
            const abortedTransactions =
              req.isolationLevel === common.IsolationLevel.READ_COMMITTED
                ? p.aborted.filter((a) => a.markerOffset >= from && a.firstOffset < end).map((a) => ({ producerId: a.producerId, firstOffset: BigInt(a.firstOffset) }))
                : [];
            const records = new Uint8Array(size);
            let o = 0;
            for (const c of chunks) {
              records.set(c, o);
              o += c.length;
            }
            return { topic: fp.topic, partition: fp.partition, highWatermark: BigInt(p.hw), lastStableOffset: BigInt(p.hw), records, abortedTransactions };
          });
          const bytes = out.reduce((a, x) => a + ("records" in x ? x.records!.length : 0), 0);
          if (bytes >= Math.max(req.minBytes, 1) || out.some((x) => "error" in x) || Date.now() >= deadline || ctx.signal.aborted) return { partitions: out };
          await new Promise<void>((r) => {
            const t = setTimeout(r, deadline - Date.now());
            this.waiters.push(() => {
              clearTimeout(t);
              r();
            });
            ctx.signal.addEventListener("abort", () => r(), { once: true });
          });
        }
      },
      listOffsets: async (req: storage.ListOffsetsRequest) => ({
        partitions: await Promise.all(
          req.partitions.map(async (lp) => {
            const p = this.part(lp.topic, lp.partition);
            let offset = lp.spec === storage.OffsetSpec.EARLIEST ? 0 : p.hw;
            if (lp.spec === storage.OffsetSpec.TIMESTAMP) {
              found: for (const b of p.batches) {
                for (const r of (await decodeBatch(b.bytes)).records) {
                  if (r.timestamp >= Number(lp.timestampMs)) {
                    offset = r.offset;
                    break found;
                  }
                }
              }
            }
            return { topic: lp.topic, partition: lp.partition, offset: BigInt(offset), timestampMs: -1n, leaderEpoch: p.epoch };
          }),
        ),
      }),
    };
  }

  /** assignmentOf is the coordinator's target for a member: the subscribed partitions, round robin over members by id. */
  private assignmentOf(memberId: string): Map<string, number[]> {
    const ids = [...this.members.keys()].sort();
    const out = new Map<string, number[]>();
    const topics = [...new Set([...this.members.values()].flatMap((m) => m.topics))].sort();
    let i = 0;
    for (const t of topics) {
      const n = this.topics.get(t)?.parts.length ?? 0;
      for (let p = 0; p < n; p++, i++) {
        const owner = ids[i % ids.length]!;
        if (owner === memberId && this.members.get(owner)!.topics.includes(t)) out.set(t, [...(out.get(t) ?? []), p]);
      }
    }
    return out;
  }

  /** txnOf is the transactional id of a request, checked against its producer id and epoch. */
  private txnOf(req: { transactionalId: string; producerId: bigint; producerEpoch: number }): MemTxn {
    const t = this.txns.get(req.transactionalId);
    if (!t || t.producerId !== req.producerId) throw reasonError(Code.FailedPrecondition, common.Reason.INVALID_PRODUCER_ID_MAPPING, `producer ${req.producerId} is not ${req.transactionalId}'s`);
    if (req.producerEpoch !== t.epoch) throw reasonError(Code.Aborted, common.Reason.PRODUCER_FENCED, `epoch ${req.producerEpoch} is not ${req.transactionalId}'s ${t.epoch}`);
    return t;
  }

  /** endTxn decides a transaction: a commit makes its staged offsets committed. */
  private endTxn(t: MemTxn, commit: boolean): void {
    if (commit) for (const [k, o] of t.staged) this.commits.set(k, o);
    t.ended.push({ commit, partitions: [...t.partitions].sort(), groups: [...t.groups].sort() });
    t.partitions.clear();
    t.groups.clear();
    t.staged.clear();
  }

  private coordinatorImpl() {
    return {
      consumerGroupHeartbeat: async (req: coordinator.ConsumerGroupHeartbeatRequest) => {
        this.heartbeats.push(req);
        let m = this.members.get(req.memberId);
        if (req.memberEpoch < 0) {
          if (m) {
            this.members.delete(req.memberId);
            this.groupEpoch++;
          }
          return { memberId: req.memberId, memberEpoch: -1 };
        }
        if (req.memberEpoch === 0) {
          m = { epoch: ++this.groupEpoch, instanceId: req.instanceId, topics: [...req.subscribedTopicNames], sent: "", lastBeat: Date.now() };
          this.members.set(req.memberId, m);
        } else if (!m) throw reasonError(Code.NotFound, common.Reason.UNKNOWN_MEMBER_ID, `member ${req.memberId} is not in the group`);
        else if (req.memberEpoch !== m.epoch) throw reasonError(Code.Aborted, common.Reason.FENCED_MEMBER_EPOCH, `member epoch ${req.memberEpoch} is stale, current ${m.epoch}`);
        m.lastBeat = Date.now();
        if (req.subscribedTopicNames.length) m.topics = [...req.subscribedTopicNames];
        const a = this.assignmentOf(req.memberId);
        const key = JSON.stringify([...a]);
        let assignment: coordinator.Assignment | undefined;
        if (key !== m.sent) {
          m.sent = key;
          m.epoch = ++this.groupEpoch;
          assignment = create(coordinator.AssignmentSchema, { partitions: [...a].map(([topic, partitions]) => ({ topic, partitions })) });
        }
        return { memberId: req.memberId, memberEpoch: m.epoch, heartbeatIntervalMs: 100, assignment };
      },
      offsetCommit: async (req: coordinator.OffsetCommitRequest) => {
        const m = this.members.get(req.memberId);
        if (!m) throw reasonError(Code.NotFound, common.Reason.UNKNOWN_MEMBER_ID, `member ${req.memberId} is not in the group`);
        if (req.memberEpoch > m.epoch || req.memberEpoch <= 0) throw reasonError(Code.Aborted, common.Reason.FENCED_MEMBER_EPOCH, `member epoch ${req.memberEpoch} is not current`);
        for (const p of req.partitions) this.commits.set(`${p.topic}/${p.partition}`, Number(p.committedOffset));
        return { partitions: req.partitions.map((p) => ({ topic: p.topic, partition: p.partition })) };
      },
      initTransactionalProducer: async (req: coordinator.InitTransactionalProducerRequest) => {
        let t = this.txns.get(req.transactionalId);
        if (!t) {
          t = { producerId: this.producerIds++, epoch: 0, timeoutMs: req.transactionTimeoutMs, partitions: new Set(), groups: new Set(), staged: new Map(), ended: [] };
          this.txns.set(req.transactionalId, t);
        } else {
          if (req.producerId >= 0n && (req.producerId !== t.producerId || req.producerEpoch !== t.epoch)) {
            throw reasonError(Code.Aborted, common.Reason.PRODUCER_FENCED, `producer ${req.producerId} epoch ${req.producerEpoch} is not current`);
          }
          if (t.partitions.size || t.groups.size) this.endTxn(t, false);
          t.epoch++;
        }
        t.timeoutMs = req.transactionTimeoutMs;
        return { producerId: t.producerId, producerEpoch: t.epoch };
      },
      addPartitionsToTxn: async (req: coordinator.AddPartitionsToTxnRequest) => {
        const t = this.txnOf(req);
        const out: { topic: string; partition: number; error?: common.ErrorDetail }[] = [];
        for (const tp of req.partitions) {
          for (const p of tp.partitions) {
            if (!this.topics.get(tp.topic)?.parts[p]) {
              out.push({ topic: tp.topic, partition: p, error: create(common.ErrorDetailSchema, { code: common.Code.NOT_FOUND, reason: common.Reason.UNKNOWN_TOPIC_OR_PARTITION, message: `no ${tp.topic}/${p}` }) });
            } else {
              t.partitions.add(`${tp.topic}/${p}`);
              out.push({ topic: tp.topic, partition: p });
            }
          }
        }
        return { partitions: out };
      },
      addOffsetsToTxn: async (req: coordinator.AddOffsetsToTxnRequest) => {
        this.txnOf(req).groups.add(req.groupId);
        return {};
      },
      txnOffsetCommit: async (req: coordinator.TxnOffsetCommitRequest) => {
        const t = this.txnOf(req);
        if (!t.groups.has(req.groupId)) throw reasonError(Code.FailedPrecondition, common.Reason.INVALID_TXN_STATE, `group ${req.groupId} is not in the transaction`);
        if (req.memberId !== "") {
          const m = this.members.get(req.memberId);
          if (!m) throw reasonError(Code.NotFound, common.Reason.UNKNOWN_MEMBER_ID, `member ${req.memberId} is not in the group`);
          if (req.memberEpoch !== -1 && req.memberEpoch !== m.epoch) throw reasonError(Code.Aborted, common.Reason.FENCED_MEMBER_EPOCH, `member epoch ${req.memberEpoch} is not current`);
        }
        for (const p of req.partitions) t.staged.set(`${p.topic}/${p.partition}`, Number(p.committedOffset));
        return { partitions: req.partitions.map((p) => ({ topic: p.topic, partition: p.partition })) };
      },
      endTxn: async (req: coordinator.EndTxnRequest) => {
        const t = this.txnOf(req);
        if (t.partitions.size === 0 && t.groups.size === 0) throw reasonError(Code.FailedPrecondition, common.Reason.INVALID_TXN_STATE, "no transaction begun");
        this.endTxn(t, req.commit);
        return {};
      },
      // require_stable (KIP-447): a partition with offsets staged by an
      // open transaction answers UNSTABLE_OFFSET_COMMIT.
      offsetFetch: async (req: coordinator.OffsetFetchRequest) => ({
        offsets: req.topics.flatMap((t) =>
          t.partitions.map((p) => {
            const k = `${t.topic}/${p}`;
            if (req.requireStable && [...this.txns.values()].some((x) => x.staged.has(k))) {
              return { topic: t.topic, partition: p, committedOffset: -1n, committedLeaderEpoch: -1, error: create(common.ErrorDetailSchema, { code: common.Code.UNAVAILABLE, reason: common.Reason.UNSTABLE_OFFSET_COMMIT, message: "offsets staged by an open transaction" }) };
            }
            return { topic: t.topic, partition: p, committedOffset: BigInt(this.commits.get(k) ?? -1), committedLeaderEpoch: -1 };
          }),
        ),
      }),
    };
  }
}

/** text decodes a message value. */
export const text = (b: Uint8Array | null) => (b === null ? null : new TextDecoder().decode(b));

