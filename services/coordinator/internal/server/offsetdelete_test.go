package server

import (
	"context"
	"testing"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	"github.com/strata-mq/strata/lib/apierr"
)

// OffsetDelete (KIP-496): an unknown group is NOT_FOUND; with a live
// member subscribed to orders, orders' offsets stay
// (GROUP_SUBSCRIBED_TO_TOPIC) and audit's go; once the group is empty,
// orders' go too.
func TestOffsetDelete(t *testing.T) {
	c := startTestCoordinator(t, openStore(t, "sqlite"), map[string]int32{"orders": 2, "audit": 1})
	ctx := context.Background()
	del := func(topics ...*commonv1.TopicPartitions) ([]*coordinatorv1.OffsetDeleteResult, error) {
		resp, err := c.OffsetDelete(ctx, connect.NewRequest(&coordinatorv1.OffsetDeleteRequest{GroupId: "g", Topics: topics}))
		if err != nil {
			return nil, err
		}
		return resp.Msg.GetPartitions(), nil
	}
	if _, err := del(&commonv1.TopicPartitions{Topic: "orders", Partitions: []int32{0}}); apierr.DetailOf(err).GetReason() != commonv1.Reason_REASON_GROUP_ID_NOT_FOUND {
		t.Fatalf("offsets of an unknown group: %v, want GROUP_ID_NOT_FOUND", err)
	}
	// Commits while the group is empty (a standalone consumer's).
	if _, err := c.OffsetCommit(ctx, connect.NewRequest(&coordinatorv1.OffsetCommitRequest{GroupId: "g", MemberEpoch: -1,
		Partitions: []*coordinatorv1.OffsetCommitPartition{{Topic: "orders", Partition: 0, CommittedOffset: 5, CommittedLeaderEpoch: -1},
			{Topic: "audit", Partition: 0, CommittedOffset: 7, CommittedLeaderEpoch: -1}}})); err != nil {
		t.Fatal(err)
	}
	heartbeat(t, c, "m1", 0) // subscribes to orders
	res, err := del(&commonv1.TopicPartitions{Topic: "orders", Partitions: []int32{0}}, &commonv1.TopicPartitions{Topic: "audit", Partitions: []int32{0}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 || res[0].GetError().GetReason() != commonv1.Reason_REASON_GROUP_SUBSCRIBED_TO_TOPIC || res[1].GetError() != nil {
		t.Fatalf("with a member subscribed to orders: %v, want orders kept (GROUP_SUBSCRIBED_TO_TOPIC) and audit deleted", res)
	}
	fetch := func() map[string]int64 {
		resp, err := c.OffsetFetch(ctx, connect.NewRequest(&coordinatorv1.OffsetFetchRequest{GroupId: "g"}))
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int64{}
		for _, o := range resp.Msg.GetOffsets() {
			if o.GetCommittedOffset() >= 0 {
				out[o.GetTopic()] = o.GetCommittedOffset()
			}
		}
		return out
	}
	if got := fetch(); len(got) != 1 || got["orders"] != 5 {
		t.Fatalf("offsets after the first delete: %v, want orders at 5 alone", got)
	}
	heartbeat(t, c, "m1", -1) // leaves
	if res, err = del(&commonv1.TopicPartitions{Topic: "orders", Partitions: []int32{0}}); err != nil || res[0].GetError() != nil {
		t.Fatalf("the empty group's orders offset: %v %v", res, err)
	}
	if got := fetch(); len(got) != 0 {
		t.Fatalf("offsets after the second delete: %v, want none", got)
	}
}
