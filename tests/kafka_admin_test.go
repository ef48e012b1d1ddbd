package tests

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-mq/strata/lib/testwait"
	"github.com/strata-mq/strata/tests/harness"
)

// testKafkaClusterAdmin runs, on TestKafkaClients' cluster, the admin APIs
// Kafka's tools manage a cluster with: ACLs created through Kafka are
// Strata's (`strata acl list`), described and deleted with Kafka's
// filters; a partition moved to another node is listed while it moves,
// ends led by its new preferred replica, and a preferred election then
// needs none; OffsetForLeaderEpoch tells where the epoch before the move
// ended.
func testKafkaClusterAdmin(t *testing.T, ctx context.Context, d *harness.Dev, cli func(string, ...string) (string, error), adm *kadm.Client) {
	// ACLs.
	created, err := adm.CreateACLs(ctx, kadm.NewACLs().Allow("User:kadm").Topics("acl-orders").
		ResourcePatternType(kadm.ACLPatternLiteral).Operations(kadm.OpRead, kadm.OpWrite))
	if err != nil {
		t.Fatal(err)
	}
	prefixed, err := adm.CreateACLs(ctx, kadm.NewACLs().Allow("User:kadm").Groups("acl-").
		ResourcePatternType(kadm.ACLPatternPrefixed).Operations(kadm.OpRead))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range append(created, prefixed...) {
		if r.Err != nil {
			t.Fatalf("create %s %s %s: %v %s", r.Type, r.Name, r.Operation, r.Err, r.ErrMessage)
		}
	}
	hosted, err := adm.CreateACLs(ctx, kadm.NewACLs().Allow("User:kadm").AllowHosts("10.0.0.1").Topics("acl-orders").
		ResourcePatternType(kadm.ACLPatternLiteral).Operations(kadm.OpRead))
	if err != nil || len(hosted) != 1 || !errors.Is(hosted[0].Err, kerr.InvalidRequest) {
		t.Fatalf("an ACL naming a host: %v %+v, want INVALID_REQUEST", err, hosted)
	}
	out, err := cli("", "acl", "list")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"acl-orders", "acl-"} {
		if !strings.Contains(out, want) || !strings.Contains(out, "User:kadm") {
			t.Fatalf("strata acl list does not show the ACL on %s:\n%s", want, out)
		}
	}
	// MATCH on a group name finds the prefixed binding.
	described, err := adm.DescribeACLs(ctx, kadm.NewACLs().Allow("User:kadm").AllowHosts().Topics("acl-orders").Groups("acl-g1").
		ResourcePatternType(kadm.ACLPatternMatch).Operations(kadm.OpAny))
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, r := range described {
		if r.Err != nil {
			t.Fatalf("describe: %v %s", r.Err, r.ErrMessage)
		}
		for _, a := range r.Described {
			seen = append(seen, fmt.Sprintf("%s %s %s %s %s", a.Type, a.Name, a.Pattern, a.Operation, a.Host))
		}
	}
	slices.Sort(seen)
	if want := []string{"GROUP acl- PREFIXED READ *", "TOPIC acl-orders LITERAL READ *", "TOPIC acl-orders LITERAL WRITE *"}; !slices.Equal(seen, want) {
		t.Fatalf("described %q, want %q", seen, want)
	}
	deleted, err := adm.DeleteACLs(ctx, kadm.NewACLs().Allow("User:kadm").AllowHosts().Topics("acl-orders").Groups("acl-g1").
		ResourcePatternType(kadm.ACLPatternMatch).Operations(kadm.OpAny))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range deleted {
		if r.Err != nil {
			t.Fatalf("delete: %v %s", r.Err, r.ErrMessage)
		}
		n += len(r.Deleted)
	}
	if n != 3 {
		t.Fatalf("deleted %d ACLs, want 3: %+v", n, deleted)
	}
	if out, err := cli("", "acl", "list"); err != nil || strings.Contains(out, "User:kadm") {
		t.Fatalf("after delete, strata acl list: %v\n%s", err, out)
	}

	// A partition on two nodes, 20 records at its first leader epoch.
	if resp, err := adm.CreateTopic(ctx, 1, 2, nil, "moves"); err != nil || resp.Err != nil {
		t.Fatalf("create moves: %v %v", err, resp.Err)
	}
	pr := kafkaClient(t, d, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DefaultProduceTopic("moves"))
	produce := func(from, to int) {
		t.Helper()
		var rs []*kgo.Record
		for i := from; i < to; i++ {
			rs = append(rs, &kgo.Record{Value: []byte(fmt.Sprintf("m%d", i))})
		}
		if err := pr.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
	produce(0, 20)
	end := func() kadm.ListedOffset {
		t.Helper()
		lo, err := adm.ListEndOffsets(ctx, "moves")
		if err != nil {
			t.Fatal(err)
		}
		o, _ := lo.Lookup("moves", 0)
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		return o
	}
	before := end()
	md, err := adm.Metadata(ctx, "moves")
	if err != nil {
		t.Fatal(err)
	}
	replicas := md.Topics["moves"].Partitions[0].Replicas
	var spare int32
	for _, b := range md.Brokers {
		if b.NodeID < coordinatorNodeIDBase && !slices.Contains(replicas, b.NodeID) {
			spare = b.NodeID
		}
	}
	if len(replicas) != 2 || spare == 0 {
		t.Fatalf("moves on %v, no third storage node among %v", replicas, md.Brokers)
	}

	// Move it: the spare node first (its new preferred replica).
	target := append([]int32{spare}, replicas...)
	var req kadm.AlterPartitionAssignmentsReq
	req.Assign("moves", 0, target)
	moved, err := adm.AlterPartitionAssignments(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	moved.Each(func(r kadm.AlterPartitionAssignmentsResponse) {
		if r.Err != nil {
			t.Fatalf("move %s-%d: %v %s", r.Topic, r.Partition, r.Err, r.ErrMessage)
		}
	})
	// Listed while it runs (it may be over by the first look: then
	// Metadata shows the target).
	listed := false
	testwait.Until(t, 60*time.Second, "the move of moves-0 to finish", func() error {
		ls, err := adm.ListPartitionReassignments(ctx, kadm.TopicsSet{"moves": {0: {}}})
		if err != nil {
			return err
		}
		if r, ok := ls["moves"][0]; ok {
			if !slices.Equal(r.Replicas, target) || !slices.Equal(r.AddingReplicas, []int32{spare}) || len(r.RemovingReplicas) != 0 {
				t.Fatalf("listed %+v, want replicas %v adding [%d]", r, target, spare)
			}
			listed = true
			return errors.New("still moving")
		}
		md, err := adm.Metadata(ctx, "moves")
		if err != nil {
			return err
		}
		p := md.Topics["moves"].Partitions[0]
		if !slices.Equal(p.Replicas, target) || p.Leader != spare {
			return fmt.Errorf("replicas %v led by %d", p.Replicas, p.Leader)
		}
		return nil
	})
	t.Logf("the move was listed while it ran: %v", listed)

	// Its preferred replica leads: an election is not needed; an unknown
	// partition is unknown; electing every partition names none of these.
	el, err := adm.ElectLeaders(ctx, kadm.ElectPreferredReplica, kadm.TopicsSet{"moves": {0: {}, 7: {}}})
	if err != nil {
		t.Fatal(err)
	}
	if r := el["moves"][0]; !errors.Is(r.Err, kerr.ElectionNotNeeded) {
		t.Fatalf("elect moves-0: %v %s, want ELECTION_NOT_NEEDED", r.Err, r.ErrMessage)
	}
	if r := el["moves"][7]; !errors.Is(r.Err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("elect moves-7: %v, want UNKNOWN_TOPIC_OR_PARTITION", r.Err)
	}
	if all, err := adm.ElectLeaders(ctx, kadm.ElectPreferredReplica, nil); err != nil || len(all["moves"]) != 0 {
		t.Fatalf("elect every partition: %v %+v", err, all["moves"])
	}

	// 10 more records under the new leader's epoch; the old epoch ended
	// where they start.
	produce(20, 30)
	after := end()
	if after.LeaderEpoch <= before.LeaderEpoch || after.Offset != 30 {
		t.Fatalf("end offset %d at epoch %d, before the move %d at %d", after.Offset, after.LeaderEpoch, before.Offset, before.LeaderEpoch)
	}
	var er kadm.OffsetForLeaderEpochRequest
	er.Add("moves", 0, before.LeaderEpoch)
	epochs, err := adm.OffsetForLeaderEpoch(ctx, er)
	if err != nil {
		t.Fatal(err)
	}
	if e := epochs["moves"][0]; e.Err != nil || e.LeaderEpoch != before.LeaderEpoch || e.EndOffset != 20 {
		t.Fatalf("epoch %d: %+v, want it to end at 20", before.LeaderEpoch, e)
	}
	er = nil
	er.Add("moves", 0, after.LeaderEpoch)
	if epochs, err = adm.OffsetForLeaderEpoch(ctx, er); err != nil {
		t.Fatal(err)
	}
	if e := epochs["moves"][0]; e.Err != nil || e.LeaderEpoch != after.LeaderEpoch || e.EndOffset != 30 {
		t.Fatalf("epoch %d: %+v, want the log end 30", after.LeaderEpoch, e)
	}
	// A Fetch v12 that says it last read the old epoch is checked against
	// that history (KIP-595's diverging_epoch): read up to 20 it is fine,
	// past 20 its log diverged, and it is told where, with no records.
	kc := kafkaClient(t, d)
	fetchAfterEpoch := func(offset int64) kmsg.FetchResponseTopicPartition {
		t.Helper()
		req := kmsg.NewPtrFetchRequest()
		req.Version, req.ReplicaID, req.MaxBytes, req.SessionEpoch = 12, -1, 1<<20, -1
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = "moves"
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.FetchOffset, rp.CurrentLeaderEpoch, rp.LastFetchedEpoch, rp.PartitionMaxBytes = offset, after.LeaderEpoch, before.LeaderEpoch, 1<<20
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, kc.Broker(int(spare)))
		if err != nil || len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			t.Fatalf("fetch v12 at %d: %v %+v", offset, err, resp)
		}
		return resp.Topics[0].Partitions[0]
	}
	if p := fetchAfterEpoch(20); p.ErrorCode != 0 || p.DivergingEpoch.EndOffset != -1 || len(p.RecordBatches) == 0 {
		t.Fatalf("fetch at 20 after epoch %d: error %d, diverging %+v, %d bytes; want records", before.LeaderEpoch, p.ErrorCode, p.DivergingEpoch, len(p.RecordBatches))
	}
	if p := fetchAfterEpoch(25); p.ErrorCode != 0 || p.DivergingEpoch.Epoch != before.LeaderEpoch || p.DivergingEpoch.EndOffset != 20 || len(p.RecordBatches) != 0 {
		t.Fatalf("fetch at 25 after epoch %d: error %d, diverging %+v, %d bytes; want diverging at 20", before.LeaderEpoch, p.ErrorCode, p.DivergingEpoch, len(p.RecordBatches))
	}

	// Log directories: each replica of "moves" (30 records) is in the
	// directory of the storage node holding it, with its size; the
	// coordinators' listeners hold no log.
	brokers, err := adm.BrokerMetadata(ctx)
	if err != nil {
		t.Fatal(err)
	}
	held, dirs := 0, 0
	for _, b := range brokers.Brokers {
		described, err := adm.DescribeBrokerLogDirs(ctx, b.NodeID, nil)
		if err != nil {
			t.Fatalf("DescribeLogDirs of broker %d: %v", b.NodeID, err)
		}
		for _, dir := range described {
			if dir.Err != nil || dir.Dir == "" || dir.TotalBytes <= 0 {
				t.Fatalf("broker %d directory %q: %v, total %d bytes", b.NodeID, dir.Dir, dir.Err, dir.TotalBytes)
			}
			dirs++
			for _, p := range dir.Topics["moves"] {
				if p.Size <= 0 {
					t.Fatalf("broker %d holds moves-%d with %d bytes", b.NodeID, p.Partition, p.Size)
				}
				held++
			}
		}
	}
	if dirs != 3 || held < 2 {
		t.Fatalf("DescribeLogDirs over every broker: %d directories and %d replicas of moves-0; want the 3 storage nodes' and at least its 2 replicas", dirs, held)
	}
}
