// The group consumer, on the coordinator's heartbeat protocol (KIP-848
// style, docs/design/coordinator.md), as the Go client's GroupConsumer
// (client/group_consumer.go) with kafkajs' run/eachMessage/eachBatch shape.
//
// A background heartbeat reports the subscription and the partitions this
// member owns (plus those assigned and not yet started, so the coordinator
// never frees a partition this member may still start on). The run loop
// reconciles a new assignment between fetch rounds: revoked partitions stop,
// have what was processed committed, and only then stop being reported, so
// no two members own a partition at once. Commits carry the member epoch and
// are fenced by the coordinator.
//
// Per-partition state lives in OwnedPartition and the two requests that
// carry it are built in one place each (heartbeatRequest, commitRequest), so
// a per-partition field of the protocol (an assignment epoch, say) is added
// there and nowhere else.

import { Code, createClient, type Client } from "@connectrpc/connect";
import { coordinator, storage, type common } from "./api.js";
import { positive, type ResolvedConfig } from "./config.js";
import {
  Action,
  ClosedError,
  classify,
  CorruptBatchError,
  detailOf,
  FencedError,
  fromConnect,
  fromDetail,
  isAuthError,
  StrataError,
  UnknownTopicError,
  UnsupportedCodecError,
} from "./errors.js";
import { Cluster } from "./metadata.js";
import { common as commonNs } from "./api.js";
import { decodeBatch, isControl, isLogAppendTime, nextOffset, peekSize } from "./recordbatch.js";
import { Backoff, sleep, tpKey, unrefTimer } from "./util.js";

const { Reason } = commonNs;

type CoordinatorClient = Client<typeof coordinator.CoordinatorService>;

/** A consumed message, as kafkajs' KafkaMessage. Bytes are Buffers in Node, Uint8Arrays in browsers. */
export interface KafkaMessage {
  key: Uint8Array | null;
  value: Uint8Array | null;
  /** Unix ms as a decimal string (the log append time when the topic uses it). */
  timestamp: string;
  /** Offset as a decimal string. */
  offset: string;
  /** Headers by key; a key that repeats gives an array. */
  headers: Record<string, Uint8Array | null | (Uint8Array | null)[]>;
  /** Leader epoch of the batch the message came from. */
  leaderEpoch: number;
  /** Size of key and value in bytes. */
  size: number;
  attributes: number;
}

/** A batch of one partition's messages, as kafkajs' Batch. */
export interface Batch {
  topic: string;
  partition: number;
  highWatermark: string;
  messages: KafkaMessage[];
  isEmpty(): boolean;
  firstOffset(): string | null;
  lastOffset(): string;
  offsetLag(): string;
}

/** What eachMessage receives. */
export interface EachMessagePayload {
  topic: string;
  partition: number;
  message: KafkaMessage;
  /** Heartbeats now (the background heartbeat runs anyway). */
  heartbeat(): Promise<void>;
  /** Pauses this partition; returns a function that resumes it. */
  pause(): () => void;
}

/** What eachBatch receives. */
export interface EachBatchPayload {
  batch: Batch;
  /** Marks messages up to and including offset processed (committed by autoCommit or commitOffsetsIfNecessary). */
  resolveOffset(offset: string): void;
  heartbeat(): Promise<void>;
  /** Commits processed offsets now when autoCommit's interval has passed (always when autoCommit is off). */
  commitOffsetsIfNecessary(): Promise<void>;
  /** False once the consumer is stopping. */
  isRunning(): boolean;
  /** True once this partition was revoked or lost: stop processing the batch. */
  isStale(): boolean;
  pause(): () => void;
}

/** Options of consumer.run. Durations in ms. */
export interface ConsumerRunConfig {
  /** Commit processed offsets every autoCommitInterval, before a revocation and on disconnect. Default true. */
  autoCommit?: boolean;
  /** Default 5000. */
  autoCommitInterval?: number;
  /** eachBatch: resolve the batch's last offset when the handler returns. Default true. */
  eachBatchAutoResolve?: boolean;
  /** Called for each message, in offset order per partition. A throw redelivers the message after a backoff. */
  eachMessage?: (payload: EachMessagePayload) => Promise<void>;
  /** Called for each fetched batch of one partition. A throw redelivers from the first unresolved offset. */
  eachBatch?: (payload: EachBatchPayload) => Promise<void>;
}

/** Options of `strata.consumer(...)`. Durations in ms. */
export interface ConsumerConfig {
  /** Group id. Required. */
  groupId: string;
  /** How long the member may take to give up revoked partitions before the coordinator removes it. Default 300000. */
  rebalanceTimeout?: number;
  /** Long-poll wait of one fetch. Default 500. */
  maxWaitTimeInMs?: number;
  /** Bytes per fetch response. Default 50 MiB. */
  maxBytes?: number;
  /** Bytes per partition per fetch. Default 1 MiB. */
  maxBytesPerPartition?: number;
}

/** A topic and partition. */
export interface TopicPartition {
  topic: string;
  partition: number;
}

/** Events the consumer emits (kafkajs names where kafkajs has one). */
export const ConsumerEvents = {
  GROUP_JOIN: "consumer.group_join",
  /** Partitions gained: payload {partitions}; listeners are awaited before the partitions are fetched. */
  PARTITIONS_ASSIGNED: "consumer.partitions_assigned",
  /** Partitions given up or lost: payload {partitions, lost}; listeners are awaited before release. */
  PARTITIONS_REVOKED: "consumer.partitions_revoked",
  COMMIT_OFFSETS: "consumer.commit_offsets",
  CRASH: "consumer.crash",
} as const;

type Listener = (payload: unknown) => unknown;

/** OwnedPartition is this member's state of one partition it owns. */
class OwnedPartition {
  /** Next offset to fetch; -1 until resolved. */
  pos = -1;
  /** Next offset to commit (one past the last processed message); -1 when nothing processed. */
  processed = -1;
  /** Offset last committed by this member; -1 when none. */
  committed = -1;
  /** Leader epoch of the last processed message; -1 when unknown. */
  leaderEpoch = -1;
  /** Last high watermark seen; -1 before the first fetch. */
  hw = -1;
  paused = false;
  /** Set once revoked or lost: handlers stop, commits skip it. */
  stale = false;
  /** Bumped by seek so a batch being handled stops. */
  seekGen = 0;
  constructor(
    readonly topic: string,
    readonly partition: number,
    /**
     * Member epoch the partition was granted under. Every record handled through this object
     * was read under it, so commits carry it and the coordinator refuses them once the
     * partition has been granted again (records read before a fence never move it back).
     */
    readonly grantEpoch: number,
  ) {}
  get key(): string {
    return tpKey(this.topic, this.partition);
  }
}

/** Consumer is one member of a consumer group. Create it with `strata.consumer({groupId})`. */
export class Consumer {
  private readonly cfg: Required<ConsumerConfig>;
  private readonly cluster: Cluster;
  readonly memberId: string;
  private topics: string[] = [];
  private fromBeginning = false;

  private epoch = 0;
  private interval = 1_000;
  private coordAddr = "";
  private readonly coords = new Map<string, CoordinatorClient>();
  private readonly owned = new Map<string, OwnedPartition>();
  private target: Map<string, TopicPartition> | undefined;
  private targetNew = false;
  private lost: TopicPartition[] = [];
  private readonly pausedKeys = new Set<string>();
  private readonly pendingSeeks = new Map<string, number>();

  private running = false;
  private stopping = false;
  private loopDone: Promise<void> | undefined;
  private hbDone: Promise<void> | undefined;
  private hbKick: (() => void) | undefined;
  private hbKickPending = false; // a kick arrived while a heartbeat was in flight
  private readonly hbAbort = new AbortController();
  private round: AbortController | undefined;
  private wakeResolvers: (() => void)[] = [];
  private commitChain: Promise<unknown> = Promise.resolve();
  private lastCommit = Date.now();
  private runCfg: Required<Omit<ConsumerRunConfig, "eachMessage" | "eachBatch">> & ConsumerRunConfig = {
    autoCommit: true,
    autoCommitInterval: 5_000,
    eachBatchAutoResolve: true,
  };
  private readonly listeners = new Map<string, Listener[]>();
  private closed = false;
  private crashed = false;

  /** @internal use strata.consumer() */
  constructor(
    readonly client: ResolvedConfig,
    cfg: ConsumerConfig,
  ) {
    const problems: string[] = [];
    if (!cfg || typeof cfg.groupId !== "string" || cfg.groupId === "") problems.push("groupId: required");
    this.cfg = {
      groupId: cfg?.groupId,
      rebalanceTimeout: cfg?.rebalanceTimeout ?? 300_000,
      maxWaitTimeInMs: cfg?.maxWaitTimeInMs ?? 500,
      maxBytes: cfg?.maxBytes ?? 50 << 20,
      maxBytesPerPartition: cfg?.maxBytesPerPartition ?? 1 << 20,
    };
    positive(problems, "rebalanceTimeout", this.cfg.rebalanceTimeout);
    positive(problems, "maxBytes", this.cfg.maxBytes);
    positive(problems, "maxBytesPerPartition", this.cfg.maxBytesPerPartition);
    if (!(this.cfg.maxWaitTimeInMs >= 0)) problems.push(`maxWaitTimeInMs ${this.cfg.maxWaitTimeInMs}: must not be negative`);
    if (problems.length) throw new TypeError(`@strata-mq/client: bad consumer config: ${problems.join("; ")}`);
    this.cluster = new Cluster(client);
    this.memberId = newMemberId();
  }

  /** Connects (kafkajs compatibility): checks that the gateway answers. */
  async connect(): Promise<void> {
    try {
      await this.cluster.gw.metadata({ topics: [] }, { timeoutMs: this.client.requestTimeout });
    } catch (e) {
      throw fromConnect(e);
    }
  }

  /**
   * subscribe adds topics to the subscription. fromBeginning: where a
   * partition the group has no committed offset for starts (true: the log
   * start; false, the default as in kafkajs: the end).
   */
  async subscribe(s: { topics?: string[]; topic?: string; fromBeginning?: boolean }): Promise<void> {
    const add = [...(s.topics ?? []), ...(s.topic ? [s.topic] : [])];
    if (add.length === 0) throw new TypeError("@strata-mq/client: subscribe needs {topics: [...]}");
    for (const t of add) {
      if (typeof t !== "string" || t === "") throw new TypeError(`@strata-mq/client: bad topic ${JSON.stringify(t)}`);
      await this.cluster.topic(t); // UnknownTopicError now rather than an empty assignment later
      if (!this.topics.includes(t)) this.topics.push(t);
    }
    this.fromBeginning = s.fromBeginning ?? this.fromBeginning;
    this.kickHeartbeat();
  }

  /** on adds an event listener (ConsumerEvents); returns a function that removes it. */
  on(event: string, listener: Listener): () => void {
    const l = this.listeners.get(event) ?? [];
    l.push(listener);
    this.listeners.set(event, l);
    return () => {
      const cur = this.listeners.get(event) ?? [];
      this.listeners.set(event, cur.filter((x) => x !== listener));
    };
  }

  private async emit(event: string, payload: object): Promise<void> {
    for (const l of this.listeners.get(event) ?? []) {
      try {
        await l({ type: event, timestamp: Date.now(), payload });
      } catch {
        // a listener's failure must not break the group protocol
      }
    }
  }

  /**
   * run joins the group and starts consuming in the background; it resolves
   * once started (as kafkajs). Handlers run one at a time, in offset order per
   * partition.
   */
  async run(cfg: ConsumerRunConfig): Promise<void> {
    if (this.closed) throw new ClosedError("consumer");
    if (this.running) throw new StrataError("consumer is already running");
    if (!cfg || (!cfg.eachMessage && !cfg.eachBatch)) throw new TypeError("@strata-mq/client: run needs eachMessage or eachBatch");
    if (this.topics.length === 0) throw new TypeError("@strata-mq/client: subscribe before run");
    this.runCfg = { ...this.runCfg, ...cfg };
    if (cfg.autoCommitInterval !== undefined) {
      const p: string[] = [];
      positive(p, "autoCommitInterval", cfg.autoCommitInterval);
      if (p.length) throw new TypeError(`@strata-mq/client: bad run config: ${p.join("; ")}`);
    }
    this.running = true;
    if (!this.hbDone) this.hbDone = this.heartbeatLoop();
    this.loopDone = this.loop();
  }

  /** assignment returns the partitions this member owns now, sorted. */
  assignment(): TopicPartition[] {
    return sortTPs([...this.owned.values()].map((o) => ({ topic: o.topic, partition: o.partition })));
  }

  /** The member epoch last granted (0 before joining). */
  memberEpoch(): number {
    return this.epoch;
  }

  /** pause stops fetching the given partitions (all of a topic when partitions is omitted). */
  pause(tps: { topic: string; partitions?: number[] }[]): void {
    for (const k of this.expand(tps)) {
      this.pausedKeys.add(k);
      const o = this.owned.get(k);
      if (o) o.paused = true;
    }
    this.wake();
  }

  /** resume undoes pause. */
  resume(tps: { topic: string; partitions?: number[] }[]): void {
    for (const k of this.expand(tps)) {
      this.pausedKeys.delete(k);
      const o = this.owned.get(k);
      if (o) o.paused = false;
    }
    this.wake();
  }

  /** paused lists paused partitions this member owns. */
  paused(): TopicPartition[] {
    return sortTPs([...this.owned.values()].filter((o) => o.paused).map((o) => ({ topic: o.topic, partition: o.partition })));
  }

  private expand(tps: { topic: string; partitions?: number[] }[]): string[] {
    const out: string[] = [];
    for (const { topic, partitions } of tps) {
      if (partitions) for (const p of partitions) out.push(tpKey(topic, p));
      else {
        const n = this.cluster.known(topic)?.parts.length ?? 0;
        for (let p = 0; p < n; p++) out.push(tpKey(topic, p));
      }
    }
    return out;
  }

  /**
   * seek moves a partition's position to offset (a decimal string or
   * number); the next message delivered is the one at that offset, and with
   * autoCommit the offset is committed as processed. A partition not owned
   * yet starts there when it is assigned.
   */
  seek(s: { topic: string; partition: number; offset: string | number }): void {
    const off = Number(s.offset);
    if (!Number.isSafeInteger(off) || off < 0) throw new TypeError(`@strata-mq/client: bad seek offset ${JSON.stringify(s.offset)}`);
    const k = tpKey(s.topic, s.partition);
    const o = this.owned.get(k);
    if (o) {
      o.pos = off;
      o.processed = off;
      o.seekGen++;
    } else this.pendingSeeks.set(k, off);
    this.wake();
  }

  /** commitOffsets commits explicit offsets (the next offset to consume) of partitions this member owns. */
  async commitOffsets(offsets: { topic: string; partition: number; offset: string | number }[]): Promise<void> {
    const parts: OwnedPartition[] = [];
    const values = new Map<string, number>();
    for (const o of offsets) {
      const k = tpKey(o.topic, o.partition);
      const own = this.owned.get(k);
      if (!own) throw new FencedError(`${o.topic}/${o.partition} is not owned by this member; not committed`, { code: Code.Aborted, reason: Reason.FENCED_MEMBER_EPOCH });
      parts.push(own);
      values.set(k, Number(o.offset));
    }
    await this.commit(parts, values);
  }

  /** disconnect stops consuming, commits what was processed (with autoCommit), leaves the group and releases connections. Safe twice. */
  async disconnect(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.stopping = true;
    this.running = false;
    this.round?.abort();
    this.wake();
    await this.loopDone?.catch(() => undefined);
    let err: unknown;
    if (this.runCfg.autoCommit && this.epoch > 0) {
      try {
        await this.commit([...this.owned.values()]);
      } catch (e) {
        err = e;
      }
    }
    this.hbAbort.abort();
    this.hbKick?.();
    await this.hbDone?.catch(() => undefined);
    if (this.epoch > 0) {
      try {
        await this.coordCall((c, timeoutMs) =>
          c.consumerGroupHeartbeat({ groupId: this.cfg.groupId, memberId: this.memberId, memberEpoch: -1 }, { timeoutMs }),
        );
      } catch (e) {
        err ??= e;
      }
      this.epoch = -1;
    }
    this.owned.clear();
    this.cluster.close();
    if (err) throw err;
  }

  /** stop is disconnect (kafkajs' stop also keeps the connection; here both release everything). */
  stop(): Promise<void> {
    return this.disconnect();
  }

  // ---- the run loop ----

  private wake(): void {
    this.round?.abort();
    const w = this.wakeResolvers;
    this.wakeResolvers = [];
    for (const f of w) f();
  }

  private waitWake(ms: number): Promise<void> {
    return new Promise((r) => {
      const t = setTimeout(r, ms);
      this.wakeResolvers.push(() => {
        clearTimeout(t);
        r();
      });
    });
  }

  private async loop(): Promise<void> {
    const bo = new Backoff(this.client.retryBackoff, this.client.maxRetryBackoff);
    while (this.running) {
      try {
        await this.reconcile();
        if (this.runCfg.autoCommit && Date.now() - this.lastCommit >= this.runCfg.autoCommitInterval) {
          await this.commitProcessed().catch(() => undefined); // retried at the next interval
        }
        const parts = [...this.owned.values()].filter((o) => !o.paused && !o.stale);
        if (parts.length === 0) {
          await this.waitWake(this.targetNew ? 0 : 200);
          continue;
        }
        const unresolved = parts.filter((o) => o.pos < 0);
        if (unresolved.length) await this.resolveStarts(unresolved);
        const got = await this.fetchRound(parts.filter((o) => o.pos >= 0));
        for (const g of got) {
          // A new assignment or a fence is applied before the next
          // partition's messages: revocations must not wait for a whole
          // round. Positions of partitions not handled did not move.
          if (!this.running || this.targetNew || this.lost.length > 0) break;
          const ok = await this.handle(g.op, g.asked, g.records, g.next);
          if (!ok) {
            await sleep(bo.next());
            break;
          }
          bo.reset();
        }
      } catch (e) {
        if (!this.running) break;
        if (e instanceof UnknownTopicError || e instanceof CorruptBatchError || e instanceof UnsupportedCodecError || isAuthError(e)) {
          await this.crash(e);
          break;
        }
        await sleep(bo.next());
      }
    }
  }

  /**
   * crash stops consuming for an error no retry can fix (kafkajs' crash
   * without restart): an unknown topic, a corrupt batch, or a refusal
   * (StrataAuthenticationError, StrataAuthorizationError). The run loop and
   * the heartbeats stop, so the coordinator gives this member's partitions
   * to the others once its session times out; disconnect() still commits
   * what was processed and leaves the group.
   */
  private async crash(error: unknown): Promise<void> {
    if (this.crashed || this.stopping) return; // a refusal while disconnecting is disconnect's to report
    this.crashed = true;
    this.running = false;
    this.hbAbort.abort();
    this.hbKick?.();
    this.wake();
    await this.emit(ConsumerEvents.CRASH, { error, groupId: this.cfg.groupId, restart: false });
  }

  /** handle delivers one partition's fetched messages; false when a handler threw (redelivery after a backoff). */
  private async handle(op: OwnedPartition, asked: number, msgs: KafkaMessage[], next: number): Promise<boolean> {
    if (op.stale || op.pos !== asked || this.owned.get(op.key) !== op) return true;
    const gen = op.seekGen;
    const live = () => this.running && !op.stale && op.seekGen === gen;
    const pause = () => {
      this.pause([{ topic: op.topic, partitions: [op.partition] }]);
      return () => this.resume([{ topic: op.topic, partitions: [op.partition] }]);
    };
    const heartbeat = async () => this.kickHeartbeat();
    if (this.runCfg.eachBatch) {
      let resolved = -1;
      let resolvedEpoch = -1;
      const batch: Batch = {
        topic: op.topic,
        partition: op.partition,
        highWatermark: String(op.hw),
        messages: msgs,
        isEmpty: () => msgs.length === 0,
        firstOffset: () => (msgs.length ? msgs[0]!.offset : null),
        lastOffset: () => (msgs.length ? msgs[msgs.length - 1]!.offset : String(next - 1)),
        offsetLag: () => String(Math.max(0, op.hw - 1 - (msgs.length ? Number(msgs[msgs.length - 1]!.offset) : next - 1))),
      };
      const resolveOffset = (offset: string) => {
        const o = Number(offset);
        if (o + 1 > resolved) {
          resolved = o + 1;
          resolvedEpoch = msgs.find((m) => m.offset === offset)?.leaderEpoch ?? resolvedEpoch;
          if (live()) {
            op.processed = resolved;
            op.leaderEpoch = resolvedEpoch;
          }
        }
      };
      try {
        await this.runCfg.eachBatch({
          batch,
          resolveOffset,
          heartbeat,
          commitOffsetsIfNecessary: async () => {
            if (!this.runCfg.autoCommit || Date.now() - this.lastCommit >= this.runCfg.autoCommitInterval) await this.commitProcessed();
          },
          isRunning: () => this.running,
          isStale: () => op.stale || op.seekGen !== gen,
          pause,
        });
      } catch (e) {
        if (live()) op.pos = resolved >= 0 ? resolved : asked;
        await this.emit(ConsumerEvents.CRASH, { error: e, groupId: this.cfg.groupId, restart: true });
        return false;
      }
      if (!live()) return true;
      if (this.runCfg.eachBatchAutoResolve && msgs.length) resolveOffset(msgs[msgs.length - 1]!.offset);
      if (op.paused && resolved >= 0) op.pos = resolved;
      else op.pos = this.runCfg.eachBatchAutoResolve ? next : resolved >= 0 ? resolved : next;
      return true;
    }
    for (const m of msgs) {
      if (!live()) return true;
      if (op.paused) {
        op.pos = Number(m.offset);
        return true;
      }
      try {
        await this.runCfg.eachMessage!({ topic: op.topic, partition: op.partition, message: m, heartbeat, pause });
      } catch (e) {
        if (live()) op.pos = Number(m.offset);
        await this.emit(ConsumerEvents.CRASH, { error: e, groupId: this.cfg.groupId, restart: true });
        return false;
      }
      if (!live()) return true;
      op.processed = Number(m.offset) + 1;
      op.leaderEpoch = m.leaderEpoch;
    }
    if (live() && !op.paused) op.pos = next;
    return true;
  }

  /** reconcile applies the latest assignment: revoke (commit first), then assign. */
  private async reconcile(): Promise<void> {
    const lost = this.lost;
    this.lost = [];
    if (lost.length) await this.emit(ConsumerEvents.PARTITIONS_REVOKED, { partitions: lost, lost: true });
    if (!this.targetNew || !this.target) return;
    this.targetNew = false;
    const target = this.target;
    const revoked = [...this.owned.values()].filter((o) => !target.has(o.key));
    const added = [...target.entries()].filter(([k]) => !this.owned.has(k)).map(([, tp]) => tp);
    if (revoked.length) {
      if (this.runCfg.autoCommit) await this.commit(revoked).catch(() => undefined);
      for (const o of revoked) o.stale = true;
      await this.emit(ConsumerEvents.PARTITIONS_REVOKED, { partitions: sortTPs(revoked.map(tpOf)), lost: false });
      for (const o of revoked) this.owned.delete(o.key);
    }
    if (added.length) {
      let committed: Map<string, number>;
      try {
        committed = await this.fetchCommitted(added);
      } catch (e) {
        this.targetNew = true; // try again next round
        throw e;
      }
      if (this.target !== target) {
        this.targetNew = true;
      }
      const now: TopicPartition[] = [];
      for (const tp of added) {
        const k = tpKey(tp.topic, tp.partition);
        if (!this.target?.has(k) || this.owned.has(k)) continue;
        const o = new OwnedPartition(tp.topic, tp.partition, this.epoch);
        const c = committed.get(k) ?? -1;
        if (c >= 0) {
          o.pos = c;
          o.processed = c;
          o.committed = c;
        }
        const seek = this.pendingSeeks.get(k);
        if (seek !== undefined) {
          o.pos = seek;
          o.processed = seek;
          this.pendingSeeks.delete(k);
        }
        o.paused = this.pausedKeys.has(k);
        this.owned.set(k, o);
        now.push(tp);
      }
      if (now.length) {
        await this.emit(ConsumerEvents.PARTITIONS_ASSIGNED, { partitions: sortTPs(now) });
        await this.emit(ConsumerEvents.GROUP_JOIN, {
          groupId: this.cfg.groupId,
          memberId: this.memberId,
          memberEpoch: this.epoch,
          memberAssignment: Object.fromEntries(byTopic(this.assignment())),
        });
      }
    }
    if (revoked.length || added.length) this.kickHeartbeat();
  }

  private async fetchCommitted(tps: TopicPartition[]): Promise<Map<string, number>> {
    const byT = new Map<string, number[]>();
    for (const tp of tps) byT.set(tp.topic, [...(byT.get(tp.topic) ?? []), tp.partition]);
    const resp = await this.coordCall((c, timeoutMs) =>
      c.offsetFetch({ groupId: this.cfg.groupId, topics: [...byT].map(([topic, partitions]) => ({ topic, partitions })) }, { timeoutMs }),
    );
    const out = new Map<string, number>();
    for (const o of resp.offsets) out.set(tpKey(o.topic, o.partition), Number(o.committedOffset));
    return out;
  }

  /** resolveStarts sets the position of partitions without a committed offset (log start or end). */
  private async resolveStarts(parts: OwnedPartition[]): Promise<void> {
    const groups = await this.byLeader(parts);
    let refused: StrataError | undefined;
    await Promise.all(
      [...groups].map(async ([addr, g]) => {
        try {
          const resp = await this.cluster.storage(addr).listOffsets(
            {
              partitions: g.map(({ op, epoch }) => ({
                topic: op.topic,
                partition: op.partition,
                currentLeaderEpoch: epoch,
                spec: this.fromBeginning ? storage.OffsetSpec.EARLIEST : storage.OffsetSpec.LATEST,
              })),
            },
            { timeoutMs: this.client.requestTimeout },
          );
          resp.partitions.forEach((r, i) => {
            const op = g[i]?.op;
            if (!op) return;
            if (r.error) {
              const e = fromDetail(r.error);
              if (isAuthError(e)) refused ??= e;
              else this.partitionError(op, e);
              return;
            }
            if (op.pos < 0) op.pos = Number(r.offset);
          });
        } catch (e0) {
          const e = fromConnect(e0);
          if (isAuthError(e)) refused ??= e;
          else await this.cluster.refresh().catch(() => undefined);
        }
      }),
    );
    if (refused) throw refused;
  }

  private async byLeader(parts: OwnedPartition[]): Promise<Map<string, { op: OwnedPartition; epoch: number }[]>> {
    const groups = new Map<string, { op: OwnedPartition; epoch: number }[]>();
    let refresh = false;
    for (const op of parts) {
      try {
        const { info } = await this.cluster.leader(op.topic, op.partition);
        const g = groups.get(info.addr) ?? [];
        g.push({ op, epoch: info.epoch });
        groups.set(info.addr, g);
      } catch (e) {
        if (e instanceof UnknownTopicError) throw e;
        refresh = true;
      }
    }
    if (refresh) await this.cluster.refresh().catch(() => undefined);
    return groups;
  }

  /** partitionError handles a per-partition fetch or ListOffsets failure. */
  private partitionError(op: OwnedPartition, e: StrataError): void {
    if (e.reasonCode === Reason.OFFSET_OUT_OF_RANGE && e.detail?.hint.case === "offsetRange") {
      const h = e.detail.hint.value;
      const lso = Number(h.logStartOffset);
      const hw = Number(h.highWatermark);
      if (op.pos >= 0 && op.pos < lso) op.pos = lso;
      else if (op.pos > hw) op.pos = hw;
      return;
    }
    if (classify(e) === Action.Refresh && !this.cluster.applyHint(e)) void this.cluster.refresh().catch(() => undefined);
  }

  /** fetchRound long-polls every leader at once and returns the answers with messages (the first cancels the rest). */
  private async fetchRound(parts: OwnedPartition[]): Promise<{ op: OwnedPartition; asked: number; records: KafkaMessage[]; next: number }[]> {
    if (parts.length === 0) {
      await this.waitWake(this.client.retryBackoff);
      return [];
    }
    const groups = await this.byLeader(parts);
    if (groups.size === 0) {
      await this.waitWake(this.client.retryBackoff);
      return [];
    }
    const round = new AbortController();
    this.round = round;
    const out: { op: OwnedPartition; asked: number; records: KafkaMessage[]; next: number }[] = [];
    let failures = 0;
    let refused: StrataError | undefined;
    await Promise.all(
      [...groups].map(async ([addr, g]) => {
        const asked = g.map(({ op }) => op.pos);
        let resp: storage.FetchResponse;
        try {
          // A node that throttled this consumer (its fetch quota) is asked
          // again only once the time it gave has passed.
          await this.cluster.throttles.wait(addr, round.signal);
          resp = await this.cluster.storage(addr).fetch(
            {
              maxWaitMs: this.cfg.maxWaitTimeInMs,
              minBytes: 1,
              maxBytes: this.cfg.maxBytes,
              partitions: g.map(({ op, epoch }, i) => ({
                topic: op.topic,
                partition: op.partition,
                fetchOffset: BigInt(asked[i]!),
                currentLeaderEpoch: epoch,
                maxBytes: this.cfg.maxBytesPerPartition,
              })),
            },
            { signal: round.signal, timeoutMs: this.client.requestTimeout + this.cfg.maxWaitTimeInMs },
          );
        } catch (e0) {
          const e = fromConnect(e0);
          if (isAuthError(e)) refused ??= e;
          else if (!round.signal.aborted) {
            failures++;
            await this.cluster.refresh().catch(() => undefined);
          }
          return;
        }
        this.cluster.throttles.note(addr, resp.throttleTimeMs);
        let any = false;
        for (let i = 0; i < resp.partitions.length && i < g.length; i++) {
          const pr = resp.partitions[i]!;
          const op = g[i]!.op;
          if (op.pos !== asked[i] || op.stale) continue;
          if (pr.error) {
            const e = fromDetail(pr.error);
            if (isAuthError(e)) refused ??= e; // a partition this principal may not read
            else this.partitionError(op, e);
            continue;
          }
          op.hw = Number(pr.highWatermark);
          const { msgs, next } = await decodeFrom(pr.records, asked[i]!);
          if (next !== asked[i]) {
            out.push({ op, asked: asked[i]!, records: msgs, next });
            if (msgs.length) any = true;
          }
        }
        if (any) round.abort(); // take what arrived; the other polls' positions did not move
      }),
    );
    if (this.round === round) this.round = undefined;
    if (refused) throw refused;
    if (failures > 0 && out.length === 0) throw new StrataError("fetch failed", { retriable: true });
    return out;
  }

  // ---- commits ----

  private commitProcessed(): Promise<void> {
    this.lastCommit = Date.now();
    return this.commit([...this.owned.values()]);
  }

  /** commitRequest builds the OffsetCommit of the given partitions (their processed offsets, or explicit values). */
  private commitRequest(parts: OwnedPartition[], values?: Map<string, number>): coordinator.OffsetCommitRequest | undefined {
    const partitions: { topic: string; partition: number; committedOffset: bigint; committedLeaderEpoch: number; memberEpoch: number }[] = [];
    for (const o of parts) {
      const v = values?.get(o.key) ?? o.processed;
      if (v < 0 || o.stale || (values === undefined && v === o.committed)) continue;
      partitions.push({ topic: o.topic, partition: o.partition, committedOffset: BigInt(v), committedLeaderEpoch: values ? -1 : o.leaderEpoch, memberEpoch: o.grantEpoch });
    }
    if (partitions.length === 0) return undefined;
    partitions.sort((a, b) => (a.topic < b.topic ? -1 : a.topic > b.topic ? 1 : a.partition - b.partition));
    return { groupId: this.cfg.groupId, memberId: this.memberId, memberEpoch: this.epoch, partitions } as unknown as coordinator.OffsetCommitRequest;
  }

  /** commit sends one commit at a time (in order), fenced by the member epoch. */
  private commit(parts: OwnedPartition[], values?: Map<string, number>): Promise<void> {
    const run = async () => {
      const req = this.commitRequest(parts, values);
      if (!req) return;
      let resp: coordinator.OffsetCommitResponse;
      try {
        resp = await this.coordCall((c, timeoutMs) => c.offsetCommit(req, { timeoutMs }));
      } catch (e) {
        const r = detailOf(e)?.reason;
        if (r === Reason.FENCED_MEMBER_EPOCH || r === Reason.UNKNOWN_MEMBER_ID) {
          throw new FencedError(`commit rejected: ${(e as Error).message}`, { code: Code.Aborted, reason: r, detail: detailOf(e), cause: e });
        }
        throw e;
      }
      const errs: StrataError[] = [];
      resp.partitions.forEach((p, i) => {
        const sent = req.partitions[i];
        if (p.error) {
          const e = fromDetail(p.error);
          errs.push(
            p.error.reason === Reason.FENCED_MEMBER_EPOCH
              ? new FencedError(`commit ${p.topic}/${p.partition}: ${p.error.message}`, { code: Code.Aborted, reason: p.error.reason, detail: p.error })
              : e,
          );
        } else if (sent) {
          const o = this.owned.get(tpKey(sent.topic, sent.partition));
          if (o && Number(sent.committedOffset) > o.committed) o.committed = Number(sent.committedOffset);
        }
      });
      void this.emit(ConsumerEvents.COMMIT_OFFSETS, {
        groupId: this.cfg.groupId,
        memberId: this.memberId,
        topics: req.partitions.map((p) => ({ topic: p.topic, partition: p.partition, offset: String(p.committedOffset) })),
      });
      if (errs.length) throw errs[0];
    };
    const p = this.commitChain.then(run, run);
    this.commitChain = p.catch(() => undefined);
    return p;
  }

  // ---- coordinator ----

  private async coordinator(): Promise<{ c: CoordinatorClient; addr: string }> {
    let addr = this.coordAddr;
    if (addr === "") {
      try {
        const r = await this.cluster.gw.findCoordinator({ groupId: this.cfg.groupId }, { timeoutMs: this.client.requestTimeout });
        addr = r.address;
      } catch (e) {
        throw fromConnect(e);
      }
      this.coordAddr = addr;
    }
    let c = this.coords.get(addr);
    if (!c) {
      c = createClient(coordinator.CoordinatorService, this.cluster.transport(addr));
      this.coords.set(addr, c);
    }
    return { c, addr };
  }

  /** coordCall runs call against the group's coordinator, following NOT_COORDINATOR and finding it again when unreachable. */
  private async coordCall<T>(call: (c: CoordinatorClient, timeoutMs: number) => Promise<T>): Promise<T> {
    const bo = new Backoff(this.client.retryBackoff, this.client.maxRetryBackoff);
    for (let attempt = 1; ; attempt++) {
      let err: unknown;
      let addr = "";
      try {
        const co = await this.coordinator();
        addr = co.addr;
        return await call(co.c, this.client.requestTimeout);
      } catch (e0) {
        err = fromConnect(e0);
      }
      const d = detailOf(err);
      const code = err instanceof StrataError ? err.code : Code.Unknown;
      if (d?.reason === Reason.NOT_COORDINATOR) {
        if (this.coordAddr === addr) this.coordAddr = d.hint.case === "coordinator" ? d.hint.value.address : "";
      } else if (code === Code.Unavailable || code === Code.Unknown || code === Code.DeadlineExceeded || code === Code.Internal) {
        if (this.coordAddr === addr) this.coordAddr = "";
      } else throw err;
      if (attempt >= 20) throw err;
      await sleep(bo.next());
    }
  }

  // ---- heartbeats ----

  private kickHeartbeat(): void {
    if (this.hbKick) this.hbKick();
    else this.hbKickPending = true;
  }

  /** heartbeatRequest builds the member's heartbeat: subscription and owned partitions. */
  private heartbeatRequest(): coordinator.ConsumerGroupHeartbeatRequest {
    const own = new Map<string, TopicPartition>();
    for (const o of this.owned.values()) own.set(o.key, tpOf(o));
    for (const [k, tp] of this.target ?? []) if (!own.has(k)) own.set(k, tp);
    return {
      groupId: this.cfg.groupId,
      memberId: this.memberId,
      memberEpoch: this.epoch,
      subscribedTopicNames: [...this.topics],
      clientId: this.client.clientId,
      rebalanceTimeoutMs: this.cfg.rebalanceTimeout,
      ownedPartitions: [...byTopic(sortTPs([...own.values()]))].map(([topic, partitions]) => ({ topic, partitions })),
    } as unknown as coordinator.ConsumerGroupHeartbeatRequest;
  }

  private async heartbeatLoop(): Promise<void> {
    const bo = new Backoff(this.client.retryBackoff, this.client.maxRetryBackoff);
    while (!this.hbAbort.signal.aborted) {
      let wait: number;
      try {
        wait = await this.heartbeat();
        bo.reset();
      } catch (e) {
        if (isAuthError(e)) {
          void this.crash(e); // the same credentials are refused again
          return;
        }
        wait = bo.next();
      }
      if (this.hbAbort.signal.aborted) return;
      if (this.hbKickPending) {
        // Something changed while the last heartbeat was in flight (a
        // revocation done, say): report it now, not an interval later.
        this.hbKickPending = false;
        continue;
      }
      await new Promise<void>((r) => {
        const t = setTimeout(r, wait);
        this.hbKick = () => {
          clearTimeout(t);
          r();
        };
      });
      this.hbKick = undefined;
    }
  }

  private async heartbeat(): Promise<number> {
    if (this.topics.length === 0) return 200;
    const req = this.heartbeatRequest();
    let co: { c: CoordinatorClient; addr: string };
    try {
      co = await this.coordinator();
    } catch (e) {
      throw e;
    }
    let resp: coordinator.ConsumerGroupHeartbeatResponse;
    try {
      resp = await co.c.consumerGroupHeartbeat(req, { timeoutMs: this.client.requestTimeout, signal: this.hbAbort.signal });
    } catch (e0) {
      const e = fromConnect(e0);
      const d = detailOf(e);
      if (d?.reason === Reason.FENCED_MEMBER_EPOCH || d?.reason === Reason.UNKNOWN_MEMBER_ID) {
        this.fenced();
        return 0; // rejoin at once
      }
      if (d?.reason === Reason.NOT_COORDINATOR) {
        if (this.coordAddr === co.addr) this.coordAddr = d.hint.case === "coordinator" ? d.hint.value.address : "";
      } else if (e instanceof StrataError && [Code.Unavailable, Code.Unknown, Code.DeadlineExceeded, Code.Internal].includes(e.code)) {
        if (this.coordAddr === co.addr) this.coordAddr = "";
      }
      throw e;
    }
    if (req.memberEpoch !== this.epoch || this.stopping) return this.interval; // fenced or leaving meanwhile
    this.epoch = resp.memberEpoch;
    if (resp.heartbeatIntervalMs > 0) this.interval = resp.heartbeatIntervalMs;
    if (resp.assignment) {
      const t = new Map<string, TopicPartition>();
      for (const tps of resp.assignment.partitions) for (const p of tps.partitions) t.set(tpKey(tps.topic, p), { topic: tps.topic, partition: p });
      this.target = t;
      this.targetNew = true;
      this.wake();
    }
    return this.interval;
  }

  /** fenced drops every partition at once and makes the next heartbeat a join. */
  private fenced(): void {
    const lost: TopicPartition[] = [];
    for (const o of this.owned.values()) {
      o.stale = true;
      lost.push(tpOf(o));
    }
    this.owned.clear();
    this.lost.push(...sortTPs(lost));
    this.target = undefined;
    this.targetNew = false;
    this.epoch = 0;
    this.wake();
  }
}

// decodeFrom decodes whole batches and returns the messages at or after
// from and the position after them; a batch cut short at the end is left
// for the next fetch; control batches move the position without messages.
async function decodeFrom(b: Uint8Array, from: number): Promise<{ msgs: KafkaMessage[]; next: number }> {
  let pos = from;
  const msgs: KafkaMessage[] = [];
  while (b.length > 0) {
    let size: number;
    try {
      size = peekSize(b);
    } catch {
      break;
    }
    if (size > b.length) break;
    const { header: h, records } = await decodeBatch(b.subarray(0, size));
    b = b.subarray(size);
    if (!isControl(h)) {
      const lat = isLogAppendTime(h);
      for (const r of records) {
        if (r.offset < pos) continue;
        const headers: Record<string, Uint8Array | null | (Uint8Array | null)[]> = {};
        for (const hd of r.headers) {
          const cur = headers[hd.key];
          if (cur === undefined) headers[hd.key] = hd.value;
          else if (Array.isArray(cur)) cur.push(hd.value);
          else headers[hd.key] = [cur, hd.value];
        }
        msgs.push({
          key: r.key,
          value: r.value,
          timestamp: String(lat ? h.maxTimestamp : r.timestamp),
          offset: String(r.offset),
          headers,
          leaderEpoch: h.partitionLeaderEpoch,
          size: (r.key?.length ?? 0) + (r.value?.length ?? 0),
          attributes: 0,
        });
      }
    }
    pos = Math.max(pos, nextOffset(h));
  }
  return { msgs, next: pos };
}

function tpOf(o: OwnedPartition): TopicPartition {
  return { topic: o.topic, partition: o.partition };
}

function sortTPs(l: TopicPartition[]): TopicPartition[] {
  return l.sort((a, b) => (a.topic < b.topic ? -1 : a.topic > b.topic ? 1 : a.partition - b.partition));
}

function byTopic(l: TopicPartition[]): Map<string, number[]> {
  const m = new Map<string, number[]>();
  for (const tp of l) m.set(tp.topic, [...(m.get(tp.topic) ?? []), tp.partition]);
  return m;
}

function newMemberId(): string {
  const c = globalThis.crypto;
  if (typeof c?.randomUUID === "function") return c.randomUUID();
  const b = new Uint8Array(16);
  c.getRandomValues(b);
  b[6] = (b[6]! & 0x0f) | 0x40;
  b[8] = (b[8]! & 0x3f) | 0x80;
  const h = [...b].map((x) => x.toString(16).padStart(2, "0")).join("");
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

export type { common };
