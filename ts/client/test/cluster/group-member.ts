// One group member as its own process, for the group test: it consumes a
// topic and prints one JSON line per event (assigned, revoked, processed,
// committed) with a wall-clock time, so the test can check from outside
// that no partition was owned by two members at once and where each
// partition resumed after a member was killed.
// Usage: node group-member.js GATEWAY TOPIC GROUP NAME
import { ConsumerEvents, Strata } from "../../src/index.js";

const [gateway, topic, groupId, name] = process.argv.slice(2) as [string, string, string, string];
const now = () => performance.timeOrigin + performance.now();
const out = (o: object) => process.stdout.write(JSON.stringify({ member: name, t: now(), ...o }) + "\n");

const strata = new Strata({ gateway, clientId: name });
const consumer = strata.consumer({ groupId, maxWaitTimeInMs: 200, maxBytesPerPartition: 4096 });
consumer.on(ConsumerEvents.PARTITIONS_ASSIGNED, (e) => out({ ev: "assigned", partitions: (e as { payload: { partitions: unknown } }).payload.partitions }));
consumer.on(ConsumerEvents.PARTITIONS_REVOKED, (e) => out({ ev: "revoked", partitions: (e as { payload: { partitions: unknown } }).payload.partitions }));
consumer.on(ConsumerEvents.COMMIT_OFFSETS, (e) => out({ ev: "committed", topics: e.payload.topics.flatMap((t) => t.partitions) }));
await consumer.subscribe({ topics: [topic], fromBeginning: true });
await consumer.run({
  autoCommitInterval: 100,
  eachBatch: async ({ batch, resolveOffset }) => {
    for (const m of batch.messages) {
      await new Promise((r) => setTimeout(r, 2)); // some work, so the kill lands mid-stream
      out({ ev: "processed", partition: batch.partition, offset: Number(m.offset) });
      resolveOffset(m.offset);
    }
  },
});
process.on("SIGTERM", () => {
  void consumer.disconnect().finally(() => {
    out({ ev: "left" });
    process.exit(0);
  });
});
out({ ev: "started", memberId: consumer.memberId });
