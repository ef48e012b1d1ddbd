// Quota throttling as Kafka's clients do it (KIP-219): a storage node that
// finds a principal over its produce or fetch quota still answers at once,
// with throttle_time_ms, and the client sends nothing more to that node
// until that time has passed. A client that did not wait would gain nothing:
// the node holds its next answer for what is still owed
// (docs/design/security.md, Quotas).
//
// A producer only produces and a consumer only fetches, each with its own
// Throttles, so "per node" here is per node and per kind of request.

import { sleep } from "./util.js";

/** Throttles remembers until when each node asked this client to wait. Not shared between clients. */
export class Throttles {
  /** Base URL of a node -> Date.now() until which it is not to be sent to. */
  private readonly until = new Map<string, number>();

  /** note records a throttle_time_ms from an answer of the node at addr; 0 or less changes nothing. */
  note(addr: string, throttleMs: number): void {
    if (!(throttleMs > 0)) return;
    const t = Date.now() + throttleMs;
    if (t > (this.until.get(addr) ?? 0)) this.until.set(addr, t);
  }

  /** remaining is how many ms are left before the next request to addr may go; 0 when none. */
  remaining(addr: string): number {
    const t = this.until.get(addr);
    if (t === undefined) return 0;
    const left = t - Date.now();
    if (left <= 0) {
      this.until.delete(addr);
      return 0;
    }
    return left;
  }

  /**
   * wait resolves once a request to addr may go, at once when the node set
   * no throttle; it rejects with the signal's reason when it aborts first.
   */
  async wait(addr: string, signal?: AbortSignal): Promise<void> {
    for (let left = this.remaining(addr); left > 0; left = this.remaining(addr)) {
      await sleep(left, signal); // a later answer may have pushed the time out
    }
  }
}
