// A transactional producer against the in-memory cluster (memcluster.ts):
// the coordinator calls and their order, the batches' transactional flag
// and the produce requests' transactional_id, sendOffsets committed only
// with the transaction, fencing by a newer producer of the same id, the
// retries of CONCURRENT_TRANSACTIONS and NOT_COORDINATOR, and the epoch
// taken anew after a failed transaction is aborted.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { create } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import { common, coordinator, storage } from "../../src/api.js";
import { ProducerFencedError, StrataError } from "../../src/index.js";
import { parseHeader } from "../../src/recordbatch.js";
import { waitFor } from "../cluster/devcluster.js";
import { COORDINATOR, MemCluster, reasonError } from "./memcluster.js";

const ATTR_TRANSACTIONAL = 0x10;

/** The transactional calls made, by method name, in order (produce calls as "Produce topic/partition"). */
function sequence(c: MemCluster): string[] {
  const names = new Set(["InitTransactionalProducer", "AddPartitionsToTxn", "AddOffsetsToTxn", "TxnOffsetCommit", "EndTxn", "Produce", "ProducePartitions", "FindCoordinator"]);
  return c.calls.filter((x) => names.has(x.method) && x.done && !x.aborted).map((x) => x.method);
}

/** Every batch produced, whichever call carried it, with the call's transactional id. */
function batches(c: MemCluster): { topic: string; partition: number; transactionalId: string; records: Uint8Array }[] {
  const out: { topic: string; partition: number; transactionalId: string; records: Uint8Array }[] = [];
  for (const x of c.calls) {
    if (x.method === "Produce") {
      const r = x.request as storage.ProduceRequest;
      out.push({ topic: r.topic, partition: r.partition, transactionalId: r.transactionalId, records: r.records });
    } else if (x.method === "ProducePartitions") {
      const r = x.request as storage.ProducePartitionsRequest;
      for (const p of r.partitions) out.push({ topic: p.topic, partition: p.partition, transactionalId: r.transactionalId, records: p.records });
    }
  }
  return out;
}

describe("transactions", () => {
  test("a committed transaction: partitions added before their first batch, transactional batches, offsets committed with it", async () => {
    const c = new MemCluster().topic("t", 2).topic("in", 1);
    const p = c.strata().producer({ transactionalId: "tx", linger: 0 });
    assert.equal(p.config.idempotent, true);
    const tx = await p.transaction();
    const md = await tx.send({ topic: "t", messages: [{ value: "a", partition: 0 }, { value: "b", partition: 1 }] });
    assert.deepEqual(
      md.map((m) => [m.partition, m.offset]),
      [
        [0, "0"],
        [1, "0"],
      ],
    );
    await tx.sendOffsets({ consumerGroupId: "g", topics: [{ topic: "in", partitions: [{ partition: 0, offset: "7" }] }] });
    assert.equal(c.commits.get("in/0"), undefined, "an offset staged in an open transaction is not committed");
    await tx.commit();
    assert.equal(tx.isActive(), false);
    await p.close();

    const t = c.txns.get("tx")!;
    assert.deepEqual(t.ended, [{ commit: true, partitions: ["t/0", "t/1"], groups: ["g"] }]);
    assert.equal(c.commits.get("in/0"), 7);
    const seq = sequence(c);
    assert.equal(seq.indexOf("InitTransactionalProducer") < seq.indexOf("AddPartitionsToTxn"), true, seq.join(","));
    const firstProduce = seq.findIndex((m) => m === "Produce" || m === "ProducePartitions");
    assert.ok(seq.indexOf("AddPartitionsToTxn") < firstProduce, `partitions added before the first batch: ${seq.join(",")}`);
    assert.equal(c.callsOf("AddPartitionsToTxn").length, 1, "both partitions in one AddPartitionsToTxn");
    assert.deepEqual(seq.filter((m) => m !== "FindCoordinator").slice(-3), ["AddOffsetsToTxn", "TxnOffsetCommit", "EndTxn"]);
    const fc = c.callsOf("FindCoordinator").map((x) => (x.request as { keyType: coordinator.CoordinatorKeyType; groupId: string }));
    assert.ok(fc.some((r) => r.groupId === "tx" && r.keyType === coordinator.CoordinatorKeyType.TRANSACTION), "the transactional id located with the transaction key type");
    assert.ok(fc.some((r) => r.groupId === "g" && r.keyType !== coordinator.CoordinatorKeyType.TRANSACTION), "TxnOffsetCommit sent to the group's coordinator");
    const txnCommit = c.callsOf("TxnOffsetCommit")[0]!.request as coordinator.TxnOffsetCommitRequest;
    assert.equal(txnCommit.memberEpoch, -1);
    assert.equal(txnCommit.memberId, "");
    const bs = batches(c);
    assert.equal(bs.length, 2);
    for (const b of bs) {
      const h = parseHeader(b.records);
      assert.equal(b.transactionalId, "tx");
      assert.ok(h.attributes & ATTR_TRANSACTIONAL, "batch marked transactional");
      assert.equal(h.producerId, t.producerId);
      assert.equal(h.producerEpoch, t.epoch);
      assert.equal(h.baseSequence, 0);
    }
  });

  test("sendOffsets with a group Consumer sends its group, member id and current epoch; a stale member's offsets are refused", async () => {
    const c = new MemCluster().topic("t", 1).topic("in", 1);
    await c.produce("in", 0, ["x"]);
    const member = c.strata().consumer({ groupId: "g", maxWaitTimeInMs: 50 });
    let read = 0;
    await member.subscribe({ topics: ["in"], fromBeginning: true });
    await member.run({ autoCommit: false, eachMessage: async () => void read++ });
    await waitFor("the member to read", () => read > 0);
    const p = c.strata().producer({ transactionalId: "tx", linger: 0 });
    let tx = await p.transaction();
    await tx.send({ topic: "t", messages: [{ value: "a" }] });
    await tx.sendOffsets({ consumer: member, topics: [{ topic: "in", partitions: [{ partition: 0, offset: "1" }] }] });
    const req = c.callsOf("TxnOffsetCommit")[0]!.request as coordinator.TxnOffsetCommitRequest;
    assert.equal(req.groupId, "g");
    assert.equal(req.memberId, member.memberId);
    assert.equal(req.memberEpoch, member.memberEpoch());
    assert.ok(req.memberEpoch > 0);
    await tx.commit();
    assert.equal(c.commits.get("in/0"), 1);
    // A member epoch the group moved past: refused, and the transaction can only abort.
    tx = await p.transaction();
    await assert.rejects(
      tx.sendOffsets({ consumer: { groupId: "g", memberId: member.memberId, memberEpoch: member.memberEpoch() + 100 }, topics: [{ topic: "in", partitions: [{ partition: 0, offset: "2" }] }] }),
      (e: unknown) => e instanceof StrataError && e.reason === "FENCED_MEMBER_EPOCH",
    );
    await assert.rejects(tx.commit(), /abort it/);
    await tx.abort();
    assert.equal(c.commits.get("in/0"), 1);
    await member.disconnect();
    await p.close();
  });

  test("a read-committed member waits out offsets an open transaction staged, then starts where the commit put them (KIP-447)", async () => {
    const c = new MemCluster().topic("in", 1);
    await c.produce("in", 0, ["a", "b", "c", "d", "e"]);
    const p = c.strata().producer({ transactionalId: "tx", linger: 0 });
    const tx = await p.transaction();
    await tx.sendOffsets({ consumerGroupId: "g", topics: [{ topic: "in", partitions: [{ partition: 0, offset: "3" }] }] });
    const member = c.strata().consumer({ groupId: "g", maxWaitTimeInMs: 50, retry: { initialRetryTime: 10, maxRetryTime: 20 } });
    const read: string[] = [];
    await member.subscribe({ topics: ["in"], fromBeginning: true });
    await member.run({ autoCommit: false, eachMessage: async ({ message }) => void read.push(message.offset) });
    await waitFor("the member to ask twice for stable offsets", () => c.callsOf("OffsetFetch").length >= 2);
    assert.deepEqual(read, [], "nothing read while the transaction's offsets are staged");
    await tx.commit();
    await waitFor("the member to read", () => read.length > 0);
    assert.equal(read[0], "3", "started at the offset the transaction committed");
    assert.ok(c.callsOf("OffsetFetch").every((x) => (x.request as coordinator.OffsetFetchRequest).requireStable), "every fetch asked for stable offsets");
    await member.disconnect();
    await p.close();
  });

  test("an aborted transaction drops its offsets; the next one adds its partitions again and numbers on", async () => {
    const c = new MemCluster().topic("t", 1).topic("in", 1);
    const p = c.strata().producer({ transactionalId: "tx", linger: 0 });
    let tx = await p.transaction();
    await tx.send({ topic: "t", messages: [{ value: "a" }] });
    await tx.sendOffsets({ consumer: { groupId: "g" }, topics: [{ topic: "in", partitions: [{ partition: 0, offset: 3 }] }] });
    await tx.abort();
    assert.equal(c.commits.get("in/0"), undefined);
    tx = await p.transaction();
    await tx.send({ topic: "t", messages: [{ value: "b" }] });
    await tx.commit();
    await p.close();
    assert.deepEqual(c.txns.get("tx")!.ended, [
      { commit: false, partitions: ["t/0"], groups: ["g"] },
      { commit: true, partitions: ["t/0"], groups: [] },
    ]);
    assert.equal(c.callsOf("AddPartitionsToTxn").length, 2);
    assert.deepEqual(
      batches(c).map((b) => parseHeader(b.records).baseSequence),
      [0, 1],
      "an abort without a failed batch keeps the epoch, and the sequences go on",
    );
  });

  test("a transactional producer sends only in a transaction, one transaction at a time; an empty one ends without a call", async () => {
    const c = new MemCluster().topic("t", 1);
    const p = c.strata().producer({ transactionalId: "tx", linger: 0 });
    await assert.rejects(p.send({ topic: "t", messages: [{ value: "a" }] }), (e: unknown) => e instanceof StrataError && e.reason === "INVALID_TXN_STATE");
    const tx = await p.transaction();
    await assert.rejects(p.transaction(), /a transaction is in progress/);
    await tx.commit();
    await assert.rejects(tx.send({ topic: "t", messages: [{ value: "a" }] }), /the transaction is committed/);
    await p.close();
    assert.equal(c.callsOf("EndTxn").length, 0);
    assert.equal(c.callsOf("Produce").length + c.callsOf("ProducePartitions").length, 0);
    assert.throws(() => c.strata().producer({ transactionalId: "tx", idempotent: false }), /a transactional producer is idempotent/);
    assert.throws(() => c.strata().producer({ transactionalId: "tx", acks: "leader" }), /needs acks "all"/);
    await assert.rejects(c.strata().producer().transaction(), /no transactionalId/);
  });

  test("a newer producer with the same transactionalId fences the older: ProducerFencedError from then on", async () => {
    const c = new MemCluster().topic("t", 1);
    const older = c.strata().producer({ transactionalId: "tx", linger: 0 });
    const tx = await older.transaction();
    await tx.send({ topic: "t", messages: [{ value: "a" }] });
    const newer = c.strata().producer({ transactionalId: "tx", linger: 0 });
    await newer.connect(); // takes the next epoch, aborting the older's transaction
    await assert.rejects(tx.commit(), (e: unknown) => e instanceof ProducerFencedError && e.transactionalId === "tx");
    await assert.rejects(older.transaction(), ProducerFencedError);
    await assert.rejects(tx.abort(), ProducerFencedError);
    const tx2 = await newer.transaction();
    await tx2.send({ topic: "t", messages: [{ value: "b" }] });
    await tx2.commit();
    await older.close();
    await newer.close();
    assert.deepEqual(
      c.txns.get("tx")!.ended.map((e) => e.commit),
      [false, true],
    );
  });

  test("a batch refused for an older epoch fences the producer", async () => {
    const c = new MemCluster().topic("t", 1);
    const p = c.strata().producer({ transactionalId: "tx", linger: 0 });
    const tx = await p.transaction();
    c.produceFault = () => reasonDetail(Code.Aborted, common.Reason.INVALID_PRODUCER_EPOCH, "epoch is old");
    await assert.rejects(tx.send({ topic: "t", messages: [{ value: "a" }] }), ProducerFencedError);
    await assert.rejects(tx.commit(), ProducerFencedError);
    await p.close();
  });

  test("CONCURRENT_TRANSACTIONS and NOT_COORDINATOR are retried", async () => {
    const c = new MemCluster().topic("t", 1);
    let inits = 0;
    c.fault("InitTransactionalProducer", () => {
      if (inits++ === 0) throw reasonError(Code.FailedPrecondition, common.Reason.NOT_COORDINATOR, "not the coordinator");
    });
    let ends = 0;
    c.fault("EndTxn", () => {
      if (ends++ < 2) throw reasonError(Code.Unavailable, common.Reason.CONCURRENT_TRANSACTIONS, "markers being written");
    });
    const p = c.strata({ retry: { initialRetryTime: 1, maxRetryTime: 5 } }).producer({ transactionalId: "tx", linger: 0 });
    const tx = await p.transaction();
    await tx.send({ topic: "t", messages: [{ value: "a" }] });
    await tx.commit();
    await p.close();
    assert.equal(inits, 2);
    assert.equal(ends, 3);
    assert.ok(c.callsOf("FindCoordinator").length >= 2, "NOT_COORDINATOR without a hint looks the coordinator up again");
    assert.deepEqual(c.txns.get("tx")!.ended.map((e) => e.commit), [true]);
    assert.equal(c.calls.find((x) => x.method === "EndTxn")!.to, COORDINATOR);
  });

  test("a failed send leaves the transaction abortable only; after the abort the producer takes the next epoch", async () => {
    const c = new MemCluster().topic("t", 1);
    const p = c.strata().producer({ transactionalId: "tx", linger: 0 });
    let tx = await p.transaction();
    await tx.send({ topic: "t", messages: [{ value: "a" }] });
    c.produceFault = () => reasonDetail(Code.InvalidArgument, common.Reason.INVALID_RECORD, "refused");
    await assert.rejects(tx.send({ topic: "t", messages: [{ value: "b" }] }), /refused/);
    c.produceFault = undefined;
    await assert.rejects(tx.commit(), (e: unknown) => e instanceof StrataError && e.reason === "INVALID_TXN_STATE");
    await tx.abort();
    const t = c.txns.get("tx")!;
    assert.equal(t.epoch, 1, "the abort of a transaction with a failed batch bumps the epoch");
    const init = c.callsOf("InitTransactionalProducer").map((x) => x.request as coordinator.InitTransactionalProducerRequest);
    assert.deepEqual(
      init.map((r) => [r.producerId, r.producerEpoch]),
      [
        [-1n, -1],
        [t.producerId, 0],
      ],
    );
    tx = await p.transaction();
    await tx.send({ topic: "t", messages: [{ value: "c" }] });
    await tx.commit();
    await p.close();
    const last = parseHeader(batches(c).at(-1)!.records);
    assert.equal(last.producerEpoch, 1);
    assert.equal(last.baseSequence, 0);
    assert.deepEqual(t.ended.map((e) => e.commit), [false, true]);
  });
});

function reasonDetail(code: Code, reason: common.Reason, message: string): common.ErrorDetail {
  return create(common.ErrorDetailSchema, { code: code as number as common.Code, reason, message });
}
