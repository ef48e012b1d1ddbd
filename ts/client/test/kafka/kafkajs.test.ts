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
