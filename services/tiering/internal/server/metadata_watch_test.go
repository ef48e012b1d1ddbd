package server

import (
	"context"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	"github.com/strata-mq/strata/lib/fakecluster"
)

// watchedTopics starts topics following c's controller, stopped at the
// end of the test. catchUp is lookup's bound; lookup returns as soon as
// the view has the name, so a generous bound costs only the lookups of
// absent names.
func watchedTopics(t *testing.T, c *fakecluster.Cluster, catchUp time.Duration) *topics {
	t.Helper()
	tp := newTopics(&Config{Controller: c.ControllerURL()}, http.DefaultClient, nil, discardLogger())
	tp.catchUp = catchUp
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tp.run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return tp
}

// eventually fails the test when cond is still false after 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 10 s", what)
		}
	}
}

func partitions(n int) []*commonv1.PartitionMetadata {
	out := make([]*commonv1.PartitionMetadata, n)
	for i := range out {
		out[i] = &commonv1.PartitionMetadata{Partition: int32(i), LeaderId: 1, Replicas: []int32{1}, Isr: []int32{1}}
	}
	return out
}

// With --controller, topics follow the metadata stream: a topic created
// a moment ago is found with its id, partition count and configs, a
// config change and a deletion are seen, and DescribeTopics is never
// called (the fake controller does not even implement it).
func TestTopicsFollowTheControllerStream(t *testing.T) {
	c := fakecluster.New(1)
	t.Cleanup(c.Close)
	tp := watchedTopics(t, c, 30*time.Second)
	ctx := context.Background()

	select {
	case <-tp.view.ReadyNotify():
	case <-time.After(10 * time.Second):
		t.Fatal("no snapshot after 10 s")
	}
	c.SetTopic(&commonv1.TopicMetadata{Name: "orders", TopicId: "id-1", Partitions: partitions(3),
		Configs: map[string]string{"cleanup.policy": "delete", "retention.ms": "60000", "retention.bytes": "-1"}})
	// No wait here: lookup waits for the view to catch up.
	ti, known := tp.lookup(ctx, "orders")
	if !known || ti == nil {
		t.Fatalf("lookup(orders) = %v, %v; want the topic created a moment ago", ti, known)
	}
	if ti.ID != "id-1" || ti.Partitions != 3 || ti.Configs["retention.ms"] != "60000" || ti.Configs["cleanup.policy"] != "delete" {
		t.Fatalf("lookup(orders) = %+v", ti)
	}

	c.UpdateTopicConfigs("orders", func(m map[string]string) { m["retention.ms"] = "1000" })
	eventually(t, "the config change", func() bool {
		ti := tp.current("orders")
		return ti != nil && ti.Configs["retention.ms"] == "1000"
	})
	if ti := tp.current("orders"); ti.ID != "id-1" || ti.Partitions != 3 {
		t.Fatalf("after the config change: %+v", ti)
	}

	c.DeleteTopic("orders")
	eventually(t, "the deletion", func() bool { return tp.current("orders") == nil })
	tp.catchUp = 10 * time.Millisecond // an absent name waits the whole bound
	if ti, known := tp.lookup(ctx, "orders"); ti != nil || known {
		t.Fatalf("lookup(orders) after the deletion = %v, %v; want unknown", ti, known)
	}

	if n := c.Calls("DescribeTopics"); n != 0 {
		t.Fatalf("DescribeTopics called %d times", n)
	}
	if n := c.Calls("WatchMetadata"); n == 0 {
		t.Fatal("WatchMetadata never called")
	}
}

// Before the first snapshot nothing is known, and lookup refuses no name:
// it waits out its bound and answers unknown-but-allowed.
func TestTopicsBeforeTheFirstSnapshot(t *testing.T) {
	c := fakecluster.New(1)
	t.Cleanup(c.Close)
	c.AddFault(&fakecluster.Fault{Method: "WatchMetadata", Partition: -1, Code: connect.CodeUnavailable})
	tp := watchedTopics(t, c, 10*time.Millisecond)
	eventually(t, "a refused watch", func() bool { return c.Calls("WatchMetadata") > 0 })
	if ti, known := tp.lookup(context.Background(), "orders"); ti != nil || !known {
		t.Fatalf("lookup(orders) before the first snapshot = %v, %v; want nil, true", ti, known)
	}
	if ti := tp.current("orders"); ti != nil {
		t.Fatalf("current(orders) before the first snapshot = %v", ti)
	}
}
