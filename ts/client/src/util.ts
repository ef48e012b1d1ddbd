// Small helpers shared by the producer, the consumer and the metadata cache.

/** sleep resolves after ms, or rejects with the signal's reason when it aborts first. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal!.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** unrefTimer lets Node exit while only this timer is pending (no-op in browsers). */
export function unrefTimer(t: unknown): void {
  (t as { unref?: () => void }).unref?.();
}

/** Backoff grows from initial by multiplier up to max, less up to `factor` of random jitter. Not shared between loops. */
export class Backoff {
  private cur: number;
  constructor(
    private readonly initial: number,
    private readonly max: number,
    private readonly factor = 0.2,
    private readonly multiplier = 2,
  ) {
    this.cur = initial;
  }
  /** of makes a Backoff from retry options. */
  static of(r: { initialRetryTime: number; maxRetryTime: number; factor: number; multiplier: number }): Backoff {
    return new Backoff(r.initialRetryTime, r.maxRetryTime, r.factor, r.multiplier);
  }
  next(): number {
    const d = this.cur;
    this.cur = Math.min(this.cur * this.multiplier, this.max);
    return d * (1 - this.factor + Math.random() * this.factor);
  }
  reset(): void {
    this.cur = this.initial;
  }
}

const utf8 = new TextEncoder();

/**
 * Node's Buffer.from, where there is one: it carves short strings out of a
 * shared pool instead of giving each its own ArrayBuffer as
 * TextEncoder.encode does, which costs twice the time per key and more
 * garbage collection on a producer's per-record path.
 */
const bufferFrom = (globalThis as { Buffer?: { from(s: string, enc: "utf8"): Uint8Array } }).Buffer?.from.bind((globalThis as { Buffer?: object }).Buffer) as
  | ((s: string, enc: "utf8") => Uint8Array)
  | undefined;

/** toBytes turns a key, value or header value as the application gives it into bytes (UTF-8 for text); null and undefined stay null. */
export function toBytes(v: string | Uint8Array | null | undefined): Uint8Array | null {
  if (v === null || v === undefined) return null;
  if (typeof v === "string") return bufferFrom ? bufferFrom(v, "utf8") : utf8.encode(v);
  return v;
}

const bufferAlloc = (globalThis as { Buffer?: { allocUnsafeSlow(n: number): Uint8Array } }).Buffer;

/**
 * uninitialized returns a Uint8Array of n bytes, with an ArrayBuffer of its
 * own as new Uint8Array(n) gives, whose bytes are to be overwritten whole:
 * in Node, memory from Buffer.allocUnsafeSlow, which skips zeroing it (a
 * record batch or a produce request of a few hundred KiB per call).
 * Callers check that they wrote every byte.
 */
export function uninitialized(n: number): Uint8Array {
  if (!bufferAlloc) return new Uint8Array(n);
  const b = bufferAlloc.allocUnsafeSlow(n);
  return new Uint8Array(b.buffer, b.byteOffset, n);
}

/** tpKey is the map key of a topic partition. */
export function tpKey(topic: string, partition: number): string {
  return `${partition}\u0000${topic}`;
}

/** A deferred promise. */
export class Deferred<T> {
  promise: Promise<T>;
  resolve!: (v: T) => void;
  reject!: (e: unknown) => void;
  constructor() {
    this.promise = new Promise<T>((res, rej) => {
      this.resolve = res;
      this.reject = rej;
    });
  }
}
