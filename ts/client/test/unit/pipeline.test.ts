// The producer's pipelining against the in-memory cluster (memcluster.ts),
// whose leaders check idempotent sequences and hold a batch that arrives
// ahead of its sequence: up to maxInFlight batches of a partition in
// flight, answers in any order completing the sends in order, recovery in
// order after a failure, the first batch under an id alone, and the
// maxInFlight option.
import assert from "node:assert/strict";
import { afterEach, describe, test } from "node:test";
import { Code } from "@connectrpc/connect";
import { common, type storage } from "../../src/api.js";
import { pipelining } from "../../src/producer.js";
import { parseHeader } from "../../src/recordbatch.js";
import { waitFor } from "../cluster/devcluster.js";
import { type Call, MemCluster, reasonError } from "./memcluster.js";

/** One batch a produce call carried. */
interface Sent {
  partition: number;
  producerId: bigint;
  epoch: number;
  seq: number;
}

function batchesOf(call: Call): Sent[] {
  const parts = call.method === "Produce" ? [call.request as storage.ProduceRequest] : (call.request as storage.ProducePartitionsRequest).partitions;
  return parts.map((pp) => {
    const h = parseHeader(pp.records);
    return { partition: pp.partition, producerId: h.producerId, epoch: h.producerEpoch, seq: h.baseSequence };
  });
}

const produceCalls = (c: MemCluster) => c.calls.filter((x) => x.method === "Produce" || x.method === "ProducePartitions");

/**
 * gate holds every produce call of c at `where` (before the leader handles
 * it, or after, before its answer) while `on`; release(seq) lets the held
 * one carrying sequence seq go. Then, and for every call once `on` is
 * off, `then` runs (a fault: what it throws is the call's answer).
 */
function gate(c: MemCluster, where: "fault" | "after") {
  const held: { seq: number; go: () => void }[] = [];
  const g = {
    on: true,
    held,
    maxHeld: 0,
    then: undefined as ((req: unknown) => void) | undefined,
    /** release lets the held call carrying sequence seq go. */
    release(seq: number) {
      const i = held.findIndex((h) => h.seq === seq);
      assert.ok(i >= 0, `no held call carries sequence ${seq}: ${held.map((h) => h.seq).join(",")}`);
      held.splice(i, 1)[0]!.go();
    },
  };
  const fn = async (req: unknown) => {
    if (g.on) {
      const seq = parseHeader((req as storage.ProduceRequest).records ?? (req as storage.ProducePartitionsRequest).partitions[0]!.records).baseSequence;
      await new Promise<void>((go) => {
        held.push({ seq, go });
        g.maxHeld = Math.max(g.maxHeld, held.length);
      });
    }
    g.then?.(req);
  };
  const set = where === "fault" ? c.fault.bind(c) : c.after.bind(c);
  set("Produce", fn);
  set("ProducePartitions", fn);
  return g;
}

const one = (v: string) => ({ topic: "t", messages: [{ value: v }] });

describe("producer pipelining", () => {
  afterEach(() => {
    pipelining.aloneAfterIdleMs = 3_600_000;
  });

  test("maxInFlight: default 5, 1 without idempotence, a bad value refused with one clear line", async () => {
    const c = new MemCluster().topic("t", 1);
    const s = c.strata();
    assert.equal(s.producer().config.maxInFlight, 5);
    assert.equal(s.producer({ maxInFlight: 2 }).config.maxInFlight, 2);
    assert.equal(s.producer({ idempotent: false, maxInFlight: 5 }).config.maxInFlight, 1);
    assert.equal(s.producer({ acks: "leader" }).config.maxInFlight, 1);
    for (const bad of [0, 6, 2.5, "3", -1]) {
      assert.throws(() => s.producer({ maxInFlight: bad as number }), (e: unknown) => e instanceof TypeError && /maxInFlight .*: want an integer from 1 to 5/.test(e.message), String(bad));
    }
  });

  test("five batches of a partition in flight; answered newest first, the sends still resolve in produce order", async () => {
    const c = new MemCluster().topic("t", 1);
    // One record per batch, sent at once.
    const p = c.strata().producer({ linger: 0, maxBatchBytes: 30 });
    await p.send(one("v0")); // the first batch under the id goes alone
    const g = gate(c, "after"); // each leader appends at once and its answer waits
    const order: number[] = [];
    const sends = [1, 2, 3, 4, 5, 6].map((i) => p.send(one(`v${i}`)).then((r) => (order.push(i), r)));
    await waitFor("five batches in flight", () => g.held.length === 5, 10_000);
    g.on = false; // the sixth is not held
    for (const seq of [5, 4, 3, 2, 1]) g.release(seq);
    const acks = await Promise.all(sends);
    await p.close();
    assert.deepEqual(order, [1, 2, 3, 4, 5, 6]);
    assert.deepEqual(acks.map((a) => a[0]!.offset), ["1", "2", "3", "4", "5", "6"]);
    assert.equal(g.maxHeld, 5, "at most five in flight");
    assert.deepEqual(await c.values("t", 0), ["v0", "v1", "v2", "v3", "v4", "v5", "v6"]);
    // The sixth left once the oldest was answered, each call with one batch of the partition.
    const calls = produceCalls(c).map(batchesOf);
    assert.ok(calls.every((b) => b.length === 1));
    assert.deepEqual(calls.map((b) => b[0]!.seq), [0, 1, 2, 3, 4, 5, 6]);
  });

  test("batch 1 fails while 2..5 are in flight: all are sent again one at a time, in order; every record lands once, in order", async () => {
    const c = new MemCluster().topic("t", 1);
    c.holdMs = 100; // batches 2..5, held behind batch 1's gap, are refused after it
    const p = c.strata().producer({ linger: 0, maxBatchBytes: 30 });
    await p.send(one("v0"));
    const g = gate(c, "fault"); // each call waits before reaching the leader
    const order: number[] = [];
    const sends = [1, 2, 3, 4, 5].map((i) => p.send(one(`v${i}`)).then((r) => (order.push(i), r)));
    await waitFor("five batches in flight", () => g.held.length === 5, 10_000);
    const failedAt = c.calls.length;
    let failed = false;
    let overlapping = 0;
    g.on = false;
    const check = (req: unknown) => {
      const call = c.calls.find((x) => x.request === req)!;
      if (c.calls.indexOf(call) >= failedAt && produceCalls(c).some((x) => x !== call && !x.done)) overlapping++;
      if (!failed && batchesOf(call)[0]!.seq === 1) {
        failed = true;
        throw reasonError(Code.Unavailable, common.Reason.NOT_ENOUGH_REPLICAS, "ISR 1 below min.insync.replicas 2");
      }
    };
    g.then = check;
    // Batches 2..5 reach the leader first and wait for 1, which fails.
    for (const seq of [2, 3, 4, 5, 1]) g.release(seq);
    const acks = await Promise.all(sends);
    await p.close();
    assert.deepEqual(order, [1, 2, 3, 4, 5]);
    assert.deepEqual(acks.map((a) => a[0]!.offset), ["1", "2", "3", "4", "5"]);
    assert.deepEqual(await c.values("t", 0), ["v0", "v1", "v2", "v3", "v4", "v5"]);
    const again = produceCalls(c).slice(produceCalls(c).length - 5).map((x) => batchesOf(x)[0]!);
    assert.deepEqual(again.map((b) => b.seq), [1, 2, 3, 4, 5], "sent again in order, the same sequences");
    assert.equal(overlapping, 0, "sent again one at a time");
    assert.ok(failed);
  });

  test("an unknown producer id while pipelining: the batches are rebuilt in order under the next epoch from sequence 0", async () => {
    const c = new MemCluster().topic("t", 1);
    c.holdMs = 100;
    const p = c.strata().producer({ linger: 0, maxBatchBytes: 30 });
    await p.send(one("v0"));
    const g = gate(c, "fault");
    const sends = [1, 2, 3, 4, 5].map((i) => p.send(one(`v${i}`)));
    await waitFor("five batches in flight", () => g.held.length === 5, 10_000);
    g.on = false;
    let refused = false;
    g.then = (req) => {
      if (!refused && parseHeader((req as storage.ProduceRequest).records).baseSequence === 1) {
        refused = true;
        throw reasonError(Code.FailedPrecondition, common.Reason.UNKNOWN_PRODUCER_ID, "unknown producer");
      }
    };
    for (const seq of [1, 2, 3, 4, 5]) g.release(seq);
    const acks = await Promise.all(sends);
    await p.close();
    assert.deepEqual(acks.map((a) => a[0]!.offset), ["1", "2", "3", "4", "5"]);
    assert.deepEqual(await c.values("t", 0), ["v0", "v1", "v2", "v3", "v4", "v5"]);
    const last = produceCalls(c).slice(-5).map((x) => batchesOf(x)[0]!);
    const first = batchesOf(produceCalls(c)[0]!)[0]!;
    // The partition's own epoch bump (KIP-360): the same id, the next epoch.
    assert.ok(last.every((b) => b.producerId === first.producerId && b.epoch === first.epoch + 1), "under the next epoch of the id");
    assert.deepEqual(last.map((b) => b.seq), [0, 1, 2, 3, 4]);
    assert.ok(refused);
  });

  test("a partition whose epochs are used up starts its next chain under a fresh id; another partition keeps its chain", async () => {
    const c = new MemCluster().topic("t", 2);
    c.producerEpoch = 0x7fff;
    const p = c.strata().producer({ linger: 0 });
    const to = (partition: number, v: string) => ({ topic: "t", messages: [{ value: v, partition }] });
    await p.send(to(0, "a0"));
    await p.send(to(1, "b0"));
    let refused = false;
    c.fault("Produce", (req) => {
      if (!refused && (req as storage.ProduceRequest).partition === 0) {
        refused = true;
        throw reasonError(Code.FailedPrecondition, common.Reason.UNKNOWN_PRODUCER_ID, "unknown producer");
      }
    });
    await p.send(to(0, "a1"));
    await p.send(to(1, "b1"));
    await p.close();
    const sent = produceCalls(c).map((x) => batchesOf(x)[0]!);
    const [a0, b0] = sent;
    const a1 = sent.filter((b) => b.partition === 0).at(-1)!;
    const b1 = sent.filter((b) => b.partition === 1).at(-1)!;
    assert.notEqual(a1.producerId, a0!.producerId, "partition 0: a fresh id");
    assert.deepEqual([a1.epoch, a1.seq], [0x7fff, 0]);
    assert.deepEqual([b1.producerId, b1.epoch, b1.seq], [b0!.producerId, 0x7fff, 1], "partition 1: its chain goes on");
    assert.equal(c.calls.filter((x) => x.method === "InitProducerId").length, 2);
    assert.deepEqual(await c.values("t", 0), ["a0", "a1"]);
    assert.deepEqual(await c.values("t", 1), ["b0", "b1"]);
  });

  test("OUT_OF_ORDER_SEQUENCE on the oldest unacknowledged batch fails it, as with one batch in flight", async () => {
    const c = new MemCluster().topic("t", 1);
    const p = c.strata().producer({ linger: 0 });
    await p.send(one("v0"));
    c.fault("Produce", () => {
      throw reasonError(Code.FailedPrecondition, common.Reason.OUT_OF_ORDER_SEQUENCE, "sequence 1, expected 7");
    });
    await assert.rejects(p.send(one("v1")), (e: unknown) => (e as { reason?: string }).reason === "OUT_OF_ORDER_SEQUENCE");
    c.fault("Produce", undefined);
    await p.send(one("v2")); // under a new id
    await p.close();
    assert.deepEqual(await c.values("t", 0), ["v0", "v2"]);
    assert.equal(produceCalls(c).length, 3, "not retried");
  });

  test("the first batch under an id goes alone, and the first after a long idle spell", async () => {
    const c = new MemCluster().topic("t", 1);
    const p = c.strata().producer({ linger: 0, maxBatchBytes: 30 });
    // Every call checks whether another is unanswered when it arrives.
    const overlapped: number[] = [];
    const watch = (req: unknown) => {
      const call = c.calls.find((x) => x.request === req)!;
      if (produceCalls(c).some((x) => x !== call && !x.done)) overlapped.push(parseHeader((req as storage.ProduceRequest).records).baseSequence);
      return new Promise<void>((r) => setImmediate(r));
    };
    c.fault("Produce", watch);
    await Promise.all([0, 1, 2].map((i) => p.send(one(`a${i}`))));
    assert.ok(!overlapped.includes(1), `batch 1 left while batch 0 was unanswered (overlapped: ${overlapped})`);
    // With the idle bound at zero, the next batches start alone again.
    pipelining.aloneAfterIdleMs = 0;
    overlapped.length = 0;
    await Promise.all([3, 4, 5].map((i) => p.send(one(`b${i}`))));
    assert.ok(!overlapped.includes(4), `batch 4 left while batch 3 was unanswered (overlapped: ${overlapped})`);
    await p.close();
    assert.deepEqual(await c.values("t", 0), ["a0", "a1", "a2", "b3", "b4", "b5"]);
  });

  test("under load several calls per partition are in flight, each naming a partition once, and every partition's records land in order", async () => {
    const c = new MemCluster().topic("t", 4);
    // Answers take a few turns of the event loop, as a network's would.
    let most = 0;
    c.after("ProducePartitions", async () => {
      const open = produceCalls(c).filter((x) => !x.done && batchesOf(x).some((b) => b.partition === 0)).length;
      most = Math.max(most, open);
      for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
    });
    const p = c.strata().producer({ linger: 0, maxBatchBytes: 200 });
    const sends: Promise<unknown>[] = [];
    for (let i = 0; i < 400; i++) sends.push(p.send({ topic: "t", messages: [0, 1, 2, 3].map((part) => ({ value: `${part}-${i}`, partition: part })) }));
    await Promise.all(sends);
    await p.close();
    for (let part = 0; part < 4; part++) {
      assert.deepEqual(await c.values("t", part), Array.from({ length: 400 }, (_, i) => `${part}-${i}`));
    }
    assert.ok(most >= 2, `at most ${most} call(s) with partition 0 in flight`);
    assert.ok(produceCalls(c).every((x) => new Set(batchesOf(x).map((b) => b.partition)).size === batchesOf(x).length));
  });
});
