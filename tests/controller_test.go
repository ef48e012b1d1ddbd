package tests

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"

	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	"github.com/strata-mq/strata/lib/testwait"
	"github.com/strata-mq/strata/tests/harness"
)

// activeController asks one controller who is active; "" when it does not
// know or does not answer.
func activeController(ctx context.Context, n *harness.Node) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	resp, err := n.ControllerClient().DescribeCluster(ctx, connect.NewRequest(&controllerv1.DescribeClusterRequest{}))
	if err != nil {
		return "", err
	}
	return resp.Msg.GetControllers().GetActiveControllerId(), nil
}

// waitAgreedActive polls DescribeCluster on every node until all name the
// same non-empty active controller, which must be one of them, and returns
// it. It fails the test with each node's last answer when ctx ends first.
func waitAgreedActive(ctx context.Context, t *testing.T, nodes []*harness.Node) string {
	t.Helper()
	for {
		answers := make([]string, len(nodes))
		agreed := ""
		ok := true
		for i, n := range nodes {
			id, err := activeController(ctx, n)
			if err != nil {
				answers[i] = fmt.Sprintf("%s: %v", n.Name(), err)
				ok = false
				continue
			}
			answers[i] = fmt.Sprintf("%s: active %q", n.Name(), id)
			if id == "" || (agreed != "" && id != agreed) {
				ok = false
			}
			agreed = id
		}
		if ok && slices.ContainsFunc(nodes, func(n *harness.Node) bool { return fmt.Sprint(n.ID) == agreed }) {
			return agreed
		}
		select {
		case <-ctx.Done():
			t.Fatalf("controllers do not agree on a live active controller: %v; last answers %v", ctx.Err(), answers)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// TestControllerQuorumFailover proves that the controller quorum survives
// the crash of its active member: with three controllers, all three name
// the same active controller; after that one is SIGKILLed, the two
// survivors agree on a new active controller (one of them) within 15 s, a
// topic can be created through a survivor and is visible from both
// survivors; and the killed member, restarted with the same argv and data
// directory, becomes ready, agrees with the others on the active
// controller and sees the topic created while it was down.
func TestControllerQuorumFailover(t *testing.T) {
	t.Parallel()
	testControllerQuorumFailover(t, false)
}

// TestControllerQuorumFailoverSecure is TestControllerQuorumFailover with
// TLS: the etcd peer ports admit controller certificates only (and each
// client listener is the controller's own socket), and the quorum still
// forms, fails over and takes its restarted member back.
func TestControllerQuorumFailoverSecure(t *testing.T) {
	t.Parallel()
	testControllerQuorumFailover(t, true)
}

func testControllerQuorumFailover(t *testing.T, secure bool) {
	// Race: an active controller killed and its quorum failing over.
	c := harness.StartCluster(t, harness.ClusterConfig{Controllers: 3, StorageNodes: 1, Secure: secure, Race: true})
	ctx := harness.Deadline(t, 120*time.Second)

	all := c.Controllers()
	first := waitAgreedActive(harness.Deadline(t, 15*time.Second), t, all)
	t.Logf("active controller: %s", first)

	var killed *harness.Node
	var survivors []*harness.Node
	for _, n := range all {
		if fmt.Sprint(n.ID) == first {
			killed = n
		} else {
			survivors = append(survivors, n)
		}
	}
	killed.Kill()
	start := time.Now()
	second := waitAgreedActive(harness.Deadline(t, 15*time.Second), t, survivors)
	t.Logf("after killing %s: active controller %s within %v", killed.Name(), second, time.Since(start).Round(time.Millisecond))
	if second == first {
		t.Fatalf("killed active controller %s is still reported active", first)
	}

	// Create through one survivor; retry while the quorum settles (UNAVAILABLE).
	const topic = "failover"
	attempts := 0
	testwait.Until(t, 30*time.Second, "a topic created through "+survivors[0].Name()+" after the failover", func() error {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := survivors[0].ControllerClient().CreateTopic(cctx, connect.NewRequest(&controllerv1.CreateTopicRequest{
			Name: topic, Partitions: 2, ReplicationFactor: 1,
		}))
		attempts++
		switch connect.CodeOf(err) {
		case connect.CodeUnavailable, connect.CodeDeadlineExceeded:
			return err
		case connect.CodeAlreadyExists:
			if attempts > 1 {
				return nil // an attempt that timed out had created it
			}
		}
		if err != nil {
			t.Fatalf("create topic through %s after failover: %v", survivors[0].Name(), err)
		}
		return nil
	})
	for _, n := range survivors {
		requireTopic(ctx, t, n, topic, 2)
	}

	killed.Restart()
	third := waitAgreedActive(harness.Deadline(t, 20*time.Second), t, all)
	if third == first {
		t.Errorf("restarted controller %s took the active role back; want %s to stay active", first, second)
	}
	requireTopic(ctx, t, killed, topic, 2)
}

// requireTopic fails the test unless n describes topic with the given
// number of partitions.
func requireTopic(ctx context.Context, t *testing.T, n *harness.Node, topic string, partitions int) {
	t.Helper()
	resp, err := n.ControllerClient().DescribeTopics(ctx, connect.NewRequest(&controllerv1.DescribeTopicsRequest{Names: []string{topic}}))
	if err != nil {
		t.Fatalf("describe %s on %s: %v", topic, n.Name(), err)
	}
	if got := len(resp.Msg.GetTopics()); got != 1 || len(resp.Msg.GetTopics()[0].GetPartitions()) != partitions {
		t.Fatalf("describe %s on %s: got %v, want one topic with %d partitions", topic, n.Name(), resp.Msg.GetTopics(), partitions)
	}
}
