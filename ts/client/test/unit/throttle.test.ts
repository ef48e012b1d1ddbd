// Quota throttling (KIP-219): a storage node's answer carries
// throttle_time_ms, and the client sends that node nothing more until the
// time has passed. Checked against a local HTTP/2 server: the next request
// arrives no earlier than the throttle after the answer that set it (a
// lower bound only: a loaded machine only makes the gap longer).
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { Strata } from "../../src/index.js";
import { buildBatch } from "../../src/recordbatch.js";
import { Throttles } from "../../src/throttle.js";
import { waitFor } from "../cluster/devcluster.js";
import { FakeServer } from "./fakeserver.js";

const servers: FakeServer[] = [];
after(async () => {
  for (const s of servers) await s.stop();
});

/** How much earlier than asked a Node timer may fire, measured on the clocks used here. */
const timerSlack = 5;

function metadata(url: string, asked: string[]) {
  return {
    nodes: [{ nodeId: 1, address: url }],
    topics: asked.map((name) => ({ name, topicId: `id-${name}`, partitions: [{ partition: 0, leaderId: 1, leaderEpoch: 1, replicas: [1], isr: [1] }] })),
    metadataVersion: 1n,
  };
}

test("Throttles: the longest wait asked for wins, and a throttle of 0 sets none", () => {
  const t = new Throttles();
  assert.equal(t.remaining("a"), 0);
  t.note("a", 0);
  t.note("a", -5);
  assert.equal(t.remaining("a"), 0);
  t.note("a", 10_000);
  t.note("a", 100);
  assert.ok(t.remaining("a") > 9_000, `remaining ${t.remaining("a")}`);
  assert.equal(t.remaining("b"), 0, "a throttle is per node");
});

test("a producer waits throttle_time_ms before its next produce to that node", async () => {
  const throttle = 1_000;
  let url = "";
  const answered: number[] = [];
  const srv = await FakeServer.start({
    gateway: {
      metadata: async (req) => metadata(url, req.topics),
      initProducerId: async () => ({ producerId: 1n, producerEpoch: 0 }),
    },
    storage: {
      produce: async () => {
        answered.push(performance.now());
        return { baseOffset: BigInt(answered.length - 1), throttleTimeMs: answered.length === 1 ? throttle : 0 };
      },
    },
  });
  url = srv.url;
  servers.push(srv);
  const producer = new Strata({ gateway: srv.url }).producer({ linger: 0 });
  await producer.send({ topic: "t", messages: [{ value: "first" }] });
  const acks = await producer.send({ topic: "t", messages: [{ value: "second" }] });
  await producer.send({ topic: "t", messages: [{ value: "third" }] });
  await producer.close();
  assert.equal(acks[0]!.offset, "1");
  const produced = srv.calls("Produce").map((s) => s.at);
  assert.equal(produced.length, 3);
  const gap = produced[1]! - answered[0]!;
  assert.ok(gap >= throttle - timerSlack, `the second produce came ${gap.toFixed(1)} ms after a ${throttle} ms throttle`);
});

test("a consumer waits throttle_time_ms before its next fetch from that node", async () => {
  const throttle = 1_000;
  let url = "";
  const records = 3;
  const answered: number[] = [];
  const batch = await buildBatch(
    {},
    Array.from({ length: records }, (_, i) => ({ key: null, value: new TextEncoder().encode(`v${i}`), headers: [], timestamp: Date.now() })),
  );
  const srv = await FakeServer.start({
    gateway: {
      metadata: async (req) => metadata(url, req.topics),
      findCoordinator: async () => ({ coordinatorId: "c1", address: url }),
    },
    coordinator: {
      consumerGroupHeartbeat: async (req) => ({
        memberId: req.memberId,
        memberEpoch: req.memberEpoch < 0 ? -1 : 1,
        heartbeatIntervalMs: 1_000,
        assignment: req.memberEpoch === 0 ? { partitions: [{ topic: "t", partitions: [0] }] } : undefined,
      }),
      offsetFetch: async () => ({ offsets: [{ topic: "t", partition: 0, committedOffset: 0n }] }),
      offsetCommit: async (req) => ({ partitions: req.partitions.map((p) => ({ topic: p.topic, partition: p.partition })) }),
    },
    storage: {
      fetch: async (req) => {
        const p = req.partitions[0]!;
        if (p.fetchOffset === 0n) {
          answered.push(performance.now());
          return { partitions: [{ topic: "t", partition: 0, highWatermark: BigInt(records), records: batch }], throttleTimeMs: throttle };
        }
        // Caught up: a long poll that finds nothing, as a node answers.
        await new Promise((r) => setTimeout(r, req.maxWaitMs));
        return { partitions: [{ topic: "t", partition: 0, highWatermark: BigInt(records) }] };
      },
    },
  });
  url = srv.url;
  servers.push(srv);
  const consumer = new Strata({ gateway: srv.url, token: "strata_tok" }).consumer({ groupId: "g", maxWaitTimeInMs: 100 });
  const got: string[] = [];
  await consumer.subscribe({ topics: ["t"], fromBeginning: true });
  await consumer.run({ eachMessage: async ({ message }) => void got.push(new TextDecoder().decode(message.value!)) });
  await waitFor("the records and the next fetch", () => got.length === records && srv.calls("Fetch").length >= 2, 30_000);
  await consumer.disconnect();
  assert.deepEqual(got, ["v0", "v1", "v2"]);
  const fetches = srv.calls("Fetch");
  assert.equal((fetches[1]!.request as { partitions: { fetchOffset: bigint }[] }).partitions[0]!.fetchOffset, BigInt(records));
  const gap = fetches[1]!.at - answered[0]!;
  assert.ok(gap >= throttle - timerSlack, `the next fetch came ${gap.toFixed(1)} ms after a ${throttle} ms throttle`);
  // The coordinator and the storage node got the token too.
  for (const m of ["FindCoordinator", "ConsumerGroupHeartbeat", "OffsetFetch", "Fetch"]) {
    assert.ok(srv.calls(m).length > 0 && srv.calls(m).every((s) => s.header.get("authorization") === "Bearer strata_tok"), `${m} without the token`);
  }
});
