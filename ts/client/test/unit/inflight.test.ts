// The per-partition in-flight queue (inflight.ts): completion in produce
// order, resending one at a time once no answer is due, and what counts
// as an unresolved batch ahead.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { type BatchState, InFlight } from "../../src/inflight.js";

interface B {
  name: string;
  state: BatchState;
}

function queue(...states: BatchState[]): [InFlight<B>, B[]] {
  const q = new InFlight<B>();
  const bs = states.map((state, i) => ({ name: `b${i + 1}`, state }));
  for (const b of bs) q.push(b);
  return [q, bs];
}

describe("in-flight queue", () => {
  test("batches complete in produce order: an acknowledged one waits for those before it", () => {
    const [q, [b1, b2, b3]] = queue("sending", "acked", "sending");
    assert.deepEqual(q.complete(), []);
    assert.equal(q.length, 3, "an acknowledged batch behind an unanswered one still counts");
    b1!.state = "failed";
    assert.deepEqual(q.complete().map((b) => b.name), ["b1", "b2"]);
    b3!.state = "acked";
    assert.deepEqual(q.complete().map((b) => b.name), ["b3"]);
    assert.equal(q.length, 0);
  });

  test("resend gives the oldest waiting batch only once no answer is due", () => {
    const [q, [, b2, b3]] = queue("acked", "waiting", "sending", "waiting");
    assert.equal(q.resend(), undefined);
    assert.ok(q.waiting());
    b3!.state = "waiting";
    assert.equal(q.resend(), b2);
    b2!.state = "sending";
    assert.equal(q.resend(), undefined);
    assert.equal(q.sending(), 1);
  });

  test("unresolvedBefore: a batch ahead that is not acknowledged", () => {
    const [q, [b1, b2, b3]] = queue("acked", "sending", "sending");
    assert.equal(q.unresolvedBefore(b1!), false);
    assert.equal(q.unresolvedBefore(b2!), false);
    assert.equal(q.unresolvedBefore(b3!), true);
    assert.deepEqual(q.before(b3!).map((b) => b.name), ["b1", "b2"]);
  });
});
