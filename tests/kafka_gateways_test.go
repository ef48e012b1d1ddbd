package tests

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-mq/strata/tests/harness"
)

// coordinatorNodeIDBase is the lowest broker id of a coordinator
// (docs/kafka.md, "Groups"; brokerid.CoordinatorBase).
const coordinatorNodeIDBase = 2146435072

// TestKafkaCoordinatorOnEveryGateway: a Kafka client bootstrapped only on
// a second gateway, through which no FindCoordinator ever passed, finds
// the coordinator's broker in that gateway's very first Metadata (the
// coordinator registered with the controller, and every gateway lists the
// registered coordinators), then consumes and commits in a group through
// it.
func TestKafkaCoordinatorOnEveryGateway(t *testing.T) {
	t.Parallel()
	d := harness.StartDev(t)
	b := d.StartGateway(t)
	ctx := harness.Deadline(t, 3*time.Minute)
	coord := d.Process(t, "coordinator", 1)
	if coord.KafkaAddress == "" {
		t.Fatalf("no coordinator kafka_address in cluster.json: %+v", coord)
	}

	onB := func(opts ...kgo.Opt) *kgo.Client {
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(b.KafkaAddress)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl
	}

	// B's first Metadata, before anything else went through B.
	cl := onB()
	md, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	var brokers []string
	coordID := int32(-1)
	for _, br := range md.Brokers {
		addr := fmt.Sprintf("%s:%d", br.Host, br.Port)
		brokers = append(brokers, fmt.Sprintf("%d@%s", br.NodeID, addr))
		if br.NodeID >= coordinatorNodeIDBase && addr == coord.KafkaAddress {
			coordID = br.NodeID
		}
	}
	if coordID < 0 {
		t.Fatalf("gateway B's first Metadata lists brokers %v, without the coordinator at %s (a broker id from %d up)", brokers, coord.KafkaAddress, coordinatorNodeIDBase)
	}

	// A group consumes through B: FindCoordinator names that broker, and
	// the client reaches it.
	const topic, group, n = "via-b", "group-via-b", 30
	adm := kadm.NewClient(cl)
	if resp, err := adm.CreateTopic(ctx, 3, 1, nil, topic); err != nil || resp.Err != nil {
		t.Fatalf("create topic: %v %v", err, resp.Err)
	}
	fc := kmsg.NewPtrFindCoordinatorRequest()
	fc.CoordinatorKey, fc.CoordinatorKeys = group, []string{group}
	fr, err := fc.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if len(fr.Coordinators) != 1 || fr.Coordinators[0].ErrorCode != 0 || fr.Coordinators[0].NodeID != coordID {
		t.Fatalf("FindCoordinator through B: %+v; want node %d", fr.Coordinators, coordID)
	}
	prod := onB(kgo.DefaultProduceTopic(topic), kgo.RequiredAcks(kgo.AllISRAcks()))
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, &kgo.Record{Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "v%d", i)})
	}
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	cons := onB(kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
	seen := map[string]bool{}
	for len(seen) < n {
		fs := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d records through B before the deadline", len(seen), n)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Logf("fetch %s-%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) { seen[string(r.Value)] = true })
	}
	if err := cons.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatalf("commit through B: %v", err)
	}
	offs, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	var committed int64
	offs.Each(func(o kadm.OffsetResponse) { committed += o.At })
	if committed != n {
		t.Fatalf("committed offsets sum to %d; want %d", committed, n)
	}
}
