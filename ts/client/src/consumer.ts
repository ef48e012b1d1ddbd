// The group consumer, on the coordinator's heartbeat protocol (KIP-848
// style, docs/design/coordinator.md), as the Go client's GroupConsumer
// (client/group_consumer.go) with kafkajs' run/eachMessage/eachBatch shape.
//
// The Consumer wires four collaborators, each in its own file under
// consumer/: the Membership (heartbeats, assignments, fences, leaving), the
// Fetcher (one Fetch in flight per leader), the Dispatcher (handlers, their
// retries and the dead-letter callback) and the Committer (OffsetCommit and
// OffsetFetch). What is left here is the control loop that applies each new
// assignment between them: revoked partitions stop being handled, have
// what was processed committed, and only then stop being reported, so no
// two members own a partition at once; added partitions start at their
// committed offset. A crash (a refusal, a corrupt batch, a handler failing
// past its retries) stops all four, commits what was processed, leaves the
// group and emits consumer.crash; restartOnFailure decides whether it
// joins again.

import { Code } from "@connectrpc/connect";
import { common } from "./api.js";
import { positive, resolveRetry, type ResolvedConfig, type ResolvedRetry } from "./config.js";
import { ClosedError, FencedError, fromConnect, isAuthError, parseOffset, StrataError } from "./errors.js";
import type { Logger } from "./logger.js";
import { Cluster } from "./metadata.js";
import { Committer } from "./consumer/committer.js";
import { CoordinatorLink } from "./consumer/coordinator.js";
import { Dispatcher, type ResolvedRunConfig } from "./consumer/dispatcher.js";
import { ConsumerEvents, Emitter, type ConsumerEventName, type ConsumerListener } from "./consumer/events.js";
import { Fetcher, type FetchLimits } from "./consumer/fetcher.js";
import { Membership } from "./consumer/membership.js";
import { byTopic, OwnedPartition, sortTPs, tpOf } from "./consumer/partition.js";
import type { ConsumerConfig, ConsumerRunConfig, ConsumerSubscribeTopics, EachBatchPayload, TopicPartition } from "./consumer/types.js";
import { Backoff, sleep, tpKey, unrefTimer } from "./util.js";

export { ConsumerEvents } from "./consumer/events.js";
export type {
  BatchEventPayload,
  ConsumerEventName,
  ConsumerEventPayloads,
  ConsumerListener,
  InstrumentationEvent,
  TopicOffsets,
} from "./consumer/events.js";
export type {
  Batch,
  ConsumerConfig,
  ConsumerRetryOptions,
  ConsumerRunConfig,
  ConsumerSubscribeTopics,
  DeadLetterPayload,
  EachBatchPayload,
  EachMessagePayload,
  KafkaMessage,
  TopicPartition,
  TopicPartitionOffset,
} from "./consumer/types.js";

const { Reason } = common;

interface ResolvedConsumerConfig extends FetchLimits {
  groupId: string;
  groupInstanceId: string;
  rebalanceTimeout: number;
  serverAssignor: string;
  retry: ResolvedRetry;
  restartOnFailure: (e: Error) => Promise<boolean>;
}

type State = "idle" | "running" | "crashed" | "stopping" | "closed";

/** Consumer is one member of a consumer group. Create it with `strata.consumer({groupId})`. Not safe to run twice at once. */
export class Consumer {
  /** The member id, a UUID kept for the consumer's lifetime (rejoins included). */
  readonly memberId: string;
  /** Event names (kafkajs' consumer.events). */
  readonly events = ConsumerEvents;
  private readonly cfg: ResolvedConsumerConfig;
  private readonly cluster: Cluster;
  private readonly log: Logger;
  private readonly emitter: Emitter;
  private readonly membership: Membership;
  private readonly committer: Committer;
  private fetcher: Fetcher | undefined;
  private dispatcher: Dispatcher | undefined;
  private runCfg: ResolvedRunConfig | undefined;

  /** Subscribed topic -> fromBeginning. */
  private readonly subscriptions = new Map<string, boolean>();
  private readonly owned = new Map<string, OwnedPartition>();
  private target: Map<string, TopicPartition> | undefined;
  private targetNew = false;
  private lost: TopicPartition[] = [];
  private readonly pausedKeys = new Set<string>();
  private readonly pendingSeeks = new Map<string, number>();

  private state: State = "idle";
  /** Bumped whenever consuming starts or ends, so a loop of an earlier run stops. */
  private runGen = 0;
  private control: Promise<void> | undefined;
  private controlWake: (() => void) | undefined;
  private controlPending = false;
  private restartAbort = new AbortController();
  private restarts = 0;
  private joinedAt = 0;

  /** @internal use strata.consumer() */
  constructor(
    /** @internal */
    readonly client: ResolvedConfig,
    cfg: ConsumerConfig,
  ) {
    const problems: string[] = [];
    if (!cfg || typeof cfg.groupId !== "string" || cfg.groupId === "") problems.push("groupId: required");
    if (cfg?.groupInstanceId !== undefined && (typeof cfg.groupInstanceId !== "string" || cfg.groupInstanceId === "")) problems.push("groupInstanceId: want a non-empty string");
    if (cfg?.serverAssignor !== undefined && cfg.serverAssignor !== "uniform" && cfg.serverAssignor !== "range") problems.push(`serverAssignor ${JSON.stringify(cfg.serverAssignor)}: want "uniform" or "range"`);
    const restartOnFailure = cfg?.retry?.restartOnFailure ?? (async () => true);
    if (typeof restartOnFailure !== "function") problems.push("retry.restartOnFailure: want a function");
    this.cfg = {
      groupId: cfg?.groupId,
      groupInstanceId: cfg?.groupInstanceId ?? "",
      rebalanceTimeout: cfg?.rebalanceTimeout ?? 300_000,
      serverAssignor: cfg?.serverAssignor ?? "",
      maxWaitTimeInMs: cfg?.maxWaitTimeInMs ?? 500,
      minBytes: cfg?.minBytes ?? 1,
      maxBytes: cfg?.maxBytes ?? 50 << 20,
      maxBytesPerPartition: cfg?.maxBytesPerPartition ?? 1 << 20,
      readUncommitted: cfg?.readUncommitted ?? false,
      retry: resolveRetry(problems, "retry", cfg?.retry, client.retry),
      restartOnFailure,
    };
    positive(problems, "rebalanceTimeout", this.cfg.rebalanceTimeout);
    positive(problems, "maxBytes", this.cfg.maxBytes);
    positive(problems, "maxBytesPerPartition", this.cfg.maxBytesPerPartition);
    if (typeof this.cfg.readUncommitted !== "boolean") problems.push(`readUncommitted ${JSON.stringify(this.cfg.readUncommitted)}: want true or false`);
    if (!(this.cfg.maxWaitTimeInMs >= 0)) problems.push(`maxWaitTimeInMs ${this.cfg.maxWaitTimeInMs}: must not be negative`);
    if (!(Number.isInteger(this.cfg.minBytes) && this.cfg.minBytes >= 0)) problems.push(`minBytes ${this.cfg.minBytes}: want a whole number, 0 or more`);
    if (problems.length) throw new TypeError(`@strata-mq/client: bad consumer config: ${problems.join("; ")}`);
    this.memberId = newMemberId();
    this.log = client.logger.namespace("Consumer");
    this.cluster = new Cluster(client, "Consumer.Cluster");
    this.emitter = new Emitter(this.log);
    const link = new CoordinatorLink(this.cluster, this.cfg.groupId, client.requestTimeout, this.cfg.retry, this.log);
    this.membership = new Membership(
      {
        groupId: this.cfg.groupId,
        memberId: this.memberId,
        instanceId: this.cfg.groupInstanceId,
        clientId: client.clientId,
        rebalanceTimeout: this.cfg.rebalanceTimeout,
        serverAssignor: this.cfg.serverAssignor,
        topics: () => [...this.subscriptions.keys()],
        reported: () => this.reported(),
        onAssignment: (t) => this.onAssignment(t),
        onFenced: () => this.onFenced(),
        onFatal: (e) => void this.crash(e, false),
      },
      link,
      this.emitter,
      client.requestTimeout,
      () => Backoff.of(client.retry),
      this.log,
    );
    this.committer = new Committer(
      {
        groupId: this.cfg.groupId,
        memberId: this.memberId,
        epoch: () => this.membership.epoch,
        owned: (k) => this.owned.get(k),
        readCommitted: !this.cfg.readUncommitted,
        backoff: () => Backoff.of(client.retry),
        current: (gen) => this.runGen === gen,
      },
      link,
      this.emitter,
      this.log,
    );
  }

  /** connect checks that the gateway answers (kafkajs compatibility; run does not need it). */
  async connect(): Promise<void> {
    try {
      await this.cluster.gw.metadata({ topics: [] }, { timeoutMs: this.client.requestTimeout });
    } catch (e) {
      throw fromConnect(e, this.cluster.gatewayUrl);
    }
    await this.emitter.emit(ConsumerEvents.CONNECT, {});
  }

  /**
   * subscribe adds topics to the subscription: names, or regular
   * expressions matched against the cluster's topics now (a topic created
   * later is not added; subscribe again). fromBeginning applies to the
   * topics of this call: where a partition the group has no committed
   * offset for starts (true: the log start; false, the default as in
   * kafkajs: the end). A named topic that does not exist rejects with
   * UnknownTopicError.
   */
  async subscribe(s: ConsumerSubscribeTopics): Promise<void> {
    if (this.state === "closed") throw new ClosedError("consumer");
    const given = [...(s?.topics ?? []), ...(s?.topic !== undefined ? [s.topic] : [])];
    if (given.length === 0) throw new TypeError("@strata-mq/client: subscribe needs {topics: [...]}");
    const names: string[] = [];
    let all: string[] | undefined;
    for (const t of given) {
      if (t instanceof RegExp) {
        if (!all) {
          try {
            all = (await this.cluster.gw.listTopics({}, { timeoutMs: this.client.requestTimeout })).topics.map((x) => x.name);
          } catch (e) {
            throw fromConnect(e, this.cluster.gatewayUrl);
          }
        }
        const matched = all.filter((n) => new RegExp(t.source, t.flags.replace("g", "")).test(n));
        if (matched.length === 0) this.log.warn("a subscription pattern matches no topic", { pattern: String(t) });
        names.push(...matched);
        continue;
      }
      if (typeof t !== "string" || t === "") throw new TypeError(`@strata-mq/client: bad topic ${JSON.stringify(t)}`);
      names.push(t);
    }
    for (const t of names) await this.cluster.topic(t); // UnknownTopicError now rather than an empty assignment later
    for (const t of names) this.subscriptions.set(t, s.fromBeginning ?? false);
    this.membership.kick();
  }

  /**
   * on adds an event listener; returns a function that removes it. A
   * listener that throws is logged and does not stop the others. Listeners
   * of partitions_assigned and partitions_revoked are awaited before the
   * partitions are fetched or released.
   */
  on<E extends ConsumerEventName>(event: E, listener: ConsumerListener<E>): () => void {
    return this.emitter.on(event, listener);
  }

  /**
   * run joins the group and starts consuming in the background; it resolves
   * once started (as kafkajs). Handlers of one partition run one at a time,
   * in offset order; up to partitionsConsumedConcurrently partitions at once.
   */
  async run(cfg: ConsumerRunConfig): Promise<void> {
    if (this.state === "closed") throw new ClosedError("consumer");
    if (this.state !== "idle") throw new StrataError("consumer is already running", { code: Code.FailedPrecondition });
    if (!cfg || (!cfg.eachMessage && !cfg.eachBatch)) throw new TypeError("@strata-mq/client: run needs eachMessage or eachBatch");
    if (this.subscriptions.size === 0) throw new TypeError("@strata-mq/client: subscribe before run");
    const rc: ResolvedRunConfig = {
      autoCommit: cfg.autoCommit ?? true,
      autoCommitInterval: cfg.autoCommitInterval ?? 5_000,
      eachBatchAutoResolve: cfg.eachBatchAutoResolve ?? true,
      partitionsConsumedConcurrently: cfg.partitionsConsumedConcurrently ?? 1,
      eachMessage: cfg.eachMessage,
      eachBatch: cfg.eachBatch,
      deadLetter: cfg.deadLetter,
    };
    const p: string[] = [];
    positive(p, "autoCommitInterval", rc.autoCommitInterval);
    if (!(Number.isInteger(rc.partitionsConsumedConcurrently) && rc.partitionsConsumedConcurrently >= 1)) {
      p.push(`partitionsConsumedConcurrently ${rc.partitionsConsumedConcurrently}: want a whole number, 1 or more`);
    }
    if (rc.deadLetter !== undefined && typeof rc.deadLetter !== "function") p.push("deadLetter: want a function");
    if (p.length) throw new TypeError(`@strata-mq/client: bad run config: ${p.join("; ")}`);
    this.runCfg = rc;
    this.fetcher = new Fetcher(
      {
        parts: () => this.owned.values(),
        fromBeginning: (t) => this.subscriptions.get(t) ?? false,
        onChunk: () => this.dispatcher?.schedule(),
        onFatal: (e) => void this.crash(e, false),
      },
      this.cluster,
      this.cfg,
      this.client.requestTimeout,
      this.client.retry,
      this.emitter,
      this.log,
    );
    this.dispatcher = new Dispatcher(
      {
        parts: () => this.owned.values(),
        running: () => this.state === "running",
        pause: (op) => {
          this.pause([{ topic: op.topic, partitions: [op.partition] }]);
          return () => this.resume([{ topic: op.topic, partitions: [op.partition] }]);
        },
        heartbeat: () => this.membership.beat(),
        commitOffsetsIfNecessary: () => this.commitOffsetsIfNecessary(),
        uncommittedOffsets: () => this.uncommittedOffsets(),
        onHandled: () => this.fetcher?.wake(),
        onExhausted: (e) => void this.crash(e, true),
      },
      rc,
      this.cfg.retry,
      this.emitter,
      this.log,
    );
    this.restartAbort = new AbortController();
    this.start();
  }

  /** start begins (or, after a crash, resumes) consuming: heartbeats, fetches, handlers and the control loop. */
  private start(): void {
    this.state = "running";
    const gen = ++this.runGen;
    if (this.membership.epoch < 0) this.membership.rejoin();
    this.joinedAt = Date.now();
    this.membership.start();
    this.fetcher!.start();
    this.dispatcher!.start();
    this.control = this.controlLoop(gen);
  }

  /** assignment returns the partitions this member owns now, sorted. */
  assignment(): TopicPartition[] {
    return sortTPs([...this.owned.values()].map(tpOf));
  }

  /** The group this consumer is a member of. */
  get groupId(): string {
    return this.cfg.groupId;
  }

  /** The member epoch last granted (0 before joining, -1 after leaving). */
  memberEpoch(): number {
    return this.membership.epoch;
  }

  /** pause stops fetching and handling the given partitions (all of a topic when partitions is omitted). */
  pause(tps: { topic: string; partitions?: number[] }[]): void {
    for (const k of this.expand(tps)) {
      this.pausedKeys.add(k);
      const o = this.owned.get(k);
      if (o) o.paused = true;
    }
  }

  /** resume undoes pause. */
  resume(tps: { topic: string; partitions?: number[] }[]): void {
    for (const k of this.expand(tps)) {
      this.pausedKeys.delete(k);
      const o = this.owned.get(k);
      if (o) o.paused = false;
    }
    this.fetcher?.wake();
    this.dispatcher?.schedule();
  }

  /** paused lists paused partitions this member owns. */
  paused(): TopicPartition[] {
    return sortTPs([...this.owned.values()].filter((o) => o.paused).map(tpOf));
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
   * number; InvalidOffsetError otherwise): the next message delivered is the
   * one at that offset, and with autoCommit the offset is committed as
   * processed. A partition not owned yet starts there when it is assigned.
   */
  seek(s: { topic: string; partition: number; offset: string | number }): void {
    const off = parseOffset(s?.offset);
    const k = tpKey(s.topic, s.partition);
    const o = this.owned.get(k);
    if (o) {
      o.seek(off);
      o.processed = off;
    } else this.pendingSeeks.set(k, off);
    this.fetcher?.wake();
  }

  /**
   * commitOffsets commits explicit offsets (the next offset to consume) of
   * partitions this member owns; FencedError for one it does not own,
   * InvalidOffsetError for an offset that is not one.
   */
  async commitOffsets(offsets: { topic: string; partition: number; offset: string | number }[]): Promise<void> {
    const parts: OwnedPartition[] = [];
    const values = new Map<string, number>();
    for (const o of offsets) {
      const v = parseOffset(o.offset);
      const k = tpKey(o.topic, o.partition);
      const own = this.owned.get(k);
      if (!own) throw new FencedError(`${o.topic}/${o.partition} is not owned by this member; not committed`, { code: Code.Aborted, reason: Reason.FENCED_MEMBER_EPOCH });
      parts.push(own);
      values.set(k, v);
    }
    await this.committer.commit(parts, values);
  }

  /** commitOffsetsIfNecessary commits processed offsets when autoCommit's interval has passed, or always without autoCommit. */
  private async commitOffsetsIfNecessary(): Promise<void> {
    const rc = this.runCfg;
    if (!rc) return;
    if (!rc.autoCommit || Date.now() - this.committer.lastCommit >= rc.autoCommitInterval) await this.committer.commitProcessed(this.liveParts());
  }

  private uncommittedOffsets(): ReturnType<EachBatchPayload["uncommittedOffsets"]> {
    const byT = new Map<string, { partition: number; offset: string }[]>();
    for (const o of this.owned.values()) {
      if (o.processed < 0 || o.processed === o.committed || o.stale) continue;
      const l = byT.get(o.topic) ?? [];
      l.push({ partition: o.partition, offset: String(o.processed) });
      byT.set(o.topic, l);
    }
    return { topics: [...byT].map(([topic, partitions]) => ({ topic, partitions })) };
  }

  private liveParts(): OwnedPartition[] {
    return [...this.owned.values()].filter((o) => !o.stale);
  }

  /**
   * stop stops consuming, commits what was processed (with autoCommit) and
   * leaves the group; run may be called again. Safe to call when not running.
   */
  async stop(): Promise<void> {
    if (this.state === "idle" || this.state === "closed" || this.state === "stopping") return;
    this.state = "stopping";
    this.runGen++;
    this.restartAbort.abort();
    this.wakeControl();
    await this.halt();
    let err: unknown;
    if (this.runCfg?.autoCommit && this.membership.epoch > 0) {
      try {
        await this.committer.commitProcessed(this.liveParts());
      } catch (e) {
        err = e;
      }
    }
    try {
      await this.membership.leave();
    } catch (e) {
      err ??= e;
    }
    this.release();
    this.state = "idle";
    await this.emitter.emit(ConsumerEvents.STOP, {});
    if (err) throw err;
  }

  /** disconnect stops consuming (see stop) and releases the connections. Safe twice. */
  async disconnect(): Promise<void> {
    if (this.state === "closed") return;
    let err: unknown;
    try {
      await this.stop();
    } catch (e) {
      err = e;
    }
    this.state = "closed";
    this.cluster.close();
    await this.emitter.emit(ConsumerEvents.DISCONNECT, {});
    if (err) throw err;
  }

  /** halt stops the fetcher, the dispatcher (waiting for running handlers) and the control loop. */
  private async halt(): Promise<void> {
    await this.fetcher?.stop();
    await this.dispatcher?.stop();
    await this.control;
    this.control = undefined;
  }

  /** release drops every partition (nothing more is handled or committed for them). */
  private release(): void {
    for (const o of this.owned.values()) o.stale = true;
    this.owned.clear();
    this.target = undefined;
    this.targetNew = false;
    this.lost = [];
  }

  /**
   * crash stops consuming after an error: it commits what was processed
   * (with autoCommit), leaves the group, so the coordinator gives the
   * partitions to the other members at once, and emits consumer.crash. A
   * restartable error (a handler past its retries) asks restartOnFailure,
   * and on true joins again after a backoff; refusals, corrupt batches and
   * unknown topics do not restart.
   */
  private async crash(error: unknown, restartable: boolean): Promise<void> {
    if (this.state !== "running") return; // a refusal while stopping is stop's to report
    this.state = "crashed";
    this.runGen++;
    this.wakeControl();
    const err = error instanceof Error ? error : new StrataError(String(error), { cause: error });
    this.log.error("consumer crashed", { groupId: this.cfg.groupId, error: err });
    await this.halt();
    if (this.runCfg?.autoCommit && this.membership.epoch > 0) await this.committer.commitQuietly(this.liveParts(), "after a crash");
    try {
      await this.membership.leave();
    } catch (e) {
      this.log.warn("leaving the group after a crash failed; the coordinator removes this member when its session times out", { groupId: this.cfg.groupId, error: e });
    }
    this.release();
    let restart = false;
    if (restartable && !isAuthError(err)) {
      try {
        restart = (await this.cfg.restartOnFailure(err)) === true;
      } catch (e) {
        this.log.error("restartOnFailure failed; not restarting", { error: e });
      }
    }
    await this.emitter.emit(ConsumerEvents.CRASH, { error: err, groupId: this.cfg.groupId, restart });
    if (!restart || this.state !== "crashed") return;
    const bo = Backoff.of(this.cfg.retry);
    let wait = 0;
    for (let i = 0; i <= this.restarts; i++) wait = bo.next();
    this.restarts++;
    this.log.info("restarting after a crash", { groupId: this.cfg.groupId, inMs: Math.round(wait) });
    try {
      await sleep(wait, this.restartAbort.signal);
    } catch {
      return; // stopped meanwhile
    }
    if (this.state === "crashed") this.start();
  }

  // ---- assignments ----

  /** reported is what heartbeats report as owned: owned now, and assigned but not started. */
  private reported(): TopicPartition[] {
    const own = new Map<string, TopicPartition>();
    for (const o of this.owned.values()) own.set(o.key, tpOf(o));
    for (const [k, tp] of this.target ?? []) if (!own.has(k)) own.set(k, tp);
    return [...own.values()];
  }

  private onAssignment(t: Map<string, TopicPartition>): void {
    if (this.state !== "running") return;
    this.target = t;
    this.targetNew = true;
    this.wakeControl();
  }

  /** onFenced drops every partition at once and makes the next heartbeat a join. */
  private onFenced(): void {
    const lost: TopicPartition[] = [];
    for (const o of this.owned.values()) {
      o.stale = true;
      lost.push(tpOf(o));
    }
    this.owned.clear();
    this.lost.push(...sortTPs(lost));
    this.target = undefined;
    this.targetNew = false;
    this.joinedAt = Date.now();
    this.wakeControl();
  }

  private wakeControl(): void {
    if (this.controlWake) this.controlWake();
    else this.controlPending = true;
  }

  /** controlLoop applies assignments and auto-commits until this run ends. */
  private async controlLoop(gen: number): Promise<void> {
    const bo = Backoff.of(this.client.retry);
    const rc = this.runCfg!;
    while (this.runGen === gen) {
      try {
        await this.reconcile(gen);
        bo.reset();
      } catch (e) {
        if (this.runGen !== gen) break;
        if (isAuthError(e)) {
          void this.crash(e, false);
          break;
        }
        const wait = bo.next();
        this.log.warn("applying the assignment failed; retrying", { groupId: this.cfg.groupId, retryInMs: Math.round(wait), error: e });
        await this.waitControl(wait);
        continue;
      }
      if (this.runGen !== gen) break;
      if (rc.autoCommit && Date.now() - this.committer.lastCommit >= rc.autoCommitInterval) {
        await this.committer.commitQuietly(this.liveParts(), "auto-commit; retried at the next interval");
        continue;
      }
      if (this.controlPending) {
        this.controlPending = false;
        continue;
      }
      const untilCommit = rc.autoCommit ? this.committer.lastCommit + rc.autoCommitInterval - Date.now() : 60_000;
      await this.waitControl(Math.max(untilCommit, 1));
    }
  }

  private waitControl(ms: number): Promise<void> {
    return new Promise((r) => {
      const t = setTimeout(() => {
        this.controlWake = undefined;
        r();
      }, ms);
      unrefTimer(t);
      this.controlWake = () => {
        clearTimeout(t);
        this.controlWake = undefined;
        r();
      };
    });
  }

  /** reconcile applies the latest assignment: revoke (handlers stopped, then commit), then assign. */
  private async reconcile(gen: number): Promise<void> {
    const lost = this.lost;
    this.lost = [];
    if (lost.length) await this.emitter.emit(ConsumerEvents.PARTITIONS_REVOKED, { partitions: lost, lost: true });
    if (!this.targetNew || !this.target) return;
    this.targetNew = false;
    const target = this.target;
    const revoked = [...this.owned.values()].filter((o) => !target.has(o.key));
    const added = [...target.entries()].filter(([k]) => !this.owned.has(k)).map(([, tp]) => tp);
    if (revoked.length || added.length) await this.emitter.emit(ConsumerEvents.REBALANCING, { groupId: this.cfg.groupId, memberId: this.memberId });
    if (revoked.length) {
      for (const o of revoked) o.revoking = true;
      await Promise.all(revoked.map((o) => o.idle()));
      if (this.runCfg?.autoCommit) await this.committer.commitQuietly(revoked, "before giving partitions up");
      for (const o of revoked) o.stale = true;
      await this.emitter.emit(ConsumerEvents.PARTITIONS_REVOKED, { partitions: sortTPs(revoked.map(tpOf)), lost: false });
      for (const o of revoked) if (this.owned.get(o.key) === o) this.owned.delete(o.key);
    }
    if (added.length) {
      let committed: Awaited<ReturnType<Committer["fetchCommitted"]>>;
      try {
        committed = await this.committer.fetchCommitted(added, gen);
      } catch (e) {
        this.targetNew = true; // try again
        throw e;
      }
      if (this.runGen !== gen) return;
      if (this.target !== target) this.targetNew = true;
      const now: TopicPartition[] = [];
      const epoch = this.membership.epoch;
      for (const tp of added) {
        const k = tpKey(tp.topic, tp.partition);
        if (!this.target?.has(k) || this.owned.has(k)) continue;
        const o = new OwnedPartition(tp.topic, tp.partition, epoch);
        const c = committed.get(k)?.offset ?? -1;
        if (c >= 0) {
          o.fetchPos = c;
          o.processed = c;
          o.committed = c;
        }
        const seek = this.pendingSeeks.get(k);
        if (seek !== undefined) {
          o.fetchPos = seek;
          o.processed = seek;
          this.pendingSeeks.delete(k);
        }
        o.paused = this.pausedKeys.has(k);
        this.owned.set(k, o);
        now.push(tp);
      }
      if (now.length) {
        await this.emitter.emit(ConsumerEvents.PARTITIONS_ASSIGNED, { partitions: sortTPs(now) });
        await this.emitter.emit(ConsumerEvents.GROUP_JOIN, {
          groupId: this.cfg.groupId,
          memberId: this.memberId,
          memberEpoch: epoch,
          memberAssignment: Object.fromEntries(byTopic(this.assignment())),
          duration: Date.now() - this.joinedAt,
        });
      }
    }
    if (revoked.length || added.length) {
      this.membership.kick();
      this.fetcher?.wake();
      this.dispatcher?.schedule();
    }
  }
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
