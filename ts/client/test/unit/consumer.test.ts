// The group consumer's state machine against the in-memory cluster
// (memcluster.ts): assignments, crashes, handler retries and the dead
// letter, fetches per leader, commits, events and options. Each test
// builds its own cluster; waits poll a condition (waitFor), never sleep
// for one.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { Code } from "@connectrpc/connect";
import { common, coordinator, storage } from "../../src/api.js";
import {
  buildBatch,
  ConsumerEvents,
  FencedError,
  HandlerError,
  InvalidOffsetError,
  StrataAuthorizationError,
  type KafkaMessage,
} from "../../src/index.js";
import { Dispatcher } from "../../src/consumer/dispatcher.js";
import { Emitter } from "../../src/consumer/events.js";
import { OwnedPartition } from "../../src/consumer/partition.js";
import { logLevel, newLogger } from "../../src/logger.js";
import { waitFor } from "../cluster/devcluster.js";
import { readFixture, unhex } from "../testdata.js";
import { MemCluster, node, reasonError, text } from "./memcluster.js";

type Got = { partition: number; offset: number; value: string | null; topic: string };

/** consume runs a consumer on topics and records what it handles; the caller disconnects it. */
async function consume(c: MemCluster, topics: string[], opts: { handler?: (m: Got) => Promise<void>; groupId?: string; fromBeginning?: boolean; consumerCfg?: object; runCfg?: object } = {}) {
  const got: Got[] = [];
  const consumer = c.strata().consumer({ groupId: opts.groupId ?? "g", maxWaitTimeInMs: 100, ...opts.consumerCfg });
  await consumer.subscribe({ topics, fromBeginning: opts.fromBeginning ?? true });
  await consumer.run({
    eachMessage: async ({ topic, partition, message }) => {
      const g = { topic, partition, offset: Number(message.offset), value: text(message.value) };
      await opts.handler?.(g);
      got.push(g);
    },
    ...opts.runCfg,
  });
  return { consumer, got };
}

describe("consumer: partitions added under a running group (defect 1)", () => {
  test("a partition the metadata does not know yet is waited for, then consumed; no crash", async () => {
    const c = new MemCluster().topic("t", 2);
    await c.produce("t", 0, ["a"]);
    await c.produce("t", 1, ["b"]);
    const { consumer, got } = await consume(c, ["t"]);
    const crashes: unknown[] = [];
    consumer.on(ConsumerEvents.CRASH, (e) => void crashes.push(e.payload.error));
    await waitFor("the first two partitions", () => got.length === 2);
    // The coordinator assigns partition 2 before the gateway's metadata shows it.
    c.metadataLag.set("t", 2);
    c.addPartitions("t", 3);
    await c.produce("t", 2, ["c"]);
    await waitFor("the new partition to be assigned", () => consumer.assignment().length === 3);
    await waitFor("a metadata refresh that still lacks it", () => c.callsOf("Metadata").length >= 3);
    c.metadataLag.delete("t");
    await waitFor("the new partition's record", () => got.some((g) => g.partition === 2));
    await consumer.disconnect();
    assert.deepEqual(crashes, []);
    assert.deepEqual(got.map((g) => g.value).sort(), ["a", "b", "c"]);
  });
});

describe("consumer: a crash leaves the group (defect 2)", () => {
  test("a refused partition crashes the member, which leaves at once and heartbeats no more", async () => {
    const c = new MemCluster().topic("t", 1);
    c.fault("Fetch", () => {
      throw reasonError(Code.PermissionDenied, common.Reason.UNSPECIFIED, "permission denied: User:alice may not read topic t");
    });
    const { consumer } = await consume(c, ["t"]);
    const crashes: { error: Error; restart: boolean }[] = [];
    consumer.on(ConsumerEvents.CRASH, (e) => void crashes.push(e.payload));
    await waitFor("the crash", () => crashes.length === 1);
    assert.ok(crashes[0]!.error instanceof StrataAuthorizationError, String(crashes[0]!.error));
    assert.equal(crashes[0]!.restart, false);
    // It left (epoch -1) before disconnect, and the coordinator no longer has it.
    assert.equal(c.heartbeats.at(-1)!.memberEpoch, -1);
    assert.equal(c.members.size, 0);
    const beats = c.heartbeats.length;
    // Absence over three heartbeat intervals (100 ms each): a wait, not a condition to poll for.
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(c.heartbeats.length, beats, "heartbeats after the crash");
    await consumer.disconnect();
    assert.equal(c.heartbeats.length, beats, "disconnect after a crash sent another leave");
  });
});

describe("consumer: one bad message (defect 3)", () => {
  test("a handler failing on one message is retried with a backoff while other partitions flow, then dead-lettered", async () => {
    const c = new MemCluster().topic("t", 3);
    for (let p = 0; p < 3; p++) await c.produce("t", p, Array.from({ length: 20 }, (_, i) => `p${p}-${i}`));
    const attempts: number[] = [];
    const dead: { offset: string; attempts: number; error: unknown }[] = [];
    let deadAt = 0;
    const { consumer, got } = await consume(c, ["t"], {
      consumerCfg: { retry: { retries: 3, initialRetryTime: 50, maxRetryTime: 100 } },
      handler: async (g) => {
        if (g.partition === 0 && g.offset === 5) {
          attempts.push(performance.now());
          throw new Error("poison");
        }
      },
      runCfg: {
        deadLetter: async (d: { message: KafkaMessage; attempts: number; error: unknown }) => {
          deadAt = performance.now();
          dead.push({ offset: d.message.offset, attempts: d.attempts, error: d.error });
        },
      },
    });
    await waitFor("every other message", () => got.length === 59);
    await consumer.disconnect();
    assert.equal(attempts.length, 4, "one call and 3 retries");
    assert.deepEqual(dead.map((d) => [d.offset, d.attempts, (d.error as Error).message]), [["5", 4, "poison"]]);
    for (let i = 1; i < attempts.length; i++) assert.ok(attempts[i]! - attempts[i - 1]! >= 35, `retry ${i} came ${attempts[i]! - attempts[i - 1]!} ms after the last`);
    // The other partitions were done before the poison message gave up.
    const lastOther = got.filter((g) => g.partition !== 0);
    assert.equal(lastOther.length, 40);
    assert.deepEqual(got.filter((g) => g.partition === 0).map((g) => g.offset), [0, 1, 2, 3, 4, ...Array.from({ length: 14 }, (_, i) => 6 + i)]);
    assert.ok(deadAt > 0);
    // Committed past the dead letter.
    assert.equal(c.commits.get("t/0"), 20);
    assert.ok(c.logs.some((l) => l.label === "WARN" && /handler failed/.test(l.log.message) && JSON.stringify(l.log).includes("poison")), "the failure was logged with its error");
  });

  test("past its retries without a dead letter, the consumer crashes with HandlerError and restartOnFailure decides", async () => {
    const c = new MemCluster().topic("t", 2);
    await c.produce("t", 0, ["ok", "bad", "after"]);
    await c.produce("t", 1, ["other"]);
    const asked: Error[] = [];
    const { consumer, got } = await consume(c, ["t"], {
      consumerCfg: {
        retry: {
          retries: 1,
          initialRetryTime: 10,
          maxRetryTime: 20,
          restartOnFailure: async (e: Error) => {
            asked.push(e);
            return asked.length < 2; // restart once, then give up
          },
        },
      },
      handler: async (g) => {
        if (g.value === "bad") throw new Error("cannot handle");
      },
    });
    const crashes: { error: Error; restart: boolean }[] = [];
    consumer.on(ConsumerEvents.CRASH, (e) => void crashes.push(e.payload));
    await waitFor("two crashes", () => crashes.length === 2);
    await consumer.disconnect();
    assert.deepEqual(crashes.map((x) => x.restart), [true, false]);
    const e = crashes[0]!.error;
    assert.ok(e instanceof HandlerError, String(e));
    assert.equal(e.partition, 0);
    assert.equal(e.offset, "1");
    assert.equal(e.attempts, 2);
    assert.equal((e.cause as Error).message, "cannot handle");
    assert.equal(asked.length, 2);
    // Each crash left the group; the restart joined again (epoch 0) in between.
    const epochs = c.heartbeats.map((h) => h.memberEpoch);
    assert.equal(epochs.filter((x) => x === -1).length, 2, `epochs ${epochs}`);
    assert.equal(epochs.filter((x) => x === 0).length, 2, `epochs ${epochs}`);
    // "ok" was committed before the first crash, so the restart did not deliver it again.
    assert.equal(got.filter((g) => g.value === "ok").length, 1);
    assert.ok(!got.some((g) => g.value === "after"));
  });

  test("a throwing eachBatch is retried from its first unresolved offset", async () => {
    const c = new MemCluster().topic("t", 1);
    await c.produce("t", 0, ["a", "b", "c", "d"]);
    const consumer = c.strata().consumer({ groupId: "g", maxWaitTimeInMs: 50, retry: { retries: 5, initialRetryTime: 10, maxRetryTime: 10 } });
    await consumer.subscribe({ topics: ["t"], fromBeginning: true });
    const seen: string[][] = [];
    let failed = false;
    await consumer.run({
      eachBatch: async ({ batch, resolveOffset }) => {
        seen.push(batch.messages.map((m) => text(m.value)!));
        for (const m of batch.messages) {
          if (text(m.value) === "c" && !failed) {
            failed = true;
            throw new Error("once");
          }
          resolveOffset(m.offset);
        }
      },
    });
    await waitFor("the retried batch", () => seen.length === 2);
    await consumer.disconnect();
    assert.deepEqual(seen, [["a", "b", "c", "d"], ["c", "d"]]);
    assert.equal(c.commits.get("t/0"), 4);
  });
});

describe("consumer: one Fetch in flight per leader (defect 4)", () => {
  test("a leader's long poll is not cut short by another leader's answers", async () => {
    const c = new MemCluster().topic("t", 2, 2); // partition 0 on node 1, partition 1 on node 2
    let n = 0;
    // Node 1 always has data; node 2 never does.
    c.fault("Fetch", async (_req, to) => {
      if (to === node(1)) await c.produce("t", 0, [`m${n++}`]);
    });
    const { consumer, got } = await consume(c, ["t"], { consumerCfg: { maxWaitTimeInMs: 400 } });
    await waitFor("records from node 1", () => got.length >= 60);
    await consumer.disconnect();
    const toNode2 = c.callsOf("Fetch").filter((x) => x.to === node(2));
    const toNode1 = c.callsOf("Fetch").filter((x) => x.to === node(1));
    assert.ok(toNode1.length >= 30, `node 1 fetched ${toNode1.length} times`);
    // Node 2's polls ran their course (only the one open at disconnect was cut).
    assert.ok(toNode2.filter((x) => x.aborted).length <= 1, `${toNode2.filter((x) => x.aborted).length} of node 2's fetches were aborted`);
    assert.ok(toNode2.length < toNode1.length / 3, `node 2 was polled ${toNode2.length} times while node 1 answered ${toNode1.length}`);
  });
});

describe("consumer: failures are typed and logged (defect 5)", () => {
  test("a bad offset is an InvalidOffsetError, not a RangeError", async () => {
    const c = new MemCluster().topic("t", 1);
    const consumer = c.strata().consumer({ groupId: "g" });
    for (const bad of ["abc", "-1", "1.5", "", 2 ** 60]) {
      assert.throws(() => consumer.seek({ topic: "t", partition: 0, offset: bad as string }), InvalidOffsetError, String(bad));
      await assert.rejects(consumer.commitOffsets([{ topic: "t", partition: 0, offset: bad as string }]), InvalidOffsetError, String(bad));
    }
    await consumer.disconnect();
  });

  test("a listener that throws is logged with its error, and the others still run", async () => {
    const c = new MemCluster().topic("t", 1);
    await c.produce("t", 0, ["x"]);
    const consumer = c.strata().consumer({ groupId: "g", maxWaitTimeInMs: 50 });
    let second = 0;
    consumer.on(ConsumerEvents.GROUP_JOIN, () => {
      throw new Error("listener broke");
    });
    consumer.on(ConsumerEvents.GROUP_JOIN, () => void second++);
    await consumer.subscribe({ topics: ["t"], fromBeginning: true });
    const got: string[] = [];
    await consumer.run({ eachMessage: async ({ message }) => void got.push(text(message.value)!) });
    await waitFor("the record", () => got.length === 1);
    await consumer.disconnect();
    assert.equal(second, 1);
    assert.ok(c.logs.some((l) => l.label === "ERROR" && /consumer.group_join listener failed/.test(l.log.message) && JSON.stringify(l.log).includes("listener broke")));
  });

  test("a leader that cannot be reached is logged with the cause and retried; its partitions resume", async () => {
    const c = new MemCluster().topic("t", 1);
    await c.produce("t", 0, ["before"]);
    c.down.add(node(1));
    const { consumer, got } = await consume(c, ["t"]);
    await waitFor("a logged fetch failure", () => c.logs.some((l) => /looking up start offsets failed|fetch failed/.test(l.log.message)));
    const entry = c.logs.find((l) => /looking up start offsets failed|fetch failed/.test(l.log.message))!;
    assert.match(JSON.stringify(entry.log), /StrataConnectionError/);
    assert.match(JSON.stringify(entry.log), /ECONNREFUSED/);
    c.down.delete(node(1));
    await waitFor("the record after the node came back", () => got.length === 1);
    await consumer.disconnect();
  });
});

describe("consumer: internals (defect 6)", () => {
  test("resolveOffset walks a batch once, whatever its size", async () => {
    const n = 20_000;
    let reads = 0;
    const msgs: KafkaMessage[] = Array.from({ length: n }, (_, i) => {
      const m = { key: null, value: null, timestamp: "0", headers: {}, leaderEpoch: 1, size: 0, attributes: 0 } as unknown as KafkaMessage;
      Object.defineProperty(m, "offset", { get: () => (reads++, String(i)) });
      return m;
    });
    const op = new OwnedPartition("t", 0, 1);
    op.fetchPos = n;
    op.chunks.push({ gen: 0, msgs, next: n, hw: n });
    const log = newLogger(logLevel.NOTHING, () => () => undefined);
    const d = new Dispatcher(
      {
        parts: () => [op],
        running: () => true,
        pause: () => () => undefined,
        heartbeat: async () => undefined,
        commitOffsetsIfNecessary: async () => undefined,
        uncommittedOffsets: () => ({ topics: [] }),
        onHandled: () => undefined,
        onExhausted: () => assert.fail("exhausted"),
      },
      {
        autoCommit: true,
        autoCommitInterval: 5000,
        eachBatchAutoResolve: false,
        partitionsConsumedConcurrently: 1,
        eachBatch: async ({ batch, resolveOffset }) => {
          for (const m of batch.messages) resolveOffset(m.offset);
        },
      },
      { retries: 0, initialRetryTime: 1, maxRetryTime: 1, factor: 0, multiplier: 2 },
      new Emitter(log),
      log,
    );
    d.start();
    await waitFor("the batch handled", () => op.processed === n && !op.busy);
    await d.stop();
    assert.ok(reads < 5 * n, `${reads} offset reads for ${n} messages`);
  });

  test("the published declarations carry no @internal member", async () => {
    const { readFileSync } = await import("node:fs");
    const { fileURLToPath } = await import("node:url");
    const dts = readFileSync(fileURLToPath(new URL("../../src/producer.d.ts", import.meta.url)), "utf8");
    for (const name of ["done(", "batchTaken(", "dropProducerId(", "producerId(", "flushing", "readonly client"]) assert.ok(!dts.includes(name), `producer.d.ts declares ${name}`);
    const cdts = readFileSync(fileURLToPath(new URL("../../src/consumer.d.ts", import.meta.url)), "utf8");
    assert.ok(!cdts.includes("readonly client"), "consumer.d.ts declares client");
  });

  test("heartbeats and commits carry typed fields: static instance id, assignor, per-partition grant epoch", async () => {
    const c = new MemCluster().topic("t", 1);
    await c.produce("t", 0, ["x"]);
    const { consumer, got } = await consume(c, ["t"], { consumerCfg: { groupInstanceId: "host-7", serverAssignor: "range" } });
    await waitFor("the record", () => got.length === 1);
    await consumer.disconnect();
    const beats = c.heartbeats;
    assert.ok(beats.every((h) => h.instanceId === "host-7"), "instance id on every heartbeat");
    assert.ok(beats.filter((h) => h.memberEpoch >= 0).every((h) => h.serverAssignor === "range"), "the assignor asked for on every heartbeat but the leave");
    assert.throws(() => c.strata().consumer({ groupId: "g", serverAssignor: "sticky" as "range" }), (e: unknown) => e instanceof TypeError && /serverAssignor "sticky": want "uniform" or "range"/.test(e.message));
    assert.equal(beats.at(-1)!.memberEpoch, -2, "a static member leaves with epoch -2");
    const commit = c.callsOf("OffsetCommit").at(-1)!.request as coordinator.OffsetCommitRequest;
    assert.ok(commit.partitions[0]!.memberEpoch > 0);
    assert.equal(commit.partitions[0]!.committedOffset, 1n);
  });
});

describe("consumer: options", () => {
  test("autoCommit false commits only what commitOffsets says", async () => {
    const c = new MemCluster().topic("t", 1);
    await c.produce("t", 0, ["a", "b", "c"]);
    const { consumer, got } = await consume(c, ["t"], { runCfg: { autoCommit: false } });
    await waitFor("the records", () => got.length === 3);
    assert.equal(c.callsOf("OffsetCommit").length, 0);
    await consumer.commitOffsets([{ topic: "t", partition: 0, offset: "2" }]);
    await consumer.disconnect();
    assert.equal(c.callsOf("OffsetCommit").length, 1, "disconnect committed with autoCommit off");
    assert.equal(c.commits.get("t/0"), 2);
  });

  test("a commit the coordinator refuses is a FencedError with the coordinator's reason", async () => {
    const c = new MemCluster().topic("t", 1);
    const { consumer } = await consume(c, ["t"]);
    await waitFor("assignment", () => consumer.assignment().length === 1);
    c.fault("OffsetCommit", () => {
      throw reasonError(Code.Aborted, common.Reason.FENCED_MEMBER_EPOCH, "member epoch 3 is not current");
    });
    await assert.rejects(consumer.commitOffsets([{ topic: "t", partition: 0, offset: "0" }]), (e: unknown) => {
      assert.ok(e instanceof FencedError, String(e));
      assert.equal(e.reason, "FENCED_MEMBER_EPOCH");
      assert.ok(e.cause, "the server's error is the cause");
      return true;
    });
    c.fault("OffsetCommit", undefined);
    await consumer.disconnect();
  });

  test("fromBeginning per subscription, regex subscribe, and the fetch limits reach the requests", async () => {
    const c = new MemCluster().topic("orders-eu", 1).topic("orders-us", 1).topic("audit", 1).topic("other", 1);
    const consumer = c.strata().consumer({ groupId: "g", maxWaitTimeInMs: 70, minBytes: 10, maxBytes: 12345, maxBytesPerPartition: 999 });
    await consumer.subscribe({ topics: [/^orders-/], fromBeginning: true });
    await consumer.subscribe({ topic: "audit", fromBeginning: false });
    await consumer.run({ eachMessage: async () => undefined });
    await waitFor("three partitions owned", () => consumer.assignment().length === 3);
    await waitFor("a fetch", () => c.callsOf("Fetch").length > 0);
    await consumer.disconnect();
    assert.deepEqual(consumer.assignment(), []);
    assert.deepEqual(c.heartbeats[0]!.subscribedTopicNames.sort(), ["audit", "orders-eu", "orders-us"]);
    const specs = new Map<string, storage.OffsetSpec>();
    for (const call of c.callsOf("ListOffsets")) for (const p of (call.request as storage.ListOffsetsRequest).partitions) specs.set(p.topic, p.spec);
    assert.deepEqual(Object.fromEntries(specs), { "orders-eu": storage.OffsetSpec.EARLIEST, "orders-us": storage.OffsetSpec.EARLIEST, audit: storage.OffsetSpec.LATEST });
    const f = c.callsOf("Fetch")[0]!.request as storage.FetchRequest;
    assert.equal(f.maxWaitMs, 70);
    assert.equal(f.minBytes, 10);
    assert.equal(f.maxBytes, 12345);
    assert.equal(f.partitions[0]!.maxBytes, 999);
  });

  test("read committed by default: aborted transactions are not handled and the group commits past them; readUncommitted reads them", async () => {
    // Go's BuildMarker bytes (producer 4243) from the shared vectors.
    const vectors = readFixture<{ valid: { name: string; hex: string }[] }>("recordbatch.json").valid;
    const marker = (kind: string) => unhex(vectors.find((v) => v.name === `strata ${kind} marker`)!.hex);
    const enc = new TextEncoder();
    const batch = (producerId: bigint, transactional: boolean, ...values: string[]) =>
      buildBatch({ idempotent: producerId >= 0n, transactional, producerId, producerEpoch: 2 }, values.map((v) => ({ key: null, value: enc.encode(v), headers: [], timestamp: 1 })));
    for (const readUncommitted of [undefined, false, true]) {
      const c = new MemCluster().topic("t", 1);
      c.appendBatch("t", 0, await batch(4243n, true, "aborted-1", "aborted-2")); // 0-1
      c.appendBatch("t", 0, await batch(8n, false, "plain")); // 2
      c.appendBatch("t", 0, marker("abort")); // 3
      c.abortedTxn("t", 0, 4243n, 0, 3);
      c.appendBatch("t", 0, await batch(4243n, true, "committed")); // 4
      c.appendBatch("t", 0, marker("commit")); // 5
      const cfg = readUncommitted === undefined ? {} : { readUncommitted };
      const { consumer, got } = await consume(c, ["t"], { consumerCfg: cfg });
      const committed = readUncommitted !== true;
      await waitFor("the first fetch's records", () => got.length === (committed ? 2 : 4));
      // A second aborted transaction on its own: nothing to handle, but
      // the position, and so the commit, moves past it and its marker.
      c.appendBatch("t", 0, await batch(4243n, true, "aborted-3")); // 6
      c.appendBatch("t", 0, marker("abort")); // 7
      c.abortedTxn("t", 0, 4243n, 6, 7);
      await waitFor("a fetch from past the second abort marker", () => c.callsOf("Fetch").some((x) => (x.request as storage.FetchRequest).partitions[0]!.fetchOffset === 8n));
      await consumer.disconnect();
      const want = committed ? ["2:plain", "4:committed"] : ["0:aborted-1", "1:aborted-2", "2:plain", "4:committed", "6:aborted-3"];
      assert.deepEqual(
        got.map((g) => `${g.offset}:${g.value}`),
        want,
        `readUncommitted ${readUncommitted}`,
      );
      if (committed) assert.equal(c.commits.get("t/0"), 8);
      const level = committed ? common.IsolationLevel.READ_COMMITTED : common.IsolationLevel.READ_UNCOMMITTED;
      for (const f of c.callsOf("Fetch")) assert.equal((f.request as storage.FetchRequest).isolationLevel, level);
      const lo = c.callsOf("ListOffsets");
      assert.ok(lo.length > 0);
      for (const l of lo) assert.equal((l.request as storage.ListOffsetsRequest).isolationLevel, level);
    }
  });

  test("readUncommitted must be a boolean", () => {
    assert.throws(() => new MemCluster().strata().consumer({ groupId: "g", readUncommitted: "yes" as unknown as boolean }), /readUncommitted "yes": want true or false/);
  });

  test("partitionsConsumedConcurrently bounds the handlers running at once", async () => {
    for (const concurrency of [1, 3]) {
      const c = new MemCluster().topic("t", 4);
      for (let p = 0; p < 4; p++) await c.produce("t", p, ["a", "b"]);
      let running = 0;
      let most = 0;
      const { consumer, got } = await consume(c, ["t"], {
        runCfg: { partitionsConsumedConcurrently: concurrency },
        handler: async () => {
          running++;
          most = Math.max(most, running);
          await new Promise((r) => setTimeout(r, 20));
          running--;
        },
      });
      await waitFor("every record", () => got.length === 8);
      await consumer.disconnect();
      assert.equal(most, concurrency);
    }
  });

  test("events: each kafkajs event fires with its payload", async () => {
    const c = new MemCluster().topic("t", 1);
    await c.produce("t", 0, ["x"]);
    const consumer = c.strata().consumer({ groupId: "g", maxWaitTimeInMs: 50 });
    const seen = new Map<string, unknown>();
    for (const ev of Object.values(ConsumerEvents)) consumer.on(ev, (e) => void (seen.has(ev) || seen.set(ev, e.payload)));
    await consumer.connect();
    await consumer.subscribe({ topics: ["t"], fromBeginning: true });
    await consumer.run({ autoCommitInterval: 50, eachMessage: async () => undefined });
    await waitFor("a commit event", () => seen.has(ConsumerEvents.COMMIT_OFFSETS) && seen.has(ConsumerEvents.END_BATCH_PROCESS) && seen.has(ConsumerEvents.HEARTBEAT));
    await consumer.disconnect();
    for (const ev of ["consumer.connect", "consumer.group_join", "consumer.rebalancing", "consumer.fetch_start", "consumer.fetch", "consumer.start_batch_process", "consumer.end_batch_process", "consumer.commit_offsets", "consumer.heartbeat", "consumer.partitions_assigned", "consumer.stop", "consumer.disconnect"]) {
      assert.ok(seen.has(ev), `no ${ev}`);
    }
    assert.deepEqual((seen.get("consumer.group_join") as { memberAssignment: object }).memberAssignment, { t: [0] });
    assert.deepEqual((seen.get("consumer.commit_offsets") as { topics: object }).topics, [{ topic: "t", partitions: [{ partition: 0, offset: "1" }] }]);
    const b = seen.get("consumer.end_batch_process") as { batchSize: number; firstOffset: string; duration: number };
    assert.equal(b.batchSize, 1);
    assert.equal(b.firstOffset, "0");
    assert.ok(b.duration >= 0);
  });

  test("a fenced heartbeat drops the partitions, reports them lost, and rejoins", async () => {
    const c = new MemCluster().topic("t", 1);
    const { consumer } = await consume(c, ["t"]);
    const revoked: { lost: boolean }[] = [];
    consumer.on(ConsumerEvents.PARTITIONS_REVOKED, (e) => void revoked.push(e.payload));
    await waitFor("assignment", () => consumer.assignment().length === 1);
    // The coordinator forgets the member (as after a session timeout).
    c.members.clear();
    await waitFor("the lost partitions and the rejoin", () => revoked.some((r) => r.lost) && consumer.assignment().length === 1);
    await consumer.disconnect();
    assert.ok(c.heartbeats.filter((h) => h.memberEpoch === 0).length >= 2);
  });
});
