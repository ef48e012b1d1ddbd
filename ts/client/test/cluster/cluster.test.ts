// The client against a real `strata dev` cluster (every service its own
// process), started once for this file. Cross-client checks use the Go
// client through the `strata` CLI.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, describe, test } from "node:test";
import { Code, ConnectError, type Transport } from "@connectrpc/connect";
import {
  ClosedError,
  ConfigResourceTypes,
  ConsumerEvents,
  FencedError,
  isTraceparent,
  logLevel,
  ProducerFencedError,
  Strata,
  StrataConnectionError,
  StrataError,
  traceCarrier,
  UnknownTopicError,
  type KafkaMessage,
  type LogEntry,
  type RecordMetadata,
} from "../../src/index.js";
import { nodePlatform } from "../../src/platform-node.js";
import { readFixture } from "../testdata.js";
import { DevCluster, waitFor } from "./devcluster.js";
import { runBrowserTest } from "./browser.js";

const here = dirname(fileURLToPath(import.meta.url));
let cluster: DevCluster;
let strata: Strata;

before(async () => {
  // A short coordinator session timeout, so a killed member's partitions
  // move within seconds (only the coordinator has --session-timeout).
  cluster = await DevCluster.start({ env: { STRATA_SESSION_TIMEOUT: "6s" } });
  strata = new Strata({ gateway: cluster.gateway, clientId: "ts-test" });
});

const closers: (() => void)[] = [];

after(async () => {
  for (const c of closers) c();
  await cluster?.stop();
});

const text = (b: Uint8Array | null) => (b === null ? null : new TextDecoder().decode(b));

/** consumeAll reads a topic with a fresh group until want(messages) is true. */
async function consumeAll(topic: string, want: (m: Map<string, KafkaMessage & { partition: number }>) => boolean, timeoutMs = 60_000) {
  const got = new Map<string, KafkaMessage & { partition: number }>();
  const consumer = strata.consumer({ groupId: `g-${topic}-${Math.random().toString(36).slice(2)}`, maxWaitTimeInMs: 200 });
  await consumer.subscribe({ topics: [topic], fromBeginning: true });
  await consumer.run({
    eachMessage: async ({ partition, message }) => {
      got.set(`${partition}/${message.offset}`, { ...message, partition });
    },
  });
  try {
    await waitFor(`records of ${topic}`, () => want(got), timeoutMs);
  } finally {
    await consumer.disconnect();
  }
  return [...got.values()];
}

describe("against strata dev", () => {
  test("admin: create, list, describe topics", async () => {
    const admin = strata.admin();
    const d = await admin.createTopic({ topic: "admin-t", partitions: 4, replicationFactor: 3, configs: { "retention.ms": "3600000" } });
    assert.equal(d.partitions.length, 4);
    assert.ok((await admin.listTopics()).includes("admin-t"));
    // Leaders answer offsets once they have applied the new topic.
    const desc = await waitFor("offsets of every partition", async () => {
      const d = await admin.describeTopic("admin-t");
      return d.partitions.every((p) => p.highWatermark === "0" && p.logStartOffset === "0") ? d : undefined;
    });
    assert.equal(desc.configs["retention.ms"], "3600000");
    assert.deepEqual(desc.partitions.map((p) => p.replicas.length), [3, 3, 3, 3]);
    await assert.rejects(admin.createTopic({ topic: "admin-t" }), (e: { reason?: string }) => e.reason === "TOPIC_ALREADY_EXISTS");
    await admin.deleteTopic("admin-t");
  });

  test("keyed records land on the partitions the Go client picks", async () => {
    const table = readFixture<{ partitions: number[]; keys: { key: string; keyHex: string; partitionFor: number[] }[] }>("partitioner.json");
    const col = table.partitions.indexOf(12);
    await strata.admin().createTopic({ topic: "keys", partitions: 12, replicationFactor: 3 });
    const producer = strata.producer();
    const keys = table.keys.filter((k) => !k.keyHex);
    const acks = await producer.send({ topic: "keys", messages: keys.map((k) => ({ key: k.key, value: `v-${k.key}` })) });
    await producer.close();
    assert.equal(acks.length, keys.length);
    keys.forEach((k, i) => assert.equal(acks[i]!.partition, k.partitionFor[col], `key ${JSON.stringify(k.key)}`));
    // And the Go client reads each key back from that partition.
    const lines = cluster.strata(["consume", "keys", "-e", "-f", "json"]).trim().split("\n").map((l) => JSON.parse(l) as { key: string; partition: number });
    assert.equal(lines.length, keys.length);
    const want = new Map(keys.map((k) => [k.key, k.partitionFor[col]]));
    for (const l of lines) assert.equal(l.partition, want.get(l.key), `Go read ${JSON.stringify(l.key)}`);
  });

  test("Go produces, TS consumes every record with headers", async () => {
    await strata.admin().createTopic({ topic: "go-to-ts", partitions: 6, replicationFactor: 3 });
    const n = 300;
    const input = Array.from({ length: n }, (_, i) => `k${i}\tvalue ${i} é`).join("\n") + "\n";
    cluster.strata(["produce", "go-to-ts", "-f", "%k\\t%v\\n", "-H", "source=go", "-H", "trace=00-abc"], input);
    const got = await consumeAll("go-to-ts", (m) => m.size >= n);
    assert.equal(got.length, n);
    const byKey = new Map(got.map((m) => [text(m.key), m]));
    for (let i = 0; i < n; i++) {
      const m = byKey.get(`k${i}`);
      assert.ok(m, `k${i} consumed`);
      assert.equal(text(m.value), `value ${i} é`);
      assert.equal(text(m.headers.source as Uint8Array), "go");
      assert.equal(text(m.headers.trace as Uint8Array), "00-abc");
    }
  });

  test("TS produces, Go consumes every record with headers", async () => {
    await strata.admin().createTopic({ topic: "ts-to-go", partitions: 6, replicationFactor: 3 });
    const producer = strata.producer({ linger: 2 });
    const n = 300;
    const sends: Promise<RecordMetadata[]>[] = [];
    for (let i = 0; i < n; i += 50) {
      sends.push(
        producer.send({
          topic: "ts-to-go",
          messages: Array.from({ length: 50 }, (_, j) => ({ key: `k${i + j}`, value: `value ${i + j} ü`, headers: { source: "ts", seq: String(i + j) } })),
        }),
      );
    }
    const acks = (await Promise.all(sends)).flat();
    await producer.close();
    assert.equal(acks.length, n);
    const lines = cluster.strata(["consume", "ts-to-go", "-e", "-f", "json"]).trim().split("\n");
    assert.equal(lines.length, n);
    const seen = new Set<string>();
    for (const l of lines) {
      const r = JSON.parse(l) as { key: string; value: string; partition: number; offset: number; headers: Record<string, string> };
      const i = Number(r.key.slice(1));
      assert.equal(r.value, `value ${i} ü`);
      assert.deepEqual(r.headers, { source: "ts", seq: String(i) });
      assert.equal(r.partition, acks[i]!.partition);
      assert.equal(String(r.offset), acks[i]!.offset);
      seen.add(r.key);
    }
    assert.equal(seen.size, n);
  });

  test("trace context crosses between the Go and TS clients in record headers", async () => {
    await strata.admin().createTopic({ topic: "traced", partitions: 1, replicationFactor: 3 });
    // TS produces with a propagator (as @opentelemetry/api's would inject);
    // a message's own traceparent header wins over the propagator's.
    const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    const producer = strata.producer({ propagator: { inject: (c) => Object.assign(c, { traceparent, tracestate: "vendor=1" }) } });
    await producer.send({ topic: "traced", messages: [{ value: "from ts" }] });
    const own = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    await producer.send({ topic: "traced", messages: [{ value: "own header", headers: { traceparent: own } }] });
    await producer.close();
    const lines = cluster.strata(["consume", "traced", "-e", "-f", "json"]).trim().split("\n");
    const read = lines.map((l) => JSON.parse(l) as { value: string; headers: Record<string, string> });
    assert.deepEqual(read[0], { ...read[0], value: "from ts", headers: { traceparent, tracestate: "vendor=1" } });
    assert.deepEqual(read[1]!.headers, { traceparent: own });

    // Go produces with tracing on (an OTLP endpoint set; nothing listens
    // there, which costs the CLI nothing but a failed export): TS reads the
    // context the Go producer's send span wrote.
    cluster.strata(["produce", "traced"], "from go\n", { OTEL_EXPORTER_OTLP_ENDPOINT: "http://127.0.0.1:9" });
    const got = await consumeAll("traced", (m) => m.size >= 3);
    const fromGo = got.find((m) => text(m.value) === "from go");
    assert.ok(fromGo, "the Go record was consumed");
    const carrier = traceCarrier(fromGo.headers);
    assert.ok(isTraceparent(carrier.traceparent ?? ""), `traceparent ${JSON.stringify(carrier)}`);
    assert.notEqual(carrier.traceparent, traceparent);
    const fromTs = got.find((m) => text(m.value) === "from ts");
    assert.deepEqual(traceCarrier(fromTs!.headers), { traceparent, tracestate: "vendor=1" });
  });

  test("errors are typed and carry the server's reason", async () => {
    const admin = strata.admin();
    await assert.rejects(admin.describeGroup("no-such-group"), (e: unknown) => {
      assert.ok(e instanceof StrataError, String(e));
      assert.equal(e.reason, "GROUP_ID_NOT_FOUND");
      assert.equal(e.codeName, "not_found");
      assert.equal(e.retriable, false);
      return true;
    });
    await assert.rejects(admin.createTopic({ topic: "bad name!" }), (e: unknown) => e instanceof StrataError && e.codeName === "invalid_argument" && /bad name!/.test(e.message));
    const fast = new Strata({ gateway: cluster.gateway, unknownTopicWait: 300 });
    const producer = fast.producer();
    await assert.rejects(producer.send({ topic: "no-such-topic", messages: [{ value: "x" }] }), (e: unknown) => e instanceof UnknownTopicError && e.topic === "no-such-topic");
    await producer.close();
    await assert.rejects(producer.send({ topic: "keys", messages: [{ value: "x" }] }), ClosedError);
    assert.throws(() => strata.producer({ acks: "leader", idempotent: true }), /idempotent: needs acks "all"/);
    assert.throws(() => new Strata({ gateway: "127.0.0.1:9092" }), /want a base URL/);
  });

  test("pause, resume, seek and eachBatch resolveOffset", async () => {
    const topic = "pause-seek";
    await strata.admin().createTopic({ topic, partitions: 2, replicationFactor: 3 });
    const producer = strata.producer();
    for (let p = 0; p < 2; p++) {
      await producer.send({ topic, messages: Array.from({ length: 50 }, (_, i) => ({ value: `p${p}-${i}`, partition: p })) });
    }
    await producer.close();
    const seen: { partition: number; offset: number }[] = [];
    const consumer = strata.consumer({ groupId: "pause-seek-g", maxWaitTimeInMs: 100 });
    await consumer.subscribe({ topics: [topic], fromBeginning: true });
    consumer.pause([{ topic, partitions: [1] }]);
    let seeked = false;
    await consumer.run({
      eachBatchAutoResolve: false,
      eachBatch: async ({ batch, resolveOffset }) => {
        for (const m of batch.messages) {
          seen.push({ partition: batch.partition, offset: Number(m.offset) });
          resolveOffset(m.offset);
          if (batch.partition === 0 && m.offset === "9" && !seeked) {
            seeked = true;
            consumer.seek({ topic, partition: 0, offset: "40" });
            return;
          }
        }
      },
    });
    // Partition 0 delivers 0..9, then from 40 on; partition 1 is paused.
    await waitFor("partition 0 read to its end", () => seen.filter((x) => x.partition === 0).some((x) => x.offset === 49));
    assert.deepEqual(
      seen.filter((x) => x.partition === 0).map((x) => x.offset),
      [...Array.from({ length: 10 }, (_, i) => i), ...Array.from({ length: 10 }, (_, i) => 40 + i)],
    );
    assert.equal(seen.filter((x) => x.partition === 1).length, 0, "a paused partition is not delivered");
    assert.deepEqual(consumer.paused(), [{ topic, partition: 1 }]);
    consumer.resume([{ topic, partitions: [1] }]);
    await waitFor("partition 1 after resume", () => seen.filter((x) => x.partition === 1).length === 50);
    await consumer.disconnect();
    // The commit on disconnect is what was resolved: the end of both partitions.
    const g = await strata.admin().describeGroup("pause-seek-g");
    assert.deepEqual(g.partitions.map((p) => [p.partition, p.committedOffset]), [[0, "50"], [1, "50"]]);
  });

  test("a member the coordinator removed has its commit refused by the coordinator with FencedError", async () => {
    const topic = "fence";
    await strata.admin().createTopic({ topic, partitions: 1, replicationFactor: 3 });
    // The member's heartbeats stop reaching the coordinator (its transport
    // drops them), so the coordinator removes it after the 6 s session
    // timeout while the member still believes it owns the partition.
    let dropBeats = false;
    const transport = (baseUrl: string): Transport => {
      const t = nodePlatform.transport(baseUrl);
      closers.push(t.close);
      return {
        unary: async (method, ...rest) => {
          if (dropBeats && method.name === "ConsumerGroupHeartbeat") throw new ConnectError("dropped by the test", Code.Unavailable);
          return t.transport.unary(method, ...rest);
        },
        stream: (method, ...rest) => t.transport.stream(method, ...rest),
      };
    };
    const consumer = new Strata({ gateway: cluster.gateway, transport, logLevel: logLevel.NOTHING }).consumer({ groupId: "fence-g" });
    await consumer.subscribe({ topics: [topic], fromBeginning: true });
    await consumer.run({ eachMessage: async () => {} });
    await waitFor("assignment", () => consumer.assignment().length === 1);
    await consumer.commitOffsets([{ topic, partition: 0, offset: "0" }]);
    const admin = strata.admin();
    assert.equal((await admin.describeGroup("fence-g")).members.length, 1);
    dropBeats = true;
    await waitFor("the coordinator to remove the member", async () => (await admin.describeGroup("fence-g")).members.length === 0, 30_000);
    assert.deepEqual(consumer.assignment(), [{ topic, partition: 0 }], "the member still believes it owns the partition");
    await assert.rejects(consumer.commitOffsets([{ topic, partition: 0, offset: "1" }]), (e: unknown) => {
      assert.ok(e instanceof FencedError, String(e));
      assert.ok(e.reason === "UNKNOWN_MEMBER_ID" || e.reason === "FENCED_MEMBER_EPOCH", `reason ${e.reason}`);
      assert.ok(e.cause instanceof StrataError && e.cause.detail, "the coordinator's own error is the cause");
      return true;
    });
    const g = await admin.describeGroup("fence-g");
    assert.equal(g.partitions.find((p) => p.partition === 0)?.committedOffset, "0", "the refused commit did not land");
    dropBeats = false;
    await consumer.disconnect().catch(() => undefined);
  });

  test("partitions added under a running group are consumed, and nothing crashes", async () => {
    const topic = "grow";
    const admin = strata.admin();
    await admin.createTopic({ topic, partitions: 2, replicationFactor: 3 });
    const producer = strata.producer({ linger: 0 });
    for (let p = 0; p < 2; p++) await producer.send({ topic, messages: [{ value: `before-${p}`, partition: p }] });
    const got = new Set<string>();
    const crashes: unknown[] = [];
    const consumer = strata.consumer({ groupId: "grow-g", maxWaitTimeInMs: 200 });
    consumer.on(ConsumerEvents.CRASH, (e) => void crashes.push(e.payload.error));
    await consumer.subscribe({ topics: [topic], fromBeginning: true });
    await consumer.run({ eachMessage: async ({ partition, message }) => void got.add(`${partition}:${text(message.value)}`) });
    await waitFor("the first records", () => got.size === 2);
    await admin.createPartitions({ topicPartitions: [{ topic, count: 4 }] });
    await waitFor("the new partitions to be assigned", () => consumer.assignment().length === 4, 30_000);
    const fresh = strata.producer({ linger: 0 });
    for (let p = 2; p < 4; p++) await fresh.send({ topic, messages: [{ value: `after-${p}`, partition: p }] });
    await fresh.close();
    await producer.close();
    await waitFor("the new partitions' records", () => got.has("2:after-2") && got.has("3:after-3"), 30_000);
    await consumer.disconnect();
    assert.deepEqual(crashes, []);
  });

  test("a handler failing on one message: the other partitions keep flowing, then the message is dead-lettered", async () => {
    const topic = "poison";
    await strata.admin().createTopic({ topic, partitions: 3, replicationFactor: 3 });
    const producer = strata.producer({ linger: 0 });
    for (let p = 0; p < 3; p++) await producer.send({ topic, messages: Array.from({ length: 30 }, (_, i) => ({ value: `p${p}-${i}`, partition: p })) });
    await producer.close();
    const done: { partition: number; offset: number; at: number }[] = [];
    const attempts: number[] = [];
    let dead: { partition: number; offset: string; at: number } | undefined;
    const consumer = strata.consumer({ groupId: "poison-g", maxWaitTimeInMs: 200, retry: { retries: 4, initialRetryTime: 300, maxRetryTime: 600 } });
    await consumer.subscribe({ topics: [topic], fromBeginning: true });
    await consumer.run({
      eachMessage: async ({ partition, message }) => {
        if (partition === 0 && message.offset === "3") {
          attempts.push(performance.now());
          throw new Error("cannot parse");
        }
        done.push({ partition, offset: Number(message.offset), at: performance.now() });
      },
      deadLetter: async ({ partition, message }) => void (dead = { partition, offset: message.offset, at: performance.now() }),
    });
    await waitFor("every other message", () => done.length === 89, 60_000);
    await consumer.disconnect();
    assert.equal(attempts.length, 5, "the first call and 4 retries");
    assert.deepEqual([dead!.partition, dead!.offset], [0, "3"]);
    const others = done.filter((d) => d.partition !== 0);
    assert.equal(others.length, 60);
    assert.ok(Math.max(...others.map((d) => d.at)) < dead!.at, "partitions 1 and 2 waited for partition 0's retries");
    const g = await strata.admin().describeGroup("poison-g");
    assert.deepEqual(g.partitions.map((p) => p.committedOffset), ["30", "30", "30"]);
  });

  test("TS writes every codec and the Go client reads it; Go writes lz4 and zstd and TS reads them", async () => {
    const topic = "codecs";
    await strata.admin().createTopic({ topic, partitions: 1, replicationFactor: 3 });
    const producer = strata.producer({ linger: 0 });
    const codecs = ["none", "gzip", "snappy", "lz4", "zstd"] as const;
    for (const codec of codecs) {
      await producer.send({ topic, compression: codec, messages: Array.from({ length: 50 }, (_, i) => ({ value: `${codec}-${i} ${"payload ".repeat(20)}` })) });
    }
    await producer.close();
    const lines = cluster.strata(["consume", topic, "-e", "-f", "json"]).trim().split("\n").map((l) => (JSON.parse(l) as { value: string }).value);
    assert.equal(lines.length, 250);
    for (const codec of codecs) assert.equal(lines.filter((v) => v.startsWith(`${codec}-`)).length, 50, codec);
    for (const codec of ["lz4", "zstd"]) cluster.strata(["produce", topic, "-z", codec], Array.from({ length: 20 }, (_, i) => `go-${codec}-${i} ${"x".repeat(300)}`).join("\n") + "\n");
    const got = await consumeAll(topic, (m) => m.size >= 290);
    for (const codec of ["lz4", "zstd"]) assert.equal(got.filter((m) => text(m.value)!.startsWith(`go-${codec}-`)).length, 20, codec);
  });

  test("max.message.bytes=4096: 12000 small records land, cut at the limit or split when refused; a record over it fails alone", async () => {
    const topic = "small-limit";
    const admin = strata.admin();
    await admin.createTopic({ topic, partitions: 1, replicationFactor: 3 });
    const logs: LogEntry[] = [];
    const client = new Strata({ gateway: cluster.gateway, clientId: "ts-split", logLevel: logLevel.DEBUG, logCreator: () => (e) => void logs.push(e) });
    // This producer learns the topic's limit (the default, 1 MiB) before it drops to 4096.
    const stale = client.producer({ linger: 5 });
    await stale.send({ topic, messages: [{ value: "first" }] });
    await admin.alterConfigs({ resources: [{ type: ConfigResourceTypes.TOPIC, name: topic, configEntries: [{ name: "max.message.bytes", value: "4096" }] }] });
    const big = "b".repeat(4096 + 70_000); // over the limit and the 64 KiB of framing the storage node allows
    const probe = strata.producer();
    await waitFor("the leader to apply max.message.bytes=4096", () =>
      probe.send({ topic, messages: [{ value: big }] }).then(
        () => false,
        (e: unknown) => e instanceof StrataError && e.reason === "RECORD_TOO_LARGE",
      ),
    );
    await probe.close();
    const values = (from: number) => Array.from({ length: 12000 }, (_, i) => `record ${from + i} ${"x".repeat(60)}`);
    // The stale producer's 1 MiB batches are refused and split in halves.
    const first = values(0);
    assert.equal((await stale.send({ topic, messages: first.map((value) => ({ value })) })).length, first.length);
    assert.ok(logs.some((e) => /sending it again in two halves/.test(e.log.message)), "a batch was split");
    await stale.close();
    // A new producer reads the limit from the metadata and cuts its batches at it.
    const fresh = strata.producer({ linger: 5 });
    const second = values(first.length);
    assert.equal((await fresh.send({ topic, messages: second.map((value) => ({ value })) })).length, second.length);
    await assert.rejects(fresh.send({ topic, messages: [{ value: big }] }), (e: unknown) => e instanceof StrataError && e.reason === "RECORD_TOO_LARGE");
    await fresh.send({ topic, messages: [{ value: "last" }] });
    await fresh.close();
    const want = ["first", ...first, ...second, "last"];
    const got = await consumeAll(topic, (m) => m.size >= want.length);
    assert.deepEqual(got.sort((a, b) => Number(BigInt(a.offset) - BigInt(b.offset))).map((m) => text(m.value)), want);
  });

  test("transactions: read-committed consumers see committed records only, offsets commit with the transaction, a newer producer fences the older", async () => {
    const admin = strata.admin();
    await admin.createTopic({ topic: "txn-t", partitions: 2, replicationFactor: 3 });
    await admin.createTopic({ topic: "txn-in", partitions: 1, replicationFactor: 3 });
    const p = strata.producer({ transactionalId: "ts-txn", linger: 0 });
    let tx = await p.transaction();
    await tx.send({ topic: "txn-t", messages: [{ value: "c0", partition: 0 }, { value: "c1", partition: 1 }] });
    await tx.commit();
    tx = await p.transaction();
    await tx.send({ topic: "txn-t", messages: [{ value: "a0", partition: 0 }, { value: "a1", partition: 1 }] });
    await tx.abort();
    // Each partition's last committed record comes after the aborted
    // ones: a consumer that has it has read past them.
    tx = await p.transaction();
    await tx.send({ topic: "txn-t", messages: [{ value: "c2", partition: 0 }, { value: "c3", partition: 1 }] });
    await tx.commit();

    const read = async (readUncommitted: boolean, want: string[]) => {
      const seen: string[] = [];
      const c = strata.consumer({ groupId: `txn-read-${Math.random().toString(36).slice(2)}`, maxWaitTimeInMs: 200, readUncommitted });
      await c.subscribe({ topics: ["txn-t"], fromBeginning: true });
      await c.run({ eachMessage: async ({ message }) => void seen.push(text(message.value)!) });
      try {
        await waitFor(`${want.join(",")} read`, () => want.every((v) => seen.includes(v)));
      } finally {
        await c.disconnect();
      }
      return seen.sort();
    };
    assert.deepEqual(await read(false, ["c2", "c3"]), ["c0", "c1", "c2", "c3"]);
    assert.deepEqual(await read(true, ["a0", "a1", "c0", "c1", "c2", "c3"]), ["a0", "a1", "c0", "c1", "c2", "c3"]);

    // sendOffsets with a running group member: its offset is committed
    // only with the transaction.
    const plain = strata.producer();
    await plain.send({ topic: "txn-in", messages: [{ value: "x" }] });
    await plain.close();
    const member = strata.consumer({ groupId: "txn-g", maxWaitTimeInMs: 200 });
    let readIn = 0;
    await member.subscribe({ topics: ["txn-in"], fromBeginning: true });
    await member.run({ autoCommit: false, eachMessage: async () => void readIn++ });
    await waitFor("the member to read txn-in", () => readIn > 0);
    const committed = async () => (await admin.describeGroup("txn-g")).partitions.find((x) => x.topic === "txn-in" && x.partition === 0)?.committedOffset ?? "-1";
    tx = await p.transaction();
    await tx.send({ topic: "txn-t", messages: [{ value: "o0", partition: 0 }] });
    await tx.sendOffsets({ consumer: member, topics: [{ topic: "txn-in", partitions: [{ partition: 0, offset: "1" }] }] });
    await tx.abort();
    assert.equal(await committed(), "-1");
    tx = await p.transaction();
    await tx.send({ topic: "txn-t", messages: [{ value: "o1", partition: 0 }] });
    await tx.sendOffsets({ consumer: member, topics: [{ topic: "txn-in", partitions: [{ partition: 0, offset: "1" }] }] });
    await tx.commit();
    await waitFor("the transaction's offset to be committed", async () => (await committed()) === "1");
    await member.disconnect();

    // A second producer with the same transactionalId fences the first.
    tx = await p.transaction();
    await tx.send({ topic: "txn-t", messages: [{ value: "fenced", partition: 1 }] });
    const p2 = strata.producer({ transactionalId: "ts-txn", linger: 0 });
    await waitFor("the newer producer to take the id", async () => {
      await p2.connect(); // retried while the older's open transaction is being aborted
      return true;
    });
    await assert.rejects(tx.commit(), (e: unknown) => e instanceof ProducerFencedError && e.transactionalId === "ts-txn");
    await assert.rejects(p.transaction(), ProducerFencedError);
    const tx2 = await p2.transaction();
    await tx2.send({ topic: "txn-t", messages: [{ value: "after", partition: 1 }] });
    await tx2.commit();
    const after = await read(false, ["after"]);
    assert.ok(!after.includes("fenced"), `the fenced producer's record was read: ${after.join(",")}`);
    await p.close();
    await p2.close();
  });

  test("a group of 3 members on 12 partitions never shares a partition and resumes from commits after a kill", async () => {
    const topic = "group12";
    await strata.admin().createTopic({ topic, partitions: 12, replicationFactor: 3 });
    // Small batches (a fetch returns whole batches), so members commit
    // between batches many times while they work.
    const producer = strata.producer({ linger: 0 });
    const perPartition = 600;
    for (let i = 0; i < perPartition; i += 20) {
      const acks = await producer.send({
        topic,
        messages: Array.from({ length: 12 * 20 }, (_, j) => ({ value: `m${i}-${j}`, partition: j % 12 })),
      });
      assert.equal(acks.length, 12 * 20);
    }
    await producer.close();

    type Ev = { member: string; t: number; ev: string; partitions?: { partition: number }[]; partition?: number; offset?: number; topics?: { partition: number; offset: string }[] };
    const events: Ev[] = [];
    const members = ["a", "b", "c"].map((name) => {
      const p = spawn(process.execPath, [join(here, "group-member.js"), cluster.gateway, topic, "g12", name], { stdio: ["ignore", "pipe", "inherit"] });
      createInterface({ input: p.stdout! }).on("line", (l) => events.push(JSON.parse(l) as Ev));
      return { name, p };
    });
    try {
      // All three own partitions and have committed something.
      await waitFor("three members with partitions and commits", () => {
        const owning = new Set(events.filter((e) => e.ev === "assigned").map((e) => e.member));
        const committed = new Set(events.filter((e) => e.ev === "committed").map((e) => e.member));
        const aDone = events.filter((e) => e.member === "a" && e.ev === "processed").length;
        return owning.size === 3 && committed.has("a") && aDone >= 200;
      }, 60_000).catch((e) => {
        const summary = ["a", "b", "c"].map((m) => `${m}: ${JSON.stringify(events.filter((x) => x.member === m).map((x) => x.ev).reduce((acc, ev) => ((acc[ev] = (acc[ev] ?? 0) + 1), acc), {} as Record<string, number>))}`);
        throw new Error(`${(e as Error).message}; events ${summary.join("; ")}`);
      });
      const killedAt = performance.timeOrigin + performance.now();
      members[0]!.p.kill("SIGKILL");
      await new Promise((r) => members[0]!.p.on("exit", r));

      // Every record is processed by someone.
      await waitFor("every record processed", () => {
        const done = new Set(events.filter((e) => e.ev === "processed").map((e) => `${e.partition}/${e.offset}`));
        return done.size === 12 * perPartition;
      }, 90_000);

      // Ownership intervals per partition never overlap.
      const intervals = new Map<number, { member: string; from: number; to: number }[]>();
      const open = new Map<string, number>();
      for (const e of events) {
        for (const tp of e.partitions ?? []) {
          const k = `${e.member}/${tp.partition}`;
          if (e.ev === "assigned") open.set(k, e.t);
          if (e.ev === "revoked" && open.has(k)) {
            intervals.set(tp.partition, [...(intervals.get(tp.partition) ?? []), { member: e.member, from: open.get(k)!, to: e.t }]);
            open.delete(k);
          }
        }
      }
      for (const [k, from] of open) {
        const [member, part] = k.split("/") as [string, string];
        intervals.set(Number(part), [...(intervals.get(Number(part)) ?? []), { member, from, to: member === "a" ? killedAt : Infinity }]);
      }
      for (const [p, ivs] of intervals) {
        ivs.sort((x, y) => x.from - y.from);
        for (let i = 1; i < ivs.length; i++) {
          assert.ok(ivs[i]!.from >= ivs[i - 1]!.to, `partition ${p} owned by ${ivs[i - 1]!.member} and ${ivs[i]!.member} at once: ${JSON.stringify(ivs)}`);
        }
      }

      // Where the killed member had committed, the next owner resumed at
      // (or after) its last commit and not after its last processed record.
      // Only partitions "a" owned when it was killed: one it had handed over
      // in a rebalance before the kill is read on by its new owner from
      // "a"'s commit, long before the kill, so it says nothing about resuming.
      const ownedAtKill = new Set([...intervals].filter(([, ivs]) => ivs.some((iv) => iv.member === "a" && iv.to === killedAt)).map(([p]) => p));
      const killedParts = new Set(events.filter((e) => e.member === "a" && e.ev === "processed" && ownedAtKill.has(e.partition!)).map((e) => e.partition!));
      let checked = 0;
      for (const p of killedParts) {
        const commits = events.filter((e) => e.member === "a" && e.ev === "committed").flatMap((e) => e.topics!.filter((x) => x.partition === p).map((x) => Number(x.offset)));
        if (commits.length === 0) continue;
        const lastCommit = Math.max(...commits);
        const lastProcessed = Math.max(...events.filter((e) => e.member === "a" && e.ev === "processed" && e.partition === p).map((e) => e.offset!));
        const after = events.filter((e) => e.member !== "a" && e.ev === "processed" && e.partition === p && e.t > killedAt).map((e) => e.offset!);
        if (lastProcessed + 1 >= perPartition && after.length === 0) continue; // finished before the kill
        assert.ok(after.length > 0, `partition ${p} was taken over`);
        const first = Math.min(...after);
        assert.ok(first >= lastCommit, `partition ${p}: resumed at ${first}, below the commit ${lastCommit}`);
        assert.ok(first <= lastProcessed + 1, `partition ${p}: resumed at ${first}, skipping past ${lastProcessed + 1}`);
        checked++;
      }
      assert.ok(checked > 0, `at least one partition of the killed member was resumed from its commit; events: ${JSON.stringify(events.filter((e) => e.member === "a" && e.ev !== "processed"))}`);
    } finally {
      for (const m of members) if (m.p.exitCode === null) m.p.kill("SIGKILL");
    }
  });

  test("a leader killed mid-produce loses no acknowledged record and reorders none", async () => {
    const topic = "leader-kill";
    await strata.admin().createTopic({ topic, partitions: 3, replicationFactor: 3 });
    const producer = strata.producer({ linger: 2 });
    const acked: RecordMetadata[] = [];
    const values: string[] = [];
    let killed: ReturnType<DevCluster["kill"]> | undefined;
    const total = 3000;
    const chunk = 50;
    const inflight: Promise<void>[] = [];
    for (let i = 0; i < total; i += chunk) {
      const msgs = Array.from({ length: chunk }, (_, j) => ({ key: `k${i + j}`, value: `v${i + j}` }));
      inflight.push(
        producer.send({ topic, messages: msgs }).then((r) => {
          r.forEach((md, j) => {
            acked.push(md);
            values.push(msgs[j]!.value);
          });
        }),
      );
      if (inflight.length >= 8) await inflight.shift();
      if (!killed && acked.length >= 500) {
        const leader = (await strata.admin().describeTopic(topic)).partitions[0]!.leader;
        killed = cluster.kill("storage", leader);
      }
    }
    await Promise.all(inflight);
    await producer.close();
    assert.ok(killed, "a leader was killed");
    assert.equal(acked.length, total, "every send was acknowledged");
    cluster.restart(killed);
    const got = await consumeAll(topic, (m) => m.size >= total, 90_000);
    const at = new Map(got.map((m) => [`${m.partition}/${m.offset}`, text(m.value)]));
    acked.forEach((md, i) => assert.equal(at.get(`${md.partition}/${md.offset}`), values[i], `acked ${values[i]} at ${md.partition}/${md.offset}`));
    const counts = new Map<string | null, number>();
    for (const m of got) counts.set(text(m.value), (counts.get(text(m.value)) ?? 0) + 1);
    for (const [v, c] of counts) assert.equal(c, 1, `${v} stored ${c} times`);
    // Several batches of a partition were in flight: each partition still holds its records in send order.
    for (const part of new Set(got.map((m) => m.partition))) {
      const sent = got.filter((m) => m.partition === part).sort((a, b) => Number(BigInt(a.offset) - BigInt(b.offset))).map((m) => Number(text(m.value)!.slice(1)));
      sent.forEach((n, i) => assert.ok(i === 0 || n > sent[i - 1]!, `partition ${part}: v${n} stored after v${sent[i - 1]}`));
    }
  });

  test("a gateway outage is reported as such, and the clients recover when it is back", async () => {
    const admin = strata.admin();
    await admin.createTopic({ topic: "outage-known", partitions: 1, replicationFactor: 3 });
    await admin.createTopic({ topic: "outage-later", partitions: 1, replicationFactor: 3 });
    await admin.disconnect();
    const client = new Strata({ gateway: cluster.gateway, unknownTopicWait: 500, retry: { retries: 2, initialRetryTime: 100, maxRetryTime: 200 }, logLevel: logLevel.NOTHING });
    const producer = client.producer({ linger: 0 });
    await producer.send({ topic: "outage-known", messages: [{ value: "before" }] });
    const killed = cluster.kill("gateway", 1);
    try {
      await assert.rejects(producer.send({ topic: "outage-later", messages: [{ value: "x" }] }), (e: unknown) => {
        assert.ok(e instanceof StrataConnectionError, `got ${String(e)}`);
        assert.equal(e.address, cluster.gateway);
        return true;
      });
      const admin1 = client.admin();
      await assert.rejects(admin1.listTopics(), StrataConnectionError);
      await admin1.disconnect();
      // A topic already routed keeps flowing: records go to the leaders.
      await producer.send({ topic: "outage-known", messages: [{ value: "during" }] });
    } finally {
      cluster.restart(killed);
    }
    const admin2 = client.admin();
    await waitFor("the gateway back", () => admin2.listTopics().then(() => true), 60_000);
    await admin2.disconnect();
    await producer.send({ topic: "outage-later", messages: [{ value: "after" }] });
    await producer.close();
    const got = await consumeAll("outage-known", (m) => m.size >= 2);
    assert.deepEqual(got.map((m) => text(m.value)).sort(), ["before", "during"]);
  });

  test("the client runs in headless Chromium against the cluster over CORS", async () => {
    await strata.admin().createTopic({ topic: "browser", partitions: 3, replicationFactor: 3 });
    const result = await runBrowserTest(cluster.gateway, "browser");
    assert.equal(result.error, undefined, result.error);
    assert.equal(result.acks, 20);
    assert.deepEqual(result.consumed.sort(), Array.from({ length: 20 }, (_, i) => `browser ${i}`).sort());
    // And the Go client sees what the browser wrote, headers included.
    const lines = cluster.strata(["consume", "browser", "-e", "-f", "json"]).trim().split("\n").map((l) => JSON.parse(l) as { value: string; headers: Record<string, string> });
    assert.equal(lines.length, 20);
    for (const l of lines) assert.equal(l.headers.origin, "chromium");
  });
});

