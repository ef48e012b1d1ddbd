package tests

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/strata-mq/strata/client"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/gen/strata/gateway/v1/gatewayv1connect"
	"github.com/strata-mq/strata/gen/strata/storage/v1/storagev1connect"
	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/testwait"
	"github.com/strata-mq/strata/services/coordinator/pgtest"
	"github.com/strata-mq/strata/tests/harness"
)

// member runs a group consumer that commits after every Poll and records
// what it read.
type member struct {
	gc   *client.GroupConsumer
	mu   sync.Mutex
	seen map[[2]int64]int // (partition, offset) -> times read
	done chan struct{}
}

// startMember starts a member of group reading "orders" through gateway,
// with opts (credentials) added to its consumer options.
func startMember(t *testing.T, ctx context.Context, gateway, group string, opts ...client.Opt) *member {
	copts := []client.ConsumerOpt{client.FetchMaxWait(200 * time.Millisecond), client.RetryBackoff(50 * time.Millisecond)}
	for _, o := range opts {
		copts = append(copts, o)
	}
	gc, err := client.NewGroupConsumer(gateway, group, []string{"orders"}, client.GroupConsumerOptions(copts...))
	if err != nil {
		t.Fatal(err)
	}
	m := &member{gc: gc, seen: map[[2]int64]int{}, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		for ctx.Err() == nil {
			recs, err := gc.Poll(ctx)
			if err != nil {
				continue
			}
			m.mu.Lock()
			for _, r := range recs {
				m.seen[[2]int64{int64(r.Partition), r.Offset}]++
			}
			m.mu.Unlock()
			_ = gc.CommitRecords(context.Background(), recs...)
		}
	}()
	return m
}

func (m *member) read() map[[2]int64]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[[2]int64]int{}
	for k, v := range m.seen {
		out[k] = v
	}
	return out
}

// produceN produces records from..from+n-1 to "orders" through gateway,
// with opts (credentials), and fails the test on any error.
func produceN(t *testing.T, gateway string, from, n int, opts ...client.Opt) {
	popts := make([]client.ProducerOpt, len(opts))
	for i, o := range opts {
		popts[i] = o
	}
	p, err := client.NewProducer(gateway, popts...)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := from; i < from+n; i++ {
		if err := p.ProduceSync(ctx, &client.Record{Topic: "orders", Key: []byte(fmt.Sprint(i)), Value: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatalf("produce %d: %v", i, err)
		}
	}
}

// waitAssigned waits until the members own all 12 partitions between them
// with none shared, and returns how long it took.
func waitAssigned(t *testing.T, ms []*member, total int) time.Duration {
	t.Helper()
	start := time.Now()
	testwait.Until(t, 60*time.Second, fmt.Sprintf("%d members to own all %d partitions", len(ms), total), func() error {
		owner := map[client.TopicPartition]int{}
		n := 0
		for i, m := range ms {
			for _, tp := range m.gc.Assignment() {
				if o, dup := owner[tp]; dup {
					t.Fatalf("%v owned by members %d and %d at once", tp, o, i)
				}
				owner[tp] = i
				n++
			}
		}
		if n != total {
			return fmt.Errorf("%d of %d partitions owned", n, total)
		}
		return nil
	})
	return time.Since(start)
}

// TestConsumerGroupsOnPostgres runs two groups on two coordinators sharing
// Postgres: every member of each group reads every record, the coordinator
// owning a group is killed and the other takes it over without moving a
// committed offset back, and a member's leaving rebalances its partitions.
// It runs on a plain cluster and on a secure one, where the producer and
// the members are User:app with a token and only the ACLs they need
// (read and write on the topic, read on every group), so the coordinator
// that takes over enforces them too.
func TestConsumerGroupsOnPostgres(t *testing.T) {
	t.Parallel()
	plainAndSecure(t, testConsumerGroupsOnPostgres)
}

func testConsumerGroupsOnPostgres(t *testing.T, secure bool) {
	dsn := pgtest.NewDatabase(t)
	c := harness.StartCluster(t, harness.ClusterConfig{StorageNodes: 1, Secure: secure})
	ctx := harness.Deadline(t, 100*time.Second)
	c.CreateTopic(ctx, "orders", 12, 1, nil)
	var app []client.Opt
	if secure {
		// Granted before the group services start: they are ready only
		// once they hold the security state (coordinators watch the
		// controllers), so only the storage node is waited for.
		cr := c.CreateUser(ctx, "app")
		createACLs(ctx, t, c, acl.Spec{Principal: "User:app", Allow: "read,write", Topic: "orders"},
			acl.Spec{Principal: "User:app", Allow: "read", Group: "*"})
		st := storagev1connect.NewStorageServiceClient(c.HTTPClientAs(cr), c.Storage(1).URL)
		waitAllowed(t, c.Storage(1).Name()+" to let User:app describe orders", func(ctx context.Context) error {
			return listOffsets(ctx, st, "orders", 0)
		})
		app = cr.ClientOpts()
	}
	gs := harness.StartGroupServices(t, c, harness.GroupConfig{Coordinators: 2, DSN: dsn})
	gw := gs.Gateway.URL
	produceN(t, gw, 0, 240, app...)

	mctx, stop := context.WithCancel(ctx)
	defer stop()
	billing := []*member{startMember(t, mctx, gw, "billing", app...), startMember(t, mctx, gw, "billing", app...), startMember(t, mctx, gw, "billing", app...)}
	took := waitAssigned(t, billing, 12)
	t.Logf("rebalance: 12 partitions over 3 members assigned in %v", took)
	analytics := []*member{startMember(t, mctx, gw, "analytics", app...)}
	waitAssigned(t, analytics, 12)

	// Both groups see every record.
	waitAll := func(ms []*member, n int, what string) {
		t.Helper()
		testwait.Until(t, 60*time.Second, fmt.Sprintf("%s to read %d records", what, n), func() error {
			all := map[[2]int64]int{}
			for _, m := range ms {
				for k, v := range m.read() {
					all[k] += v
				}
			}
			if len(all) < n {
				return fmt.Errorf("%d distinct records read", len(all))
			}
			return nil
		})
	}
	waitAll(billing, 240, "billing")
	waitAll(analytics, 240, "analytics")

	gwc := gatewayv1connect.NewGatewayServiceClient(c.HTTPClient(), gw)
	committed := func(group string) map[int32]int64 {
		resp, err := gwc.DescribeGroup(ctx, connect.NewRequest(&gatewayv1.DescribeGroupRequest{GroupId: group}))
		if err != nil {
			t.Fatalf("describe %s: %v", group, err)
		}
		out := map[int32]int64{}
		for _, p := range resp.Msg.GetGroup().GetPartitions() {
			out[p.GetPartition()] = p.GetCommittedOffset()
		}
		return out
	}
	// Kill the coordinator that owns billing; the other takes over.
	var owner *harness.Node
	loc, err := gwc.FindCoordinator(ctx, connect.NewRequest(&gatewayv1.FindCoordinatorRequest{GroupId: "billing"}))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range gs.Coordinators {
		if n.URL == loc.Msg.GetAddress() {
			owner = n
		}
	}
	if owner == nil {
		t.Fatalf("no coordinator at %s", loc.Msg.GetAddress())
	}
	before := committed("billing")
	owner.Kill()
	produceN(t, gw, 240, 120, app...)
	waitAll(billing, 360, "billing after the coordinator was killed")
	after := committed("billing")
	for p, off := range before {
		if after[p] < off {
			t.Fatalf("partition %d: committed offset moved back from %d to %d after handover", p, off, after[p])
		}
	}
	// Kill a member: its partitions move after the session timeout.
	billing[2].gc.Close(context.Background()) // leave cleanly is the fast path; kill below is the slow one
	took = waitAssigned(t, billing[:2], 12)
	t.Logf("rebalance after a member left: %v", took)
	stop()
	for _, m := range append(billing, analytics...) {
		<-m.done
		m.gc.Close(context.Background())
	}
}
