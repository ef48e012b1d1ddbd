// The in-flight queue of one partition of the producer.
//
// An idempotent producer keeps up to maxInFlight batches of a partition
// unanswered at once (Kafka's max.in.flight.requests.per.connection). They
// are numbered (sequences) when built, in the order they were taken from
// the partition's buffer, and the leader appends them in that order: it
// holds a batch that arrives ahead of its sequence until the ones before it
// arrive, and refuses it with OUT_OF_ORDER_SEQUENCE if they do not. So the
// producer has to remember, per partition, every batch from the oldest one
// not yet completed to the newest one sent, in order, with what it knows of
// each: that is this queue.
//
// A batch enters at the tail when it is taken from the buffer and leaves at
// the head once its outcome is final (acknowledged or failed for good), so
// the application hears of a partition's batches in produce order even
// when their answers arrive in another order. The queue's length is what
// the in-flight bound counts: a batch acknowledged behind an unanswered one
// still counts, because the leader remembers only the last five batches of
// a producer, and the unanswered one may have to be sent again and
// recognized as a duplicate.

/**
 * Where a batch is:
 * - "sending": being built or sent, or its call is unanswered;
 * - "waiting": its last attempt failed and it waits to be sent again (the
 *   partition recovers: see InFlight.resend);
 * - "acked": acknowledged, waiting for the batches before it to complete;
 * - "failed": failed for good, waiting for the batches before it to complete.
 */
export type BatchState = "sending" | "waiting" | "acked" | "failed";

/** What the queue needs of a batch. */
export interface Tracked {
  state: BatchState;
}

/** InFlight is one partition's batches from the oldest not completed to the newest taken, in produce order. Not shared between partitions. */
export class InFlight<B extends Tracked> {
  private items: B[] = [];

  /** Batches taken and not completed (what the in-flight bound counts). */
  get length(): number {
    return this.items.length;
  }

  /** push appends a batch just taken from the buffer. */
  push(b: B): void {
    this.items.push(b);
  }

  /** sending counts the batches being sent or awaiting an answer. */
  sending(): number {
    let n = 0;
    for (const b of this.items) if (b.state === "sending") n++;
    return n;
  }

  /**
   * unresolvedBefore reports whether a batch ahead of b is not
   * acknowledged: then a refusal of b for its sequence may only mean that
   * the leader held b behind the gap that batch left.
   */
  unresolvedBefore(b: B): boolean {
    for (const x of this.items) {
      if (x === b) return false;
      if (x.state !== "acked") return true;
    }
    return false;
  }

  /**
   * replace puts batches in b's place, in order (a batch split in two
   * halves); nothing when b is not in the queue.
   */
  replace(b: B, batches: B[]): void {
    const i = this.items.indexOf(b);
    if (i >= 0) this.items.splice(i, 1, ...batches);
  }

  /** before returns the batches ahead of b, oldest first. */
  before(b: B): B[] {
    const i = this.items.indexOf(b);
    return i < 0 ? [] : this.items.slice(0, i);
  }

  /**
   * resend returns the oldest batch waiting to be sent again, once no
   * batch of the partition awaits an answer (a recovering partition sends
   * its batches again one at a time, in order); undefined when there is
   * none or answers are still due.
   */
  resend(): B | undefined {
    let waiting: B | undefined;
    for (const b of this.items) {
      if (b.state === "sending") return undefined;
      if (b.state === "waiting" && waiting === undefined) waiting = b;
    }
    return waiting;
  }

  /** waiting reports whether any batch waits to be sent again. */
  waiting(): boolean {
    return this.items.some((b) => b.state === "waiting");
  }

  /** complete removes and returns the batches at the head whose outcome is final, oldest first. */
  complete(): B[] {
    let n = 0;
    while (n < this.items.length && (this.items[n]!.state === "acked" || this.items[n]!.state === "failed")) n++;
    return n === 0 ? [] : this.items.splice(0, n);
  }
}
