// Error classification and the client-wide options: what each failure
// becomes (type, code, reason, retriable, cause), how offsets given by the
// application are read, a gateway outage reported as one, and
// connectionTimeout on the real Node transport.
import assert from "node:assert/strict";
import { createServer, type Socket } from "node:net";
import type { AddressInfo } from "node:net";
import { describe, test } from "node:test";
import { Code, ConnectError } from "@connectrpc/connect";
import { common } from "../../src/api.js";
import { Action, classify, fromConnect, parseOffset } from "../../src/errors.js";
import {
  ClosedError,
  CorruptBatchError,
  InvalidOffsetError,
  NoLeaderError,
  Strata,
  StrataAuthenticationError,
  StrataAuthorizationError,
  StrataConnectionError,
  StrataError,
  UnknownPartitionError,
  UnknownTopicError,
} from "../../src/index.js";
import { MemCluster, reasonError, unreachable } from "./memcluster.js";

describe("errors", () => {
  const cases: { name: string; err: unknown; action: Action; type?: Function }[] = [
    { name: "not the leader", err: fromConnect(reasonError(Code.FailedPrecondition, common.Reason.NOT_LEADER, "x")), action: Action.Refresh },
    { name: "not enough replicas", err: fromConnect(reasonError(Code.Unavailable, common.Reason.NOT_ENOUGH_REPLICAS, "x")), action: Action.Retry },
    { name: "unknown producer id", err: fromConnect(reasonError(Code.NotFound, common.Reason.UNKNOWN_PRODUCER_ID, "x")), action: Action.NewProducerId },
    { name: "record too large", err: fromConnect(reasonError(Code.ResourceExhausted, common.Reason.RECORD_TOO_LARGE, "x")), action: Action.Fail },
    { name: "a node unreachable", err: fromConnect(unreachable("http://n1"), "http://n1"), action: Action.Refresh, type: StrataConnectionError },
    { name: "unavailable from a server", err: fromConnect(new ConnectError("loading", Code.Unavailable)), action: Action.Refresh, type: StrataError },
    { name: "unauthenticated", err: fromConnect(new ConnectError("no token", Code.Unauthenticated)), action: Action.Fail, type: StrataAuthenticationError },
    { name: "permission denied", err: fromConnect(new ConnectError("no", Code.PermissionDenied)), action: Action.Fail, type: StrataAuthorizationError },
    { name: "invalid argument", err: fromConnect(new ConnectError("bad", Code.InvalidArgument)), action: Action.Fail },
    { name: "no leader", err: new NoLeaderError("t", 0), action: Action.Refresh },
    { name: "a partition not in the metadata yet", err: new UnknownPartitionError("t", 3), action: Action.Refresh },
    { name: "unknown topic", err: new UnknownTopicError("t"), action: Action.Fail },
    { name: "closed", err: new ClosedError("producer"), action: Action.Fail },
    { name: "corrupt batch", err: new CorruptBatchError("crc", "x"), action: Action.Fail },
    { name: "a bad offset", err: new InvalidOffsetError("x"), action: Action.Fail },
  ];
  for (const c of cases) {
    test(`classify: ${c.name}`, () => {
      assert.equal(classify(c.err), c.action);
      assert.ok(c.err instanceof StrataError, String(c.err));
      if (c.type) assert.ok(c.err instanceof c.type, `${String(c.err)} is no ${c.type.name}`);
      assert.equal(c.err.retriable, c.action !== Action.Fail);
    });
  }

  test("fromConnect keeps the cause, and wraps what is not a Connect error", () => {
    const ce = reasonError(Code.FailedPrecondition, common.Reason.NOT_LEADER, "not the leader");
    const e = fromConnect(ce) as StrataError;
    assert.equal(e.cause, ce);
    assert.equal(e.reason, "NOT_LEADER");
    const odd = new RangeError("boom");
    const w = fromConnect(odd) as StrataError;
    assert.ok(w instanceof StrataError);
    assert.equal(w.cause, odd);
    const u = fromConnect(unreachable("http://gw"), "http://gw") as StrataConnectionError;
    assert.equal(u.address, "http://gw");
    assert.match(u.message, /^http:\/\/gw: connect ECONNREFUSED/);
  });

  test("parseOffset takes numbers, bigints and decimal strings; anything else is an InvalidOffsetError", () => {
    assert.equal(parseOffset(0), 0);
    assert.equal(parseOffset("42"), 42);
    assert.equal(parseOffset(7n), 7);
    for (const bad of [-1, 1.5, NaN, "", "0x10", "1e3", "-3", null, undefined, {}, 2n ** 60n]) {
      assert.throws(() => parseOffset(bad), InvalidOffsetError, String(bad));
    }
  });

  test("a gateway outage is reported as StrataConnectionError, not UnknownTopicError, and recovered from", async () => {
    const c = new MemCluster().topic("known", 1).topic("later", 1);
    const strata = c.strata({ unknownTopicWait: 200 });
    const p = strata.producer({ linger: 0 });
    await p.send({ topic: "known", messages: [{ value: "a" }] });
    c.down.add("http://gateway.test");
    await assert.rejects(p.send({ topic: "later", messages: [{ value: "b" }] }), (e: unknown) => {
      assert.ok(e instanceof StrataConnectionError, `got ${String(e)}`);
      assert.ok(!(e instanceof UnknownTopicError));
      return true;
    });
    // Records of a topic already routed go to the leader directly meanwhile.
    await p.send({ topic: "known", messages: [{ value: "c" }] });
    c.down.delete("http://gateway.test");
    await p.send({ topic: "later", messages: [{ value: "d" }] });
    await p.close();
  });

  test("config: every problem is reported at once", () => {
    assert.throws(
      () => new Strata({ gateway: ["http://a:1", "b:2"], retry: { retries: -1, factor: 3 }, connectionTimeout: 0, logLevel: 3 as never }),
      (e: unknown) =>
        e instanceof TypeError &&
        /gateway "b:2"/.test(e.message) &&
        /retry.retries -1/.test(e.message) &&
        /retry.factor 3/.test(e.message) &&
        /connectionTimeout 0/.test(e.message) &&
        /logLevel 3/.test(e.message),
    );
  });

  test("connectionTimeout: a node that never completes a connection fails in that time with StrataConnectionError", async () => {
    // A TCP listener that never answers the TLS handshake.
    const sockets: Socket[] = [];
    const server = createServer((s) => void sockets.push(s));
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const url = `https://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const admin = new Strata({ gateway: url, connectionTimeout: 200, requestTimeout: 20_000, retry: { retries: 0 }, logLevel: 0 }).admin();
    const t0 = performance.now();
    await assert.rejects(admin.listTopics(), (e: unknown) => {
      assert.ok(e instanceof StrataConnectionError, String(e));
      assert.match(e.message, /connection not established within 200 ms/);
      return true;
    });
    assert.ok(performance.now() - t0 < 10_000, "the request timeout, not the connection timeout, ended the call");
    await admin.disconnect();
    for (const s of sockets) s.destroy();
    await new Promise((r) => server.close(r));
  });
});
