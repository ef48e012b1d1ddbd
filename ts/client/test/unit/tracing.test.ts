// W3C trace context in record headers: what the producer adds and what
// traceCarrier reads back (the Go client writes the same headers).
import assert from "node:assert/strict";
import { test } from "node:test";
import { isTraceparent, traceCarrier } from "../../src/index.js";
import { traceHeaders } from "../../src/tracing.js";

const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const enc = (s: string) => new TextEncoder().encode(s);

test("isTraceparent accepts W3C traceparent values only", () => {
  assert.ok(isTraceparent(tp));
  for (const bad of ["", "00-abc", tp.toUpperCase(), "ff" + tp.slice(2), "00-" + "0".repeat(32) + "-00f067aa0ba902b7-01", "00-4bf92f3577b34da6a3ce929d0e0e4736-" + "0".repeat(16) + "-01"]) {
    assert.ok(!isTraceparent(bad), bad);
  }
});

test("traceHeaders takes what the propagator injects, if well-formed", () => {
  assert.deepEqual(traceHeaders(undefined), []);
  assert.deepEqual(traceHeaders({ inject: () => {} }), []);
  assert.deepEqual(traceHeaders({ inject: (c) => Object.assign(c, { traceparent: "garbage" }) }), []);
  assert.deepEqual(traceHeaders({ inject: (c) => Object.assign(c, { traceparent: tp }) }), [["traceparent", tp]]);
  assert.deepEqual(traceHeaders({ inject: (c) => Object.assign(c, { traceparent: tp, tracestate: "a=1" }) }), [
    ["traceparent", tp],
    ["tracestate", "a=1"],
  ]);
});

test("traceCarrier reads a consumed message's trace context", () => {
  assert.deepEqual(traceCarrier({}), {});
  assert.deepEqual(traceCarrier({ traceparent: enc("nonsense") }), {});
  assert.deepEqual(traceCarrier({ traceparent: enc(tp), other: enc("x") }), { traceparent: tp });
  assert.deepEqual(traceCarrier({ traceparent: [enc(tp), enc("second")], tracestate: enc("a=1") }), { traceparent: tp, tracestate: "a=1" });
});
