package kafka

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	"github.com/strata-mq/strata/gen/strata/coordinator/v1/coordinatorv1connect"
	"github.com/strata-mq/strata/lib/apierr"
)

// offsetsCoordinator answers OffsetFetch from a table of groups; a group
// not in it has never committed, and group "loading" is not ready.
type offsetsCoordinator struct {
	*scriptedCoordinator
	offsets map[string][]*coordinatorv1.CommittedOffset
}

func (c *offsetsCoordinator) OffsetFetch(_ context.Context, req *connect.Request[coordinatorv1.OffsetFetchRequest]) (*connect.Response[coordinatorv1.OffsetFetchResponse], error) {
	g := req.Msg.GetGroupId()
	if g == "loading" {
		return nil, apierr.New(connect.CodeUnavailable, commonv1.Reason_REASON_COORDINATOR_LOADING, "loading")
	}
	o, ok := c.offsets[g]
	if !ok {
		return nil, apierr.New(connect.CodeNotFound, commonv1.Reason_REASON_GROUP_ID_NOT_FOUND, "no group %s", g)
	}
	return connect.NewResponse(&coordinatorv1.OffsetFetchResponse{Offsets: o}), nil
}

// OffsetFetch v8 and v9 (KIP-709) name several groups: each is answered in
// its own entry with its offsets, a group that never committed with none
// and no error, and a group whose coordinator is not ready with its own
// code while the others are answered.
func TestOffsetFetchSeveralGroups(t *testing.T) {
	coord := &offsetsCoordinator{scriptedCoordinator: &scriptedCoordinator{}, offsets: map[string][]*coordinatorv1.CommittedOffset{
		"a": {{Topic: "t", Partition: 0, CommittedOffset: 42, CommittedLeaderEpoch: 3, Metadata: "m"}},
		"b": {{Topic: "u", Partition: 1, CommittedOffset: 7, CommittedLeaderEpoch: -1}},
	}}
	b := newBridgeWithCoordinator(t, coord)
	for _, version := range []int16{8, 9} {
		req := kmsg.NewPtrOffsetFetchRequest()
		for _, g := range []string{"a", "b", "never", "loading"} {
			rg := kmsg.NewOffsetFetchRequestGroup()
			rg.Group = g
			if g == "b" {
				rt := kmsg.NewOffsetFetchRequestGroupTopic()
				rt.Topic, rt.Partitions = "u", []int32{1, 2}
				rg.Topics = append(rg.Topics, rt)
			}
			req.Groups = append(req.Groups, rg)
		}
		r, err := b.offsetFetch(context.Background(), version, req)
		if err != nil {
			t.Fatal(err)
		}
		resp := decoded(t, r, version).(*kmsg.OffsetFetchResponse)
		if len(resp.Groups) != 4 {
			t.Fatalf("v%d: %d groups answered, want 4", version, len(resp.Groups))
		}
		a, bg, never, loading := resp.Groups[0], resp.Groups[1], resp.Groups[2], resp.Groups[3]
		if a.Group != "a" || a.ErrorCode != 0 || len(a.Topics) != 1 || a.Topics[0].Partitions[0].Offset != 42 ||
			a.Topics[0].Partitions[0].LeaderEpoch != 3 || *a.Topics[0].Partitions[0].Metadata != "m" {
			t.Fatalf("v%d group a: %+v", version, a)
		}
		// Named partitions: 1 committed, 2 answered -1.
		if bg.Group != "b" || len(bg.Topics) != 1 || len(bg.Topics[0].Partitions) != 2 || bg.Topics[0].Partitions[0].Offset != 7 || bg.Topics[0].Partitions[1].Offset != -1 {
			t.Fatalf("v%d group b: %+v", version, bg)
		}
		if never.Group != "never" || never.ErrorCode != 0 || len(never.Topics) != 0 {
			t.Fatalf("v%d a group that never committed: %+v, want no offsets and no error", version, never)
		}
		if loading.Group != "loading" || loading.ErrorCode != 14 { // COORDINATOR_LOAD_IN_PROGRESS
			t.Fatalf("v%d a loading group: %+v, want code 14", version, loading)
		}
	}
}

// stableCoordinator answers OffsetFetch with partition 0 unstable (offsets
// staged by an ongoing transaction) when asked require_stable, and
// records whether it was.
type stableCoordinator struct {
	*scriptedCoordinator
	asked []bool
}

func (c *stableCoordinator) OffsetFetch(_ context.Context, req *connect.Request[coordinatorv1.OffsetFetchRequest]) (*connect.Response[coordinatorv1.OffsetFetchResponse], error) {
	c.asked = append(c.asked, req.Msg.GetRequireStable())
	o := &coordinatorv1.CommittedOffset{Topic: "t", Partition: 0, CommittedOffset: 5, CommittedLeaderEpoch: -1}
	if req.Msg.GetRequireStable() {
		o = &coordinatorv1.CommittedOffset{Topic: "t", Partition: 0, CommittedOffset: -1, CommittedLeaderEpoch: -1,
			Error: apierr.Detail(connect.CodeUnavailable, commonv1.Reason_REASON_UNSTABLE_OFFSET_COMMIT, "staged")}
	}
	return connect.NewResponse(&coordinatorv1.OffsetFetchResponse{Offsets: []*coordinatorv1.CommittedOffset{o}}), nil
}

// TestOffsetFetchRequireStable: from v7 require_stable (KIP-447) reaches
// the coordinator, and a partition it finds staged by a transaction is
// answered UNSTABLE_OFFSET_COMMIT; before v7 there is no such flag.
func TestOffsetFetchRequireStable(t *testing.T) {
	coord := &stableCoordinator{scriptedCoordinator: &scriptedCoordinator{}}
	b := newBridgeWithCoordinator(t, coord)
	for _, tc := range []struct {
		version int16
		code    int16
	}{{6, 0}, {7, kerr.UnstableOffsetCommit.Code}} {
		req := kmsg.NewPtrOffsetFetchRequest()
		req.Group, req.RequireStable = "g", true
		r, err := b.offsetFetch(context.Background(), tc.version, req)
		if err != nil {
			t.Fatal(err)
		}
		resp := decoded(t, r, tc.version).(*kmsg.OffsetFetchResponse)
		if p := resp.Topics[0].Partitions[0]; p.ErrorCode != tc.code {
			t.Errorf("v%d: partition code %d, want %d", tc.version, p.ErrorCode, tc.code)
		}
	}
	if len(coord.asked) != 2 || coord.asked[0] || !coord.asked[1] {
		t.Fatalf("require_stable reached the coordinator as %v; want false (v6), then true (v7)", coord.asked)
	}
}

// newBridgeWithCoordinator is a bridge whose every group is coordinated by
// h, served over HTTP.
func newBridgeWithCoordinator(t *testing.T, h coordinatorv1connect.CoordinatorServiceHandler) *Bridge {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(coordinatorv1connect.NewCoordinatorServiceHandler(h))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	b, err := New(Config{Gateway: &topicGateway{coordAddr: srv.URL}, HTTPClient: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// deletingCoordinator answers OffsetDelete: partitions of "orders" are
// subscribed to, the others deleted.
type deletingCoordinator struct {
	*scriptedCoordinator
	asked *coordinatorv1.OffsetDeleteRequest
}

func (c *deletingCoordinator) OffsetDelete(_ context.Context, req *connect.Request[coordinatorv1.OffsetDeleteRequest]) (*connect.Response[coordinatorv1.OffsetDeleteResponse], error) {
	c.asked = req.Msg
	out := &coordinatorv1.OffsetDeleteResponse{}
	for _, t := range req.Msg.GetTopics() {
		for _, p := range t.GetPartitions() {
			r := &coordinatorv1.OffsetDeleteResult{Topic: t.GetTopic(), Partition: p}
			if t.GetTopic() == "orders" {
				r.Error = &commonv1.ErrorDetail{Code: commonv1.Code_CODE_FAILED_PRECONDITION, Reason: commonv1.Reason_REASON_GROUP_SUBSCRIBED_TO_TOPIC}
			}
			out.Partitions = append(out.Partitions, r)
		}
	}
	return connect.NewResponse(out), nil
}

// OffsetDelete (47): each partition's code from the coordinator
// (GROUP_SUBSCRIBED_TO_TOPIC for a subscribed topic).
func TestOffsetDelete(t *testing.T) {
	coord := &deletingCoordinator{scriptedCoordinator: &scriptedCoordinator{}}
	b := newBridgeWithCoordinator(t, coord)
	req := kmsg.NewPtrOffsetDeleteRequest()
	req.Group = "g"
	for _, name := range []string{"orders", "audit"} {
		rt := kmsg.NewOffsetDeleteRequestTopic()
		rt.Topic = name
		rp := kmsg.NewOffsetDeleteRequestTopicPartition()
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
	}
	r, err := b.offsetDelete(context.Background(), 0, req)
	if err != nil {
		t.Fatal(err)
	}
	resp := decoded(t, r, 0).(*kmsg.OffsetDeleteResponse)
	if resp.ErrorCode != 0 || len(resp.Topics) != 2 || resp.Topics[0].Partitions[0].ErrorCode != kerr.GroupSubscribedToTopic.Code || resp.Topics[1].Partitions[0].ErrorCode != 0 {
		t.Fatalf("answer %+v, want orders GROUP_SUBSCRIBED_TO_TOPIC and audit deleted", resp)
	}
}
