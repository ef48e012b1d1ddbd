// The client against `strata dev --secure`: TLS everywhere with the dev
// CA, mutual TLS between services, authentication and ACLs on. The admin
// connects with the certificate DIR/admin.env names; a user created with
// `strata user create` connects with its token and the CA, and is held to
// its ACLs and its quota; the browser build sends the token over CORS.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { after, before, describe, test } from "node:test";
import type { Transport } from "@connectrpc/connect";
import {
  ConsumerEvents,
  Strata,
  StrataAuthenticationError,
  StrataAuthorizationError,
  StrataError,
  type StrataConfig,
} from "../../src/index.js";
import { nodePlatform } from "../../src/platform-node.js";
import { makePKI } from "../unit/tlsfiles.js";
import { runBrowserTest } from "./browser.js";
import { DevCluster, waitFor } from "./devcluster.js";

describe("against strata dev --secure", () => {
  let cluster: DevCluster;
  let env: Record<string, string>;
  let ca: string;
  let admin: Strata;
  const closers: (() => unknown)[] = [];

  before(async () => {
    cluster = await DevCluster.start({ args: ["--secure"], env: { STRATA_SESSION_TIMEOUT: "6s" } });
    env = cluster.adminEnv();
    for (const k of ["STRATA_GATEWAY", "STRATA_TLS_CA", "STRATA_TLS_CERT", "STRATA_TLS_KEY"]) assert.ok(env[k], `admin.env sets no ${k}: ${JSON.stringify(env)}`);
    assert.match(env.STRATA_GATEWAY!, /^https:\/\//);
    ca = readFileSync(env.STRATA_TLS_CA!, "utf8");
    admin = new Strata({
      gateway: env.STRATA_GATEWAY!,
      clientId: "ts-secure",
      tls: { ca, cert: readFileSync(env.STRATA_TLS_CERT!), key: readFileSync(env.STRATA_TLS_KEY!) },
    });
  });

  after(async () => {
    for (const c of closers) await c();
    await cluster?.stop();
  });

  /** cli runs the strata CLI as the admin (admin.env) and returns its stdout. */
  const cli = (args: string[]) => cluster.strata(args, undefined, env);

  /** user creates a user and returns a client config with its token and the CA (no certificate). */
  function user(name: string): StrataConfig {
    const out = cli(["user", "create", name]).trim();
    const m = /^STRATA_TOKEN=(\S+)$/.exec(out);
    assert.ok(m, `strata user create printed ${out.length} characters, not one STRATA_TOKEN= line`);
    return { gateway: env.STRATA_GATEWAY!, clientId: `ts-${name}`, token: m[1]!, tls: { ca } };
  }

  test("the admin's certificate: User:admin creates, produces and consumes over TLS", async () => {
    const a = admin.admin();
    closers.push(() => a.disconnect());
    assert.deepEqual(await a.whoAmI(), { principal: "User:admin", method: "certificate" });
    await a.createTopic({ topic: "secure-admin", partitions: 3, replicationFactor: 3 });
    const producer = admin.producer({ linger: 2 });
    const acks = await producer.send({ topic: "secure-admin", messages: Array.from({ length: 30 }, (_, i) => ({ key: `k${i}`, value: `v${i}` })) });
    await producer.close();
    assert.equal(acks.length, 30);
    const got = new Set<string>();
    const consumer = admin.consumer({ groupId: "secure-admin-g", maxWaitTimeInMs: 200 });
    await consumer.subscribe({ topics: ["secure-admin"], fromBeginning: true });
    await consumer.run({ eachMessage: async ({ message }) => void got.add(String(message.value)) });
    await waitFor("30 records over TLS", () => got.size === 30);
    await consumer.disconnect();
  });

  test("without credentials the cluster answers StrataAuthenticationError", async () => {
    const a = new Strata({ gateway: env.STRATA_GATEWAY!, tls: { ca } }).admin();
    await assert.rejects(a.listTopics(), (e: unknown) => e instanceof StrataAuthenticationError && /unauthenticated/.test(e.message) && !e.message.includes("\n"));
    await a.disconnect();
  });

  test("a client that trusts another CA refuses the cluster's certificate", async () => {
    const other = makePKI("not-the-strata-ca", "mallory");
    const a = new Strata({ gateway: env.STRATA_GATEWAY!, tls: { ca: other.ca, cert: other.clientCert, key: other.clientKey } }).admin();
    await assert.rejects(a.listTopics(), (e: unknown) => e instanceof StrataError && /certificate/i.test(e.message));
    await a.disconnect();
  });

  test("a token user is refused without ACLs, with principal, operation and resource; a grant and a revoke apply", async () => {
    await admin.admin().createTopic({ topic: "orders", partitions: 2, replicationFactor: 3 });
    const alice = new Strata(user("alice"));
    const a = alice.admin();
    closers.push(() => a.disconnect());
    assert.deepEqual(await a.whoAmI(), { principal: "User:alice", method: "token" });

    const producer = alice.producer({ linger: 0 });
    closers.push(() => producer.close());
    await assert.rejects(producer.send({ topic: "orders", messages: [{ value: "no" }] }), (e: unknown) => {
      assert.ok(e instanceof StrataAuthorizationError, String(e));
      assert.match(e.message, /^permission denied: User:alice may not \w+ topic orders$/);
      return true;
    });

    cli(["acl", "create", "--principal", "User:alice", "--allow", "write,describe", "--topic", "orders"]);
    // Within a second on every service; the deadline is for a loaded machine.
    await waitFor("the grant to reach the gateway and the leaders", () => producer.send({ topic: "orders", messages: [{ value: "yes" }] }).then(() => true), 30_000);

    // Reading needs read on the topic and on the group.
    const consumer = alice.consumer({ groupId: "alice-g", maxWaitTimeInMs: 200 });
    const crashes: unknown[] = [];
    consumer.on(ConsumerEvents.CRASH, (ev) => void crashes.push((ev as { payload: { error: unknown } }).payload.error));
    await consumer.subscribe({ topics: ["orders"], fromBeginning: true });
    await consumer.run({ eachMessage: async () => undefined });
    await waitFor("the consumer to crash without read on its group", () => crashes.length > 0);
    await consumer.disconnect().catch(() => undefined);
    assert.ok(crashes[0] instanceof StrataAuthorizationError, String(crashes[0]));
    // FindCoordinator at the gateway needs describe on the group, the heartbeat read.
    assert.match((crashes[0] as Error).message, /^permission denied: User:alice may not (read|describe) group alice-g$/);

    cli(["acl", "create", "--principal", "User:alice", "--allow", "read", "--topic", "orders"]);
    cli(["acl", "create", "--principal", "User:alice", "--allow", "read", "--group", "alice-g"]);
    // A member that starts before the grants reach the coordinator crashes;
    // try again until one reads what alice wrote.
    await waitFor("alice to read what she wrote", async () => {
      const got = new Set<string>();
      let crashed = false;
      const reader = alice.consumer({ groupId: "alice-g", maxWaitTimeInMs: 200 });
      reader.on(ConsumerEvents.CRASH, () => void (crashed = true));
      try {
        await reader.subscribe({ topics: ["orders"], fromBeginning: true });
        await reader.run({ eachMessage: async ({ message }) => void got.add(String(message.value)) });
        await waitFor("a record or a crash", () => got.has("yes") || crashed, 30_000);
      } finally {
        await reader.disconnect().catch(() => undefined);
      }
      return got.has("yes");
    }, 60_000);

    cli(["acl", "delete", "--principal", "User:alice", "--allow", "write,describe", "--topic", "orders"]);
    await waitFor("the revoke to apply", () =>
      producer.send({ topic: "orders", messages: [{ value: "revoked?" }] }).then(
        () => false,
        (e: unknown) => e instanceof StrataAuthorizationError,
      ), 30_000);
  });

  test("a producer over its quota is throttled and honours it", async () => {
    await admin.admin().createTopic({ topic: "quota", partitions: 1, replicationFactor: 3 });
    const cfg = user("bob");
    cli(["acl", "create", "--principal", "User:bob", "--allow", "write,describe", "--topic", "quota"]);
    const rate = 200_000;
    cli(["quota", "set", "--principal", "User:bob", "--produce-bytes-per-sec", String(rate)]);
    // The client's own transport, counting the throttle times the node answered with.
    let throttled = 0;
    const transport = (baseUrl: string): Transport => {
      const t = nodePlatform.transport(baseUrl, { tls: { ca } });
      closers.push(t.close);
      return {
        unary: async (method, ...rest) => {
          const r = await t.transport.unary(method, ...rest);
          if (method.name === "Produce" && (r.message as { throttleTimeMs?: number }).throttleTimeMs! > 0) throttled++;
          return r;
        },
        stream: (method, ...rest) => t.transport.stream(method, ...rest),
      };
    };
    const producer = new Strata({ ...cfg, transport }).producer({ linger: 0, maxBatchBytes: 20_000 });
    await waitFor("bob's grant", () => producer.send({ topic: "quota", messages: [{ value: "x" }] }).then(() => true), 30_000);
    const value = "q".repeat(10_000);
    const total = 6 * rate;
    const started = performance.now();
    for (let sent = 0; sent < total; sent += 5 * value.length) {
      await producer.send({ topic: "quota", messages: Array.from({ length: 5 }, () => ({ value })) });
    }
    const elapsed = performance.now() - started;
    await producer.close();
    assert.ok(throttled > 0, "no produce answer carried a throttle time");
    // The node lets one second of the rate through at once; the rest goes
    // at the rate. A lower bound only: a loaded machine is slower still.
    const least = ((total - rate) / rate) * 1000 * 0.9;
    assert.ok(elapsed >= least, `${total} bytes in ${elapsed.toFixed(0)} ms at a quota of ${rate} B/s (want at least ${least.toFixed(0)} ms)`);
  });

  test("the browser build sends a token over CORS to the https cluster", async () => {
    await admin.admin().createTopic({ topic: "browser-secure", partitions: 3, replicationFactor: 3 });
    const cfg = user("carol");
    cli(["acl", "create", "--principal", "User:carol", "--allow", "write,read,describe", "--topic", "browser-secure"]);
    cli(["acl", "create", "--principal", "User:carol", "--allow", "read", "--group", "browser-group"]);
    const result = await runBrowserTest(env.STRATA_GATEWAY!, "browser-secure", cfg.token as string);
    assert.equal(result.error, undefined, result.error);
    assert.equal(result.acks, 20);
    assert.equal(result.consumed.length, 20);
  });
});
