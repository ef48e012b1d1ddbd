package server

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kgo"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	"github.com/strata-mq/strata/lib/fakecluster"
	"github.com/strata-mq/strata/lib/testwait"
	"github.com/strata-mq/strata/services/kafka/kafkatest"
)

// TestKafkaGroupsInProcess runs franz-go consumer groups in-process, as
// franz-go tests itself against kfake: the Kafka door on a fake cluster's
// storage nodes (services/kafka/kafkatest) and this coordinator on SQLite
// behind it. A classic group (cooperative-sticky, assigned by its leader)
// and a KIP-848 group (assigned here) of two members each share a
// six-partition topic: both members get partitions, every record is read,
// and the group's commits reach the end of every partition.
func TestKafkaGroupsInProcess(t *testing.T) {
	fc := fakecluster.New(3)
	t.Cleanup(fc.Close)
	s := openStore(t, "sqlite")
	cfg := &Config{InstanceID: "coordinator-test", Gateway: fc.GatewayURL(), SessionTimeout: 10 * time.Second,
		HeartbeatInterval: 300 * time.Millisecond, OwnershipLease: time.Minute, LagInterval: time.Hour}
	c := startUntilCleanup(t, cfg, s, http.DefaultClient)
	mux := http.NewServeMux()
	mux.Handle(c.Handler())
	fc.SetCoordinator(mux)
	seeds := kafkatest.Listeners(t, fc, 3)
	if err := fc.CreateTopic("orders", 6, 3); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pr, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic("orders"))
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	const records = 300
	var rs []*kgo.Record
	for i := range records {
		rs = append(rs, &kgo.Record{Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Append(nil, i)})
	}
	if err := pr.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	for _, kind := range []struct {
		name string
		opts []kgo.Opt
	}{
		{"classic", nil},
		{"KIP-848", []kgo.Opt{kgo.ServerSideBalancer()}},
	} {
		t.Run(kind.name, func(t *testing.T) {
			group := "g-" + kind.name
			var mu sync.Mutex
			read := map[string]bool{}
			owned := map[int]int{} // member -> partitions assigned so far
			var members []*kgo.Client
			for m := range 2 {
				opts := append([]kgo.Opt{kgo.SeedBrokers(seeds...), kgo.ConsumerGroup(group), kgo.ConsumeTopics("orders"),
					kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.SessionTimeout(10 * time.Second),
					kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, a map[string][]int32) {
						mu.Lock()
						defer mu.Unlock()
						owned[m] += len(a["orders"])
					})}, kind.opts...)
				cl, err := kgo.NewClient(opts...)
				if err != nil {
					t.Fatal(err)
				}
				members = append(members, cl)
				go func() {
					for ctx.Err() == nil {
						fs := cl.PollFetches(ctx)
						if fs.IsClientClosed() {
							return
						}
						mu.Lock()
						fs.EachRecord(func(r *kgo.Record) { read[string(r.Value)] = true })
						mu.Unlock()
					}
				}()
			}
			defer func() {
				for _, cl := range members {
					cl.Close()
				}
			}()
			testwait.Until(t, time.Minute, "both members given partitions and every record read", func() error {
				mu.Lock()
				defer mu.Unlock()
				if owned[0] == 0 || owned[1] == 0 || len(read) < records {
					return fmt.Errorf("partitions given %v, %d of %d records read", owned, len(read), records)
				}
				return nil
			})
			testwait.Until(t, time.Minute, "the group's commits at the end of every partition", func() error {
				for _, cl := range members {
					if err := cl.CommitUncommittedOffsets(ctx); err != nil {
						return err
					}
				}
				resp, err := c.OffsetFetch(ctx, connect.NewRequest(&coordinatorv1.OffsetFetchRequest{GroupId: group,
					Topics: []*commonv1.TopicPartitions{{Topic: "orders", Partitions: []int32{0, 1, 2, 3, 4, 5}}}}))
				if err != nil {
					return err
				}
				var sum int64
				for _, o := range resp.Msg.GetOffsets() {
					sum += max(o.GetCommittedOffset(), 0)
				}
				if sum != records {
					return fmt.Errorf("committed offsets sum to %d, want %d", sum, records)
				}
				return nil
			})
		})
	}
}
