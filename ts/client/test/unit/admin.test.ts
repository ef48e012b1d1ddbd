// Admin calls against the in-memory cluster (memcluster.ts): what each
// sends to the gateway or the leaders, kafkajs' answer shapes, retries of
// retriable failures and none of refusals.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { Code } from "@connectrpc/connect";
import { common, coordinator, gateway } from "../../src/api.js";
import { ConfigResourceTypes, ConfigSource, DeleteGroupsError, InvalidOffsetError, StrataAuthorizationError, StrataConnectionError, StrataError } from "../../src/index.js";
import { GATEWAY, MemCluster, reasonError } from "./memcluster.js";

describe("admin", () => {
  test("createPartitions sends the new total per topic", async () => {
    const c = new MemCluster().topic("t", 2);
    const admin = c.strata().admin();
    assert.equal(await admin.createPartitions({ topicPartitions: [{ topic: "t", count: 5 }] }), true);
    await admin.disconnect();
    assert.deepEqual((c.callsOf("CreatePartitions")[0]!.request as gateway.CreatePartitionsRequest).total, 5);
    assert.equal(c.topics.get("t")!.parts.length, 5);
  });

  test("fetchTopicOffsetsByTimestamp asks each leader for the first offset at or after the time", async () => {
    const c = new MemCluster().topic("t", 2, 2);
    await c.produce("t", 0, ["a", "b"], 1000);
    await c.produce("t", 0, ["c"], 2000);
    await c.produce("t", 1, ["d"], 500);
    const admin = c.strata().admin();
    assert.deepEqual(await admin.fetchTopicOffsetsByTimestamp("t", 1500), [
      { partition: 0, offset: "2" },
      { partition: 1, offset: "1" },
    ]);
    assert.deepEqual(await admin.fetchTopicOffsetsByTimestamp("t"), [
      { partition: 0, offset: "3" },
      { partition: 1, offset: "1" },
    ]);
    await admin.disconnect();
    assert.deepEqual(new Set(c.callsOf("ListOffsets").map((x) => x.to)).size, 2, "each partition's leader was asked");
  });

  test("resetOffsets and setOffsets move committed offsets through ResetOffsets", async () => {
    const c = new MemCluster().topic("t", 3);
    await c.produce("t", 1, ["a", "b", "c"]);
    const admin = c.strata().admin();
    await admin.resetOffsets({ groupId: "g", topic: "t", earliest: true });
    assert.deepEqual([0, 1, 2].map((p) => c.commits.get(`t/${p}`)), [0, 0, 0]);
    await admin.resetOffsets({ groupId: "g", topic: "t" });
    assert.equal(c.commits.get("t/1"), 3);
    await admin.setOffsets({ groupId: "g", topic: "t", partitions: [{ partition: 0, offset: "0" }, { partition: 1, offset: "2" }, { partition: 2, offset: 0 }] });
    assert.deepEqual([0, 1, 2].map((p) => c.commits.get(`t/${p}`)), [0, 2, 0]);
    // One call per distinct offset.
    const sets = c.callsOf("ResetOffsets").slice(2).map((x) => x.request as gateway.ResetOffsetsRequest);
    assert.deepEqual(sets.map((r) => [r.spec, Number(r.offset), r.topics[0]!.partitions]), [
      [coordinator.ResetSpec.OFFSET, 0, [0, 2]],
      [coordinator.ResetSpec.OFFSET, 2, [1]],
    ]);
    await assert.rejects(admin.setOffsets({ groupId: "g", topic: "t", partitions: [{ partition: 0, offset: "x" }] }), InvalidOffsetError);
    await admin.disconnect();
  });

  test("deleteGroups reports each group, and rejects with DeleteGroupsError when one was not deleted", async () => {
    const c = new MemCluster();
    const admin = c.strata().admin();
    assert.deepEqual(await admin.deleteGroups(["a"]), [{ groupId: "a", errorCode: "NONE" }]);
    await assert.rejects(admin.deleteGroups(["a", "busy", "missing"]), (e: unknown) => {
      assert.ok(e instanceof DeleteGroupsError, String(e));
      assert.deepEqual(e.groups.map((g) => [g.groupId, g.errorCode]), [["a", "NONE"], ["busy", "GROUP_NOT_EMPTY"], ["missing", "GROUP_ID_NOT_FOUND"]]);
      return true;
    });
    await admin.disconnect();
  });

  test("describeConfigs and alterConfigs: topic configs with their source; other resources are refused", async () => {
    const c = new MemCluster().topic("t", 1);
    const admin = c.strata().admin();
    await admin.alterConfigs({ resources: [{ type: ConfigResourceTypes.TOPIC, name: "t", configEntries: [{ name: "cleanup.policy", value: "compact" }] }] });
    const d = await admin.describeConfigs({ resources: [{ type: ConfigResourceTypes.TOPIC, name: "t" }] });
    const byName = Object.fromEntries(d.resources[0]!.configEntries.map((e) => [e.configName, e]));
    assert.equal(byName["cleanup.policy"]!.configValue, "compact");
    assert.equal(byName["cleanup.policy"]!.configSource, ConfigSource.TOPIC_CONFIG);
    assert.equal(byName["cleanup.policy"]!.isDefault, false);
    assert.equal(byName["retention.ms"]!.isDefault, true);
    assert.equal(byName["retention.ms"]!.configSource, ConfigSource.DEFAULT_CONFIG);
    const narrow = await admin.describeConfigs({ resources: [{ type: ConfigResourceTypes.TOPIC, name: "t", configNames: ["retention.ms"] }] });
    assert.deepEqual(narrow.resources[0]!.configEntries.map((e) => e.configName), ["retention.ms"]);
    await admin.alterConfigs({ resources: [{ type: ConfigResourceTypes.TOPIC, name: "t", configEntries: [{ name: "cleanup.policy", value: null }] }] });
    assert.deepEqual(c.topics.get("t")!.configs, {});
    await assert.rejects(admin.describeConfigs({ resources: [{ type: ConfigResourceTypes.BROKER, name: "1" }] }), (e: unknown) => e instanceof StrataError && e.code === Code.Unimplemented);
    await admin.disconnect();
  });

  test("fetchTopicMetadata describes many topics in one call, every topic when none are named", async () => {
    const c = new MemCluster().topic("a", 2).topic("b", 1);
    const admin = c.strata().admin();
    const m = await admin.fetchTopicMetadata({ topics: ["a", "b"] });
    assert.deepEqual(m.topics.map((t) => [t.name, t.partitions.map((p) => p.partitionId)]), [["a", [0, 1]], ["b", [0]]]);
    assert.equal(c.callsOf("DescribeTopics").length, 1);
    assert.equal((await admin.fetchTopicMetadata()).topics.length, 2);
    await admin.disconnect();
  });

  test("admin calls retry a retriable failure and not a refusal", async () => {
    const c = new MemCluster().topic("t", 1);
    let n = 0;
    c.fault("ListTopics", () => {
      if (++n <= 2) throw reasonError(Code.Unavailable, common.Reason.NOT_CONTROLLER, "not the active controller");
    });
    const admin = c.strata().admin();
    assert.deepEqual(await admin.listTopics(), ["t"]);
    assert.equal(n, 3);
    c.fault("DescribeTopics", () => {
      throw reasonError(Code.PermissionDenied, common.Reason.UNSPECIFIED, "permission denied: User:alice may not describe topic t");
    });
    await assert.rejects(admin.describeTopic("t"), StrataAuthorizationError);
    assert.equal(c.callsOf("DescribeTopics").length, 1, "a refusal was retried");
    await admin.disconnect();
  });

  test("a list of gateways: an unreachable one is skipped, and a full outage is a StrataConnectionError", async () => {
    const c = new MemCluster().topic("t", 1);
    const second = "http://gateway-2.test";
    c.down.add(GATEWAY);
    const admin = c.strata({ gateway: [GATEWAY, second], retry: { retries: 1, initialRetryTime: 10, maxRetryTime: 10 } }).admin();
    assert.deepEqual(await admin.listTopics(), ["t"]);
    assert.deepEqual(await admin.listTopics(), ["t"]);
    assert.deepEqual(c.callsOf("ListTopics").map((x) => x.to), [second, second], "the answering gateway became the current one");
    c.down.add(second);
    await assert.rejects(admin.listTopics(), (e: unknown) => {
      assert.ok(e instanceof StrataConnectionError, String(e));
      assert.ok(e.retriable);
      assert.match(String((e.cause as Error).message), /ECONNREFUSED/);
      return true;
    });
    await admin.disconnect();
  });
});
