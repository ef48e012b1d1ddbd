// The consumer's decoder (decodeFrom: fetched bytes straight to messages)
// against the record-batch decoder and the shared vectors the Go tests
// write (testdata/recordbatch.json: Strata's, librdkafka's, Java's and
// sarama's batches in every codec): the same records, offsets, timestamps
// and headers, keys and values as views of the fetched bytes, and the
// same refusals; and read_committed answers, whose aborted transactions'
// batches are dropped as the Go client drops them.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { AbortedFilter } from "../../src/aborted.js";
import { decodeFrom } from "../../src/consumer/decode.js";
import type { KafkaMessage } from "../../src/consumer/types.js";
import { buildBatch, CorruptBatchError, decodeBatch } from "../../src/index.js";
import "../../src/index.js";
import { hex, readFixture, unhex } from "../testdata.js";

interface Vector {
  name: string;
  hex: string;
  codec: number;
}
const shared = readFixture<{ valid: Vector[]; invalid: { name: string; hex: string; error: string }[] }>("recordbatch.json");

/** What decodeFrom must give for a batch decoded by decodeBatch: kafkajs' message shape. */
async function expected(b: Uint8Array, from: number) {
  const { header: h, records } = await decodeBatch(b);
  if ((h.attributes & 0x20) !== 0) return []; // a control batch: transaction markers are never messages
  const lat = (h.attributes & 0x08) !== 0;
  return records
    .filter((r) => r.offset >= from)
    .map((r) => {
      const headers: Record<string, string | null | (string | null)[]> = {};
      for (const x of r.headers) {
        const cur = headers[x.key];
        const v = hex(x.value);
        if (cur === undefined) headers[x.key] = v;
        else if (Array.isArray(cur)) cur.push(v);
        else headers[x.key] = [cur, v];
      }
      return {
        offset: String(r.offset),
        timestamp: String(lat ? h.maxTimestamp : r.timestamp),
        key: hex(r.key),
        value: hex(r.value),
        headers,
        leaderEpoch: h.partitionLeaderEpoch,
        size: (r.key?.length ?? 0) + (r.value?.length ?? 0),
        attributes: 0,
      };
    });
}

function shape(m: KafkaMessage) {
  const headers: Record<string, string | null | (string | null)[]> = {};
  for (const [k, v] of Object.entries(m.headers)) headers[k] = Array.isArray(v) ? v.map(hex) : hex(v);
  return { offset: m.offset, timestamp: m.timestamp, key: hex(m.key), value: hex(m.value), headers, leaderEpoch: m.leaderEpoch, size: m.size, attributes: m.attributes };
}

describe("decodeFrom on the shared vectors", () => {
  for (const v of shared.valid) {
    test(v.name, async () => {
      const b = unhex(v.hex);
      const { records } = await decodeBatch(b);
      const first = records[0]!.offset;
      const next = records[records.length - 1]!.offset + 1;
      // Every start: the whole batch, from inside it, and past its end.
      for (const from of [first, first + 1, Math.floor((first + next) / 2), next - 1, next]) {
        const got = await decodeFrom(b, from);
        assert.deepEqual(got.msgs.map(shape), await expected(b, from), `from ${from}`);
        assert.equal(got.next, Math.max(from, next));
      }
    });
  }
  for (const v of shared.invalid) {
    test(`invalid: ${v.name}`, async () => {
      const b = unhex(v.hex);
      if (v.error === "short") {
        // A batch cut at the end of an answer is left for the next fetch.
        assert.deepEqual(await decodeFrom(b, 0), { msgs: [], next: 0 });
        return;
      }
      await assert.rejects(decodeFrom(b, 0), (e: unknown) => e instanceof CorruptBatchError && e.kind === v.error);
    });
  }
});

test("decodeFrom reads several batches of one answer, keys and values as Buffers over the answer's bytes", async () => {
  const enc = new TextEncoder();
  const batches: Uint8Array[] = [];
  for (let b = 0; b < 3; b++) {
    const bb = await buildBatch(
      { codec: b === 1 ? "lz4" : "none" },
      Array.from({ length: 50 }, (_, i) => ({
        key: i % 7 === 0 ? null : enc.encode(`k${b}-${i}`),
        value: i % 11 === 0 ? null : enc.encode(`v${b}-${i}`.repeat(i)),
        headers: i % 5 === 0 ? [{ key: "h", value: enc.encode(`${i}`) }, { key: "h", value: null }] : [],
        timestamp: 1_700_000_000_000 + i,
      })),
    );
    new DataView(bb.buffer, bb.byteOffset).setBigInt64(0, BigInt(100 + b * 50));
    batches.push(bb);
  }
  // One answer at an odd offset of a larger buffer, with part of a fourth batch after it.
  const answer = new Uint8Array(7 + batches.reduce((n, b) => n + b.length, 0) + 30).subarray(7);
  let o = 0;
  for (const b of batches) {
    answer.set(b, o);
    o += b.length;
  }
  answer.set(batches[0]!.subarray(0, 30), o);

  const got = await decodeFrom(answer, 120);
  assert.equal(got.next, 250);
  const want = [...(await expected(batches[0]!, 120)), ...(await expected(batches[1]!, 120)), ...(await expected(batches[2]!, 120))];
  assert.deepEqual(got.msgs.map(shape), want);
  assert.equal(got.msgs.length, 130);
  for (const m of got.msgs) {
    for (const x of [m.key, m.value]) {
      if (x === null) continue;
      assert.ok(Buffer.isBuffer(x), "bytes are Buffers in Node");
      // The uncompressed batches' bytes are views of the answer, never copies.
      if (Number(m.offset) < 150 || Number(m.offset) >= 200) assert.equal(x.buffer, answer.buffer);
    }
  }
  assert.deepEqual(got.msgs.find((m) => m.offset === "125")!.headers, { h: [Buffer.from("25"), null] });
});

/** at returns a copy of a batch stamped with a base offset, as a leader stamps it. */
function at(b: Uint8Array, base: number): Uint8Array {
  const c = b.slice();
  new DataView(c.buffer).setBigInt64(0, BigInt(base));
  return c;
}

function concat(bs: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(bs.reduce((n, b) => n + b.length, 0));
  let o = 0;
  for (const b of bs) {
    out.set(b, o);
    o += b.length;
  }
  return out;
}

const vector = (name: string) => unhex(shared.valid.find((v) => v.name === name)!.hex);

describe("decodeFrom under read_committed", () => {
  // The markers are Go's BuildMarker bytes from the shared vectors:
  // producer 4243, epoch 2, one record whose key is version 0 and type 0
  // (abort) or 1 (commit).
  const abortMarker = vector("strata abort marker");
  const commitMarker = vector("strata commit marker");
  const enc = new TextEncoder();
  const batch = (producerId: bigint, transactional: boolean, ...values: string[]) =>
    buildBatch(
      { idempotent: producerId >= 0n, transactional, producerId, producerEpoch: 2 },
      values.map((v) => ({ key: null, value: enc.encode(v), headers: [], timestamp: 1_700_000_000_000 })),
    );

  // The partition as the Go client's test has it, with producer 4243's
  // markers: 0-1 an aborted transaction, 2 another producer's idempotent
  // batch, 3 the abort marker, 4 the producer's next transaction, 5 its
  // commit marker, 6 a batch with no producer.
  async function partition(): Promise<Uint8Array> {
    return concat([
      at(await batch(4243n, true, "aborted-1", "aborted-2"), 0),
      at(await batch(8n, false, "plain"), 2),
      at(abortMarker, 3),
      at(await batch(4243n, true, "committed"), 4),
      at(commitMarker, 5),
      at(await batch(-1n, false, "no producer"), 6),
    ]);
  }
  const values = (msgs: KafkaMessage[]) => msgs.map((m) => `${m.offset}:${Buffer.from(m.value!).toString()}`);

  test("the aborted transaction's records are dropped, markers are never messages, the position moves past both", async () => {
    const log = await partition();
    const committed = await decodeFrom(log, 0, new AbortedFilter([{ producerId: 4243n, firstOffset: 0 }]));
    assert.deepEqual(values(committed.msgs), ["2:plain", "4:committed", "6:no producer"]);
    assert.equal(committed.next, 7);
    // read_uncommitted: no filter, every data record.
    const all = await decodeFrom(log, 0);
    assert.deepEqual(values(all.msgs), ["0:aborted-1", "1:aborted-2", "2:plain", "4:committed", "6:no producer"]);
    assert.equal(all.next, 7);
    // An answer with no aborted transaction drops nothing.
    assert.deepEqual(values((await decodeFrom(log, 0, new AbortedFilter([]))).msgs), values(all.msgs));
  });

  test("from inside the aborted transaction, and an answer that holds nothing but it", async () => {
    const log = await partition();
    const aborted = () => new AbortedFilter([{ producerId: 4243n, firstOffset: 0 }]);
    const mid = await decodeFrom(log, 1, aborted());
    assert.deepEqual(values(mid.msgs), ["2:plain", "4:committed", "6:no producer"]);
    assert.equal(mid.next, 7);
    // The aborted batch and its marker alone: no message, and the next
    // fetch starts after the marker rather than asking for them again.
    const only = concat([at(await batch(4243n, true, "aborted-1", "aborted-2"), 10), at(abortMarker, 12)]);
    const got = await decodeFrom(only, 10, new AbortedFilter([{ producerId: 4243n, firstOffset: 10 }]));
    assert.deepEqual(got, { msgs: [], next: 13 });
  });

  test("a commit marker ends nothing: only an abort marker closes its producer's aborted stretch", async () => {
    // Producer 4243's transaction from 0 is listed as aborted; a commit
    // marker of the same producer at 2 (as no leader writes, but a reader
    // must not take it for the abort) leaves the batch at 3 aborted too.
    const log = concat([at(await batch(4243n, true, "a"), 0), at(await batch(4243n, true, "b"), 1), at(commitMarker, 2), at(await batch(4243n, true, "c"), 3), at(abortMarker, 4)]);
    const got = await decodeFrom(log, 0, new AbortedFilter([{ producerId: 4243n, firstOffset: 0 }]));
    assert.deepEqual(got, { msgs: [], next: 5 });
  });

  test("compressed transactional batches: the aborted one dropped, the committed one read", async () => {
    const lz4 = await buildBatch(
      { codec: "lz4", idempotent: true, transactional: true, producerId: 4243n, producerEpoch: 2 },
      [{ key: null, value: enc.encode("squeezed"), headers: [], timestamp: 1 }],
    );
    const log = concat([at(lz4, 0), at(abortMarker, 1), at(lz4, 2), at(commitMarker, 3)]);
    const got = await decodeFrom(log, 0, new AbortedFilter([{ producerId: 4243n, firstOffset: 0 }]));
    assert.deepEqual(values(got.msgs), ["2:squeezed"]);
    assert.equal(got.next, 4);
  });
});
