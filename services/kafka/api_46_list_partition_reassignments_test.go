package kafka

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestListPartitionReassignments: null topics list every move with its
// replicas, adding and removing replicas, grouped by topic; named
// partitions list only those of them that move, and a topic named with
// no partitions lists nothing without asking (the gateway would read no
// topic as every topic).
func TestListPartitionReassignments(t *testing.T) {
	g, _, admin := clusterGuard(t)
	gw := &moveGateway{}
	b, err := New(Config{Gateway: gw, HTTPClient: http.DefaultClient, Guard: g})
	if err != nil {
		t.Fatal(err)
	}
	list := func(topics map[string][]int32) []string {
		t.Helper()
		req := kmsg.NewPtrListPartitionReassignmentsRequest()
		if topics != nil {
			req.Topics = []kmsg.ListPartitionReassignmentsRequestTopic{}
			for _, name := range []string{"t", "u"} {
				if ps, ok := topics[name]; ok {
					rt := kmsg.NewListPartitionReassignmentsRequestTopic()
					rt.Topic, rt.Partitions = name, ps
					req.Topics = append(req.Topics, rt)
				}
			}
		}
		resp, err := b.listPartitionReassignments(admin, 0, req)
		if err != nil {
			t.Fatal(err)
		}
		r := decoded(t, resp, 0).(*kmsg.ListPartitionReassignmentsResponse)
		if r.ErrorCode != 0 {
			t.Fatalf("code %d", r.ErrorCode)
		}
		var out []string
		for _, rt := range r.Topics {
			for _, rp := range rt.Partitions {
				out = append(out, fmt.Sprintf("%s/%d %v +%v -%v", rt.Topic, rp.Partition, rp.Replicas, rp.AddingReplicas, rp.RemovingReplicas))
			}
		}
		return out
	}
	if got := fmt.Sprint(list(nil)); got != "[t/0 [2 4 1] +[4] -[1] t/1 [2 4 1] +[4] -[1] u/0 [2 4 1] +[4] -[1]]" {
		t.Errorf("every move: %s", got)
	}
	if asked := gw.listed[0].GetTopics(); len(asked) != 0 {
		t.Errorf("every move asked for %v", asked)
	}
	if got := fmt.Sprint(list(map[string][]int32{"t": {1, 5}})); got != "[t/1 [2 4 1] +[4] -[1]]" {
		t.Errorf("t/1 and t/5: %s", got)
	}
	if asked := gw.listed[1].GetTopics(); fmt.Sprint(asked) != "[t]" {
		t.Errorf("asked for %v", asked)
	}
	if got := list(map[string][]int32{"u": {}}); len(got) != 0 || len(gw.listed) != 2 {
		t.Errorf("no partitions: %v, %d calls", got, len(gw.listed))
	}
}
