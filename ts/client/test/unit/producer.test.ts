// The producer against the in-memory cluster (memcluster.ts): acks,
// per-send options, the delivery timeout, the bounded buffer, close with a
// timeout, partitioners and sendBatch.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { common, storage } from "../../src/api.js";
import { ClosedError, DeliveryTimeoutError, Partitioners, StrataError } from "../../src/index.js";
import { codecOf, parseHeader, readRecords, recordsSection } from "../../src/recordbatch.js";
import { waitFor } from "../cluster/devcluster.js";
import { MemCluster, reasonError } from "./memcluster.js";

const produced = (c: MemCluster) => c.callsOf("Produce").map((x) => x.request as storage.ProduceRequest);

describe("producer", () => {
  test("acks none and leader reach the leader; acks none answers offset -1", async () => {
    const c = new MemCluster().topic("t", 1);
    const p = c.strata().producer({ acks: "none", linger: 0 });
    const none = await p.send({ topic: "t", messages: [{ value: "a" }] });
    const leader = await p.send({ topic: "t", messages: [{ value: "b" }], acks: "leader" });
    const all = await p.send({ topic: "t", messages: [{ value: "c" }], acks: -1 });
    await p.close();
    assert.equal(none[0]!.offset, "-1");
    assert.equal(leader[0]!.offset, "1");
    assert.equal(all[0]!.offset, "2");
    assert.deepEqual(produced(c).map((r) => r.acks), [common.Acks.NONE, common.Acks.LEADER, common.Acks.ALL]);
    // Without idempotence the batches carry no producer id.
    assert.ok(produced(c).every((r) => parseHeader(r.records).producerId === -1n));
  });

  test("an idempotent producer refuses a send with acks other than all", async () => {
    const c = new MemCluster().topic("t", 1);
    const p = c.strata().producer();
    await assert.rejects(p.send({ topic: "t", messages: [{ value: "a" }], acks: "leader" }), /idempotent producer: it needs acks "all"/);
    await p.close();
    assert.equal(c.callsOf("Produce").length, 0);
  });

  test("per-send compression: each batch carries its send's codec, and sends of different codecs never share a batch", async () => {
    const c = new MemCluster().topic("t", 1);
    const p = c.strata().producer({ linger: 20, compression: "gzip" });
    const codecs = ["none", "snappy", "lz4", "zstd", undefined] as const;
    // Each send's values name its codec. On a busy machine the linger may pass
    // before a send's second record is routed, so a send may take two batches:
    // what must hold is that no batch mixes codecs and none is lost.
    const sends = codecs.map((codec) => {
      const name = codec ?? "gzip";
      return p.send({ topic: "t", messages: [{ value: `${name}:${"x".repeat(200)}` }, { value: `${name}:y` }], compression: codec });
    });
    await Promise.all(sends);
    await p.close();
    const seen: string[] = [];
    for (const r of produced(c)) {
      const h = parseHeader(r.records);
      const want = codecOf(h);
      readRecords(h, await recordsSection(h, r.records), (_o, _t, _k, v) => {
        const text = new TextDecoder().decode(v!);
        assert.equal(text.slice(0, text.indexOf(":")), want, `a record of the ${text.slice(0, text.indexOf(":"))} send in a ${want} batch`);
        seen.push(text.slice(0, text.indexOf(":") + 2));
      });
    }
    assert.deepEqual(seen, ["none:x", "none:y", "snappy:x", "snappy:y", "lz4:x", "lz4:y", "zstd:x", "zstd:y", "gzip:x", "gzip:y"]);
  });

  test("a batch never acknowledged fails with DeliveryTimeoutError carrying the last error", async () => {
    const c = new MemCluster().topic("t", 1);
    c.fault("Produce", () => {
      throw reasonError(Code.Unavailable, common.Reason.NOT_ENOUGH_REPLICAS, "ISR 1 below min.insync.replicas 2");
    });
    // Long enough for a second attempt (20 ms backoff) on a loaded machine,
    // where 300 ms once held only the first.
    const p = c.strata().producer({ deliveryTimeout: 2000, linger: 0 });
    await assert.rejects(p.send({ topic: "t", messages: [{ value: "a" }] }), (e: unknown) => {
      assert.ok(e instanceof DeliveryTimeoutError, String(e));
      assert.equal(e.reason, "NOT_ENOUGH_REPLICAS");
      assert.ok(e.cause instanceof StrataError && /min.insync/.test(e.cause.message));
      return true;
    });
    assert.ok(c.callsOf("Produce").length >= 2, "retried");
    await p.close();
  });

  test("an attempt the delivery timeout cuts short leaves the cause the cluster last answered", async () => {
    const c = new MemCluster().topic("t", 1);
    let calls = 0;
    c.fault("Produce", () => {
      if (++calls === 1) throw reasonError(Code.Unavailable, common.Reason.NOT_ENOUGH_REPLICAS, "ISR 1 below min.insync.replicas 2");
      return new Promise<void>(() => {}); // every later attempt hangs until the delivery timeout
    });
    // Every attempt after the first hangs, so the delivery timeout always
    // ends one; it is long enough for the first answer on a busy machine.
    const p = c.strata().producer({ deliveryTimeout: 3000, linger: 0 });
    await assert.rejects(p.send({ topic: "t", messages: [{ value: "a" }] }), (e: unknown) => {
      assert.ok(e instanceof DeliveryTimeoutError, String(e));
      assert.ok(calls >= 2, `the first attempt was answered and retried (${calls} calls)`);
      assert.equal(e.reason, "NOT_ENOUGH_REPLICAS");
      return true;
    });
    await p.close();
  });

  test("a full buffer makes send wait for acknowledgements (backpressure), in order", async () => {
    const c = new MemCluster().topic("t", 1);
    let release: (() => void) | undefined;
    c.fault("Produce", () => new Promise<void>((r) => (release = r)));
    const p = c.strata().producer({ maxBufferedBytes: 3000, linger: 0 });
    const big = "x".repeat(2000);
    const order: string[] = [];
    const first = p.send({ topic: "t", messages: [{ value: big }] }).then(() => order.push("first"));
    await waitFor("the first produce", () => release !== undefined);
    const second = p.send({ topic: "t", messages: [{ value: big }] }).then(() => order.push("second"));
    // The second send has no room: nothing of it is produced while the first is in flight.
    await new Promise((r) => setTimeout(r, 100));
    assert.equal(c.callsOf("Produce").length, 1);
    const r1 = release!;
    release = undefined;
    r1();
    await waitFor("the second produce", () => release !== undefined);
    release!();
    c.fault("Produce", undefined);
    await Promise.all([first, second]);
    await p.close();
    assert.deepEqual(order, ["first", "second"]);
  });

  test("sends made before their topic is known land in send order once it is", async () => {
    // Each send that finds the topic unknown used to look it up on its own,
    // retrying with its own jittered backoff, so they were routed in the
    // order their lookups ended.
    const c = new MemCluster();
    const p = c.strata({ unknownTopicWait: 10_000, retry: { initialRetryTime: 20, factor: 1 } }).producer({ linger: 0 });
    const values = Array.from({ length: 40 }, (_, i) => `v${i}`);
    const sends = values.map((v) => p.send({ topic: "late", messages: [{ value: v }] }));
    await waitFor("the producer asked for the topic more than once", () => c.callsOf("Metadata").length >= 3);
    c.topic("late", 1);
    await Promise.all(sends);
    await p.close();
    assert.deepEqual(await c.values("late", 0), values);
  });

  test("a send that finds no room within its delivery timeout fails with DeliveryTimeoutError", async () => {
    const c = new MemCluster().topic("slow", 1).topic("t", 1);
    // The first send's records wait for the metadata of their topic, holding the buffer.
    let release: (() => void) | undefined;
    c.fault("Metadata", (req) => ((req as { topics: string[] }).topics.includes("slow") ? new Promise<void>((r) => (release = r)) : undefined));
    const p = c.strata().producer({ maxBufferedBytes: 3000, linger: 0, deliveryTimeout: 200 });
    const first = p.send({ topic: "slow", messages: [{ value: "x".repeat(2000) }] });
    await waitFor("the metadata call", () => release !== undefined);
    await assert.rejects(p.send({ topic: "t", messages: [{ value: "y".repeat(2000) }] }), (e: unknown) => e instanceof DeliveryTimeoutError && /maxBufferedBytes 3000/.test(e.message));
    assert.equal(c.callsOf("Produce").length, 0);
    c.fault("Metadata", undefined);
    release!();
    // The first send spent its delivery timeout waiting for metadata.
    await assert.rejects(first, DeliveryTimeoutError);
    // Both gave their bytes back: the buffer works on.
    await p.send({ topic: "t", messages: [{ value: "z".repeat(2000) }] });
    await p.close();
  });

  test("close({timeout}) gives up on what is not acknowledged by then", async () => {
    const c = new MemCluster().topic("t", 1);
    let release: (() => void) | undefined;
    c.fault("Produce", () => new Promise<void>((r) => (release = r))); // the leader does not answer
    const p = c.strata().producer({ linger: 0 });
    const pending = p.send({ topic: "t", messages: [{ value: "a" }] });
    await waitFor("the produce", () => release !== undefined);
    const t0 = performance.now();
    await p.close({ timeout: 150 });
    assert.ok(performance.now() - t0 < 10_000, "close waited for the leader, not the timeout");
    await assert.rejects(pending, ClosedError);
    await assert.rejects(p.send({ topic: "t", messages: [{ value: "b" }] }), ClosedError);
    release!();
  });

  test("partitioners: a custom one is asked per message, RoundRobin spreads unkeyed records, a bad answer fails the message", async () => {
    const c = new MemCluster().topic("t", 4);
    const asked: number[] = [];
    const custom = c.strata().producer({
      linger: 0,
      createPartitioner: () => ({ partitionMetadata, message }) => {
        asked.push(partitionMetadata.length);
        return Number(String(message.value)) % partitionMetadata.length;
      },
    });
    const acks = await custom.send({ topic: "t", messages: ["5", "6", "7"].map((value) => ({ value })) });
    assert.deepEqual(acks.map((a) => a.partition), [1, 2, 3]);
    assert.deepEqual(asked, [4, 4, 4]);
    await custom.close();
    const rr = c.strata().producer({ linger: 0, createPartitioner: Partitioners.RoundRobinPartitioner });
    const spread = await rr.send({ topic: "t", messages: Array.from({ length: 8 }, (_, i) => ({ value: String(i) })) });
    assert.equal(new Set(spread.map((a) => a.partition)).size, 4);
    await rr.close();
    const bad = c.strata().producer({ linger: 0, createPartitioner: () => () => 9 });
    await assert.rejects(bad.send({ topic: "t", messages: [{ value: "x" }] }), /chose partition 9 of topic "t", which has 4/);
    await bad.close();
  });

  test("the partitions a node leads share one Produce: one call per round, each partition with its own offsets", async () => {
    const c = new MemCluster().topic("t", 4);
    const p = c.strata().producer({ linger: 0 });
    const rounds = 10;
    for (let round = 0; round < rounds; round++) {
      const acks = await p.send({ topic: "t", messages: [0, 1, 2, 3].map((i) => ({ value: `${round}`, partition: i })) });
      assert.deepEqual(acks.map((a) => [a.partition, a.offset]), [0, 1, 2, 3].map((i) => [i, String(round)]));
    }
    await p.close();
    const calls = c.callsOf("ProducePartitions").map((x) => x.request as storage.ProducePartitionsRequest);
    // MemCluster's topic has one leader for every partition: one call per round, not four.
    assert.equal(calls.length + produced(c).length, rounds, `calls: ${calls.map((r) => r.partitions.length).join(",")}, and ${produced(c).length} Produce`);
    assert.ok(calls.every((r) => r.partitions.length === 4));
  });

  test("a partition failing in a shared Produce is retried alone; the others are acknowledged once", async () => {
    const c = new MemCluster().topic("t", 3);
    let failed = false;
    c.produceFault = (_topic, partition) => {
      if (failed || partition !== 1) return undefined;
      failed = true;
      return create(common.ErrorDetailSchema, { code: common.Code.UNAVAILABLE, reason: common.Reason.NOT_ENOUGH_REPLICAS, message: "ISR 1 below min.insync.replicas 2" });
    };
    const p = c.strata().producer({ linger: 0 });
    const acks = await p.send({ topic: "t", messages: [0, 1, 2].map((i) => ({ value: `v${i}`, partition: i })) });
    await p.close();
    assert.deepEqual(acks.map((a) => [a.partition, a.offset]), [[0, "0"], [1, "0"], [2, "0"]]);
    const calls = c.calls
      .filter((x) => x.method === "Produce" || x.method === "ProducePartitions")
      .map((x) => (x.method === "Produce" ? [(x.request as storage.ProduceRequest).partition] : (x.request as storage.ProducePartitionsRequest).partitions.map((pp) => pp.partition)));
    assert.deepEqual(calls, [[0, 1, 2], [1]]);
  });

  test("a node without ProducePartitions (an older version) gets one Produce per partition", async () => {
    const c = new MemCluster().topic("t", 3);
    c.fault("ProducePartitions", () => {
      throw new ConnectError("unimplemented", Code.Unimplemented);
    });
    const p = c.strata().producer({ linger: 0 });
    for (let round = 0; round < 2; round++) {
      const acks = await p.send({ topic: "t", messages: [0, 1, 2].map((i) => ({ value: `v${i}`, partition: i })) });
      assert.deepEqual(acks.map((a) => [a.partition, a.offset]), [0, 1, 2].map((i) => [i, String(round)]));
    }
    await p.close();
    assert.equal(c.callsOf("ProducePartitions").length, 1, "asked once, then not again");
    assert.equal(produced(c).length, 6);
  });

  test("sendBatch sends to several topics and answers in order, topic by topic", async () => {
    const c = new MemCluster().topic("a", 1).topic("b", 1);
    const p = c.strata().producer({ linger: 0 });
    const r = await p.sendBatch({
      topicMessages: [
        { topic: "a", messages: [{ value: "1" }, { value: "2" }] },
        { topic: "b", messages: [{ value: "3" }] },
      ],
    });
    await p.close();
    assert.deepEqual(r.map((x) => [x.topic, x.offset]), [["a", "0"], ["a", "1"], ["b", "0"]]);
  });
});
