package server

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/lib/authn"
	"github.com/strata-mq/strata/lib/recordbatch"
)

// The tests here call a node's StorageService handler in process, as
// lib/serve's authentication middleware would after authenticating the
// caller: the principal is in the context (as).

// as is a request context of principal p ("User:alice",
// "Service:storage/3").
func as(t *testing.T, p string) context.Context {
	t.Helper()
	pr, err := acl.ParsePrincipal(p)
	if err != nil {
		t.Fatal(err)
	}
	method := authn.MethodToken
	if pr.IsService() {
		method = authn.MethodCertificate
	}
	return authn.NewContext(context.Background(), authn.Info{Principal: pr, Method: method})
}

// allow is an ACL binding allowing principal op on a topic (or, for
// acl.Cluster, the cluster).
func allow(principal string, op acl.Operation, rt acl.ResourceType, name string) *commonv1.AclBinding {
	return &commonv1.AclBinding{Principal: principal, Permission: commonv1.AclPermission_ACL_PERMISSION_ALLOW,
		Operation: commonv1.AclOperation(op), ResourceType: commonv1.AclResourceType(rt), ResourceName: name}
}

// newSecureCluster is newCluster with --require-auth on every node.
func newSecureCluster(t *testing.T, n int) *testCluster {
	t.Helper()
	return newClusterOf(t, n, 10*time.Second, &testCluster{requireAuth: true})
}

// setSecurity publishes st through the fake controller's metadata stream
// and waits until every node's guard has it.
func (c *testCluster) setSecurity(st *commonv1.SecurityState) {
	c.t.Helper()
	c.ctrl.SetSecurity(st)
	want := st
	if want == nil {
		want = &commonv1.SecurityState{} // what the controller sends once all is removed
	}
	c.eventually("the security state on every node", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, n := range c.nodes {
			if got := n.node.cfg.Guard.Applied(); got == nil || !proto.Equal(got, want) {
				return false
			}
		}
		return true
	})
}

// handler is node id's StorageService, called in process.
func (c *testCluster) handler(id int32) *service { return &service{n: c.node(id).node} }

func produceAs(ctx context.Context, s *service, topic string, records []byte) (*storagev1.ProduceResponse, error) {
	resp, err := s.Produce(ctx, connect.NewRequest(&storagev1.ProduceRequest{
		Topic: topic, Acks: commonv1.Acks_ACKS_ALL, LeaderEpoch: -1, Records: records, TimeoutMs: 10_000,
	}))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

// checkDenied fails unless err (or d) is a one-line PERMISSION_DENIED
// naming every one of words.
func checkDenied(t *testing.T, what string, d *commonv1.ErrorDetail, words ...string) {
	t.Helper()
	if d.GetCode() != commonv1.Code_CODE_PERMISSION_DENIED {
		t.Fatalf("%s: %v, want PERMISSION_DENIED", what, d)
	}
	msg := d.GetMessage()
	if strings.Contains(msg, "\n") {
		t.Errorf("%s: refusal is not one line: %q", what, msg)
	}
	for _, w := range append([]string{"permission denied"}, words...) {
		if !strings.Contains(msg, w) {
			t.Errorf("%s: refusal %q does not name %q", what, msg, w)
		}
	}
}

// Produce needs write on the topic; a grant and a revoke arrive through
// the metadata stream.
func TestProduceNeedsWrite(t *testing.T) {
	c := newSecureCluster(t, 1)
	c.createTopic("orders", 1, 1)
	s := c.handler(1)
	c.setSecurity(&commonv1.SecurityState{Acls: []*commonv1.AclBinding{allow("User:alice", acl.Write, acl.Topic, "orders")}})

	_, err := produceAs(as(t, "User:bob"), s, "orders", batch(t, "b"))
	if connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("bob's produce: %v, want PERMISSION_DENIED", err)
	}
	checkDenied(t, "bob's produce", apierr.AsDetail(err), "User:bob", "write", "orders")
	// Refused before the partition is looked up: a topic bob may not see
	// is not told apart from one that does not exist.
	_, err = produceAs(as(t, "User:bob"), s, "no-such-topic", batch(t, "b"))
	checkDenied(t, "bob's produce to a missing topic", apierr.AsDetail(err), "User:bob", "no-such-topic")

	if _, err := produceAs(as(t, "User:alice"), s, "orders", batch(t, "a")); err != nil {
		t.Fatalf("alice's produce with write on orders: %v", err)
	}
	c.setSecurity(&commonv1.SecurityState{})
	_, err = produceAs(as(t, "User:alice"), s, "orders", batch(t, "a"))
	checkDenied(t, "alice's produce after the revoke", apierr.AsDetail(err), "User:alice", "write", "orders")
	if leo := c.node(1).node.replica("orders", 0).Log().LogEndOffset(); leo != 1 {
		t.Fatalf("log end %d, want 1: only alice's allowed produce appended", leo)
	}
}

// Fetch refuses the partitions of topics the principal may not read and
// serves the others in the same answer.
func TestFetchRefusesPartitionsWithoutRead(t *testing.T) {
	c := newSecureCluster(t, 1)
	c.createTopic("orders", 1, 1)
	c.createTopic("secret", 1, 1)
	s := c.handler(1)
	c.setSecurity(&commonv1.SecurityState{Acls: []*commonv1.AclBinding{allow("User:alice", acl.Read, acl.Topic, "orders")}})
	for _, topic := range []string{"orders", "secret"} {
		if _, err := produceAs(as(t, "Service:gateway/1"), s, topic, batch(t, topic+"-1")); err != nil {
			t.Fatalf("produce to %s as a service: %v", topic, err)
		}
	}
	resp, err := s.Fetch(as(t, "User:alice"), connect.NewRequest(&storagev1.FetchRequest{
		Partitions: []*storagev1.FetchPartition{{Topic: "secret", CurrentLeaderEpoch: -1}, {Topic: "orders", CurrentLeaderEpoch: -1}},
		MaxWaitMs:  5000, MinBytes: 1,
	}))
	if err != nil {
		t.Fatalf("alice's fetch: %v", err)
	}
	secret, orders := resp.Msg.GetPartitions()[0], resp.Msg.GetPartitions()[1]
	checkDenied(t, "secret-0", secret.GetError(), "User:alice", "read", "secret")
	if len(secret.GetRecords()) != 0 || secret.GetHighWatermark() != -1 {
		t.Errorf("the refused partition carries data: %d bytes, high watermark %d", len(secret.GetRecords()), secret.GetHighWatermark())
	}
	if orders.GetError() != nil {
		t.Fatalf("orders-0: %v", orders.GetError())
	}
	if got := values(t, orders.GetRecords()); len(got) != 1 || got[0] != "orders-1" {
		t.Fatalf("orders-0 records %q, want [orders-1]", got)
	}

	// ListOffsets and a consumer's OffsetForLeaderEpoch need describe
	// (which read implies), partition by partition.
	lo, err := s.ListOffsets(as(t, "User:alice"), connect.NewRequest(&storagev1.ListOffsetsRequest{Partitions: []*storagev1.ListOffsetsPartition{
		{Topic: "orders", CurrentLeaderEpoch: -1, Spec: storagev1.OffsetSpec_OFFSET_SPEC_LATEST},
		{Topic: "secret", CurrentLeaderEpoch: -1, Spec: storagev1.OffsetSpec_OFFSET_SPEC_LATEST},
	}}))
	if err != nil {
		t.Fatal(err)
	}
	if p := lo.Msg.GetPartitions()[0]; p.GetError() != nil || p.GetOffset() != 1 {
		t.Errorf("ListOffsets of orders-0: %v", p)
	}
	checkDenied(t, "ListOffsets of secret-0", lo.Msg.GetPartitions()[1].GetError(), "User:alice", "describe", "secret")
	oe, err := s.OffsetForLeaderEpoch(as(t, "User:alice"), connect.NewRequest(&storagev1.OffsetForLeaderEpochRequest{ReplicaId: -1,
		Partitions: []*storagev1.OffsetForLeaderEpochPartition{{Topic: "secret", CurrentLeaderEpoch: -1, LeaderEpoch: 1}}}))
	if err != nil {
		t.Fatal(err)
	}
	checkDenied(t, "OffsetForLeaderEpoch of secret-0", oe.Msg.GetPartitions()[0].GetError(), "User:alice", "describe", "secret")
	_, err = s.DescribeLog(as(t, "User:alice"), connect.NewRequest(&storagev1.DescribeLogRequest{}))
	checkDenied(t, "DescribeLog", apierr.AsDetail(err), "User:alice", "describe", acl.ClusterName)
}

// Only storage node N's own identity replicates as replica N: not a user,
// whatever its ACLs, not another service, not another storage node.
func TestReplicateNeedsTheNodesOwnIdentity(t *testing.T) {
	c := newSecureCluster(t, 2)
	c.createTopic("r", 2, 1)
	s := c.handler(1)
	c.setSecurity(&commonv1.SecurityState{Acls: []*commonv1.AclBinding{
		allow("User:alice", acl.All, acl.Cluster, acl.ClusterName), allow("User:alice", acl.All, acl.Topic, "r"),
	}})
	replicate := func(who string, replica int32) error {
		_, err := s.Replicate(as(t, who), connect.NewRequest(&storagev1.ReplicateRequest{ReplicaId: replica, NodeEpoch: c.node(2).node.meta.NodeEpoch(),
			Partitions: []*storagev1.ReplicatePartition{{Topic: "r", CurrentLeaderEpoch: 1}}}))
		return err
	}
	for _, tc := range []struct {
		who     string
		replica int32
	}{
		{"User:alice", 2},
		{"Service:gateway/1", 2},
		{"Service:storage/3", 4},
		{"Service:storage/3", 2},
	} {
		err := replicate(tc.who, tc.replica)
		checkDenied(t, fmt.Sprintf("%s replicating as node %d", tc.who, tc.replica), apierr.AsDetail(err), tc.who)
	}
	if err := replicate("Service:storage/2", 2); err != nil {
		t.Fatalf("node 2 replicating as itself: %v", err)
	}
	_, err := s.OffsetForLeaderEpoch(as(t, "Service:storage/3"), connect.NewRequest(&storagev1.OffsetForLeaderEpochRequest{ReplicaId: 4,
		Partitions: []*storagev1.OffsetForLeaderEpochPartition{{Topic: "r", CurrentLeaderEpoch: -1, LeaderEpoch: 1}}}))
	checkDenied(t, "OffsetForLeaderEpoch of node 3 as node 4", apierr.AsDetail(err), "Service:storage/3", "4")
}

// A principal over its quota is told its throttle time, a client that
// does not wait it out has its next answer held back, and a principal
// without a quota is left alone. Only lower bounds on time are asserted.
func TestQuotaThrottlesAndHolds(t *testing.T) {
	c := newSecureCluster(t, 1)
	c.createTopic("orders", 1, 1)
	s := c.handler(1)
	const rate = 100_000 // bytes/s; the bucket holds one second of it
	c.setSecurity(&commonv1.SecurityState{
		Acls: []*commonv1.AclBinding{allow("User:alice", acl.All, acl.Topic, "orders"), allow("User:bob", acl.All, acl.Topic, "orders")},
		Quotas: []*commonv1.Quota{{Principal: "User:alice", ProduceBytesPerSecond: rate, FetchBytesPerSecond: rate},
			{Principal: "User:carol", ProduceBytesPerSecond: 1}},
	})
	big := func() []byte {
		b, err := recordbatch.Build(recordbatch.BuildOptions{}, []recordbatch.Record{{Value: make([]byte, 3*rate/2), Timestamp: time.Now().UnixMilli()}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}()

	start := time.Now()
	first, err := produceAs(as(t, "User:alice"), s, "orders", big)
	if err != nil {
		t.Fatal(err)
	}
	// 1.5 s worth of bytes from a full bucket of 1 s: half a second owed,
	// less what the bucket refilled while the produce was served (a busy
	// machine may take a while).
	throttle := time.Duration(first.GetThrottleTimeMs()) * time.Millisecond
	if want := 500*time.Millisecond - time.Since(start) - 10*time.Millisecond; throttle < want {
		t.Fatalf("alice at 1.5x her quota told to wait %v, want about 500ms less the time served (at least %v)", throttle, want)
	}
	if r, err := produceAs(as(t, "User:bob"), s, "orders", big); err != nil || r.GetThrottleTimeMs() != 0 {
		t.Fatalf("bob without a quota: throttle %dms, %v", r.GetThrottleTimeMs(), err)
	}
	// alice does not wait: her answer is held until she has.
	if _, err := produceAs(as(t, "User:alice"), s, "orders", big); err != nil {
		t.Fatal(err)
	}
	if held := time.Since(start); held < throttle {
		t.Fatalf("alice's second produce answered %v after her first, before her throttle of %v", held, throttle)
	}
	// A hold ends with the request's deadline: carol owes the better part
	// of a day after one batch.
	if _, err := produceAs(as(t, "User:carol"), s, "orders", batch(t, "c")); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("carol without ACLs: %v", err)
	}
	c.setSecurity(&commonv1.SecurityState{
		Acls:   []*commonv1.AclBinding{allow("User:alice", acl.All, acl.Topic, "orders"), allow("User:carol", acl.Write, acl.Topic, "orders")},
		Quotas: []*commonv1.Quota{{Principal: "User:alice", ProduceBytesPerSecond: rate, FetchBytesPerSecond: rate}, {Principal: "User:carol", ProduceBytesPerSecond: 1}},
	})
	if r, err := produceAs(as(t, "User:carol"), s, "orders", big); err != nil || r.GetThrottleTimeMs() == 0 {
		t.Fatalf("carol's first produce: throttle %dms, %v", r.GetThrottleTimeMs(), err)
	}
	ctx, cancel := context.WithTimeout(as(t, "User:carol"), 100*time.Millisecond)
	defer cancel()
	_, err = produceAs(ctx, s, "orders", batch(t, "c"))
	if d := apierr.AsDetail(err); d.GetCode() != commonv1.Code_CODE_DEADLINE_EXCEEDED || !strings.Contains(d.GetMessage(), "quota") {
		t.Fatalf("carol's held produce past its deadline: %v, want DEADLINE_EXCEEDED naming the quota", err)
	}

	// Fetch: alice reads the four big batches, 6 s of her fetch rate, at
	// once.
	resp, err := s.Fetch(as(t, "User:alice"), connect.NewRequest(&storagev1.FetchRequest{
		Partitions: []*storagev1.FetchPartition{{Topic: "orders", CurrentLeaderEpoch: -1}}, MinBytes: 1, MaxBytes: 10 << 20}))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(resp.Msg.GetPartitions()[0].GetRecords()); n < 3*rate {
		t.Fatalf("fetched %d bytes, want the three big batches", n)
	}
	if resp.Msg.GetThrottleTimeMs() < 1000 {
		t.Fatalf("alice's fetch of 6x her quota: throttle %dms, want about 5s", resp.Msg.GetThrottleTimeMs())
	}
}

// Parallel requests from one principal are charged as they are admitted,
// not after they are served: four produces of one second of quota each,
// sent at once, end no sooner than the quota lets their bytes through
// (before, all four got in before any was charged). Only a lower bound on
// time is asserted.
func TestQuotaChargesParallelRequestsBeforeServing(t *testing.T) {
	c := newSecureCluster(t, 1)
	c.createTopic("orders", 1, 1)
	s := c.handler(1)
	const rate = 100_000 // bytes/s; the bucket holds one second of it
	c.setSecurity(&commonv1.SecurityState{
		Acls:   []*commonv1.AclBinding{allow("User:alice", acl.All, acl.Topic, "orders")},
		Quotas: []*commonv1.Quota{{Principal: "User:alice", ProduceBytesPerSecond: rate}},
	})
	second, err := recordbatch.Build(recordbatch.BuildOptions{}, []recordbatch.Record{{Value: make([]byte, rate), Timestamp: time.Now().UnixMilli()}})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			// Each its own copy: the node writes offsets into the batch.
			_, err := produceAs(as(t, "User:alice"), s, "orders", bytes.Clone(second))
			errs <- err
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	// A full bucket admits the first two at once (the first leaves it
	// nearly empty, the second 1 s in debt); the third waits 1 s, the
	// fourth 1 s more.
	if took := time.Since(start); took < 1900*time.Millisecond {
		t.Fatalf("four parallel produces of 1 s of quota each took %v, want at least 2s", took)
	}
}

// Without --require-auth a node allows every request, whatever ACLs the
// metadata carries.
func TestWithoutRequireAuthEverythingIsAllowed(t *testing.T) {
	c := newCluster(t, 1, 10*time.Second)
	c.createTopic("orders", 1, 1)
	c.setSecurity(&commonv1.SecurityState{Acls: []*commonv1.AclBinding{allow("User:alice", acl.Read, acl.Topic, "other")}})
	if _, err := produce(c.storage(1), "orders", commonv1.Acks_ACKS_ALL, -1, batch(t, "x"), 5*time.Second); err != nil {
		t.Fatalf("anonymous produce over HTTP: %v", err)
	}
	if got := values(t, fetch(t, c.storage(1), "orders", 0, time.Second).GetRecords()); len(got) != 1 {
		t.Fatalf("anonymous fetch: %q", got)
	}
	if _, err := produceAs(as(t, "User:bob"), c.handler(1), "orders", batch(t, "y")); err != nil {
		t.Fatalf("bob's produce on a node that does not enforce: %v", err)
	}
}
