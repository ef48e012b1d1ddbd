// Load program: produce and consume throughput of the TypeScript client,
// comparable to loadtest/cmd/strata-load (Go): 1 KiB values, keys spread
// over 1000 keys, 12 partitions, RF 3, acks all, at most 2048 records in
// flight, linger 5 ms. It prints figures; nothing here is a test.
//
//   node dist/bench/load.js --gateway http://127.0.0.1:9092 --records 100000
//
// Then it consumes the topic from the beginning with a fresh group
// (eachBatch) and prints consume MB/s. --modes consume --topic T reads an
// existing topic's first --records records only (e.g. under node
// --cpu-prof, to profile the consumer alone). --per-partition sends each
// chunk as one send per partition (the key's, as the producer routes it),
// so the in-flight window frees a partition's records when its batch is
// acknowledged, nearer strata-load's per-record window.
//
// As strata-load, the producer is warmed up before the clock starts: four
// one-byte records to every partition, so the topic's metadata, the
// producer id, a connection to every leader and each partition's first
// batch (which goes alone) are not counted in produce MB/s.
import { parseArgs } from "node:util";
import { Strata } from "../src/index.js";
import { partitionForKey } from "../src/murmur2.js";

const { values: args } = parseArgs({
  options: {
    gateway: { type: "string", default: process.env.STRATA_GATEWAY ?? "http://127.0.0.1:9092" },
    records: { type: "string", default: "100000" },
    "record-bytes": { type: "string", default: "1024" },
    partitions: { type: "string", default: "12" },
    chunk: { type: "string", default: "64" },
    inflight: { type: "string", default: "2048" },
    "max-in-flight": { type: "string", default: "5" },
    linger: { type: "string", default: "5" },
    acks: { type: "string", default: "all" },
    rf: { type: "string", default: "3" },
    modes: { type: "string", default: "produce,consume" },
    topic: { type: "string" },
    "per-partition": { type: "boolean", default: false },
  },
});
const records = Number(args.records);
const size = Number(args["record-bytes"]);
const partitions = Number(args.partitions);
const chunk = Number(args.chunk);
const inflight = Number(args.inflight);

const modes = new Set(args.modes!.split(","));
const keyBytes = new TextEncoder();

const strata = new Strata({ gateway: args.gateway!, clientId: "ts-load" });
const topic = args.topic ?? `ts-load-${Date.now()}`;
/** Records in the topic besides the measured ones: the warm-up's, when this run produced it. */
let extra = 0;
if (modes.has("produce")) {
  await strata.admin().createTopic({ topic, partitions, replicationFactor: Number(args.rf) });
  await produce();
}
if (modes.has("consume")) await consume();
process.exit(0);

async function produce(): Promise<void> {
  const value = new Uint8Array(size).fill(120);
  const producer = strata.producer({ acks: args.acks as "all", linger: Number(args.linger), maxInFlight: Number(args["max-in-flight"]) });
  const lat: number[] = [];
  let pending = 0;
  let wake: (() => void) | undefined;
  await warmUp(producer);
  const t0 = performance.now();
  const cpu0 = process.cpuUsage();
  for (let i = 0; i < records; i += chunk) {
    while (pending + chunk > inflight) await new Promise<void>((r) => (wake = r));
    const n = Math.min(chunk, records - i);
    const messages = Array.from({ length: n }, (_, j) => ({ key: `key-${(i + j) % 1000}`, value }));
    for (const group of args["per-partition"] ? byPartition(messages) : [messages]) {
      pending += group.length;
      const start = performance.now();
      void producer.send({ topic, messages: group }).then(
        () => {
          lat.push(performance.now() - start);
          pending -= group.length;
          wake?.();
        },
        (e) => {
          console.error("produce failed:", e);
          process.exit(1);
        },
      );
    }
  }
  await producer.flush();
  const produceMs = performance.now() - t0;
  const produceCpu = cpuPerGB(cpu0, records * size);
  await producer.close();
  lat.sort((a, b) => a - b);
  const mb = (records * size) / 1e6;
  console.log(`${records} records of ${size} B, ${partitions} partitions, RF ${args.rf}, acks ${args.acks}`);
  console.log(
    `produce: ${(mb / (produceMs / 1000)).toFixed(1)} MB/s, ${Math.round(records / (produceMs / 1000))} records/s, ` +
      `p50 ${lat[Math.floor(lat.length / 2)]!.toFixed(1)} ms, p99 ${lat[Math.floor(lat.length * 0.99)]!.toFixed(1)} ms (per ${chunk}-record send), ` +
      `client CPU ${produceCpu} s/GB`,
  );
}

async function consume(): Promise<void> {
  const consumer = strata.consumer({ groupId: `${topic}-g-${Date.now()}` });
  await consumer.subscribe({ topics: [topic], fromBeginning: true });
  let got = 0;
  let bytes = 0;
  let done: () => void;
  const finished = new Promise<void>((r) => (done = r));
  // strata-load counts a consumer from its first Poll (start offsets and
  // the first fetch included, no group to join); the comparable start here
  // is the assignment (group_join), and the time from run() is printed too.
  let assigned = 0;
  let cpu0 = process.cpuUsage();
  consumer.on("consumer.group_join", () => {
    if (assigned !== 0) return;
    assigned = performance.now();
    cpu0 = process.cpuUsage();
  });
  const c0 = performance.now();
  await consumer.run({
    eachBatch: async ({ batch }) => {
      got += batch.messages.length;
      for (const m of batch.messages) bytes += m.value?.length ?? 0;
      if (got >= records + extra) done();
    },
  });
  await finished;
  const end = performance.now();
  const consumeCpu = cpuPerGB(cpu0, bytes);
  await consumer.disconnect();
  const rate = (ms: number) => (bytes / 1e6 / (ms / 1000)).toFixed(1);
  console.log(
    `consume: ${rate(end - assigned)} MB/s, ${Math.round(got / ((end - assigned) / 1000))} records/s from the assignment; ` +
      `${rate(end - c0)} MB/s from run() (joining took ${Math.round(assigned - c0)} ms); client CPU ${consumeCpu} s/GB`,
  );
}

/** warmUp sends strata-load's warm-up records (produce.go's newProducer): four one-byte values to every partition, and waits for them. */
async function warmUp(producer: ReturnType<Strata["producer"]>): Promise<void> {
  const w = new Uint8Array([119]); // "w"
  const messages = Array.from({ length: partitions * 4 }, (_, i) => ({ partition: i % partitions, value: w }));
  await producer.send({ topic, messages });
  extra = messages.length;
}

/** byPartition splits messages by the partition their key goes to. */
function byPartition<M extends { key: string }>(messages: M[]): M[][] {
  const groups = new Map<number, M[]>();
  for (const m of messages) {
    const p = partitionForKey(keyBytes.encode(m.key), partitions);
    let g = groups.get(p);
    if (!g) groups.set(p, (g = []));
    g.push(m);
  }
  return [...groups.values()];
}

/** cpuPerGB is this process's CPU time (user and system) since from, per 1e9 bytes of record values: strata-load's client CPU s/GB. */
function cpuPerGB(from: NodeJS.CpuUsage, bytes: number): string {
  const u = process.cpuUsage(from);
  return ((u.user + u.system) / 1e6 / (bytes / 1e9)).toFixed(1);
}
