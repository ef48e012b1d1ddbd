// kafkajs (a Kafka client nobody here wrote) against the Kafka listeners of
// a real `strata dev`: an idempotent producer, a consumer group of two, and
// the same records read by the `strata` CLI (Connect) at the same offsets
// with the same headers. Run by `npm test` (make test) and by `npm run
// test:kafka` (make test-kafka): see docs/kafka.md.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { Kafka, logLevel } from "kafkajs";
import { binDir, DevCluster, waitFor } from "../cluster/devcluster.js";

let cluster: DevCluster;
let kafka: Kafka;

before(async () => {
  cluster = await DevCluster.start({ env: { STRATA_SESSION_TIMEOUT: "6s" } });
  const bootstrap = `127.0.0.1:${cluster.basePort + 5}`;
  kafka = new Kafka({ clientId: "kafkajs-test", brokers: [bootstrap], logLevel: logLevel.NOTHING });
});

after(async () => {
  await cluster?.stop();
});

function cli(...args: string[]): string {
  return execFileSync(join(binDir, "strata"), ["--gateway", cluster.gateway, ...args], { encoding: "utf8" });
}

test("kafkajs produces idempotently and consumes in a group of two; the CLI reads the same records", async () => {
  const admin = kafka.admin();
  await admin.connect();
  assert.equal(await admin.createTopics({ topics: [{ topic: "kjs", numPartitions: 4, replicationFactor: 3 }], waitForLeaders: true }), true);
  const md = await admin.fetchTopicMetadata({ topics: ["kjs"] });
  assert.equal(md.topics[0]!.partitions.length, 4);
  await admin.disconnect();

  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  const n = 120;
  const acked = new Map<string, { partition: number; offset: string }>();
  for (let i = 0; i < n; i += 20) {
    const messages = Array.from({ length: 20 }, (_, j) => ({ key: `k${(i + j) % 5}`, value: `v${i + j}`, headers: { via: "kafkajs" } }));
    const res = await producer.send({ topic: "kjs", acks: -1, messages });
    // kafkajs reports a base offset per partition per send; resolve each
    // record's offset from the CLI's read below instead.
    assert.ok(res.every((r) => r.errorCode === 0));
  }
  await producer.disconnect();

  const seen = new Map<string, number>();
  const consumers = [kafka.consumer({ groupId: "kjs-group" }), kafka.consumer({ groupId: "kjs-group" })];
  for (const c of consumers) {
    await c.connect();
    await c.subscribe({ topic: "kjs", fromBeginning: true });
    await c.run({
      eachMessage: async ({ partition, message }) => {
        const v = message.value!.toString();
        seen.set(v, (seen.get(v) ?? 0) + 1);
        acked.set(v, { partition, offset: message.offset });
        assert.equal(message.headers?.via?.toString(), "kafkajs");
      },
    });
  }
  await waitFor("the kafkajs group to read every record", () => seen.size >= n, 120_000);
  for (const c of consumers) await c.disconnect();

  const lines = cli("consume", "kjs", "-o", "start", "-e", "-f", "json").trim().split("\n");
  assert.equal(lines.length, n);
  for (const line of lines) {
    const r = JSON.parse(line) as { partition: number; offset: number; value: string; headers: Record<string, string> };
    const k = acked.get(r.value);
    assert.ok(k, `CLI read ${r.value}, kafkajs did not`);
    assert.equal(k.partition, r.partition);
    assert.equal(k.offset, String(r.offset));
    assert.equal(r.headers.via, "kafkajs");
  }
  const group = JSON.parse(cli("group", "describe", "kjs-group", "--output", "json")) as unknown;
  assert.ok(group);
});

test("kafkajs transactions: a committed transaction is read, an aborted one is not, and sendOffsets commits only with the transaction", async () => {
  const admin = kafka.admin();
  await admin.connect();
  await admin.createTopics({ topics: [{ topic: "kjs-txn", numPartitions: 2, replicationFactor: 3 }, { topic: "kjs-txn-in", numPartitions: 1, replicationFactor: 3 }], waitForLeaders: true });

  const producer = kafka.producer({ transactionalId: "kjs-tx", idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  let tx = await producer.transaction();
  await tx.send({ topic: "kjs-txn", messages: [{ partition: 0, value: "c0" }, { partition: 1, value: "c1" }] });
  await tx.send({ topic: "kjs-txn", messages: [{ partition: 0, value: "c2" }, { partition: 1, value: "c3" }] });
  await tx.commit();
  tx = await producer.transaction();
  await tx.send({ topic: "kjs-txn", messages: [{ partition: 0, value: "a0" }, { partition: 1, value: "a1" }] });
  await tx.abort();
  // A record after the abort: the consumer has read past the aborted
  // records once it has this one.
  tx = await producer.transaction();
  await tx.send({ topic: "kjs-txn", messages: [{ partition: 0, value: "c4" }, { partition: 1, value: "c5" }] });
  await tx.commit();

  const read = async (groupId: string, readUncommitted: boolean, want: number): Promise<string[]> => {
    const seen: string[] = [];
    const c = kafka.consumer({ groupId, readUncommitted });
    await c.connect();
    await c.subscribe({ topic: "kjs-txn", fromBeginning: true });
    await c.run({ eachMessage: async ({ message }) => void seen.push(message.value!.toString()) });
    await waitFor(`${groupId} to read ${want} records`, () => seen.length >= want, 120_000);
    await c.disconnect();
    return seen.sort();
  };
  assert.deepEqual(await read("kjs-txn-committed", false, 6), ["c0", "c1", "c2", "c3", "c4", "c5"]);
  assert.deepEqual(await read("kjs-txn-uncommitted", true, 8), ["a0", "a1", "c0", "c1", "c2", "c3", "c4", "c5"]);

  // sendOffsets: the group's offset is staged with the transaction and
  // visible only once it commits; an aborted transaction's offset never is.
  const offset = async (): Promise<string> => {
    const [t] = await admin.fetchOffsets({ groupId: "kjs-txn-group", topics: ["kjs-txn-in"] });
    return t!.partitions.find((p) => p.partition === 0)!.offset;
  };
  tx = await producer.transaction();
  await tx.send({ topic: "kjs-txn", messages: [{ partition: 0, value: "o1" }] });
  await tx.sendOffsets({ consumerGroupId: "kjs-txn-group", topics: [{ topic: "kjs-txn-in", partitions: [{ partition: 0, offset: "7" }] }] });
  await tx.abort();
  assert.equal(await offset(), "-1");
  tx = await producer.transaction();
  await tx.send({ topic: "kjs-txn", messages: [{ partition: 0, value: "o2" }] });
  await tx.sendOffsets({ consumerGroupId: "kjs-txn-group", topics: [{ topic: "kjs-txn-in", partitions: [{ partition: 0, offset: "5" }] }] });
  assert.equal(await offset(), "-1");
  await tx.commit();
  await waitFor("the committed transaction's offset", async () => (await offset()) === "5");
  await producer.disconnect();
  await admin.disconnect();
});
