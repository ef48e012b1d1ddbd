// The produce requests' own encoding (producewire.ts) against the generic
// protobuf encoder, byte for byte, its pieces referring to the batches
// rather than copying them, and the Node transport's own produce call
// (producecall.ts) that sends them: a storage node receives the batches a
// producer built under the Connect call Connect's transport makes (its
// headers, its deadline), and the caller gets the errors connect-node
// gives (a Connect error with its details, DeadlineExceeded, Canceled).
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { after, test } from "node:test";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { common, storage } from "../../src/api.js";
import { Strata } from "../../src/index.js";
import { nodePlatform } from "../../src/platform-node.js";
import { producePartitionsPieces, producePieces } from "../../src/producewire.js";
import { FakeServer } from "./fakeserver.js";

const servers: FakeServer[] = [];
after(async () => {
  for (const s of servers) await s.stop();
});

/** A small deterministic generator, so a failure names its case. */
function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 0x100000000;
  };
}

const INT32S = [0, 1, -1, 127, 128, 300, 16_383, 16_384, 2_147_483_647, -2_147_483_648, -300];
const TOPICS = ["", "t", "orders", "ß-ünïcödé-日本", "x".repeat(200)];
/** Transactional ids: none (left out), short, and one whose length takes two varint bytes. */
const TXN_IDS = ["", "tx", "trånsåctiön-" + "y".repeat(150)];

function bytes(r: () => number, n: number): Uint8Array {
  const b = new Uint8Array(n);
  for (let i = 0; i < n; i++) b[i] = (r() * 256) | 0;
  return b;
}

function pick<T>(r: () => number, xs: T[]): T {
  return xs[Math.floor(r() * xs.length)]!;
}

const SIZES = [0, 1, 127, 128, 16_383, 16_384, 70_000];

/** join is what goes on the wire: a request's pieces one after another. */
function join(pieces: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(pieces.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of pieces) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

const encodeProducePartitions = (m: Parameters<typeof producePartitionsPieces>[0]) => join(producePartitionsPieces(m));
const encodeProduce = (m: Parameters<typeof producePieces>[0]) => join(producePieces(m));

test("ProducePartitionsRequest and ProduceRequest encode as the generic encoder writes them", () => {
  for (let seed = 1; seed <= 300; seed++) {
    const r = rng(seed);
    const acks = pick(r, [0, 1, 2, 3]) as storage.ProducePartitionsRequest["acks"];
    const parts = Array.from({ length: Math.floor(r() * 5) }, () => ({
      topic: pick(r, TOPICS),
      partition: pick(r, INT32S),
      leaderEpoch: pick(r, INT32S),
      records: bytes(r, pick(r, SIZES)),
    }));
    const many = { partitions: parts, acks, timeoutMs: pick(r, INT32S), transactionalId: pick(r, TXN_IDS) };
    const want = toBinary(storage.ProducePartitionsRequestSchema, create(storage.ProducePartitionsRequestSchema, many));
    assert.deepEqual(encodeProducePartitions(many), want, `seed ${seed}: ProducePartitionsRequest`);
    // The init shape the producer passes and the message made from it encode alike.
    assert.deepEqual(encodeProducePartitions(create(storage.ProducePartitionsRequestSchema, many)), want, `seed ${seed}: as a message`);

    const one = { topic: pick(r, TOPICS), partition: pick(r, INT32S), acks, timeoutMs: pick(r, INT32S), leaderEpoch: pick(r, INT32S), records: bytes(r, pick(r, SIZES)), transactionalId: pick(r, TXN_IDS) };
    const got = encodeProduce(one);
    assert.deepEqual(got, toBinary(storage.ProduceRequestSchema, create(storage.ProduceRequestSchema, one)), `seed ${seed}: ProduceRequest`);
    const back = fromBinary(storage.ProduceRequestSchema, got);
    assert.equal(back.leaderEpoch, one.leaderEpoch, `seed ${seed}: leader epoch read back`);
    assert.deepEqual(back.records, one.records, `seed ${seed}: records read back`);
  }
  // Fields left out take their defaults.
  assert.deepEqual(encodeProducePartitions({}), new Uint8Array(0));
  assert.deepEqual(encodeProduce({}), new Uint8Array(0));
});

test("the pieces of a request refer to its record batches rather than copying them", () => {
  for (let seed = 1; seed <= 100; seed++) {
    const r = rng(seed);
    const parts = Array.from({ length: 1 + Math.floor(r() * 5) }, () => ({
      topic: pick(r, TOPICS),
      partition: pick(r, INT32S),
      leaderEpoch: pick(r, INT32S),
      records: bytes(r, pick(r, SIZES)),
    }));
    const many = { partitions: parts, acks: common.Acks.ALL, timeoutMs: pick(r, INT32S), transactionalId: pick(r, TXN_IDS) };
    const pieces = producePartitionsPieces(many);
    for (const p of parts) {
      if (p.records.length > 0) assert.ok(pieces.includes(p.records), `seed ${seed}: a batch of ${p.records.length} bytes is one of the pieces itself`);
    }
    // Every other piece is a view of one small buffer: the fields' bytes only.
    const own = pieces.filter((x) => !parts.some((p) => p.records === x));
    assert.ok(own.every((x) => x.buffer === own[0]!.buffer), `seed ${seed}: one buffer for the fields`);
    assert.equal(own.reduce((n, x) => n + x.length, 0) + parts.reduce((n, p) => n + p.records.length, 0), encodeProducePartitions(many).length);
    const one = { topic: pick(r, TOPICS), partition: 1, acks: common.Acks.ALL, leaderEpoch: 3, records: bytes(r, 1 + pick(r, SIZES)) };
    assert.ok(producePieces(one).includes(one.records), `seed ${seed}: the Produce batch is a piece`);
  }
});

/** A fake cluster of one node leading every partition of topic t, which answers produce calls through the handlers given. */
async function oneNode(storageHandlers: FakeServerStorage): Promise<FakeServer> {
  let url = "";
  const srv = await FakeServer.start({
    gateway: {
      metadata: async (req) => ({
        nodes: [{ nodeId: 1, address: url }],
        topics: req.topics.map((name) => ({
          name,
          topicId: `id-${name}`,
          partitions: [0, 1, 2].map((partition) => ({ partition, leaderId: 1, leaderEpoch: 7, replicas: [1], isr: [1] })),
        })),
        metadataVersion: 1n,
      }),
      initProducerId: async () => ({ producerId: 42n, producerEpoch: 3 }),
    },
    storage: storageHandlers,
  });
  url = srv.url;
  servers.push(srv);
  return srv;
}

type FakeServerStorage = Parameters<typeof FakeServer.start>[0]["storage"];

test("a producer's ProducePartitions reaches the node whole through the Node transport, with Connect's headers", async () => {
  const got: storage.ProducePartitionsRequest[] = [];
  const srv = await oneNode({
    producePartitions: async (req) => {
      got.push(req);
      return { partitions: req.partitions.map((p) => ({ topic: p.topic, partition: p.partition, baseOffset: 10n, logAppendTimeMs: -1n })) };
    },
  });
  const strata = new Strata({ gateway: srv.url, logLevel: 0 });
  // One send: both partitions' batches are built in the same turn and
  // leave in the node's next call together.
  const producer = strata.producer({ linger: 0 });
  const value = new Uint8Array(3000).fill(9);
  const sent = await producer.send({ topic: "t", messages: [{ partition: 0, value }, { partition: 1, key: "k", value: "b" }] });
  assert.deepEqual(sent.map((m) => [m.partition, m.offset]), [[0, "10"], [1, "10"]]);
  await producer.close();
  assert.equal(got.length, 1, "one call for both partitions");
  const req = got[0]!;
  assert.equal(req.acks, common.Acks.ALL);
  assert.deepEqual(req.partitions.map((p) => [p.topic, p.partition, p.leaderEpoch]).sort(), [["t", 0, 7], ["t", 1, 7]]);
  for (const p of req.partitions) {
    // A RecordBatch of the partition's records: its length field covers the bytes received.
    const dv = new DataView(p.records.buffer, p.records.byteOffset, p.records.byteLength);
    assert.equal(dv.getInt32(8) + 12, p.records.length, `partition ${p.partition}: a whole batch`);
    assert.equal(dv.getInt32(57), 1, `partition ${p.partition}: its record count`);
  }
  const calls = srv.seen.filter((s) => s.method === "ProducePartitions");
  assert.equal(calls.length, 1);
  // The headers Connect's transport writes for a unary call.
  const h = calls[0]!.header;
  assert.equal(h.get("content-type"), "application/proto");
  assert.equal(h.get("connect-protocol-version"), "1");
  assert.match(h.get("connect-timeout-ms") ?? "", /^[1-9][0-9]*$/);
  // producecall.ts names Connect's version itself: it must follow an upgrade.
  const pkg = JSON.parse(readFileSync(new URL("../../../package.json", import.meta.url), "utf8")) as { dependencies: Record<string, string> };
  assert.equal(h.get("user-agent"), `connect-es/${pkg.dependencies["@connectrpc/connect"]}`);
});

test("a node without ProducePartitions gets one Produce per partition through the same transport, and its errors come back as Connect's", async () => {
  const got: storage.ProduceRequest[] = [];
  const srv = await oneNode({
    // producePartitions left out: the server answers it unimplemented.
    produce: async (req) => {
      got.push(req);
      return { baseOffset: 5n, logAppendTimeMs: -1n };
    },
  });
  const strata = new Strata({ gateway: srv.url, logLevel: 0 });
  const producer = strata.producer({ linger: 50 });
  const sent = await Promise.all([0, 1, 2].map((partition) => producer.send({ topic: "t", messages: [{ partition, value: `v${partition}` }] })));
  assert.deepEqual(sent.flat().map((m) => [m.partition, m.offset]), [[0, "5"], [1, "5"], [2, "5"]]);
  await producer.close();
  assert.deepEqual(got.map((r) => [r.topic, r.partition, r.leaderEpoch]).sort(), [["t", 0, 7], ["t", 1, 7], ["t", 2, 7]]);
});

/** A storage client over the Node transport to srv, as the producer makes one. */
function storageClient(srv: FakeServer) {
  const t = nodePlatform.transport(srv.url);
  return { client: createClient(storage.StorageService, t.transport), close: t.close };
}

const request = (records: Uint8Array) => ({ acks: common.Acks.ALL, timeoutMs: 1000, partitions: [{ topic: "t", partition: 0, leaderEpoch: 7, records }, { topic: "t", partition: 1, leaderEpoch: 7, records }] });

test("a produce call's Connect error reaches the caller with its code, message and details", async () => {
  const srv = await oneNode({
    producePartitions: async () => {
      const d = create(common.ErrorDetailSchema, { code: common.Code.FAILED_PRECONDITION, reason: common.Reason.NOT_LEADER, message: "node 1 no longer leads t/0" });
      throw new ConnectError("node 1 no longer leads t/0", Code.FailedPrecondition, undefined, [{ desc: common.ErrorDetailSchema, value: d }]);
    },
  });
  const { client, close } = storageClient(srv);
  await assert.rejects(client.producePartitions(request(new Uint8Array(100).fill(1))), (e: unknown) => {
    assert.ok(e instanceof ConnectError, String(e));
    assert.equal(e.code, Code.FailedPrecondition);
    assert.equal(e.rawMessage, "node 1 no longer leads t/0");
    assert.equal(e.findDetails(common.ErrorDetailSchema)[0]?.reason, common.Reason.NOT_LEADER);
    return true;
  });
  close();
});

test("a produce call passes the caller's headers and gives the answer's header and trailer to onHeader and onTrailer", async () => {
  const srv = await oneNode({
    producePartitions: async (req, ctx) => {
      ctx.responseHeader.set("x-answer", "h");
      ctx.responseTrailer.set("x-done", "t");
      return { partitions: req.partitions.map((p) => ({ topic: p.topic, partition: p.partition, baseOffset: 2n })) };
    },
  });
  const { client, close } = storageClient(srv);
  let header: Headers | undefined;
  let trailer: Headers | undefined;
  for (const headers of [{ "X-Probe": "object" }, [["X-Probe", "pairs"]] as [string, string][], new Headers({ "x-probe": "headers" })]) {
    const resp = await client.producePartitions(request(new Uint8Array(5).fill(2)), { headers, onHeader: (h) => (header = h), onTrailer: (t) => (trailer = t) });
    assert.equal(resp.partitions.length, 2);
    assert.equal(header?.get("x-answer"), "h");
    assert.equal(header?.get("trailer-x-done"), null, "a trailer is not a header");
    assert.equal(trailer?.get("x-done"), "t");
  }
  assert.deepEqual(srv.calls("ProducePartitions").map((c) => c.header.get("x-probe")), ["object", "pairs", "headers"]);
  close();
});

test("a produce call ends with DeadlineExceeded at its timeout and with Canceled when its signal aborts", async () => {
  let answered = 0;
  const srv = await oneNode({
    producePartitions: async (req) => {
      await new Promise((r) => setTimeout(r, 400));
      answered++;
      return { partitions: req.partitions.map((p) => ({ topic: p.topic, partition: p.partition, baseOffset: 1n })) };
    },
  });
  const { client, close } = storageClient(srv);
  const records = new Uint8Array(70_000).fill(3);
  await assert.rejects(client.producePartitions(request(records), { timeoutMs: 50 }), (e: unknown) => e instanceof ConnectError && e.code === Code.DeadlineExceeded);
  const ac = new AbortController();
  const why = new Error("closing");
  setTimeout(() => ac.abort(why), 50);
  await assert.rejects(client.producePartitions(request(records), { signal: ac.signal }), (e: unknown) => e instanceof ConnectError && e.code === Code.Canceled && e.cause === why);
  // The connection still serves calls, and the request arrives whole.
  const resp = await client.producePartitions(request(records), { timeoutMs: 5000 });
  assert.deepEqual(resp.partitions.map((p) => [p.partition, p.baseOffset]), [[0, 1n], [1, 1n]]);
  const last = srv.calls("ProducePartitions").at(-1)!.request as storage.ProducePartitionsRequest;
  assert.deepEqual(last.partitions[1]!.records, records);
  assert.ok(answered >= 1);
  close();
});

test("a produce call to a node that is not there fails as a connection failure", async () => {
  const srv = await oneNode({});
  const url = srv.url;
  await srv.stop();
  servers.splice(servers.indexOf(srv), 1);
  const t = nodePlatform.transport(url);
  const client = createClient(storage.StorageService, t.transport);
  await assert.rejects(client.producePartitions(request(new Uint8Array(10))), (e: unknown) => e instanceof ConnectError && e.code === Code.Unavailable && (e.cause as { code?: string })?.code === "ECONNREFUSED");
  t.close();
});
