// Fetching for one consumer: one long-poll Fetch in flight per partition
// leader at a time, each leader on its own (an answer from one leader never
// cuts another's poll short), every owned partition that is not paused and
// has room in its buffer named in its leader's next Fetch. Answers become
// chunks on the partitions, which the dispatcher hands to the handler;
// while a handler works on one chunk, the next is already being fetched.
// Partitions without a position get one from ListOffsets (the log start or
// end, as the subscription says). A leader that cannot be reached is
// retried after a backoff while the others go on; a partition that is not
// routable yet (partitions were added) refreshes the metadata.

import { AbortedFilter } from "../aborted.js";
import { common, storage } from "../api.js";
import type { ResolvedRetry } from "../config.js";
import { Action, classify, CorruptBatchError, fromConnect, fromDetail, isAbort, isAuthError, StrataError, UnsupportedCodecError } from "../errors.js";
import type { Logger } from "../logger.js";
import type { Cluster } from "../metadata.js";
import { Backoff } from "../util.js";
import { decodeFrom } from "./decode.js";
import type { Emitter } from "./events.js";
import type { OwnedPartition } from "./partition.js";

const { Reason } = common;

/** Fetch limits and isolation, as ConsumerConfig names them. */
export interface FetchLimits {
  maxWaitTimeInMs: number;
  minBytes: number;
  maxBytes: number;
  maxBytesPerPartition: number;
  /** Read to the high watermark, aborted transactions too; false reads committed records only. */
  readUncommitted: boolean;
}

/** What the fetcher needs of the consumer. */
export interface FetcherHost {
  /** The partitions this member owns. */
  parts(): Iterable<OwnedPartition>;
  /** Whether a partition of topic with no committed offset starts at the log start. */
  fromBeginning(topic: string): boolean;
  /** A chunk was added to op. */
  onChunk(op: OwnedPartition): void;
  /** A failure no retry can fix: a refusal, or bytes that cannot be decoded. */
  onFatal(e: unknown): void;
}

/** Fetcher runs the fetches of one consumer. Not shared. */
export class Fetcher {
  /** Chunks a partition may have waiting for the handler before it is fetched again. */
  static readonly prefetch = 2;
  private abort: AbortController | undefined;
  private loop: Promise<void> | undefined;
  private wakeFn: (() => void) | undefined;
  private wakePending = false;
  /**
   * One abort signal per leader for its calls, all aborted by stop: a
   * signal shared by every call would gather a listener per call in flight.
   */
  private readonly aborts = new Map<string, AbortController>();
  /** Leaders (base URLs) with a Fetch in flight. */
  private readonly inFlight = new Set<string>();
  /** Leaders whose last Fetch failed: Date.now() before which they are not asked again, and their backoff. */
  private readonly cooling = new Map<string, { until: number; bo: Backoff }>();
  private refreshing = false;
  private lastRefresh = 0;
  /** The isolation level of every Fetch and ListOffsets (which decides where LATEST is). */
  private readonly isolationLevel: common.IsolationLevel;

  constructor(
    private readonly host: FetcherHost,
    private readonly cluster: Cluster,
    private readonly limits: FetchLimits,
    private readonly requestTimeout: number,
    private readonly retry: ResolvedRetry,
    private readonly events: Emitter,
    private readonly log: Logger,
  ) {
    this.isolationLevel = limits.readUncommitted ? common.IsolationLevel.READ_UNCOMMITTED : common.IsolationLevel.READ_COMMITTED;
  }

  /** start begins fetching (a second start does nothing). */
  start(): void {
    if (this.loop) return;
    const abort = new AbortController();
    this.abort = abort;
    this.loop = this.run(abort.signal);
  }

  /** stop aborts every fetch in flight and waits for the loop. Safe twice. */
  async stop(): Promise<void> {
    const loop = this.loop;
    if (!loop) return;
    this.abort?.abort();
    for (const a of this.aborts.values()) a.abort();
    this.aborts.clear();
    this.wake();
    await loop;
    this.loop = undefined;
  }

  /** signalFor returns the abort signal of calls to a leader. */
  private signalFor(addr: string): AbortSignal {
    let a = this.aborts.get(addr);
    if (!a) {
      a = new AbortController();
      this.aborts.set(addr, a);
    }
    return a.signal;
  }

  /** wake looks for partitions to fetch now (an assignment, a resume, a seek, a chunk handled). */
  wake(): void {
    if (this.wakeFn) this.wakeFn();
    else this.wakePending = true;
  }

  private async run(signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      const next = this.tick(signal);
      if (this.wakePending) {
        this.wakePending = false;
        continue;
      }
      await new Promise<void>((r) => {
        const t = setTimeout(r, next);
        this.wakeFn = () => {
          clearTimeout(t);
          r();
        };
      });
      this.wakeFn = undefined;
    }
  }

  /** tick starts the fetches and lookups that can go now; it returns how long until it should look again. */
  private tick(signal: AbortSignal): number {
    const now = Date.now();
    let again = 1_000;
    const unresolved: OwnedPartition[] = [];
    const byLeader = new Map<string, { op: OwnedPartition; epoch: number }[]>();
    let unroutable = false;
    for (const op of this.host.parts()) {
      if (!op.live || op.paused) continue;
      if (op.fetchPos < 0) {
        if (!op.resolving) unresolved.push(op);
        continue;
      }
      if (op.inFlight || op.chunks.length >= Fetcher.prefetch) continue;
      const info = this.cluster.known(op.topic)?.parts[op.partition];
      if (!info || info.leader < 0 || info.addr === "") {
        unroutable = true;
        continue;
      }
      const g = byLeader.get(info.addr);
      if (g) g.push({ op, epoch: info.epoch });
      else byLeader.set(info.addr, [{ op, epoch: info.epoch }]);
    }
    if (unresolved.length) void this.resolveStarts(unresolved, signal);
    for (const [addr, g] of byLeader) {
      if (this.inFlight.has(addr)) continue;
      const until = this.cooling.get(addr)?.until ?? 0;
      if (until > now) {
        again = Math.min(again, until - now);
        continue;
      }
      void this.fetch(addr, g, signal);
    }
    if (unroutable) again = Math.min(again, this.refreshSoon());
    return Math.max(again, 1);
  }

  /**
   * refreshSoon refreshes the metadata for partitions with no known leader,
   * at most once per initialRetryTime; it returns when to look again.
   */
  private refreshSoon(): number {
    const wait = this.lastRefresh + this.retry.initialRetryTime - Date.now();
    if (this.refreshing || wait > 0) return Math.max(wait, this.retry.initialRetryTime);
    this.refreshing = true;
    this.lastRefresh = Date.now();
    void this.cluster.refreshQuietly("a partition with no known leader").finally(() => {
      this.refreshing = false;
      this.wake();
    });
    return this.retry.initialRetryTime;
  }

  /** fetch sends one Fetch to a leader and turns its answer into chunks. */
  private async fetch(addr: string, g: { op: OwnedPartition; epoch: number }[], loopSignal: AbortSignal): Promise<void> {
    if (loopSignal.aborted) return;
    const signal = this.signalFor(addr);
    this.inFlight.add(addr);
    const asked = g.map(({ op }) => ({ pos: op.fetchPos, gen: op.gen }));
    for (const { op } of g) op.inFlight = true;
    const t0 = Date.now();
    try {
      // A node that throttled this consumer (its fetch quota) is asked
      // again only once the time it gave has passed.
      await this.cluster.throttles.wait(addr, signal);
      if (this.events.has("consumer.fetch_start")) void this.events.emit("consumer.fetch_start", { nodeId: addr });
      let resp: storage.FetchResponse;
      try {
        resp = await this.cluster.storage(addr).fetch(
          {
            maxWaitMs: this.limits.maxWaitTimeInMs,
            minBytes: this.limits.minBytes,
            maxBytes: this.limits.maxBytes,
            isolationLevel: this.isolationLevel,
            partitions: g.map(({ op, epoch }, i) => ({
              topic: op.topic,
              partition: op.partition,
              fetchOffset: BigInt(asked[i]!.pos),
              currentLeaderEpoch: epoch,
              maxBytes: this.limits.maxBytesPerPartition,
            })),
          },
          { signal, timeoutMs: this.requestTimeout + this.limits.maxWaitTimeInMs },
        );
      } catch (e0) {
        throw fromConnect(e0, addr);
      }
      this.cluster.throttles.note(addr, resp.throttleTimeMs);
      this.cooling.delete(addr);
      let batches = 0;
      for (let i = 0; i < resp.partitions.length && i < g.length; i++) {
        const pr = resp.partitions[i]!;
        const op = g[i]!.op;
        const a = asked[i]!;
        if (op.gen !== a.gen || op.stale) continue;
        if (pr.error) {
          const e = fromDetail(pr.error);
          if (isAuthError(e)) throw e; // a partition this principal may not read
          this.partitionError(op, e);
          continue;
        }
        op.hw = Number(pr.highWatermark);
        if (pr.records.length === 0) continue;
        const aborted =
          this.isolationLevel === common.IsolationLevel.READ_COMMITTED
            ? new AbortedFilter(pr.abortedTransactions.map((t) => ({ producerId: t.producerId, firstOffset: Number(t.firstOffset) })))
            : undefined;
        const { msgs, next } = await decodeFrom(pr.records, a.pos, aborted);
        if (op.gen !== a.gen || op.stale || next === a.pos) continue;
        op.chunks.push({ gen: a.gen, msgs, next, hw: op.hw });
        op.fetchPos = next;
        batches++;
        this.host.onChunk(op);
      }
      if (this.events.has("consumer.fetch")) void this.events.emit("consumer.fetch", { numberOfBatches: batches, duration: Date.now() - t0, nodeId: addr });
    } catch (e) {
      if (signal.aborted || isAbort(e)) return;
      if (isAuthError(e) || e instanceof CorruptBatchError || e instanceof UnsupportedCodecError) {
        this.host.onFatal(e);
        return;
      }
      const wait = this.cool(addr);
      this.log.warn("fetch failed; asking this leader again after a backoff, the others go on", { leader: addr, retryInMs: Math.round(wait), error: e });
      if (classify(e) !== Action.Fail) void this.cluster.refreshQuietly("a fetch failed");
    } finally {
      this.inFlight.delete(addr);
      for (const { op } of g) op.inFlight = false;
      this.wake();
    }
  }

  /** cool keeps a leader that failed from being asked for a backoff, longer each time in a row; it returns the wait. */
  private cool(addr: string): number {
    const c = this.cooling.get(addr) ?? { until: 0, bo: Backoff.of(this.retry) };
    const wait = c.bo.next();
    c.until = Date.now() + wait;
    this.cooling.set(addr, c);
    return wait;
  }

  /** cooled reports a leader that is still in its backoff. */
  private cooled(addr: string): boolean {
    return (this.cooling.get(addr)?.until ?? 0) > Date.now();
  }

  /** partitionError handles a per-partition Fetch or ListOffsets failure. */
  private partitionError(op: OwnedPartition, e: StrataError): void {
    if (e.reasonCode === Reason.OFFSET_OUT_OF_RANGE && e.detail?.hint.case === "offsetRange") {
      const h = e.detail.hint.value;
      const lso = Number(h.logStartOffset);
      const hw = Number(h.highWatermark);
      const to = op.fetchPos < lso ? lso : op.fetchPos > hw ? hw : op.fetchPos;
      this.log.info("fetch offset out of range; moving to the log's edge", { topic: op.topic, partition: op.partition, from: op.fetchPos, to });
      op.fetchPos = to;
      return;
    }
    this.log.debug("partition error", { topic: op.topic, partition: op.partition, error: e });
    if (classify(e) === Action.Refresh && !this.cluster.applyHint(e)) void this.cluster.refreshQuietly(`${op.topic}/${op.partition}: ${e.reason || e.codeName}`);
  }

  /** resolveStarts sets the position of partitions without a committed offset (log start or end). */
  private async resolveStarts(parts: OwnedPartition[], loopSignal: AbortSignal): Promise<void> {
    if (loopSignal.aborted) return;
    const groups = new Map<string, { op: OwnedPartition; epoch: number; gen: number }[]>();
    let unroutable = false;
    for (const op of parts) {
      const info = this.cluster.known(op.topic)?.parts[op.partition];
      if (!info || info.leader < 0 || info.addr === "") {
        unroutable = true;
        continue;
      }
      if (this.cooled(info.addr)) continue;
      op.resolving = true;
      const g = groups.get(info.addr) ?? [];
      g.push({ op, epoch: info.epoch, gen: op.gen });
      groups.set(info.addr, g);
    }
    if (unroutable) this.refreshSoon();
    if (groups.size === 0) return; // nothing asked: the refresh wakes the loop
    await Promise.all(
      [...groups].map(async ([addr, g]) => {
        const signal = this.signalFor(addr);
        try {
          let resp: storage.ListOffsetsResponse;
          try {
            resp = await this.cluster.storage(addr).listOffsets(
              {
                // Under read_committed LATEST is the last stable offset,
                // so a new partition starts below the open transactions.
                isolationLevel: this.isolationLevel,
                partitions: g.map(({ op, epoch }) => ({
                  topic: op.topic,
                  partition: op.partition,
                  currentLeaderEpoch: epoch,
                  spec: this.host.fromBeginning(op.topic) ? storage.OffsetSpec.EARLIEST : storage.OffsetSpec.LATEST,
                })),
              },
              { timeoutMs: this.requestTimeout, signal },
            );
          } catch (e0) {
            throw fromConnect(e0, addr);
          }
          resp.partitions.forEach((r, i) => {
            const x = g[i];
            if (!x) return;
            if (r.error) {
              const e = fromDetail(r.error);
              if (isAuthError(e)) throw e;
              this.partitionError(x.op, e);
              return;
            }
            if (x.op.fetchPos < 0 && x.op.gen === x.gen) x.op.fetchPos = Number(r.offset);
          });
        } catch (e) {
          if (signal.aborted || isAbort(e)) return;
          if (isAuthError(e)) {
            this.host.onFatal(e);
            return;
          }
          const wait = this.cool(addr);
          this.log.warn("looking up start offsets failed; asking this leader again after a backoff", { leader: addr, retryInMs: Math.round(wait), error: e });
          void this.cluster.refreshQuietly("ListOffsets failed");
        } finally {
          for (const { op } of g) op.resolving = false;
        }
      }),
    );
    this.wake();
  }
}
