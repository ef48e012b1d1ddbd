package client

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	"github.com/strata-mq/strata/gen/strata/coordinator/v1/coordinatorv1connect"
)

// scriptedCoordinator is a one-member group coordinator for one topic: a
// join gets every partition under a new epoch, Fence makes the next
// heartbeat fail with FENCED_MEMBER_EPOCH, and commits are recorded and
// stored as sent.
type scriptedCoordinator struct {
	coordinatorv1connect.UnimplementedCoordinatorServiceHandler
	topic string
	parts int32

	mu        sync.Mutex
	epoch     int32
	fence     bool
	fenceAll  bool // FenceFromNowOn
	commits   []*coordinatorv1.OffsetCommitRequest
	committed map[int32]int64
	assignors []string // server_assignor of each heartbeat but a leave
	instances []string // instance_id of each heartbeat, the leave's included
	leaves    []int32  // the epoch of each leave (-1, -2)
	// unstable is how many more OffsetFetch asking for stable offsets
	// answer each partition UNSTABLE_OFFSET_COMMIT (a transaction has its
	// offsets staged); stable records each fetch's require_stable.
	unstable map[int32]int
	stable   []bool
}

func (s *scriptedCoordinator) Fence() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fence = true
}

// FenceFromNowOn makes every heartbeat but a leave fail with
// FENCED_MEMBER_EPOCH, joins included: a member stays fenced whichever of
// its heartbeats reaches the coordinator first.
func (s *scriptedCoordinator) FenceFromNowOn() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fenceAll = true
}

func (s *scriptedCoordinator) Commits() []*coordinatorv1.OffsetCommitRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*coordinatorv1.OffsetCommitRequest, len(s.commits))
	for i, c := range s.commits {
		out[i] = proto.Clone(c).(*coordinatorv1.OffsetCommitRequest)
	}
	return out
}

func (s *scriptedCoordinator) ConsumerGroupHeartbeat(_ context.Context, req *connect.Request[coordinatorv1.ConsumerGroupHeartbeatRequest]) (*connect.Response[coordinatorv1.ConsumerGroupHeartbeatResponse], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := req.Msg
	if m.GetMemberEpoch() >= 0 {
		s.assignors = append(s.assignors, m.GetServerAssignor())
	} else {
		s.leaves = append(s.leaves, m.GetMemberEpoch())
	}
	s.instances = append(s.instances, m.GetInstanceId())
	resp := &coordinatorv1.ConsumerGroupHeartbeatResponse{MemberId: m.GetMemberId(), HeartbeatIntervalMs: 20}
	switch {
	case m.GetMemberEpoch() < 0:
		resp.MemberEpoch = m.GetMemberEpoch()
	case s.fenceAll:
		return nil, fencedError()
	case m.GetMemberEpoch() == 0:
		s.epoch += 2 // epochs a member never had
		resp.MemberEpoch = s.epoch
		all := &commonv1.TopicPartitions{Topic: s.topic}
		for p := range s.parts {
			all.Partitions = append(all.Partitions, p)
		}
		resp.Assignment = &coordinatorv1.Assignment{Partitions: []*commonv1.TopicPartitions{all}}
	case s.fence:
		s.fence = false
		return nil, fencedError()
	default:
		resp.MemberEpoch = s.epoch
	}
	return connect.NewResponse(resp), nil
}

// fencedError is the coordinator's FENCED_MEMBER_EPOCH answer.
func fencedError() error {
	e := connect.NewError(connect.CodeAborted, errors.New("fenced"))
	if d, err := connect.NewErrorDetail(&commonv1.ErrorDetail{Code: commonv1.Code_CODE_ABORTED, Reason: commonv1.Reason_REASON_FENCED_MEMBER_EPOCH, Message: "fenced"}); err == nil {
		e.AddDetail(d)
	}
	return e
}

func (s *scriptedCoordinator) OffsetFetch(_ context.Context, req *connect.Request[coordinatorv1.OffsetFetchRequest]) (*connect.Response[coordinatorv1.OffsetFetchResponse], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := &coordinatorv1.OffsetFetchResponse{}
	s.stable = append(s.stable, req.Msg.GetRequireStable())
	for _, t := range req.Msg.GetTopics() {
		for _, p := range t.GetPartitions() {
			if req.Msg.GetRequireStable() && s.unstable[p] > 0 {
				s.unstable[p]--
				out.Offsets = append(out.Offsets, &coordinatorv1.CommittedOffset{Topic: t.GetTopic(), Partition: p, CommittedOffset: -1, CommittedLeaderEpoch: -1,
					Error: &commonv1.ErrorDetail{Code: commonv1.Code_CODE_UNAVAILABLE, Reason: commonv1.Reason_REASON_UNSTABLE_OFFSET_COMMIT, Message: "offsets staged"}})
				continue
			}
			off, ok := s.committed[p]
			if !ok {
				off = -1
			}
			out.Offsets = append(out.Offsets, &coordinatorv1.CommittedOffset{Topic: t.GetTopic(), Partition: p, CommittedOffset: off, CommittedLeaderEpoch: -1})
		}
	}
	return connect.NewResponse(out), nil
}

func (s *scriptedCoordinator) OffsetCommit(_ context.Context, req *connect.Request[coordinatorv1.OffsetCommitRequest]) (*connect.Response[coordinatorv1.OffsetCommitResponse], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.commits = append(s.commits, req.Msg)
	out := &coordinatorv1.OffsetCommitResponse{}
	for _, p := range req.Msg.GetPartitions() {
		s.committed[p.GetPartition()] = p.GetCommittedOffset()
		out.Partitions = append(out.Partitions, &coordinatorv1.OffsetCommitPartitionResult{Topic: p.GetTopic(), Partition: p.GetPartition()})
	}
	return connect.NewResponse(out), nil
}

// pollUntil polls until a record at offset last has been returned, and
// returns every record returned meanwhile.
func pollUntil(t *testing.T, ctx context.Context, gc *GroupConsumer, last int64) []*Record {
	t.Helper()
	var out []*Record
	for {
		recs, err := gc.Poll(ctx)
		if err != nil {
			t.Fatalf("poll: %v", err)
		}
		out = append(out, recs...)
		for _, r := range recs {
			if r.Offset == last {
				return out
			}
		}
	}
}

// TestCommitOfRecordsReadBeforeFence: records carry the member epoch they
// were read under and commits send it; after a fence and a new assignment
// of the same partition, a commit of records read before the fence fails
// with ErrFenced and is not sent, so the offset cannot move back.
func TestCommitOfRecordsReadBeforeFence(t *testing.T) {
	fc := newFake(t, 1, "t", 1)
	co := &scriptedCoordinator{topic: "t", parts: 1, committed: map[int32]int64{}}
	mux := http.NewServeMux()
	mux.Handle(coordinatorv1connect.NewCoordinatorServiceHandler(co))
	fc.SetCoordinator(mux)
	ctx := ctxT(t)
	p := newProducer(t, fc)
	produce := func(n int) {
		for range n {
			if err := p.ProduceSync(ctx, &Record{Topic: "t", Value: []byte("v")}); err != nil {
				t.Fatal(err)
			}
		}
	}
	produce(5)
	gc, err := NewGroupConsumer(fc.GatewayURL(), "g", []string{"t"},
		GroupConsumerOptions(RetryBackoff(5*time.Millisecond), MaxRetryBackoff(20*time.Millisecond), FetchMaxWait(50*time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close(context.Background())

	before := pollUntil(t, ctx, gc, 4)
	for _, r := range before {
		if r.MemberEpoch != 2 {
			t.Fatalf("record %d read under member epoch 2 carries %d", r.Offset, r.MemberEpoch)
		}
	}
	if err := gc.CommitRecords(ctx, before[:2]...); err != nil {
		t.Fatal(err)
	}
	cs := co.Commits()
	want := &coordinatorv1.OffsetCommitRequest{GroupId: "g", MemberId: gc.MemberID(), MemberEpoch: 2,
		Partitions: []*coordinatorv1.OffsetCommitPartition{{Topic: "t", Partition: 0, CommittedOffset: 2, CommittedLeaderEpoch: before[1].LeaderEpoch, MemberEpoch: 2}}}
	if len(cs) != 1 || !proto.Equal(cs[0], want) {
		t.Fatalf("commit sent %v, want %v", cs, want)
	}

	// Fenced, the member joins again and is given the partition back.
	co.Fence()
	for gc.Epoch() != 4 {
		select {
		case <-ctx.Done():
			t.Fatalf("member epoch %d, never 4", gc.Epoch())
		case <-time.After(5 * time.Millisecond):
		}
	}
	produce(5)
	after := pollUntil(t, ctx, gc, 9)
	if after[0].Offset != 2 || after[0].MemberEpoch != 4 {
		t.Fatalf("after the fence the member read from offset %d under epoch %d; want 2 under 4", after[0].Offset, after[0].MemberEpoch)
	}
	if err := gc.CommitRecords(ctx, after...); err != nil {
		t.Fatal(err)
	}
	sent := len(co.Commits())

	err = gc.CommitRecords(ctx, before...)
	if !errors.Is(err, ErrFenced) || !strings.Contains(err.Error(), "t-0: records read under member epoch 2, before the partition was assigned to this member again at epoch 4") {
		t.Fatalf("commit of records read before the fence = %v; want ErrFenced naming the epochs", err)
	}
	if n := len(co.Commits()); n != sent {
		t.Fatalf("a commit of records read before the fence was sent: %v", co.Commits()[sent:])
	}
	// Mixed with newer records, the newer ones are committed.
	err = gc.CommitRecords(ctx, append(before, after[:3]...)...)
	if !errors.Is(err, ErrFenced) {
		t.Fatalf("mixed commit = %v; want ErrFenced for the old records", err)
	}
	cs = co.Commits()
	if len(cs) != sent+1 || cs[sent].GetPartitions()[0].GetCommittedOffset() != 5 || cs[sent].GetPartitions()[0].GetMemberEpoch() != 4 {
		t.Fatalf("mixed commit sent %v; want offset 5 read under epoch 4", cs[sent:])
	}
}

// runScriptedMember runs one group member with opts against a scripted
// coordinator on a fake cluster: it joins, reads the one record of
// topic t and closes (leaving the group). It returns the coordinator,
// which recorded the member's heartbeats.
func runScriptedMember(t *testing.T, opts ...GroupOpt) *scriptedCoordinator {
	t.Helper()
	fc := newFake(t, 1, "t", 1)
	co := &scriptedCoordinator{topic: "t", parts: 1, committed: map[int32]int64{}}
	mux := http.NewServeMux()
	mux.Handle(coordinatorv1connect.NewCoordinatorServiceHandler(co))
	fc.SetCoordinator(mux)
	ctx := ctxT(t)
	if err := newProducer(t, fc).ProduceSync(ctx, &Record{Topic: "t", Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	gc, err := NewGroupConsumer(fc.GatewayURL(), "g", []string{"t"}, append([]GroupOpt{GroupConsumerOptions(FetchMaxWait(50 * time.Millisecond))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	pollUntil(t, ctx, gc, 0)
	if err := gc.Close(ctx); err != nil {
		t.Fatal(err)
	}
	return co
}

// TestServerAssignorIsAskedOnEveryHeartbeat: ServerAssignor("range") is
// sent with each heartbeat (a leave needs none), so the coordinator always knows what the
// member asks for; without it the member asks for nothing ("").
func TestServerAssignorIsAskedOnEveryHeartbeat(t *testing.T) {
	for _, want := range []string{"range", ""} {
		var opts []GroupOpt
		if want != "" {
			opts = append(opts, ServerAssignor(want))
		}
		co := runScriptedMember(t, opts...)
		co.mu.Lock()
		got := slices.Clone(co.assignors)
		co.mu.Unlock()
		if len(got) == 0 {
			t.Fatal("no heartbeat")
		}
		for _, a := range got {
			if a != want {
				t.Fatalf("heartbeats asked for %q, want %q on each", got, want)
			}
		}
	}
}

// TestStaticMemberSendsItsInstanceAndLeavesToComeBack: with InstanceID
// every heartbeat carries the id and Close leaves with epoch -2 (the
// coordinator keeps the partitions for the restart); without it, -1.
func TestStaticMemberSendsItsInstanceAndLeavesToComeBack(t *testing.T) {
	for _, id := range []string{"host-1", ""} {
		var opts []GroupOpt
		if id != "" {
			opts = append(opts, InstanceID(id))
		}
		co := runScriptedMember(t, opts...)
		co.mu.Lock()
		instances, leaves := slices.Clone(co.instances), slices.Clone(co.leaves)
		co.mu.Unlock()
		want := int32(-1)
		if id != "" {
			want = -2
		}
		if !slices.Equal(leaves, []int32{want}) {
			t.Fatalf("instance %q: left with %v, want [%d]", id, leaves, want)
		}
		for _, got := range instances {
			if got != id {
				t.Fatalf("heartbeats carried instance ids %q, want %q on each", instances, id)
			}
		}
	}
}
