package kafka

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	"github.com/strata-mq/strata/gen/strata/coordinator/v1/coordinatorv1connect"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/lib/guard"
)

// scriptedCoordinator records the heartbeats and commits it gets and
// answers what the test sets.
type scriptedCoordinator struct {
	coordinatorv1connect.UnimplementedCoordinatorServiceHandler
	mu       sync.Mutex
	beats    []*coordinatorv1.ConsumerGroupHeartbeatRequest
	commits  []*coordinatorv1.OffsetCommitRequest
	answer   *coordinatorv1.ConsumerGroupHeartbeatResponse
	err      error
	commitTo *coordinatorv1.OffsetCommitResponse
}

func (c *scriptedCoordinator) ConsumerGroupHeartbeat(_ context.Context, req *connect.Request[coordinatorv1.ConsumerGroupHeartbeatRequest]) (*connect.Response[coordinatorv1.ConsumerGroupHeartbeatResponse], error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.beats = append(c.beats, req.Msg)
	if c.err != nil {
		return nil, c.err
	}
	out := proto.Clone(c.answer).(*coordinatorv1.ConsumerGroupHeartbeatResponse)
	out.MemberId = req.Msg.GetMemberId()
	return connect.NewResponse(out), nil
}

func (c *scriptedCoordinator) OffsetCommit(_ context.Context, req *connect.Request[coordinatorv1.OffsetCommitRequest]) (*connect.Response[coordinatorv1.OffsetCommitResponse], error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.commits = append(c.commits, req.Msg)
	if c.err != nil {
		return nil, c.err
	}
	return connect.NewResponse(c.commitTo), nil
}

func (c *scriptedCoordinator) last() *coordinatorv1.ConsumerGroupHeartbeatRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.beats) == 0 {
		return nil
	}
	return c.beats[len(c.beats)-1]
}

// topicGateway knows topics t and u with their ids, and names the
// scripted coordinator for every group.
type topicGateway struct {
	Gateway
	coordAddr string
	extra     []*commonv1.TopicMetadata // topics besides t and u
}

const (
	idT = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
	idU = "11111111-2222-3333-4444-555555555555"
)

func (g *topicGateway) Metadata(_ context.Context, req *connect.Request[gatewayv1.MetadataRequest]) (*connect.Response[gatewayv1.MetadataResponse], error) {
	all := append([]*commonv1.TopicMetadata{{Name: "t", TopicId: idT}, {Name: "u", TopicId: idU}}, g.extra...)
	out := &gatewayv1.MetadataResponse{ClusterId: "c"}
	for _, t := range all {
		if len(req.Msg.GetTopics()) == 0 || slices.Contains(req.Msg.GetTopics(), t.GetName()) {
			out.Topics = append(out.Topics, t)
		}
	}
	return connect.NewResponse(out), nil
}

func (g *topicGateway) FindCoordinator(context.Context, *connect.Request[gatewayv1.FindCoordinatorRequest]) (*connect.Response[gatewayv1.FindCoordinatorResponse], error) {
	return connect.NewResponse(&gatewayv1.FindCoordinatorResponse{CoordinatorId: "c0", Address: g.coordAddr}), nil
}

func newConsumerBridge(t *testing.T) (*Bridge, *scriptedCoordinator) {
	t.Helper()
	coord := &scriptedCoordinator{answer: &coordinatorv1.ConsumerGroupHeartbeatResponse{MemberEpoch: 1, HeartbeatIntervalMs: 2000}}
	mux := http.NewServeMux()
	mux.Handle(coordinatorv1connect.NewCoordinatorServiceHandler(coord))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	b, err := New(Config{Gateway: &topicGateway{coordAddr: srv.URL}, HTTPClient: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	return b, coord
}

func tps(topic string, ps ...int32) []*commonv1.TopicPartitions {
	return []*commonv1.TopicPartitions{{Topic: topic, Partitions: ps}}
}

func heartbeat(t *testing.T, b *Bridge, version int16, req *kmsg.ConsumerGroupHeartbeatRequest) *kmsg.ConsumerGroupHeartbeatResponse {
	t.Helper()
	r, err := b.consumerGroupHeartbeat(context.Background(), version, "client-1", req)
	if err != nil {
		t.Fatal(err)
	}
	return r.(*kmsg.ConsumerGroupHeartbeatResponse)
}

// keepalive is a heartbeat leaving every optional field null, as a
// KIP-848 client sends when nothing changed.
func keepalive(member string, epoch int32) *kmsg.ConsumerGroupHeartbeatRequest {
	req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	req.Group, req.MemberID, req.MemberEpoch = "g", member, epoch
	return req
}

func ownedTopic(id string, ps ...int32) kmsg.ConsumerGroupHeartbeatRequestTopic {
	t := kmsg.NewConsumerGroupHeartbeatRequestTopic()
	t.TopicID, t.Partitions = topicID(id), ps
	return t
}

// TestConsumerGroupHeartbeatMapping: a KIP-848 member's heartbeats reach
// the coordinator with the topic names of the ids it sent and with the
// fields it left null filled in; assignments come back by topic id; a
// heartbeat with null owned partitions never reports as given up a
// partition answered since the member's last full list.
func TestConsumerGroupHeartbeatMapping(t *testing.T) {
	b, coord := newConsumerBridge(t)

	// Join (v1: the member names itself).
	join := keepalive("m1", 0)
	join.SubscribedTopicNames = []string{"t"}
	join.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
	join.RebalanceTimeoutMillis = 30000
	assignor, rack := "range", "r1"
	join.ServerAssignor, join.RackID = &assignor, &rack
	coord.answer = &coordinatorv1.ConsumerGroupHeartbeatResponse{MemberEpoch: 3, HeartbeatIntervalMs: 2000,
		Assignment: &coordinatorv1.Assignment{Partitions: tps("t", 0, 1)}}
	r := heartbeat(t, b, 1, join)
	if r.ErrorCode != 0 || r.MemberEpoch != 3 || r.HeartbeatIntervalMillis != 2000 || r.MemberID == nil || *r.MemberID != "m1" {
		t.Fatalf("join answered %+v", r)
	}
	if r.Assignment == nil || len(r.Assignment.Topics) != 1 || r.Assignment.Topics[0].TopicID != topicID(idT) || !slices.Equal(r.Assignment.Topics[0].Partitions, []int32{0, 1}) {
		t.Fatalf("join assignment %+v", r.Assignment)
	}
	got := coord.last()
	if got.GetMemberEpoch() != 0 || !slices.Equal(got.GetSubscribedTopicNames(), []string{"t"}) || len(got.GetOwnedPartitions()) != 0 ||
		got.GetRebalanceTimeoutMs() != 30000 || got.GetRackId() != "r1" || got.GetServerAssignor() != "range" || got.GetClientId() != "client-1" {
		t.Fatalf("coordinator got join %v", got)
	}

	// A keepalive: the subscription and the rebalance timeout are the
	// join's, and the owned partitions are what the join's answer gave
	// (the member may be reading them).
	coord.answer = &coordinatorv1.ConsumerGroupHeartbeatResponse{MemberEpoch: 3, HeartbeatIntervalMs: 2000,
		Assignment: &coordinatorv1.Assignment{Partitions: tps("t", 0)}} // partition 1 revoked
	r = heartbeat(t, b, 1, keepalive("m1", 3))
	if r.ErrorCode != 0 || r.Assignment == nil || !slices.Equal(r.Assignment.Topics[0].Partitions, []int32{0}) {
		t.Fatalf("keepalive answered %+v", r)
	}
	got = coord.last()
	if got.GetMemberEpoch() != 3 || !slices.Equal(got.GetSubscribedTopicNames(), []string{"t"}) || got.GetRebalanceTimeoutMs() != 30000 || got.GetRackId() != "r1" ||
		got.GetServerAssignor() != "range" {
		t.Fatalf("keepalive reached the coordinator as %v", got)
	}
	if !samePartitions(got.GetOwnedPartitions(), tps("t", 0, 1)) {
		t.Fatalf("keepalive owned %v, want t 0 1", got.GetOwnedPartitions())
	}

	// While the member revokes partition 1 it keeps sending keepalives:
	// partition 1 is still reported, never given up on its behalf.
	coord.answer = &coordinatorv1.ConsumerGroupHeartbeatResponse{MemberEpoch: 3, HeartbeatIntervalMs: 2000}
	heartbeat(t, b, 1, keepalive("m1", 3))
	if got = coord.last(); !samePartitions(got.GetOwnedPartitions(), tps("t", 0, 1)) {
		t.Fatalf("keepalive while revoking owned %v, want t 0 1", got.GetOwnedPartitions())
	}

	// Its full list, by topic id, gives partition 1 up; later keepalives
	// stand for that list.
	full := keepalive("m1", 3)
	full.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{ownedTopic(idT, 0)}
	if r = heartbeat(t, b, 1, full); r.ErrorCode != 0 {
		t.Fatalf("full heartbeat answered %+v", r)
	}
	if got = coord.last(); !samePartitions(got.GetOwnedPartitions(), tps("t", 0)) {
		t.Fatalf("full heartbeat owned %v", got.GetOwnedPartitions())
	}
	heartbeat(t, b, 1, keepalive("m1", 3))
	if got = coord.last(); !samePartitions(got.GetOwnedPartitions(), tps("t", 0)) {
		t.Fatalf("keepalive after the full list owned %v", got.GetOwnedPartitions())
	}

	// A new subscription replaces the old; an owned id no topic has is
	// left out.
	sub := keepalive("m1", 3)
	sub.SubscribedTopicNames = []string{"t", "u"}
	sub.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{ownedTopic(idT, 0), ownedTopic("99999999-2222-3333-4444-555555555555", 4)}
	heartbeat(t, b, 1, sub)
	if got = coord.last(); !slices.Equal(got.GetSubscribedTopicNames(), []string{"t", "u"}) || !samePartitions(got.GetOwnedPartitions(), tps("t", 0)) {
		t.Fatalf("subscription change reached the coordinator as %v", got)
	}

	// Leaving: -2 (a static member's leave for a restart, which the
	// coordinator holds its partitions for) reaches the coordinator as
	// -2; the member is forgotten here.
	n := len(coord.beats)
	r = heartbeat(t, b, 1, keepalive("m1", -2))
	if r.ErrorCode != 0 || r.MemberEpoch != -2 || len(coord.beats) != n+1 || coord.last().GetMemberEpoch() != -2 {
		t.Fatalf("static leave answered %+v, coordinator got %v", r, coord.last())
	}
	if b.consumers.get("g", "m1") != nil {
		t.Fatal("the member is still known after leaving")
	}
}

// TestConsumerGroupHeartbeatErrors: refusals are the protocol's codes,
// and the coordinator's fencing reaches the client as KIP-848's.
func TestConsumerGroupHeartbeatErrors(t *testing.T) {
	b, coord := newConsumerBridge(t)
	join := func(member string) *kmsg.ConsumerGroupHeartbeatRequest {
		req := keepalive(member, 0)
		req.SubscribedTopicNames = []string{"t"}
		req.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
		return req
	}
	regex := join("m")
	re := "t.(" // does not compile
	regex.SubscribedTopicRegex, regex.SubscribedTopicNames = &re, nil
	otherAssignor := join("m")
	ra := "sticky" // a client-side name, not a server assignor
	otherAssignor.ServerAssignor = &ra
	owning := join("m")
	owning.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{ownedTopic(idT, 0)}
	emptied := keepalive("m", 2)
	emptied.SubscribedTopicNames = []string{}
	for _, c := range []struct {
		name    string
		version int16
		req     *kmsg.ConsumerGroupHeartbeatRequest
		code    int16
	}{
		{"regex that does not compile", 1, regex, errInvalidRegularExpression},
		{"client or other assignor", 1, otherAssignor, errUnsupportedAssignor},
		{"v1 without member id", 1, join(""), kerr.InvalidRequest.Code},
		{"join without topics", 1, keepalive("m", 0), kerr.InvalidRequest.Code},
		{"join owning partitions", 1, owning, kerr.InvalidRequest.Code},
		{"empty subscription", 1, emptied, kerr.InvalidRequest.Code},
		{"epoch below -2", 1, keepalive("m", -3), kerr.InvalidRequest.Code},
		{"member this bridge does not know", 1, keepalive("stranger", 4), kerr.FencedMemberEpoch.Code},
	} {
		n := len(coord.beats)
		if r := heartbeat(t, b, c.version, c.req); r.ErrorCode != c.code || r.ErrorMessage == nil || *r.ErrorMessage == "" {
			t.Errorf("%s: answered %d %v, want %d with a message", c.name, r.ErrorCode, r.ErrorMessage, c.code)
		}
		if len(coord.beats) != n {
			t.Errorf("%s: reached the coordinator", c.name)
		}
	}

	// A regex subscription reaches the coordinator, which resolves it; a
	// keepalive that leaves it null keeps it.
	byRegex := join("r")
	pattern := "t.*"
	byRegex.SubscribedTopicRegex, byRegex.SubscribedTopicNames = &pattern, nil
	if r := heartbeat(t, b, 1, byRegex); r.ErrorCode != 0 || coord.last().GetSubscribedTopicRegex() != "t.*" {
		t.Fatalf("a regex join answered %+v, coordinator got %v", r, coord.last())
	}
	if heartbeat(t, b, 1, keepalive("r", coord.answer.GetMemberEpoch())); coord.last().GetSubscribedTopicRegex() != "t.*" {
		t.Fatalf("a keepalive of a regex member reached the coordinator as %v", coord.last())
	}

	// v0: the bridge names a member joining without an id.
	r := heartbeat(t, b, 0, join(""))
	if r.ErrorCode != 0 || r.MemberID == nil || *r.MemberID == "" || coord.last().GetMemberId() != *r.MemberID {
		t.Fatalf("v0 join answered %+v, coordinator got %v", r, coord.last())
	}

	// The coordinator's fencing and forgetting.
	heartbeat(t, b, 1, join("m2"))
	coord.err = apierr.New(connect.CodeAborted, commonv1.Reason_REASON_FENCED_MEMBER_EPOCH, "fenced")
	if r := heartbeat(t, b, 1, keepalive("m2", 1)); r.ErrorCode != kerr.FencedMemberEpoch.Code {
		t.Fatalf("fenced: %d", r.ErrorCode)
	}
	coord.err = apierr.New(connect.CodeNotFound, commonv1.Reason_REASON_UNKNOWN_MEMBER_ID, "unknown")
	if r := heartbeat(t, b, 1, keepalive("m2", 1)); r.ErrorCode != kerr.UnknownMemberID.Code {
		t.Fatalf("unknown: %d", r.ErrorCode)
	}
	if b.consumers.get("g", "m2") != nil {
		t.Fatal("a member the coordinator forgot is still known")
	}
}

// TestConsumerOffsetCommit: a KIP-848 member commits with OffsetCommit
// v9, its member epoch as the generation, checked by the coordinator; an
// epoch the coordinator refuses is STALE_MEMBER_EPOCH; before v9 the
// member is refused UNSUPPORTED_VERSION, as by Kafka.
func TestConsumerOffsetCommit(t *testing.T) {
	b, coord := newConsumerBridge(t)
	join := keepalive("m1", 0)
	join.SubscribedTopicNames = []string{"t"}
	join.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
	coord.answer = &coordinatorv1.ConsumerGroupHeartbeatResponse{MemberEpoch: 5, Assignment: &coordinatorv1.Assignment{Partitions: tps("t", 0, 1)}}
	heartbeat(t, b, 1, join)

	commit := func(version int16) *kmsg.OffsetCommitResponse {
		t.Helper()
		req := kmsg.NewPtrOffsetCommitRequest()
		req.Group, req.MemberID, req.Generation = "g", "m1", 5
		rt := kmsg.NewOffsetCommitRequestTopic()
		rt.Topic = "t"
		for _, p := range []int32{0, 1} {
			rp := kmsg.NewOffsetCommitRequestTopicPartition()
			rp.Partition, rp.Offset = p, 10
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
		r, err := b.offsetCommit(context.Background(), version, req)
		if err != nil {
			t.Fatal(err)
		}
		return r.(*kmsg.OffsetCommitResponse)
	}
	coord.commitTo = &coordinatorv1.OffsetCommitResponse{Partitions: []*coordinatorv1.OffsetCommitPartitionResult{
		{Topic: "t", Partition: 0},
		{Topic: "t", Partition: 1, Error: &commonv1.ErrorDetail{Code: commonv1.Code(connect.CodeAborted), Reason: commonv1.Reason_REASON_FENCED_MEMBER_EPOCH}},
	}}
	r := commit(9)
	if c := coord.commits[len(coord.commits)-1]; c.GetMemberId() != "m1" || c.GetMemberEpoch() != 5 || len(c.GetPartitions()) != 2 {
		t.Fatalf("coordinator got commit %v", c)
	}
	if p := r.Topics[0].Partitions; p[0].ErrorCode != 0 || p[1].ErrorCode != kerr.StaleMemberEpoch.Code {
		t.Fatalf("v9 commit answered %+v", p)
	}
	coord.err = apierr.New(connect.CodeAborted, commonv1.Reason_REASON_FENCED_MEMBER_EPOCH, "fenced")
	if r := commit(9); r.Topics[0].Partitions[0].ErrorCode != kerr.StaleMemberEpoch.Code {
		t.Fatalf("fenced v9 commit answered %+v", r.Topics[0].Partitions)
	}
	coord.err = nil
	n := len(coord.commits)
	if r := commit(8); r.Topics[0].Partitions[0].ErrorCode != kerr.UnsupportedVersion.Code || len(coord.commits) != n {
		t.Fatalf("v8 commit of a KIP-848 member answered %+v", r.Topics[0].Partitions)
	}
}

// TestConsumerGroupHeartbeatLateList: a full owned list at an epoch older
// than the last one answered (a request delivered late) gives up nothing
// answered since, in the keepalives after it; and a member silent for
// forgetAfter is forgotten when another joins.
func TestConsumerGroupHeartbeatLateList(t *testing.T) {
	b, coord := newConsumerBridge(t)
	join := keepalive("m1", 0)
	join.SubscribedTopicNames = []string{"t"}
	join.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
	coord.answer = &coordinatorv1.ConsumerGroupHeartbeatResponse{MemberEpoch: 3, Assignment: &coordinatorv1.Assignment{Partitions: tps("t", 0, 1)}}
	heartbeat(t, b, 1, join)
	coord.answer = &coordinatorv1.ConsumerGroupHeartbeatResponse{MemberEpoch: 3}
	late := keepalive("m1", 2)
	late.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{ownedTopic(idT, 0)}
	heartbeat(t, b, 1, late)
	if got := coord.last(); got.GetMemberEpoch() != 2 || !samePartitions(got.GetOwnedPartitions(), tps("t", 0)) {
		t.Fatalf("late list reached the coordinator as %v", got)
	}
	heartbeat(t, b, 1, keepalive("m1", 3))
	if got := coord.last(); !samePartitions(got.GetOwnedPartitions(), tps("t", 0, 1)) {
		t.Fatalf("keepalive after a late list owned %v, want t 0 1", got.GetOwnedPartitions())
	}

	m1 := b.consumers.get("g", "m1")
	b.consumers.put("g", "m2", &consumerMember{}, time.Now().Add(forgetAfter+time.Minute))
	if b.consumers.get("g", "m1") != nil || !m1.gone.Load() || b.consumers.get("g", "m2") == nil {
		t.Fatal("a silent member was not forgotten")
	}
	if r := heartbeat(t, b, 1, keepalive("m1", 3)); r.ErrorCode != kerr.FencedMemberEpoch.Code {
		t.Fatalf("a forgotten member answered %d, want FENCED_MEMBER_EPOCH", r.ErrorCode)
	}
}

// TestConsumerGroupHeartbeatAuthorized: a KIP-848 heartbeat's refusal by
// the coordinator (read on the group) is GROUP_AUTHORIZATION_FAILED; a
// subscription regex goes to the coordinator, which resolves it in the
// principal's name.
func TestConsumerGroupHeartbeatAuthorized(t *testing.T) {
	g, ctx := readerGuard(t) // User:reader may read topic "granted"
	coord := &scriptedCoordinator{answer: &coordinatorv1.ConsumerGroupHeartbeatResponse{MemberEpoch: 1},
		err: guard.DeniedOn(acl.Group, "permission denied: User:reader may not read group g")}
	mux := http.NewServeMux()
	mux.Handle(coordinatorv1connect.NewCoordinatorServiceHandler(coord))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	b, err := New(Config{Gateway: &topicGateway{coordAddr: srv.URL, extra: []*commonv1.TopicMetadata{{Name: "granted", TopicId: "22222222-2222-3333-4444-555555555555"}}},
		HTTPClient: srv.Client(), Guard: g})
	if err != nil {
		t.Fatal(err)
	}
	join := keepalive("m1", 0)
	join.SubscribedTopicNames = []string{"granted", "t"}
	join.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
	r, err := b.consumerGroupHeartbeat(ctx, 1, "c", join)
	if err != nil {
		t.Fatal(err)
	}
	if code := r.(*kmsg.ConsumerGroupHeartbeatResponse).ErrorCode; code != kerr.GroupAuthorizationFailed.Code {
		t.Fatalf("refused by the coordinator: code %d, want GROUP_AUTHORIZATION_FAILED", code)
	}
	coord.mu.Lock()
	coord.err = nil
	coord.mu.Unlock()
	g.Apply(&commonv1.SecurityState{Acls: []*commonv1.AclBinding{
		{Principal: "User:reader", Permission: commonv1.AclPermission(acl.Allow), Operation: commonv1.AclOperation(acl.Read),
			ResourceType: commonv1.AclResourceType(acl.Topic), ResourceName: "granted"},
		{Principal: "User:reader", Permission: commonv1.AclPermission(acl.Allow), Operation: commonv1.AclOperation(acl.Read),
			ResourceType: commonv1.AclResourceType(acl.Group), ResourceName: "g"},
	}})
	if r, err = b.consumerGroupHeartbeat(ctx, 1, "c", join); err != nil || r.(*kmsg.ConsumerGroupHeartbeatResponse).ErrorCode != 0 {
		t.Fatalf("with read on the group: %v %+v", err, r)
	}
	// A regex reaches the coordinator as it is: the coordinator resolves
	// it against the topics the principal may describe.
	byRegex := keepalive("m2", 0)
	pattern := ".*"
	byRegex.SubscribedTopicRegex = &pattern
	byRegex.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
	if r, err = b.consumerGroupHeartbeat(ctx, 1, "c", byRegex); err != nil || r.(*kmsg.ConsumerGroupHeartbeatResponse).ErrorCode != 0 {
		t.Fatalf("a regex join: %v %+v", err, r)
	}
	if got := coord.last(); got.GetSubscribedTopicRegex() != ".*" {
		t.Fatalf("a regex join reached the coordinator as %v, want the regex", got)
	}
}
