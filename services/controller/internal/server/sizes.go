package server

import (
	"context"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"
	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/gen/strata/storage/v1/storagev1connect"
	"github.com/strata-mq/strata/services/controller/internal/metastore"
)

// sizeTimeout bounds the DescribeLog calls behind one plan: a node that
// does not answer in time leaves its partitions' sizes unknown, which the
// balancer copes with.
const sizeTimeout = 3 * time.Second

// partitionSizes asks every live node for the sizes of the replicas it
// holds (DescribeLog, all at once) and returns the largest size reported
// for each partition, which is its leader's or its most complete copy's.
// Partitions no node reported are missing from the map (size unknown).
func (c *Controller) partitionSizes(ctx context.Context, m *metastore.Model) map[metastore.PartitionKey]int64 {
	ctx, cancel := context.WithTimeout(ctx, sizeTimeout)
	defer cancel()
	hc := c.cfg.HTTPClient
	if hc == nil {
		hc = http.DefaultClient
	}
	out := map[metastore.PartitionKey]int64{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for id := range m.Live {
		addr := m.Nodes[id].GetNode().GetAddress()
		if addr == "" {
			continue
		}
		wg.Go(func() {
			cl := storagev1connect.NewStorageServiceClient(hc, addr, c.cfg.ClientOptions...)
			resp, err := cl.DescribeLog(ctx, connect.NewRequest(&storagev1.DescribeLogRequest{}))
			if err != nil {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for _, p := range resp.Msg.GetPartitions() {
				if p.GetError() != nil {
					continue
				}
				k := metastore.PartitionKey{Topic: p.GetTopic(), Partition: p.GetPartition()}
				out[k] = max(out[k], p.GetLocalSizeBytes())
			}
		})
	}
	wg.Wait()
	return out
}
