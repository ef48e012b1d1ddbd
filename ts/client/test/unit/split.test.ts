// Batches over the topic's max.message.bytes (KIP-126): the producer cuts
// batches at the limit when the metadata tells it, splits a batch the
// leader refuses as too large and sends the halves, and fails only a
// single record over the limit, alone.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import type { storage } from "../../src/api.js";
import { StrataError } from "../../src/errors.js";
import { parseHeader } from "../../src/recordbatch.js";
import { MemCluster } from "./memcluster.js";

const LIMIT = 4096;

/** A topic "t" whose max.message.bytes is 4096 (the storage node takes batches up to 4096 + 64 KiB). */
function cluster(partitions = 1): MemCluster {
  const c = new MemCluster().topic("t", partitions);
  c.topics.get("t")!.configs["max.message.bytes"] = String(LIMIT);
  return c;
}

const values = (n: number, from = 0) => Array.from({ length: n }, (_, i) => `record-${String(from + i).padStart(6, "0")}-${"x".repeat(80)}`);

/** Every batch the producer's calls carried: its size and whether it was refused. */
function batches(c: MemCluster): { bytes: number; records: number }[] {
  const out: { bytes: number; records: number }[] = [];
  for (const call of c.calls) {
    if (call.method === "Produce") {
      const r = (call.request as storage.ProduceRequest).records;
      out.push({ bytes: r.length, records: parseHeader(r).lastOffsetDelta + 1 });
    } else if (call.method === "ProducePartitions") {
      for (const pp of (call.request as storage.ProducePartitionsRequest).partitions) out.push({ bytes: pp.records.length, records: parseHeader(pp.records).lastOffsetDelta + 1 });
    }
  }
  return out;
}

describe("batches over max.message.bytes", () => {
  test("the producer cuts batches at the topic's max.message.bytes: 3000 small records in one send all land, no batch refused", async () => {
    const c = cluster();
    const p = c.strata().producer({ linger: 5 });
    const want = values(3000);
    const acks = await p.send({ topic: "t", messages: want.map((value) => ({ value })) });
    await p.close();
    assert.equal(acks.length, 3000);
    assert.deepEqual(await c.values("t", 0), want);
    const sent = batches(c);
    assert.ok(sent.length > 1);
    assert.ok(sent.every((b) => b.bytes <= LIMIT + 100), `every batch within the limit and its header: ${Math.max(...sent.map((b) => b.bytes))} bytes`);
  });

  test("a batch refused as too large is split and the halves sent, until every record lands once, in order", async () => {
    for (const idempotent of [true, false]) {
      const c = cluster();
      c.metadataConfigs = false; // the client does not know the limit: its 1 MiB batches are refused
      const p = c.strata().producer({ idempotent, acks: idempotent ? "all" : "leader", linger: 5 });
      const want = values(12000);
      const acks = await p.send({ topic: "t", messages: want.map((value) => ({ value })) });
      await p.close();
      assert.deepEqual(acks.map((a) => a.offset), want.map((_, i) => String(i)), `idempotent ${idempotent}: offsets in order`);
      assert.deepEqual(await c.values("t", 0), want, `idempotent ${idempotent}: every record once, in order`);
      const sent = batches(c);
      assert.ok(sent.some((b) => b.bytes > LIMIT + 65536), "a batch over the limit was sent and refused");
      assert.ok(sent.filter((b) => b.bytes > LIMIT + 65536).every((b) => b.records > 1));
    }
  });

  test("only a single record over the limit fails, alone; the records around it land", async () => {
    const c = cluster();
    c.metadataConfigs = false;
    const p = c.strata().producer({ linger: 20 });
    const before = values(500);
    const after = values(500, 500);
    // Three sends in one linger: one batch, the big record in its middle.
    const s1 = p.send({ topic: "t", messages: before.map((value) => ({ value })) });
    const big = p.send({ topic: "t", messages: [{ value: "b".repeat(LIMIT + 70_000) }] });
    const s2 = p.send({ topic: "t", messages: after.map((value) => ({ value })) });
    await assert.rejects(big, (e: unknown) => e instanceof StrataError && e.reason === "RECORD_TOO_LARGE");
    await Promise.all([s1, s2]);
    await p.send({ topic: "t", messages: [{ value: "later" }] });
    await p.close();
    assert.deepEqual(await c.values("t", 0), [...before, ...after, "later"]);
    const alone = batches(c).filter((b) => b.bytes > LIMIT + 70_000 && b.records === 1);
    assert.equal(alone.length, 1, "the big record was sent alone once, and failed");
  });

  test("a record over the limit the client knows of goes alone and fails alone", async () => {
    const c = cluster();
    const p = c.strata().producer({ linger: 20 });
    const s1 = p.send({ topic: "t", messages: [{ value: "a" }] });
    const big = p.send({ topic: "t", messages: [{ value: "b".repeat(LIMIT + 70_000) }] });
    const s2 = p.send({ topic: "t", messages: [{ value: "c" }] });
    await assert.rejects(big, (e: unknown) => e instanceof StrataError && e.reason === "RECORD_TOO_LARGE");
    await Promise.all([s1, s2]);
    await p.close();
    assert.deepEqual(await c.values("t", 0), ["a", "c"]);
  });
});
