// The Node transport's HTTP/2 settings, seen from a local HTTP/2 server: the
// receive windows the Go client uses (lib/serve), so a Fetch answer of
// several MiB is not cut into 64 KiB steps that each wait for the
// consumer's event loop to read them and send a WINDOW_UPDATE.
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { Strata } from "../../src/index.js";
import { CONNECTION_WINDOW, STREAM_WINDOW } from "../../src/platform-node.js";
import { buildBatch } from "../../src/recordbatch.js";
import { waitFor } from "../cluster/devcluster.js";
import { FakeServer } from "./fakeserver.js";

const servers: FakeServer[] = [];
after(async () => {
  for (const s of servers) await s.stop();
});

test("the Node transport opens 4 MiB stream and 16 MiB connection windows, as the Go client", async () => {
  assert.equal(STREAM_WINDOW, 4 << 20);
  assert.equal(CONNECTION_WINDOW, 16 << 20);
  const srv = await FakeServer.start({ gateway: { listTopics: async () => ({ topics: [{ name: "t" }] }) } });
  servers.push(srv);
  const strata = new Strata({ gateway: srv.url, logLevel: 0 });
  const admin = strata.admin();
  assert.deepEqual(await admin.listTopics(), ["t"]);
  // HTTP/2's defaults are 65535 for both; the connection window grows by
  // the client's WINDOW_UPDATE, which arrives after its SETTINGS.
  const w = await waitFor("the client's connection window", () => {
    const ws = srv.peerWindows();
    return ws.length === 1 && ws[0]!.connection! >= CONNECTION_WINDOW - 65_535 ? ws[0] : undefined;
  }, 10_000);
  assert.equal(w.stream, STREAM_WINDOW);
  await admin.disconnect();
});

test("a consumer reads a Fetch answer of several MiB through the widened windows", async () => {
  // Six batches of 1 MiB in one answer: more than HTTP/2's default stream
  // window (64 KiB) and the old connection window many times over.
  let url = "";
  const value = new Uint8Array(1 << 10).fill(7);
  const perBatch = 1024;
  const batches: Uint8Array[] = [];
  for (let b = 0; b < 6; b++) {
    const bb = await buildBatch({}, Array.from({ length: perBatch }, () => ({ key: null, value, headers: [], timestamp: Date.now() })));
    new DataView(bb.buffer, bb.byteOffset).setBigInt64(0, BigInt(b * perBatch)); // baseOffset is outside the CRC
    batches.push(bb);
  }
  const all = new Uint8Array(batches.reduce((n, b) => n + b.length, 0));
  batches.reduce((o, b) => (all.set(b, o), o + b.length), 0);
  const total = 6 * perBatch;
  const srv = await FakeServer.start({
    gateway: {
      metadata: async (req) => ({
        nodes: [{ nodeId: 1, address: url }],
        topics: req.topics.map((name) => ({ name, topicId: `id-${name}`, partitions: [{ partition: 0, leaderId: 1, leaderEpoch: 1, replicas: [1], isr: [1] }] })),
        metadataVersion: 1n,
      }),
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
        if (p.fetchOffset === 0n) return { partitions: [{ topic: "t", partition: 0, highWatermark: BigInt(total), records: all }] };
        await new Promise((r) => setTimeout(r, req.maxWaitMs));
        return { partitions: [{ topic: "t", partition: 0, highWatermark: BigInt(total) }] };
      },
    },
  });
  url = srv.url;
  servers.push(srv);
  const strata = new Strata({ gateway: srv.url, logLevel: 0 });
  const consumer = strata.consumer({ groupId: "g", maxBytesPerPartition: 8 << 20 });
  await consumer.subscribe({ topics: ["t"], fromBeginning: true });
  const offsets: number[] = [];
  let bytes = 0;
  await consumer.run({
    eachBatch: async ({ batch }) => {
      for (const m of batch.messages) {
        offsets.push(Number(m.offset));
        bytes += m.value!.length;
        assert.equal(m.value![0], 7);
      }
    },
  });
  await waitFor("every record", () => offsets.length >= total, 60_000);
  await consumer.disconnect();
  assert.deepEqual(offsets, Array.from({ length: total }, (_, i) => i));
  assert.equal(bytes, total * value.length);
  assert.equal(srv.calls("Fetch").filter((c) => (c.request as { partitions: { fetchOffset: bigint }[] }).partitions[0]!.fetchOffset === 0n).length, 1);
});
