// AbortedFilter against the table lib/recordbatch's TestAbortedFilter
// checks, so both clients drop the same batches of a read_committed
// answer; and the markers it tells apart, from the shared vectors Go's
// BuildMarker writes, with their key's version varied as Kafka reads it.
import assert from "node:assert/strict";
import { test } from "node:test";
import { AbortedFilter } from "../../src/aborted.js";
import { crc32c } from "../../src/crc32c.js";
import "../../src/index.js"; // installs the Node platform the record reader wraps bytes with
import { buildBatch, parseHeader, type BatchHeader } from "../../src/recordbatch.js";
import { readFixture, unhex } from "../testdata.js";

const shared = readFixture<{ valid: { name: string; hex: string }[] }>("recordbatch.json");
const vector = (name: string) => unhex(shared.valid.find((v) => v.name === name)!.hex);
const HEADER_SIZE = 61;

interface Batch {
  h: BatchHeader;
  records: Uint8Array;
}

/** stamp sets a batch's base offset and producer id (fixing its CRC) and returns its header and records section. */
function stamp(b: Uint8Array, base: number, producerId?: bigint): Batch {
  const c = b.slice();
  const dv = new DataView(c.buffer);
  dv.setBigInt64(0, BigInt(base));
  if (producerId !== undefined) {
    dv.setBigInt64(43, producerId);
    dv.setUint32(17, crc32c(c.subarray(21)));
  }
  return { h: parseHeader(c), records: c.subarray(HEADER_SIZE) };
}

async function data(producerId: bigint, transactional: boolean, base: number): Promise<Batch> {
  const rec = (v: string) => ({ key: null, value: new TextEncoder().encode(v), headers: [], timestamp: 1 });
  return stamp(await buildBatch({ idempotent: producerId >= 0n, producerId, transactional }, [rec("v"), rec("w")]), base);
}

const marker = (kind: "abort" | "commit", producerId: bigint, base: number) => stamp(vector(`strata ${kind} marker`), base, producerId);

test("AbortedFilter drops what Go's AbortedFilter drops", async () => {
  const log: [string, boolean, Batch][] = [
    ["producer 1's aborted transaction", true, await data(1n, true, 0)],
    ["producer 2, idempotent", false, await data(2n, false, 2)],
    ["no producer", false, await data(-1n, false, 4)],
    ["producer 1's abort marker", false, marker("abort", 1n, 6)],
    ["producer 1's next transaction", false, await data(1n, true, 7)],
    ["producer 3's aborted transaction", true, await data(3n, true, 9)],
    ["producer 2's transaction, not aborted", false, await data(2n, true, 11)],
    ["producer 2's commit marker", false, marker("commit", 2n, 13)],
  ];
  const f = new AbortedFilter([
    { producerId: 3n, firstOffset: 9 },
    { producerId: 1n, firstOffset: 0 },
  ]);
  for (const [name, skip, b] of log) assert.equal(f.skip(b.h, b.records), skip, name);
  // Without aborted transactions nothing is dropped.
  const none = new AbortedFilter([]);
  for (const [name, , b] of log) assert.equal(none.skip(b.h, b.records), false, name);
});

test("a transaction listed from inside a batch counts for that whole batch", async () => {
  // Kafka compares first offsets with each batch's last offset.
  const f = new AbortedFilter([{ producerId: 5n, firstOffset: 1 }]);
  const b = await data(5n, true, 0);
  assert.equal(f.skip(b.h, b.records), true);
});

test("an abort marker is told by its key: version 0 or more, type 0", () => {
  // The key is the record's first 4 bytes of payload; in Go's marker the
  // record is 17 bytes: length, attributes, two deltas, key length, key.
  const withKey = (version: number, type: number) => {
    const b = vector("strata abort marker").slice();
    const key = b.subarray(HEADER_SIZE + 5, HEADER_SIZE + 9);
    assert.deepEqual([...key], [0, 0, 0, 0], "the vector's key is version 0, abort");
    new DataView(key.buffer, key.byteOffset).setInt16(0, version);
    new DataView(key.buffer, key.byteOffset).setInt16(2, type);
    new DataView(b.buffer).setUint32(17, crc32c(b.subarray(21)));
    return stamp(b, 2);
  };
  const endsAbort = (m: Batch) => {
    const f = new AbortedFilter([{ producerId: 4243n, firstOffset: 0 }]);
    const before = stamp(vector("strata none transactional"), 0);
    assert.equal(f.skip(before.h, before.records), true);
    f.skip(m.h, m.records);
    const after = stamp(vector("strata none transactional"), 3);
    return !f.skip(after.h, after.records);
  };
  assert.equal(endsAbort(withKey(0, 0)), true, "version 0 abort");
  assert.equal(endsAbort(withKey(1, 0)), true, "a later version reads as version 0");
  assert.equal(endsAbort(withKey(-1, 0)), false, "a negative version is no marker");
  assert.equal(endsAbort(withKey(0, 1)), false, "a commit");
  assert.equal(endsAbort(marker("commit", 4243n, 2)), false, "Go's commit marker");
});
