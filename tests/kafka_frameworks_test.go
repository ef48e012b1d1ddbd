package tests

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-mq/strata/tests/harness"
)

// testKafkaFrameworkCalls makes the calls the Java frameworks make at
// start, beyond their groups (docs/kafka.md, "Frameworks"), none of which
// can be installed here:
//   - Kafka Connect and Schema Registry create their internal topics
//     compacted and read the policy back before they use them
//     (TopicAdmin's verifyTopicCleanupPolicyOnlyCompact, KafkaStore's
//     check), then read each to its end with read_committed consumers;
//   - Debezium's schema history topic keeps everything:
//     retention.ms=Long.MAX_VALUE and retention.bytes=-1, and takes the
//     cluster's replication factor (-1, KIP-464);
//   - Kafka Streams' changelogs of windowed stores are compact,delete;
//   - Flink's source and MirrorMaker 2's checkpoints commit a group's
//     offsets from outside any member (generation -1, no member id), and
//     MirrorMaker 2 lists the groups (such a group among them) and
//     fetches their offsets.
func testKafkaFrameworkCalls(t *testing.T, ctx context.Context, d *harness.Dev, adm *kadm.Client) {
	compact, both, forever, unbounded := "compact", "compact,delete", strconv.FormatInt(math.MaxInt64, 10), "-1"
	topics := map[string]map[string]*string{
		"connect-configs":            {"cleanup.policy": &compact},
		"_schemas":                   {"cleanup.policy": &compact},
		"schema-history":             {"retention.ms": &forever, "retention.bytes": &unbounded},
		"app-window-store-changelog": {"cleanup.policy": &both},
	}
	for name, configs := range topics {
		rf := int16(3)
		if name == "schema-history" {
			rf = -1
		}
		if r, err := adm.CreateTopic(ctx, 1, rf, configs, name); err != nil || r.Err != nil {
			t.Fatalf("create %s: %v %v", name, err, r.Err)
		}
	}
	described, err := adm.DescribeTopicConfigs(ctx, "connect-configs", "_schemas", "schema-history", "app-window-store-changelog")
	if err != nil {
		t.Fatal(err)
	}
	for name, configs := range topics {
		rc, err := described.On(name, nil)
		if err != nil {
			t.Fatalf("describe %s: %v", name, err)
		}
		got := map[string]string{}
		for _, c := range rc.Configs {
			got[c.Key] = c.MaybeValue()
		}
		for k, v := range configs {
			if got[k] != *v {
				t.Errorf("%s: %s described as %q, created %q", name, k, got[k], *v)
			}
		}
	}

	// Read to the end as Connect's KafkaBasedLog does: the end offsets a
	// read_committed consumer is given (the last stable offset) hold
	// every acknowledged record when no transaction is open.
	pr := kafkaClient(t, d, kgo.RequiredAcks(kgo.AllISRAcks()))
	var rs []*kgo.Record
	for i := range 5 {
		rs = append(rs, &kgo.Record{Topic: "connect-configs", Key: fmt.Appendf(nil, "connector-%d", i%2), Value: fmt.Appendf(nil, "config %d", i)})
	}
	if err := pr.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	stable, err := adm.ListCommittedOffsets(ctx, "connect-configs")
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := stable.Lookup("connect-configs", 0); !ok || o.Err != nil || o.Offset != 5 {
		t.Errorf("read_committed end of connect-configs: %+v, want 5", o)
	}

	// A commit from outside the group, then the group listed and its
	// offsets fetched, as MirrorMaker 2's checkpoint connector does.
	var commit kadm.Offsets
	commit.Add(kadm.Offset{Topic: "connect-configs", Partition: 0, At: 3, LeaderEpoch: -1, Metadata: "flink checkpoint 7"})
	resp, err := adm.CommitOffsets(ctx, "flink-source", commit)
	if err != nil || resp.Error() != nil {
		t.Fatalf("commit from outside the group: %v %v", err, resp.Error())
	}
	groups, err := adm.ListGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := groups["flink-source"]; !ok {
		t.Errorf("ListGroups leaves out a group that has only committed offsets: %v", groups.Groups())
	}
	fetched, err := adm.FetchOffsets(ctx, "flink-source")
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := fetched.Lookup("connect-configs", 0); !ok || o.At != 3 || o.Metadata != "flink checkpoint 7" {
		t.Errorf("fetched %+v, want offset 3 with its metadata", o)
	}
}
