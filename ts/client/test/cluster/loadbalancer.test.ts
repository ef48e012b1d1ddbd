// The client bootstrapped through a real HAProxy in front of two gateways
// (`strata dev --gateways 2`), as tests/loadbalancer_test.go runs the Go
// client: admin, producers and consumer groups through the balancer only,
// then one gateway SIGKILLed. The producers that were already running
// carry on (their records go to the storage nodes directly; their metadata
// refreshes go through the balancer, to the gateway that is left), and a
// freshly bootstrapped producer and consumer group work through the
// balancer. Every acknowledged record is read back once, at the partition
// and offset it was acknowledged at.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import type { Transport } from "@connectrpc/connect";
import { Strata, type KafkaMessage, type Producer, type RecordMetadata } from "../../src/index.js";
import { nodePlatform } from "../../src/platform-node.js";
import { DevCluster, waitFor } from "./devcluster.js";
import { backends, LoadBalancer } from "./haproxy.js";

const topic = "lb";
let cluster: DevCluster | undefined;
let lb: LoadBalancer | undefined;
const closers: (() => void)[] = [];

before(async () => {
  cluster = await DevCluster.start({ args: ["--gateways", "2"] });
  const gws = backends(cluster);
  assert.equal(gws.length, 2, `cluster.json lists gateways ${JSON.stringify(cluster.file().gateways)}, want 2`);
  lb = await LoadBalancer.start(cluster.dir, gws);
  // The balancer counts a gateway up after its first /readyz checks.
  await lb.waitStatus("gateway-1", "UP");
  await lb.waitStatus("gateway-2", "UP");
  // And a client bootstrapped at the balancer gets answers.
  const admin = new Strata({ gateway: lb.url }).admin();
  await waitFor("the balancer to answer ListTopics", () => admin.listTopics().then(() => true), 30_000);
});

after(async () => {
  for (const p of producers) await p.producer.close().catch(() => undefined);
  for (const c of closers) c();
  await lb?.stop();
  await cluster?.stop();
});

const text = (b: Uint8Array | null) => (b === null ? null : new TextDecoder().decode(b));

/** acked is where each value was acknowledged. */
const acked = new Map<string, RecordMetadata>();

/**
 * A long-lived producer whose client counts the Metadata calls that
 * succeeded through the balancer: the client's own Node transport,
 * wrapped.
 */
interface Counted {
  producer: Producer;
  metadataOK: number;
  gateway?: string; // the server its connection through the balancer went to
}
const producers: Counted[] = [];

function countedProducer(): Counted {
  const c = { metadataOK: 0 } as Counted;
  const transport = (baseUrl: string): Transport => {
    const t = nodePlatform.transport(baseUrl);
    closers.push(t.close);
    if (baseUrl !== lb!.url) return t.transport;
    return {
      unary: async (method, ...rest) => {
        const r = await t.transport.unary(method, ...rest);
        if (method.name === "Metadata") c.metadataOK++;
        return r;
      },
      stream: (method, ...rest) => t.transport.stream(method, ...rest),
    };
  };
  // A short metadata age, so the producer keeps going back to the
  // balancer for metadata, also after a gateway died under it.
  c.producer = new Strata({ gateway: lb!.url, clientId: "ts-lb", metadataMaxAge: 300, transport }).producer({ linger: 2 });
  return c;
}

/** connections is how many connections the balancer has sent to each gateway so far. */
async function connections(): Promise<Map<string, number>> {
  return new Map([...(await lb!.stat())].map(([name, row]) => [name, Number(row.stot)]));
}

/** produce sends n records valued `${prefix}-i` in chunks and records where each was acknowledged. */
async function produce(p: Producer, prefix: string, n: number): Promise<void> {
  const chunk = 25;
  const sends: Promise<void>[] = [];
  for (let i = 0; i < n; i += chunk) {
    const msgs = Array.from({ length: Math.min(chunk, n - i) }, (_, j) => ({ key: `k${(i + j) % 12}`, value: `${prefix}-${i + j}` }));
    sends.push(
      p.send({ topic, messages: msgs }).then((mds) => {
        assert.equal(mds.length, msgs.length);
        mds.forEach((md, j) => acked.set(msgs[j]!.value, md));
      }),
    );
  }
  await Promise.all(sends);
}

/** consumeAll reads the topic with a new group from a client bootstrapped at the balancer until every acknowledged record is in. */
async function consumeAll(group: string): Promise<Map<string, KafkaMessage & { partition: number }>> {
  const got = new Map<string, KafkaMessage & { partition: number }>();
  const consumer = new Strata({ gateway: lb!.url, clientId: group }).consumer({ groupId: group, maxWaitTimeInMs: 200 });
  await consumer.subscribe({ topics: [topic], fromBeginning: true });
  await consumer.run({
    eachMessage: async ({ partition, message }) => {
      got.set(`${partition}/${message.offset}`, { ...message, partition });
    },
  });
  try {
    await waitFor(`${acked.size} records consumed by ${group}`, () => got.size >= acked.size, 60_000);
  } finally {
    await consumer.disconnect();
  }
  return got;
}

/** checkOnce asserts every acknowledged record was consumed at its partition and offset, and each value once. */
function checkOnce(got: Map<string, KafkaMessage & { partition: number }>, want: number): void {
  assert.equal(acked.size, want, "every record sent was acknowledged");
  for (const [value, md] of acked) assert.equal(text(got.get(`${md.partition}/${md.offset}`)?.value ?? null), value, `${value} acknowledged at ${md.partition}/${md.offset}`);
  const counts = new Map<string | null, number>();
  for (const m of got.values()) counts.set(text(m.value), (counts.get(text(m.value)) ?? 0) + 1);
  for (const [v, c] of counts) assert.equal(c, 1, `${v} consumed ${c} times`);
  assert.equal(got.size, want);
}

describe("behind an HAProxy load balancer", () => {
  test("admin, producers and a consumer group through the balancer", async () => {
    const admin = new Strata({ gateway: lb!.url, clientId: "ts-lb-admin" }).admin();
    const d = await admin.createTopic({ topic, partitions: 6, replicationFactor: 3 });
    assert.equal(d.partitions.length, 6);
    await waitFor("every partition to have a leader and 3 replicas", async () => {
      const t = await admin.describeTopic(topic);
      return t.partitions.length === 6 && t.partitions.every((p) => p.leader > 0 && p.replicas.length === 3);
    });
    // Two producers, one after the other: each opens one connection
    // through the balancer, and round robin sends the second to the other
    // gateway, so whichever gateway dies later, one of them was on it.
    for (const name of ["a", "b"]) {
      const c = countedProducer();
      producers.push(c);
      const before = await connections();
      await produce(c.producer, `before-${name}`, 150);
      const after = await connections();
      const opened = [...after].filter(([s, n]) => n > before.get(s)!).map(([s]) => s);
      assert.equal(opened.length, 1, `producer ${name} opened connections through the balancer to ${opened}`);
      assert.equal(after.get(opened[0]!), before.get(opened[0]!)! + 1, `producer ${name} opened one connection`);
      c.gateway = opened[0]!;
    }
    assert.deepEqual(producers.map((c) => c.gateway).sort(), ["gateway-1", "gateway-2"], "the producers are on different gateways");
    checkOnce(await consumeAll("lb-before"), 300);
  });

  test("a gateway killed behind the balancer: clients carry on through the other", async () => {
    assert.equal(producers.length, 2, "the producers of the first test run");
    cluster!.kill("gateway", 1);
    // The running producers carry on at once: their data path is the
    // storage nodes.
    await Promise.all(producers.map((c, i) => produce(c.producer, `during-${i}`, 100)));
    // A client bootstrapped now, before or after the balancer's checks
    // notice (a connection to the dead gateway is redispatched), works
    // through gateway 2.
    const fresh = new Strata({ gateway: lb!.url, clientId: "ts-lb-fresh" }).producer({ linger: 2 });
    try {
      await produce(fresh, "fresh", 200);
    } finally {
      await fresh.close();
    }
    // The running producers' metadata refreshes go through the balancer
    // again, whichever gateway their connection was on, and they keep
    // producing.
    const seen = producers.map((c) => c.metadataOK);
    await waitFor("both running producers to refresh metadata twice through the balancer", () => producers.every((c, i) => c.metadataOK >= seen[i]! + 2), 30_000);
    await Promise.all(producers.map((c, i) => produce(c.producer, `after-${i}`, 100)));
    checkOnce(await consumeAll("lb-after"), 300 + 200 + 200 + 200);
    await lb!.waitStatus("gateway-1", "DOWN");
    assert.ok((await lb!.serverStatus("gateway-2")).startsWith("UP"));
  });
});
