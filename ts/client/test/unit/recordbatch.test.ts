// The record-batch codec against the vectors the Go codec passes
// (testdata/recordbatch.json, written by lib/recordbatch's
// TestSharedVectors), and a property test: random records round-trip, and
// any flipped bit in the CRC'd region is caught.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { buildBatch, Codec, CorruptBatchError, crc32c, decodeBatch, UnsupportedCodecError } from "../../src/index.js";
import { decompress as fzstd } from "fzstd";
import { lz4Compress, lz4Decompress } from "../../src/codecs/lz4.js";
import { zstdCompress } from "../../src/codecs/zstd.js";
import type { CodecName, RecordInput } from "../../src/index.js";
import { isControl, isTransactional } from "../../src/recordbatch.js";
import { hex, readFixture, unhex } from "../testdata.js";

interface SharedRecord {
  offset: string;
  timestamp: string;
  key: string | null;
  value: string | null;
  headers: { key: string; value: string | null }[];
}
interface SharedVector {
  name: string;
  hex: string;
  codec: number;
  exact: boolean;
  idempotent: boolean;
  transactional: boolean;
  attributes: number;
  producerId: string;
  producerEpoch: number;
  baseSequence: number;
  baseOffset: string;
  partitionLeaderEpoch: number;
  baseTimestamp: string;
  maxTimestamp: string;
  lastOffsetDelta: number;
  crc: number;
  records: SharedRecord[];
}
const shared = readFixture<{ valid: SharedVector[]; invalid: { name: string; hex: string; error: string }[] }>("recordbatch.json");
const codecName = (n: number) => (Object.keys(Codec) as CodecName[]).find((k) => Codec[k] === n)!;

describe("shared record-batch vectors", () => {
  assert.ok(shared.valid.length >= 10 && shared.invalid.length >= 5, "fixture has vectors");
  for (const v of shared.valid) {
    test(v.name, async () => {
      const bytes = unhex(v.hex);
      const { header: h, records } = await decodeBatch(bytes);
      assert.equal(h.attributes & 7, v.codec);
      assert.equal(h.attributes, v.attributes);
      assert.equal(isTransactional(h), v.transactional);
      assert.equal(isControl(h), (v.attributes & 0x20) !== 0);
      assert.equal(String(h.baseOffset), v.baseOffset);
      assert.equal(h.partitionLeaderEpoch, v.partitionLeaderEpoch);
      assert.equal(h.crc, v.crc);
      assert.equal(h.lastOffsetDelta, v.lastOffsetDelta);
      assert.equal(String(h.producerId), v.producerId);
      assert.equal(h.producerEpoch, v.producerEpoch);
      assert.equal(h.baseSequence, v.baseSequence);
      assert.equal(String(h.baseTimestamp), v.baseTimestamp);
      assert.equal(String(h.maxTimestamp), v.maxTimestamp);
      assert.deepEqual(
        records.map((r) => ({
          offset: String(r.offset),
          timestamp: String(r.timestamp),
          key: hex(r.key),
          value: hex(r.value),
          headers: r.headers.map((x) => ({ key: x.key, value: hex(x.value) })),
        })),
        v.records,
      );
      if (v.exact) {
        const again = await buildBatch(
          {
            codec: codecName(v.codec),
            idempotent: v.idempotent,
            transactional: v.transactional,
            producerId: BigInt(v.producerId),
            producerEpoch: v.producerEpoch,
            baseSequence: v.baseSequence,
          },
          v.records.map((r) => ({
            key: r.key === null ? null : unhex(r.key),
            value: r.value === null ? null : unhex(r.value),
            headers: r.headers.map((x) => ({ key: x.key, value: x.value === null ? null : unhex(x.value) })),
            timestamp: Number(r.timestamp),
          })),
        );
        assert.equal(hex(again), v.hex, "buildBatch reproduces the Go bytes");
      }
    });
  }
  for (const v of shared.invalid) {
    test(`invalid: ${v.name}`, async () => {
      await assert.rejects(decodeBatch(unhex(v.hex)), (e: unknown) => {
        assert.ok(e instanceof CorruptBatchError, `got ${String(e)}`);
        assert.equal(e.kind, v.error);
        return true;
      });
    });
  }
});

test("crc32c matches the standard check value", () => {
  assert.equal(crc32c(new TextEncoder().encode("123456789")), 0xe3069283);
  assert.equal(crc32c(new Uint8Array(0)), 0);
});

// The iSCSI test patterns of RFC 3720, appendix B.4: long enough to take the
// word path (64 bytes and more) once repeated, and short ones for the byte path.
test("crc32c matches RFC 3720's test patterns", () => {
  const asc = Uint8Array.from({ length: 32 }, (_, i) => i);
  assert.equal(crc32c(new Uint8Array(32)), 0x8a9136aa);
  assert.equal(crc32c(new Uint8Array(32).fill(0xff)), 0x62a8ab43);
  assert.equal(crc32c(asc), 0x46dd794e);
  assert.equal(crc32c(asc.slice().reverse()), 0x113fdb5c);
});

// crc32cBitwise is the definition, one bit at a time.
function crc32cBitwise(data: Uint8Array): number {
  let c = 0xffffffff;
  for (const b of data) {
    c ^= b;
    for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ 0x82f63b78 : c >>> 1;
  }
  return (c ^ 0xffffffff) >>> 0;
}

test("crc32c equals the bitwise definition at every alignment and length", () => {
  // The fast path reads aligned 32-bit words in blocks of 16 bytes: every
  // start offset modulo 4 and every tail length modulo 16, around the
  // threshold where it starts, and long inputs, over one shared buffer.
  const next = rng(7);
  const buf = new Uint8Array(5000);
  for (let i = 0; i < buf.length; i++) buf[i] = Math.floor(next() * 256);
  for (let off = 0; off < 8; off++) {
    for (const n of [0, 1, 3, 15, 16, 17, 31, 62, 63, 64, 65, 66, 67, 79, 80, 81, 95, 127, 128, 129, 1000, 1031, 4096, 4991]) {
      const v = buf.subarray(off, off + n);
      assert.equal(crc32c(v), crc32cBitwise(v), `offset ${off}, length ${n}`);
    }
  }
  // A view into a Node Buffer from its pool (shared, odd offsets).
  const pooled = Buffer.from(buf.subarray(1, 2001));
  assert.equal(crc32c(pooled), crc32cBitwise(pooled));
});

// A small deterministic PRNG so a failure is reproducible from its seed.
function rng(seed: number) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function randomRecords(r: () => number): RecordInput[] {
  const n = 1 + Math.floor(r() * 40);
  const base = 1_600_000_000_000 + Math.floor(r() * 1e11);
  const bytes = (max: number): Uint8Array | null => {
    const x = r();
    if (x < 0.1) return null;
    const len = x < 0.2 ? 0 : Math.floor(r() * r() * max);
    const b = new Uint8Array(len);
    for (let i = 0; i < len; i++) b[i] = Math.floor(r() * 256);
    return b;
  };
  return Array.from({ length: n }, () => ({
    key: bytes(64),
    value: bytes(3000),
    timestamp: base + Math.floor((r() - 0.3) * 1e7),
    headers: Array.from({ length: Math.floor(r() * 4) }, (_, i) => ({ key: `h${i}-${"é".repeat(Math.floor(r() * 3))}`, value: bytes(40) })),
  }));
}

test("property: random records round-trip through build and decode", async () => {
  for (let seed = 1; seed <= 200; seed++) {
    const r = rng(seed);
    const recs = randomRecords(r);
    const codec = (Object.keys(Codec) as CodecName[])[seed % 5]!;
    const idem = seed % 2 === 0;
    const b = await buildBatch({ codec, idempotent: idem, producerId: 77n, producerEpoch: 1, baseSequence: seed }, recs);
    const { header, records } = await decodeBatch(b);
    assert.equal(header.recordCount, recs.length, `seed ${seed}`);
    assert.equal(header.baseSequence, idem ? seed : -1, `seed ${seed}`);
    assert.equal(header.maxTimestamp, Math.max(...recs.map((x) => x.timestamp)), `seed ${seed}`);
    assert.deepEqual(
      records.map((x) => ({ key: hex(x.key), value: hex(x.value), ts: x.timestamp, h: x.headers.map((y) => [y.key, hex(y.value)]) })),
      recs.map((x) => ({ key: hex(x.key), value: hex(x.value), ts: x.timestamp, h: x.headers.map((y) => [y.key, hex(y.value)]) })),
      `seed ${seed}`,
    );
    assert.deepEqual(records.map((x) => x.offset), recs.map((_, i) => i));
  }
});

/**
 * referenceBatch is RecordBatch v2 written the plain way, one byte at a
 * time into an array, with the bitwise CRC: what buildBatch must write for
 * codec none, whatever it does to go fast.
 */
function referenceBatch(recs: RecordInput[], idem?: { producerId: bigint; producerEpoch: number; baseSequence: number }): Uint8Array {
  const zz = (v: number) => (v >= 0 ? v * 2 : -v * 2 - 1);
  const varint = (out: number[], u: number) => {
    while (u >= 0x80) {
      out.push((u % 0x80) | 0x80);
      u = Math.floor(u / 0x80);
    }
    out.push(u);
  };
  const nullable = (out: number[], b: Uint8Array | null) => {
    if (b === null) return varint(out, 1);
    varint(out, zz(b.length));
    for (const x of b) out.push(x);
  };
  const base = recs[0]!.timestamp;
  const section: number[] = [];
  recs.forEach((r, i) => {
    const body: number[] = [0];
    varint(body, zz(r.timestamp - base));
    varint(body, zz(i));
    nullable(body, r.key);
    nullable(body, r.value);
    varint(body, zz(r.headers.length));
    for (const h of r.headers) {
      nullable(body, new TextEncoder().encode(h.key));
      nullable(body, h.value);
    }
    varint(section, zz(body.length));
    for (const x of body) section.push(x);
  });
  const b = new Uint8Array(61 + section.length);
  b.set(section, 61);
  const dv = new DataView(b.buffer);
  dv.setBigInt64(0, 0n);
  dv.setInt32(8, b.length - 12);
  dv.setInt32(12, -1);
  dv.setInt8(16, 2);
  dv.setInt16(21, 0);
  dv.setInt32(23, recs.length - 1);
  dv.setBigInt64(27, BigInt(base));
  dv.setBigInt64(35, BigInt(Math.max(...recs.map((r) => r.timestamp))));
  dv.setBigInt64(43, idem ? idem.producerId : -1n);
  dv.setInt16(51, idem ? idem.producerEpoch : -1);
  dv.setInt32(53, idem ? idem.baseSequence : -1);
  dv.setInt32(57, recs.length);
  dv.setUint32(17, crc32cBitwise(b.subarray(21)));
  return b;
}

test("property: buildBatch writes the bytes of the plain reference encoding", async () => {
  for (let seed = 1; seed <= 300; seed++) {
    const r = rng(1000 + seed);
    const recs = randomRecords(r);
    const idem = seed % 2 === 0 ? { producerId: BigInt(seed) * 1_000_003n, producerEpoch: seed % 7, baseSequence: seed * 11 } : undefined;
    const got = await buildBatch(idem ? { idempotent: true, ...idem } : {}, recs);
    assert.deepEqual(got, referenceBatch(recs, idem), `seed ${seed}`);
  }
  // Header keys in every UTF-8 length, a surrogate pair and lone surrogates
  // (which TextEncoder writes as U+FFFD), in a batch of 700 records.
  const keys = ["", "a", "é", "日本", "😀", "x\ud800y", "\udc00", "ab\ud83d"];
  const v = new Uint8Array([1, 2, 3]);
  const recs: RecordInput[] = Array.from({ length: 700 }, (_, i) => ({
    key: i % 3 === 0 ? null : v,
    value: i % 5 === 0 ? null : v,
    timestamp: 1_700_000_000_000 + i * 997 - (i % 4) * 3_000_000,
    headers: i % 2 === 0 ? [] : keys.map((k, j) => ({ key: k, value: j % 2 ? null : v })),
  }));
  assert.deepEqual(await buildBatch({}, recs), referenceBatch(recs));
});

test("property: a flipped bit after the CRC field never decodes", async () => {
  const r = rng(99);
  for (let trial = 0; trial < 300; trial++) {
    const b = await buildBatch({}, randomRecords(r).slice(0, 3));
    const i = 21 + Math.floor(r() * (b.length - 21));
    b[i]! ^= 1 << Math.floor(r() * 8);
    await assert.rejects(decodeBatch(b), (e: unknown) => e instanceof CorruptBatchError && e.kind === "crc");
  }
});

test("property: truncated batches are short, never a crash", async () => {
  const b = await buildBatch({}, randomRecords(rng(5)));
  for (let n = 0; n < b.length; n += Math.max(1, Math.floor(b.length / 97))) {
    await assert.rejects(decodeBatch(b.subarray(0, n)), (e: unknown) => e instanceof CorruptBatchError && (e.kind === "short" || e.kind === "length"));
  }
});

describe("codecs this client writes", () => {
  // Inputs that reach each path of the encoders: empty, shorter than a
  // match, repetitive across block boundaries (64 KiB for lz4, 128 KiB for
  // zstd), incompressible, and long runs (match lengths past the codes'
  // extension bytes).
  const r = rng(7);
  const random = (n: number) => Uint8Array.from({ length: n }, () => Math.floor(r() * 256));
  const text = new TextEncoder().encode(JSON.stringify(Array.from({ length: 8000 }, (_, i) => ({ id: i, user: `user-${i % 37}`, tags: ["a", "b", String(i % 5)] }))));
  const unit = random(1500);
  const inputs: [string, Uint8Array][] = [
    ["empty", new Uint8Array(0)],
    ["one byte", Uint8Array.of(42)],
    ["short repeat", new TextEncoder().encode("hello hello hello hello hello")],
    ["JSON records over several blocks", text],
    ["incompressible", random(200_000)],
    ["a run of 500 000 equal bytes", new Uint8Array(500_000).fill(7)],
    ["repeats far apart", Uint8Array.from([...unit, ...random(70_000), ...unit, ...random(140_000), ...unit])],
  ];
  for (const [name, data] of inputs) {
    test(`zstd and lz4 round-trip: ${name}`, () => {
      const z = zstdCompress(data);
      assert.deepEqual(fzstd(z), data, "fzstd reads what zstdCompress wrote");
      const l = lz4Compress(data);
      assert.deepEqual(lz4Decompress(l, 1 << 26), data);
      if (name.startsWith("JSON") || name.startsWith("a run")) {
        assert.ok(z.length < data.length / 4, `zstd ${z.length} of ${data.length} bytes`);
        assert.ok(l.length < data.length / 4, `lz4 ${l.length} of ${data.length} bytes`);
      }
    });
  }

  test("every codec round-trips a batch, and the header names the codec", async () => {
    const recs = randomRecords(rng(11));
    for (const codec of Object.keys(Codec) as CodecName[]) {
      const b = await buildBatch({ codec }, recs);
      const { header, records } = await decodeBatch(b);
      assert.equal(header.attributes & 7, Codec[codec], codec);
      assert.deepEqual(records.map((x) => hex(x.value)), recs.map((x) => hex(x.value)), codec);
    }
  });

  test("lz4: hostile frames fail as CorruptBatchError, never past the limit", () => {
    const ok = lz4Compress(new Uint8Array(100_000).fill(1));
    assert.throws(() => lz4Decompress(ok, 50_000), (e: unknown) => e instanceof CorruptBatchError && e.kind === "too-large");
    const cases: [string, Uint8Array][] = [
      ["bad magic", Uint8Array.of(1, 2, 3, 4, 0x60, 0x40, 0x82, 0, 0, 0, 0)],
      ["cut header", ok.subarray(0, 5)],
      ["cut block", ok.subarray(0, ok.length - 10)],
      // A block whose only sequence points before the start of the output.
      ["offset before the start", Uint8Array.of(0x04, 0x22, 0x4d, 0x18, 0x60, 0x40, 0x82, 4, 0, 0, 0, 0x10, 0x41, 0xff, 0x00, 0, 0, 0, 0)],
    ];
    for (const [name, b] of cases) assert.throws(() => lz4Decompress(b, 1 << 20), (e: unknown) => e instanceof CorruptBatchError, name);
  });

  test("a codec the format does not name is refused when building", async () => {
    await assert.rejects(buildBatch({ codec: "brotli" as CodecName }, randomRecords(rng(3))), UnsupportedCodecError);
  });
});
