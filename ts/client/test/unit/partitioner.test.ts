// murmur2 and the key partitioner against the table the Go client checks
// (testdata/partitioner.json, written by client's TestSharedPartitionerTable).
import assert from "node:assert/strict";
import { test } from "node:test";
import { murmur2, partitionForKey } from "../../src/index.js";
import { readFixture, unhex } from "../testdata.js";

interface Table {
  partitions: number[];
  keys: { key: string; keyHex: string; murmur2: number; partitionFor: number[] }[];
}
const table = readFixture<Table>("partitioner.json");

test("murmur2 and partitionForKey match the Go client's table", () => {
  assert.ok(table.keys.length >= 100);
  for (const k of table.keys) {
    const key = k.keyHex ? unhex(k.keyHex) : new TextEncoder().encode(k.key);
    assert.equal(murmur2(key), k.murmur2, `murmur2(${k.key || k.keyHex})`);
    table.partitions.forEach((n, i) => {
      assert.equal(partitionForKey(key, n), k.partitionFor[i], `partitionForKey(${k.key || k.keyHex}, ${n})`);
      if (!k.keyHex) assert.equal(partitionForKey(k.key, n), k.partitionFor[i], "string keys hash as UTF-8");
    });
  }
});

test("Kafka's own murmur2 values", () => {
  // From Kafka's UtilsTest, as the Go client's partitioner_test.go.
  assert.equal(murmur2(new TextEncoder().encode("21")), -973932308);
  assert.equal(murmur2(new TextEncoder().encode("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8")), -58897971);
});
