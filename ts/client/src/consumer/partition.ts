// One partition this member owns, and everything the fetcher, the
// dispatcher, the committer and the membership know about it. The fetcher
// fills `chunks` and moves `fetchPos`; the dispatcher hands chunks to the
// handler and moves `processed`; the committer sends `processed`; the
// membership reports the partition until it is released. All of it runs
// on one JavaScript thread, so fields are read and written without locks;
// `gen` tells late answers apart from current ones.

import { tpKey } from "../util.js";
import type { KafkaMessage, TopicPartition } from "./types.js";

/** Fetched messages of one partition, in offset order, not handled yet. */
export interface Chunk {
  /** The partition's gen when the fetch was sent; a chunk of an older gen is dropped. */
  gen: number;
  /** Messages still to hand to the handler (delivered ones are cut off the front). */
  msgs: KafkaMessage[];
  /** The offset after this chunk: where the partition is once it is handled. */
  next: number;
  /** The high watermark the fetch reported. */
  hw: number;
}

/** OwnedPartition is this member's state of one partition it owns. */
export class OwnedPartition {
  /** Next offset to fetch; -1 until resolved (committed offset, or the log start or end). */
  fetchPos = -1;
  /** Next offset to commit (one past the last processed message); -1 when nothing processed. */
  processed = -1;
  /** Offset last committed by this member; -1 when none. */
  committed = -1;
  /** Leader epoch of the last processed message; -1 when unknown. */
  leaderEpoch = -1;
  /** Last high watermark seen; -1 before the first fetch. */
  hw = -1;
  paused = false;
  /** Set when a revocation starts: no new handler call starts, the running one stops at the next message. */
  revoking = false;
  /** Set once revoked or lost: nothing more is handled or committed for it. */
  stale = false;
  /** Bumped by seek and offset resets, so fetches and chunks of before are dropped. */
  gen = 0;
  /** Fetched, not yet handled; at most Fetcher.prefetch of them. */
  readonly chunks: Chunk[] = [];
  /** A Fetch naming this partition is in flight. */
  inFlight = false;
  /** A ListOffsets for its start is in flight. */
  resolving = false;
  /** The dispatcher is calling the handler for it. */
  busy = false;
  /** Handler calls that failed in a row at the current position. */
  failures = 0;
  /** Date.now() before which the handler is not called again (its backoff). */
  retryAt = 0;
  private idleWaiters: (() => void)[] = [];

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

  /** live reports whether messages may still be handled for it. */
  get live(): boolean {
    return !this.stale && !this.revoking;
  }

  /** seek moves fetching and handling to offset: buffered chunks and fetches in flight are dropped. */
  seek(offset: number): void {
    this.gen++;
    this.chunks.length = 0;
    this.fetchPos = offset;
    this.failures = 0;
    this.retryAt = 0;
  }

  /** setBusy marks the handler running or done; done wakes idle() waiters. */
  setBusy(b: boolean): void {
    this.busy = b;
    if (!b) {
      const w = this.idleWaiters;
      this.idleWaiters = [];
      for (const f of w) f();
    }
  }

  /** idle resolves once no handler call runs for this partition. */
  idle(): Promise<void> {
    if (!this.busy) return Promise.resolve();
    return new Promise((r) => this.idleWaiters.push(r));
  }
}

export function tpOf(o: { topic: string; partition: number }): TopicPartition {
  return { topic: o.topic, partition: o.partition };
}

export function sortTPs<T extends TopicPartition>(l: T[]): T[] {
  return l.sort((a, b) => (a.topic < b.topic ? -1 : a.topic > b.topic ? 1 : a.partition - b.partition));
}

export function byTopic(l: TopicPartition[]): Map<string, number[]> {
  const m = new Map<string, number[]>();
  for (const tp of l) {
    const cur = m.get(tp.topic);
    if (cur) cur.push(tp.partition);
    else m.set(tp.topic, [tp.partition]);
  }
  return m;
}
