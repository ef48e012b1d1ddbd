// Batches that may already be in the log: a producer must never number
// them again under another producer id, or the leader cannot tell the
// copy from the original and appends the records twice (issue 36). A
// storage node answers NOT_LEADER after the append too (leadership lost,
// the replica closed, the log failed while an acks=all produce waited for
// the high watermark), so under acks=all NOT_LEADER leaves the outcome
// unknown, as the Go client's unwritten() says.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { Code, ConnectError } from "@connectrpc/connect";
import { common } from "../../src/api.js";
import { fromConnect, NoLeaderError, OutcomeUnknownError, StrataError, unwritten } from "../../src/errors.js";
import { MemCluster, reasonError, unreachable } from "./memcluster.js";

const one = (v: string) => ({ topic: "t", messages: [{ value: v }] });
const R = common.Reason;

/** A connection the peer reset under a call, as Node reports it. */
function reset(): ConnectError {
  const cause = Object.assign(new Error("read ECONNRESET"), { code: "ECONNRESET" });
  return new ConnectError(cause.message, Code.Unavailable, undefined, undefined, cause);
}

describe("batches that may have landed", () => {
  test("unwritten: refusals before the append; NOT_LEADER only without acks=all; anything else unknown", () => {
    const e = (code: Code, reason: common.Reason) => fromConnect(reasonError(code, reason, "x"));
    const cases: [unknown, common.Acks, boolean][] = [
      [e(Code.FailedPrecondition, R.NOT_LEADER), common.Acks.LEADER, true],
      [e(Code.FailedPrecondition, R.NOT_LEADER), common.Acks.ALL, false],
      [e(Code.Unavailable, R.NOT_LEADER), common.Acks.ALL, false], // a failed log
      [e(Code.Aborted, R.FENCED_LEADER_EPOCH), common.Acks.ALL, true],
      [e(Code.Unavailable, R.UNKNOWN_LEADER_EPOCH), common.Acks.ALL, true],
      [e(Code.NotFound, R.UNKNOWN_TOPIC_OR_PARTITION), common.Acks.ALL, true],
      [e(Code.Unavailable, R.NOT_ENOUGH_REPLICAS), common.Acks.ALL, true],
      [e(Code.FailedPrecondition, R.OUT_OF_ORDER_SEQUENCE), common.Acks.ALL, true],
      [e(Code.FailedPrecondition, R.UNKNOWN_PRODUCER_ID), common.Acks.ALL, true],
      [e(Code.Aborted, R.INVALID_PRODUCER_EPOCH), common.Acks.ALL, true],
      [e(Code.InvalidArgument, R.CORRUPT_RECORD), common.Acks.ALL, true],
      [e(Code.ResourceExhausted, R.RECORD_TOO_LARGE), common.Acks.ALL, true],
      [e(Code.InvalidArgument, R.DUPLICATE_SEQUENCE), common.Acks.ALL, true],
      [e(Code.PermissionDenied, R.UNSPECIFIED), common.Acks.ALL, true], // the principal refused, before anything
      [new NoLeaderError("t", 0), common.Acks.ALL, true], // nothing sent
      [fromConnect(unreachable("http://node-1.test"), "http://node-1.test"), common.Acks.ALL, true], // refused: never connected
      [fromConnect(reset(), "http://node-1.test"), common.Acks.ALL, false], // reset: the request may have left
      [e(Code.Unavailable, R.NOT_ENOUGH_REPLICAS_AFTER_APPEND), common.Acks.ALL, false],
      [e(Code.DeadlineExceeded, R.REQUEST_TIMED_OUT), common.Acks.ALL, false],
      [e(Code.Unavailable, R.UNSPECIFIED), common.Acks.ALL, false],
      [new StrataError("produce timed out", { code: Code.DeadlineExceeded }), common.Acks.ALL, false],
    ];
    for (const [err, acks, want] of cases) {
      assert.equal(unwritten(err, acks), want, `${(err as StrataError).reason || (err as Error).message} acks ${common.Acks[acks]}`);
    }
  });

  test("NOT_LEADER after the append, then the id is dropped: the batch fails as outcome unknown, never appended twice", async () => {
    const c = new MemCluster().topic("t", 1);
    const p = c.strata().producer({ linger: 0 });
    await p.send(one("v0"));
    let attempt = 0;
    c.fault("Produce", () => {
      attempt++;
      // The second attempt meets a leader that lost track of the producer:
      // the producer drops its id.
      if (attempt === 2) throw reasonError(Code.FailedPrecondition, R.UNKNOWN_PRODUCER_ID, "unknown producer");
    });
    c.after("Produce", () => {
      // The first attempt was appended; leadership moved before the high watermark passed it.
      if (attempt === 1) throw reasonError(Code.FailedPrecondition, R.NOT_LEADER, "replica: leadership lost before the batch was committed");
    });
    await assert.rejects(p.send(one("v1")), (e: unknown) => {
      assert.ok(e instanceof OutcomeUnknownError, `rejected with ${String(e)}`);
      assert.equal((e as OutcomeUnknownError).reason, "UNKNOWN_PRODUCER_ID", "the last answer's reason");
      assert.match((e as Error).message, /outcome unknown/);
      return true;
    });
    c.fault("Produce", undefined);
    c.after("Produce", undefined);
    await p.send(one("v2")); // the producer goes on under its new id
    await p.close();
    assert.deepEqual(await c.values("t", 0), ["v0", "v1", "v2"], "v1 once, where its first attempt put it");
  });

  test("NOT_LEADER before the append is retried under the same id and lands once", async () => {
    const c = new MemCluster().topic("t", 1);
    const p = c.strata().producer({ linger: 0 });
    await p.send(one("v0"));
    let attempt = 0;
    c.fault("Produce", () => {
      if (++attempt === 1) throw reasonError(Code.FailedPrecondition, R.NOT_LEADER, "replica: not the leader");
    });
    const [md] = await p.send(one("v1"));
    await p.close();
    assert.equal(md!.offset, "1");
    assert.deepEqual(await c.values("t", 0), ["v0", "v1"]);
  });

  test("another topic's record over max.message.bytes fails alone: a partition's batch that may have landed is sent again under its own id and answered once", async () => {
    const c = new MemCluster().topic("t", 1).topic("big", 1);
    c.topics.get("big")!.configs["max.message.bytes"] = "4096";
    c.topics.get("big")!.parts[0]!.leader = 2; // its own node: every call to node 1 is one Produce of "t"
    const p = c.strata().producer({ linger: 0 });
    await p.send(one("v0"));
    await p.send({ topic: "big", messages: [{ value: "small" }] }); // both topics routed: no metadata call needed
    const topicOf = (req: unknown) => (req as { topic: string }).topic;
    let attempt = 0;
    let bigFailed!: () => void;
    const failedBig = new Promise<void>((r) => (bigFailed = r));
    let holdRefresh = false;
    c.fault("Metadata", async () => {
      if (holdRefresh) await failedBig; // v1's retry refreshes the metadata: it waits until big has failed
    });
    c.fault("Produce", (req) => {
      if (topicOf(req) === "t") attempt++;
    });
    c.after("Produce", (req) => {
      if (topicOf(req) === "t" && attempt === 1) {
        holdRefresh = true;
        throw reasonError(Code.Unavailable, R.UNSPECIFIED, "connection reset"); // appended; the answer lost
      }
    });
    const v1 = p.send(one("v1"));
    await assert.rejects(p.send({ topic: "big", messages: [{ value: "b".repeat(4096 + 70_000) }] }), (e: unknown) => e instanceof StrataError && e.reason === "RECORD_TOO_LARGE");
    bigFailed();
    const [md] = await v1;
    await p.send(one("v2"));
    await p.close();
    assert.equal(md!.offset, "1", "v1 answered where its first attempt put it");
    assert.deepEqual(await c.values("t", 0), ["v0", "v1", "v2"]);
    assert.equal(attempt, 3, "v1 sent twice, then v2");
  });
});
