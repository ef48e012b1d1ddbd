// A NOT_LEADER hint names the new leader's default address; a client that
// bootstrapped through a gateway handing out another advertised listener
// must keep using that listener's address for the node.
import assert from "node:assert/strict";
import { test } from "node:test";
import { create } from "@bufbuild/protobuf";
import "../../src/index.js"; // installs the Node platform (transports)
import { common } from "../../src/api.js";
import { resolveConfig } from "../../src/config.js";
import { StrataError } from "../../src/errors.js";
import { Cluster } from "../../src/metadata.js";

interface Internals {
  nodes: Map<number, string>;
  topics: Map<string, { id: string; parts: { leader: number; epoch: number; addr: string }[] }>;
}

function hint(partition: number, leaderId: number, leaderAddress: string): StrataError {
  const detail = create(common.ErrorDetailSchema, {
    hint: {
      case: "leader",
      value: create(common.LeaderHintSchema, {
        topicPartition: create(common.TopicPartitionSchema, { topic: "t", partition }),
        leaderId,
        leaderAddress,
        leaderEpoch: 4,
      }),
    },
  });
  return new StrataError("not the leader", { detail });
}

test("applyHint routes to the address the gateway gave for the node, else the hint's", () => {
  const c = new Cluster(resolveConfig({ gateway: "http://127.0.0.1:1" }));
  try {
    const internals = c as unknown as Internals;
    internals.nodes.set(2, "http://node-2.example.com:31102");
    internals.topics.set("t", {
      id: "id",
      parts: [
        { leader: 1, epoch: 3, addr: "http://node-1.example.com:31101" },
        { leader: 1, epoch: 3, addr: "http://node-1.example.com:31101" },
      ],
    });
    assert.ok(c.applyHint(hint(0, 2, "http://10.0.0.2:9102")), "hint not applied");
    assert.deepEqual(internals.topics.get("t")!.parts[0], { leader: 2, epoch: 4, addr: "http://node-2.example.com:31102" });
    assert.ok(c.applyHint(hint(1, 3, "http://10.0.0.3:9102")), "hint not applied");
    assert.equal(internals.topics.get("t")!.parts[1].addr, "http://10.0.0.3:9102", "an unlisted node is reached at the hint's address");
    assert.ok(!c.applyHint(hint(1, 3, "http://10.0.0.3:9102")), "a hint no newer than the cache is applied again");
  } finally {
    c.close();
  }
});
