package client

import (
	"testing"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
)

// TestHintUsesAdvertisedAddress checks that a not-leader hint, which names
// the new leader's default address, is routed to the address the gateway's
// metadata gave this client for that node (another advertised listener),
// and to the hint's address only for a node the metadata did not list.
func TestHintUsesAdvertisedAddress(t *testing.T) {
	cfg := defaultConfig()
	c := newCluster("http://127.0.0.1:1", &cfg)
	defer c.close()
	c.nodes[2] = "http://node-2.example.com:31102"
	c.topics["t"] = &topicInfo{id: "id", parts: []partInfo{{leader: 1, epoch: 3, addr: "http://node-1.example.com:31101"}, {leader: 1, epoch: 3}}}
	hint := func(part, leader int32, addr string) error {
		return &Error{Detail: &commonv1.ErrorDetail{Hint: &commonv1.ErrorDetail_Leader{Leader: &commonv1.LeaderHint{
			TopicPartition: &commonv1.TopicPartition{Topic: "t", Partition: part}, LeaderId: leader, LeaderAddress: addr, LeaderEpoch: 4,
		}}}}
	}
	if !c.applyHint(hint(0, 2, "http://10.0.0.2:9102")) {
		t.Fatal("hint not applied")
	}
	if got := c.topics["t"].parts[0]; got.leader != 2 || got.addr != "http://node-2.example.com:31102" {
		t.Errorf("partition 0 routed to %d at %s; want 2 at its advertised address", got.leader, got.addr)
	}
	if !c.applyHint(hint(1, 3, "http://10.0.0.3:9102")) {
		t.Fatal("hint not applied")
	}
	if got := c.topics["t"].parts[1]; got.addr != "http://10.0.0.3:9102" {
		t.Errorf("partition 1 routed to %s; want the hint's address for an unlisted node", got.addr)
	}
}
