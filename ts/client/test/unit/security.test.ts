// The client's side of a secure cluster against a local HTTP/2 server
// (fakeserver.ts): the bearer token on every request to every node, the TLS
// options (a private CA, a client certificate) over real TLS, typed and
// unretried refusals, and secrets that never show in what the client
// prints or throws.
import assert from "node:assert/strict";
import { inspect } from "node:util";
import { after, describe, test } from "node:test";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import type { TLSSocket } from "node:tls";
import {
  ConsumerEvents,
  Strata,
  StrataAuthenticationError,
  StrataAuthorizationError,
  StrataError,
  type TokenSource,
} from "../../src/index.js";
import { common, gateway } from "../../src/api.js";
import { FakeServer, type Handlers } from "./fakeserver.js";
import { makePKI } from "./tlsfiles.js";
import { waitFor } from "../cluster/devcluster.js";

const servers: FakeServer[] = [];
after(async () => {
  for (const s of servers) await s.stop();
});

/**
 * cluster starts a fake cluster whose gateway knows the given topics (one
 * partition each, led by node 1: the same server) and whose storage node
 * acknowledges every produce.
 */
async function cluster(topics: string[], more: Handlers = {}, tls?: Parameters<typeof FakeServer.start>[1]): Promise<FakeServer> {
  let url = "";
  let offset = 0n;
  const srv = await FakeServer.start(
    {
      gateway: {
        metadata: async (req) => metadataFor(url, topics, req.topics),
        initProducerId: async () => ({ producerId: 7n, producerEpoch: 0 }),
        whoAmI: async () => ({ principal: "User:alice", method: "token" }),
        ...more.gateway,
      },
      storage: {
        produce: async () => ({ baseOffset: offset++ }),
        ...more.storage,
      },
      coordinator: more.coordinator,
    },
    tls,
  );
  url = srv.url;
  servers.push(srv);
  return srv;
}

function metadataFor(url: string, known: string[], asked: string[]) {
  return {
    nodes: [{ nodeId: 1, address: url }],
    topics: asked.filter((t) => known.includes(t)).map((name) => ({ name, topicId: `id-${name}`, partitions: [{ partition: 0, leaderId: 1, leaderEpoch: 1, replicas: [1], isr: [1] }] })),
    unknownTopics: asked.filter((t) => !known.includes(t)),
    metadataVersion: 1n,
  };
}

describe("bearer token", () => {
  const cases: { name: string; token: TokenSource | undefined; want: (h: string | null, i: number) => boolean }[] = [
    { name: "a fixed token", token: "strata_abcDEF-123_x", want: (h) => h === "Bearer strata_abcDEF-123_x" },
    { name: "a token function, asked on every request", token: (() => { let n = 0; return async () => `tok-${++n}`; })(), want: (h, i) => h === `Bearer tok-${i + 1}` },
    { name: "no token", token: undefined, want: (h) => h === null },
  ];
  for (const c of cases) {
    test(`${c.name}: every request to the gateway and the storage node carries it`, async () => {
      const srv = await cluster(["t"]);
      const strata = new Strata({ gateway: srv.url, token: c.token });
      const producer = strata.producer({ linger: 0 });
      await producer.send({ topic: "t", messages: [{ value: "a" }] });
      await producer.send({ topic: "t", messages: [{ value: "b" }] });
      await producer.close();
      const admin = strata.admin();
      assert.deepEqual(await admin.whoAmI(), { principal: "User:alice", method: "token" });
      await admin.disconnect();
      const methods = srv.seen.map((s) => s.method);
      for (const m of ["Metadata", "InitProducerId", "Produce", "WhoAmI"]) assert.ok(methods.includes(m), `no ${m} in ${methods}`);
      srv.seen.forEach((s, i) => assert.ok(c.want(s.header.get("authorization"), i), `${s.method} (request ${i}) had Authorization ${JSON.stringify(s.header.get("authorization"))}`));
    });
  }

  test("a token that could break the header is refused when the client is made, without quoting it", () => {
    for (const bad of ["two words", "line\r\nX-Injected: 1", ""]) {
      assert.throws(
        () => new Strata({ gateway: "http://127.0.0.1:1", token: bad }),
        (e: unknown) => e instanceof TypeError && /token: want a non-empty string/.test(e.message) && (bad === "" || !e.message.includes(bad)),
      );
    }
  });

  test("a token function that returns nothing usable fails the call, not the process", async () => {
    const srv = await cluster(["t"]);
    const admin = new Strata({ gateway: srv.url, token: () => "" }).admin();
    await assert.rejects(admin.whoAmI(), /the token function returned no usable token/);
    await admin.disconnect();
    assert.equal(srv.calls("WhoAmI").length, 0, "a request went out without a token");
  });
});

describe("refusals", () => {
  test("PERMISSION_DENIED from a storage node fails the send once with StrataAuthorizationError", async () => {
    const line = "permission denied: User:alice may not write topic orders";
    const srv = await cluster(["orders"], {
      storage: {
        produce: async () => {
          throw new ConnectError(line, Code.PermissionDenied);
        },
      },
    });
    const producer = new Strata({ gateway: srv.url, token: "strata_tok" }).producer({ linger: 0 });
    await assert.rejects(producer.send({ topic: "orders", messages: [{ value: "x" }] }), (e: unknown) => {
      assert.ok(e instanceof StrataAuthorizationError, String(e));
      assert.ok(e instanceof StrataError);
      assert.equal(e.message, line);
      assert.equal(e.codeName, "permission_denied");
      assert.equal(e.retriable, false);
      return true;
    });
    await producer.close();
    assert.equal(srv.calls("Produce").length, 1, "a refused produce was retried");
  });

  test("UNAUTHENTICATED from the gateway fails at once with StrataAuthenticationError, the token in no message", async () => {
    const line = "unauthenticated: unknown or revoked token";
    const refuse = async (): Promise<never> => {
      throw new ConnectError(line, Code.Unauthenticated);
    };
    const srv = await cluster(["t"], { gateway: { metadata: refuse, listTopics: refuse } });
    const strata = new Strata({ gateway: srv.url, token: "strata_SECRETSECRET" });
    const producer = strata.producer();
    const check = (e: unknown) => {
      assert.ok(e instanceof StrataAuthenticationError, String(e));
      assert.equal(e.message, line);
      assert.equal(e.codeName, "unauthenticated");
      assert.equal(e.retriable, false);
      assert.ok(!inspect(e, { depth: 10 }).includes("SECRETSECRET"), "the token is in the error");
      return true;
    };
    await assert.rejects(producer.send({ topic: "t", messages: [{ value: "x" }] }), check);
    await producer.close();
    assert.equal(srv.calls("Metadata").length, 1, "a refused metadata call was retried");
    const admin = strata.admin();
    await assert.rejects(admin.listTopics(), check);
    await admin.disconnect();
  });

  test("a topic the gateway will not describe is refused alone; the others stay routable", async () => {
    const line = "permission denied: User:alice may not describe topic secret";
    let url = "";
    const srv = await cluster(["open", "secret"], {
      gateway: {
        metadata: async (req) => {
          if (req.topics.includes("secret")) throw new ConnectError(line, Code.PermissionDenied);
          return metadataFor(url, ["open"], req.topics);
        },
      },
    });
    url = srv.url;
    const producer = new Strata({ gateway: srv.url }).producer({ linger: 0 });
    await producer.send({ topic: "open", messages: [{ value: "1" }] });
    await assert.rejects(producer.send({ topic: "secret", messages: [{ value: "2" }] }), (e: unknown) => e instanceof StrataAuthorizationError && e.message === line);
    await producer.send({ topic: "open", messages: [{ value: "3" }] });
    await assert.rejects(producer.send({ topic: "secret", messages: [{ value: "4" }] }), StrataAuthorizationError);
    await producer.close();
    const asked = srv.calls("Metadata").map((s) => (s.request as gateway.MetadataRequest).topics.join(","));
    // open; open+secret refused whole, then each alone; secret alone again.
    assert.deepEqual(asked, ["open", "open,secret", "open", "secret", "open,secret", "open", "secret"]);
    assert.equal(srv.calls("Produce").length, 2);
  });

  test("a partition the consumer may not read crashes it with StrataAuthorizationError, without restart", async () => {
    const line = "permission denied: User:alice may not read topic t";
    let url = "";
    const srv = await cluster(["t"], {
      gateway: { findCoordinator: async () => ({ coordinatorId: "c1", address: url }) },
      coordinator: {
        consumerGroupHeartbeat: async (req) => ({
          memberId: req.memberId,
          memberEpoch: req.memberEpoch < 0 ? -1 : 1,
          heartbeatIntervalMs: 200,
          assignment: req.memberEpoch === 0 ? { partitions: [{ topic: "t", partitions: [0] }] } : undefined,
        }),
        offsetFetch: async () => ({ offsets: [{ topic: "t", partition: 0, committedOffset: 0n }] }),
      },
      storage: {
        fetch: async () => ({
          partitions: [{ topic: "t", partition: 0, error: create(common.ErrorDetailSchema, { code: common.Code.PERMISSION_DENIED, message: line }) }],
        }),
      },
    });
    url = srv.url;
    const consumer = new Strata({ gateway: srv.url }).consumer({ groupId: "g" });
    const crashes: { error: unknown; restart: boolean }[] = [];
    consumer.on(ConsumerEvents.CRASH, (ev) => void crashes.push((ev as { payload: { error: unknown; restart: boolean } }).payload));
    await consumer.subscribe({ topics: ["t"], fromBeginning: true });
    await consumer.run({ eachMessage: async () => assert.fail("a message was delivered") });
    await waitFor("the consumer to crash", () => crashes.length > 0, 30_000);
    assert.equal(crashes.length, 1);
    assert.ok(crashes[0]!.error instanceof StrataAuthorizationError, String(crashes[0]!.error));
    assert.equal((crashes[0]!.error as Error).message, line);
    assert.equal(crashes[0]!.restart, false);
    await consumer.disconnect();
    const leave = srv.calls("ConsumerGroupHeartbeat").at(-1)!.request as { memberEpoch: number };
    assert.equal(leave.memberEpoch, -1, "disconnect after a crash leaves the group");
  });
});

describe("TLS", () => {
  const pki = makePKI("strata-test-ca", "alice");
  const other = makePKI("another-ca", "mallory");
  const serverTLS = { key: pki.serverKey, cert: pki.serverCert, ca: pki.ca, requestCert: true, rejectUnauthorized: true };

  /** peers starts a TLS server requiring client certificates and records each client's CN. */
  async function tlsServer(): Promise<{ srv: FakeServer; peers: string[] }> {
    const srv = await cluster(["t"], {}, serverTLS);
    const peers: string[] = [];
    srv.onSecureConnection((s: TLSSocket) => peers.push(String(s.getPeerCertificate().subject?.CN ?? "")));
    return { srv, peers };
  }

  test("a private CA and a client certificate: mutual TLS, with the token beside it", async () => {
    const { srv, peers } = await tlsServer();
    const strata = new Strata({ gateway: srv.url, token: "strata_tok", tls: { ca: pki.ca, cert: Buffer.from(pki.clientCert), key: pki.clientKey } });
    const admin = strata.admin();
    assert.equal((await admin.whoAmI()).principal, "User:alice");
    await admin.disconnect();
    const producer = strata.producer({ linger: 0 });
    await producer.send({ topic: "t", messages: [{ value: "over tls" }] });
    await producer.close();
    assert.ok(srv.url.startsWith("https://"));
    assert.ok(peers.length >= 2 && peers.every((cn) => cn === "alice"), `client certificates seen: ${peers}`);
    assert.ok(srv.seen.every((s) => s.header.get("authorization") === "Bearer strata_tok"));
    assert.ok(srv.calls("Produce").length === 1);
  });

  const refusals: { name: string; tls?: { ca?: string; cert?: string; key?: string }; want: RegExp }[] = [
    { name: "a server certificate from another CA", tls: { ca: other.ca, cert: pki.clientCert, key: pki.clientKey }, want: /certificate/i },
    { name: "no CA: Node's public roots do not know the private one", tls: undefined, want: /certificate/i },
    { name: "no client certificate where the server requires one", tls: { ca: pki.ca }, want: /./ },
    { name: "a client certificate from another CA", tls: { ca: pki.ca, cert: other.clientCert, key: other.clientKey }, want: /./ },
  ];
  for (const r of refusals) {
    test(`refused: ${r.name}`, async () => {
      const { srv } = await tlsServer();
      const admin = new Strata({ gateway: srv.url, tls: r.tls }).admin();
      await assert.rejects(admin.whoAmI(), (e: unknown) => e instanceof StrataError && r.want.test(e.message));
      await admin.disconnect();
      assert.equal(srv.calls("WhoAmI").length, 0, "the server answered a client it should have refused");
    });
  }

  test("bad TLS material is refused when the client is made, one line, no key in it", () => {
    const cases: { tls: object; want: RegExp }[] = [
      { tls: { cert: pki.clientCert, key: other.clientKey }, want: /^@strata-mq\/client: bad config: tls: .*key values mismatch/ },
      { tls: { ca: "not a certificate" }, want: /bad config: tls.ca: no PEM certificate/ },
      { tls: { ca: [pki.ca, "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----"] }, want: /bad config: tls.ca: / },
      { tls: { cert: pki.clientCert }, want: /tls: give cert and key together/ },
      { tls: { ca: 42 }, want: /tls\.ca: want PEM/ },
    ];
    for (const c of cases) {
      assert.throws(
        () => new Strata({ gateway: "https://127.0.0.1:1", tls: c.tls as never }),
        (e: unknown) => e instanceof TypeError && c.want.test(e.message) && !e.message.includes("PRIVATE KEY") && !e.message.includes("\n"),
        JSON.stringify(c.want.source),
      );
    }
  });

  test("the token and the key never show when a client is printed or serialized", async () => {
    const token = "strata_NEVERSHOWTHIS";
    const strata = new Strata({ gateway: "https://127.0.0.1:1", token, tls: { ca: pki.ca, cert: pki.clientCert, key: pki.clientKey } });
    const producer = strata.producer();
    const consumer = strata.consumer({ groupId: "g" });
    const keyBody = pki.clientKey.split("\n")[1]!;
    const shown = [
      inspect(strata, { depth: 20, showHidden: true }),
      inspect(producer, { depth: 20, showHidden: true }),
      inspect(consumer, { depth: 20, showHidden: true }),
      JSON.stringify(producer.client),
      String(producer.client.credentials),
      `${producer.client.credentials}`,
    ];
    for (const s of shown) {
      assert.ok(!s.includes("NEVERSHOWTHIS"), `token shown: ${s.slice(0, 200)}`);
      assert.ok(!s.includes(keyBody), "private key shown");
    }
    assert.match(JSON.stringify(producer.client), /"token":"\[REDACTED\]"/);
    await producer.close();
    await consumer.disconnect();
  });
});
