// Handing fetched chunks to the application's eachMessage or eachBatch:
// up to partitionsConsumedConcurrently partitions at once, one chunk at a
// time per partition, in offset order. A handler that throws gets the same
// message again after a backoff (the consumer's retry options) while the
// other partitions keep flowing; past its retries the message goes to the
// dead-letter callback, or the consumer is told to crash. Positions move
// only past handled messages.

import type { ResolvedRetry } from "../config.js";
import { HandlerError } from "../errors.js";
import type { Logger } from "../logger.js";
import type { Emitter, BatchEventPayload } from "./events.js";
import type { Chunk, OwnedPartition } from "./partition.js";
import type { Batch, ConsumerRunConfig, DeadLetterPayload, EachBatchPayload, KafkaMessage } from "./types.js";

/** consumer.run's options with defaults applied. */
export type ResolvedRunConfig = Required<Pick<ConsumerRunConfig, "autoCommit" | "autoCommitInterval" | "eachBatchAutoResolve" | "partitionsConsumedConcurrently">> &
  Pick<ConsumerRunConfig, "eachMessage" | "eachBatch" | "deadLetter">;

/** What the dispatcher needs of the consumer. */
export interface DispatcherHost {
  parts(): Iterable<OwnedPartition>;
  /** False once the consumer stops or crashes. */
  running(): boolean;
  pause(op: OwnedPartition): () => void;
  heartbeat(): Promise<void>;
  commitOffsetsIfNecessary(): Promise<void>;
  uncommittedOffsets(): ReturnType<EachBatchPayload["uncommittedOffsets"]>;
  /** A chunk was handled (its buffer room is free for the fetcher). */
  onHandled(): void;
  /** A handler failed past its retries and no dead-letter callback took the message. */
  onExhausted(e: HandlerError): void;
}

type Outcome = { kind: "done" } | { kind: "partial" } | { kind: "failed"; message: KafkaMessage; error: unknown };

/** Dispatcher calls one consumer's handlers. Not shared. */
export class Dispatcher {
  private active = 0;
  private stopped = true;
  private rr = 0;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private timerAt = 0;

  constructor(
    private readonly host: DispatcherHost,
    private readonly cfg: ResolvedRunConfig,
    private readonly retry: ResolvedRetry,
    private readonly events: Emitter,
    private readonly log: Logger,
  ) {}

  start(): void {
    this.stopped = false;
    this.schedule();
  }

  /** stop starts no more handler calls and waits for the running ones to return. */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    await Promise.all([...this.host.parts()].map((op) => op.idle()));
  }

  /** schedule starts handler calls for partitions with a chunk, up to the concurrency limit. */
  schedule(): void {
    if (this.stopped || !this.host.running()) return;
    const limit = this.cfg.partitionsConsumedConcurrently;
    if (this.active >= limit) return;
    const parts = [...this.host.parts()];
    const n = parts.length;
    const now = Date.now();
    let soonest = Infinity;
    for (let i = 0; i < n && this.active < limit; i++) {
      const op = parts[(this.rr + i) % n]!;
      if (op.busy || !op.live || op.paused) continue;
      while (op.chunks.length && op.chunks[0]!.gen !== op.gen) op.chunks.shift();
      if (op.chunks.length === 0) continue;
      if (op.retryAt > now) {
        soonest = Math.min(soonest, op.retryAt);
        continue;
      }
      this.rr = (this.rr + i + 1) % n;
      this.run(op);
    }
    if (soonest !== Infinity) this.wakeAt(soonest);
  }

  private wakeAt(at: number): void {
    if (this.timer !== undefined && this.timerAt <= at) return;
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timerAt = at;
    this.timer = setTimeout(
      () => {
        this.timer = undefined;
        this.schedule();
      },
      Math.max(at - Date.now(), 1),
    );
  }

  private run(op: OwnedPartition): void {
    op.setBusy(true);
    this.active++;
    void this.handle(op)
      .catch((e) => this.log.error("dispatching failed", { topic: op.topic, partition: op.partition, error: e }))
      .finally(() => {
        this.active--;
        op.setBusy(false);
        this.host.onHandled();
        this.schedule();
      });
  }

  private async handle(op: OwnedPartition): Promise<void> {
    const chunk = op.chunks[0]!;
    const gen = op.gen;
    if (chunk.msgs.length === 0) {
      // Only control records (or messages already handled): the position moves past them.
      op.chunks.shift();
      if (op.processed < chunk.next) op.processed = chunk.next;
      return;
    }
    const ev = this.events.has("consumer.start_batch_process") || this.events.has("consumer.end_batch_process") ? batchEvent(op, chunk) : undefined;
    if (ev) await this.events.emit("consumer.start_batch_process", ev);
    const t0 = Date.now();
    const out = this.cfg.eachBatch ? await this.batch(op, chunk, gen) : await this.messages(op, chunk, gen);
    if (ev) await this.events.emit("consumer.end_batch_process", { ...ev, duration: Date.now() - t0 });
    if (op.gen !== gen || op.stale) return;
    switch (out.kind) {
      case "done":
        if (op.chunks[0] === chunk) op.chunks.shift();
        op.failures = 0;
        return;
      case "partial":
        return;
      case "failed":
        await this.failed(op, chunk, gen, out.message, out.error);
    }
  }

  /** failed schedules a retry of a failed message, or gives it to deadLetter or onExhausted past the retries. */
  private async failed(op: OwnedPartition, chunk: Chunk, gen: number, m: KafkaMessage, error: unknown): Promise<void> {
    op.failures++;
    const attempts = op.failures;
    if (attempts <= this.retry.retries) {
      const wait = this.backoff(attempts);
      op.retryAt = Date.now() + wait;
      this.log.warn("handler failed; retrying the message after a backoff, other partitions go on", {
        topic: op.topic,
        partition: op.partition,
        offset: m.offset,
        attempt: attempts,
        retryInMs: Math.round(wait),
        error,
      });
      this.wakeAt(op.retryAt);
      return;
    }
    const he = new HandlerError(op.topic, op.partition, m.offset, attempts, error);
    if (this.cfg.deadLetter) {
      const payload: DeadLetterPayload = { topic: op.topic, partition: op.partition, message: m, error, attempts };
      try {
        await this.cfg.deadLetter(payload);
      } catch (e) {
        this.log.error("the dead-letter callback failed", { topic: op.topic, partition: op.partition, offset: m.offset, error: e });
        this.host.onExhausted(new HandlerError(op.topic, op.partition, m.offset, attempts, e));
        return;
      }
      this.log.warn("message given to the dead-letter callback", { topic: op.topic, partition: op.partition, offset: m.offset, attempts, error });
      if (op.gen !== gen || op.stale) return;
      op.failures = 0;
      op.retryAt = 0;
      op.processed = Number(m.offset) + 1;
      op.leaderEpoch = m.leaderEpoch;
      if (chunk.msgs[0] === m) chunk.msgs = chunk.msgs.slice(1);
      return;
    }
    this.log.error("handler failed past its retries", { topic: op.topic, partition: op.partition, offset: m.offset, attempts, error });
    this.host.onExhausted(he);
  }

  /** backoff is the wait before handler attempt n+1: initialRetryTime grown by multiplier up to maxRetryTime, with jitter. */
  private backoff(n: number): number {
    const r = this.retry;
    const d = Math.min(r.initialRetryTime * Math.pow(r.multiplier, n - 1), r.maxRetryTime);
    return d * (1 - r.factor + Math.random() * r.factor);
  }

  private pauseFn(op: OwnedPartition): () => () => void {
    return () => this.host.pause(op);
  }

  private async messages(op: OwnedPartition, chunk: Chunk, gen: number): Promise<Outcome> {
    const msgs = chunk.msgs;
    const each = this.cfg.eachMessage!;
    const heartbeat = () => this.host.heartbeat();
    const pause = this.pauseFn(op);
    let i = 0;
    for (; i < msgs.length; i++) {
      if (!this.host.running() || op.gen !== gen || !op.live || op.paused) break;
      const m = msgs[i]!;
      try {
        await each({ topic: op.topic, partition: op.partition, message: m, heartbeat, pause });
      } catch (error) {
        chunk.msgs = msgs.slice(i);
        return { kind: "failed", message: m, error };
      }
      if (op.gen !== gen || op.stale) return { kind: "done" };
      op.processed = Number(m.offset) + 1;
      op.leaderEpoch = m.leaderEpoch;
      op.failures = 0;
    }
    if (i < msgs.length) {
      chunk.msgs = msgs.slice(i);
      return { kind: "partial" };
    }
    return { kind: "done" };
  }

  private async batch(op: OwnedPartition, chunk: Chunk, gen: number): Promise<Outcome> {
    const msgs = chunk.msgs;
    const live = () => this.host.running() && op.live && op.gen === gen;
    // resolveOffset walks msgs once in all: offsets only move forward.
    let resolved = -1; // next offset after the last resolved one
    let j = 0; // messages before j are resolved
    const resolveOffset = (offset: string) => {
      const o = Number(offset);
      if (!(o + 1 > resolved)) return;
      resolved = o + 1;
      while (j < msgs.length && Number(msgs[j]!.offset) <= o) j++;
      if (live() && j > 0) {
        op.processed = resolved;
        op.leaderEpoch = msgs[j - 1]!.leaderEpoch;
      }
    };
    const last = msgs[msgs.length - 1]!;
    const hw = chunk.hw;
    const batch: Batch = {
      topic: op.topic,
      partition: op.partition,
      highWatermark: String(hw),
      messages: msgs,
      isEmpty: () => msgs.length === 0,
      firstOffset: () => (msgs.length ? msgs[0]!.offset : null),
      lastOffset: () => last.offset,
      offsetLag: () => String(Math.max(0, hw - 1 - Number(last.offset))),
      offsetLagLow: () => String(Math.max(0, hw - 1 - Number(msgs[0]!.offset))),
    };
    try {
      await this.cfg.eachBatch!({
        batch,
        resolveOffset,
        heartbeat: () => this.host.heartbeat(),
        commitOffsetsIfNecessary: () => this.host.commitOffsetsIfNecessary(),
        uncommittedOffsets: () => this.host.uncommittedOffsets(),
        isRunning: () => this.host.running(),
        isStale: () => !op.live || op.gen !== gen,
        pause: this.pauseFn(op),
      });
    } catch (error) {
      if (!live() || j >= msgs.length) return { kind: "done" };
      chunk.msgs = msgs.slice(j);
      return { kind: "failed", message: msgs[j]!, error };
    }
    if (!live()) return { kind: "done" };
    if (this.cfg.eachBatchAutoResolve) resolveOffset(last.offset);
    if (j >= msgs.length) return { kind: "done" };
    if (op.paused) {
      chunk.msgs = msgs.slice(j);
      return { kind: "partial" };
    }
    // Returned without resolving everything: fetch again from the first
    // unresolved offset (kafkajs delivers those messages again).
    op.seek(Number(msgs[j]!.offset));
    return { kind: "done" };
  }
}

function batchEvent(op: OwnedPartition, c: Chunk): BatchEventPayload {
  const first = c.msgs[0]!.offset;
  const last = c.msgs[c.msgs.length - 1]!.offset;
  return {
    topic: op.topic,
    partition: op.partition,
    highWatermark: String(c.hw),
    offsetLag: String(Math.max(0, c.hw - 1 - Number(last))),
    offsetLagLow: String(Math.max(0, c.hw - 1 - Number(first))),
    batchSize: c.msgs.length,
    firstOffset: first,
    lastOffset: last,
  };
}
