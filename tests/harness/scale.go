package harness

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
)

// What elastic-storage tests add to a Cluster: storage nodes joining a
// running cluster, a gateway alone, the active controller, and partition
// moves.

// AddStorageNode starts storage node len(StorageNodes())+1 with the same
// flags as the others (its own ports and data directory) and waits until
// it is ready and registered alive.
func (c *Cluster) AddStorageNode() *Node {
	c.t.Helper()
	id := len(c.storage) + 1
	ports, err := FreePorts(c.t, 2)
	if err != nil {
		c.t.Fatal(err)
	}
	api, admin := "127.0.0.1:"+strconv.Itoa(ports[0]), "127.0.0.1:"+strconv.Itoa(ports[1])
	n := c.startStorage(id, api, admin, filepath.Join(c.t.TempDir(), fmt.Sprintf("storage-%d", id)))
	c.storage = append(c.storage, n)
	n.WaitReady()
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.ReadyTimeout)
	defer cancel()
	if err := c.waitNodesAlive(ctx, id); err != nil {
		c.t.Fatalf("harness: %v", err)
	}
	return n
}

// ActiveController returns the active controller, waiting until a running
// one is known to be active.
func (c *Cluster) ActiveController(ctx context.Context) *Node {
	c.t.Helper()
	for {
		for _, n := range c.controllers {
			if n.Proc.Exited() {
				continue
			}
			resp, err := n.ControllerClient().DescribeCluster(ctx, connect.NewRequest(&controllerv1.DescribeClusterRequest{}))
			if err != nil {
				continue
			}
			id := resp.Msg.GetControllers().GetActiveControllerId()
			for _, a := range c.controllers {
				if strconv.Itoa(a.ID) == id && !a.Proc.Exited() {
					return a
				}
			}
		}
		select {
		case <-ctx.Done():
			c.t.Fatalf("harness: no active controller: %v", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Move starts moving a partition to replicas (with a throttle in bytes per
// second per node, 0 for none) and fails the test if the controller
// refuses. It returns the record with the move started.
func (c *Cluster) Move(ctx context.Context, topic string, partition int32, throttle int64, replicas ...int32) *commonv1.PartitionMetadata {
	c.t.Helper()
	resp, err := c.Ctl().AlterPartitionReassignments(ctx, connect.NewRequest(&controllerv1.AlterPartitionReassignmentsRequest{
		Reassignments:          []*controllerv1.PartitionReassignment{{Topic: topic, Partition: partition, Replicas: replicas}},
		ThrottleBytesPerSecond: throttle,
	}))
	if err != nil {
		c.t.Fatalf("harness: move %s-%d to %v: %v", topic, partition, replicas, err)
	}
	r := resp.Msg.GetResults()[0]
	if r.GetError() != nil {
		c.t.Fatalf("harness: move %s-%d to %v: %s", topic, partition, replicas, r.GetError().GetMessage())
	}
	return r.GetState()
}

// Moving reports whether p has a move running.
func Moving(p *commonv1.PartitionMetadata) bool {
	return len(p.GetAddingReplicas())+len(p.GetRemovingReplicas()) > 0
}
