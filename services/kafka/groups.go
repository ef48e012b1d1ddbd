package kafka

import (
	"context"
	"crypto/rand"
	"fmt"
	"sync"

	"connectrpc.com/connect"

	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	"github.com/strata-mq/strata/gen/strata/coordinator/v1/coordinatorv1connect"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
)

// coordinatorClients caches a client per coordinator instance address.
type coordinatorClients struct {
	mu     sync.Mutex
	coords map[string]coordinatorv1connect.CoordinatorServiceClient // by address
}

func newCoordinatorClients() *coordinatorClients {
	return &coordinatorClients{coords: map[string]coordinatorv1connect.CoordinatorServiceClient{}}
}

// coordinator returns a client of the coordinator instance that owns
// group, found through the gateway.
func (b *Bridge) coordinator(ctx context.Context, group string) (coordinatorv1connect.CoordinatorServiceClient, error) {
	return b.ownerOf(ctx, group, coordinatorv1.CoordinatorKeyType_COORDINATOR_KEY_TYPE_GROUP)
}

// txnCoordinator returns a client of the coordinator instance that owns
// transactional id, found through the gateway.
func (b *Bridge) txnCoordinator(ctx context.Context, id string) (coordinatorv1connect.CoordinatorServiceClient, error) {
	return b.ownerOf(ctx, id, coordinatorv1.CoordinatorKeyType_COORDINATOR_KEY_TYPE_TRANSACTION)
}

// ownerOf returns a client of the coordinator instance that owns key, a
// group or a transactional id.
func (b *Bridge) ownerOf(ctx context.Context, key string, kind coordinatorv1.CoordinatorKeyType) (coordinatorv1connect.CoordinatorServiceClient, error) {
	loc, err := b.cfg.Gateway.FindCoordinator(ctx, connect.NewRequest(&gatewayv1.FindCoordinatorRequest{GroupId: key, KeyType: kind}))
	if err != nil {
		return nil, err
	}
	addr := loc.Msg.GetAddress()
	g := b.coords
	g.mu.Lock()
	defer g.mu.Unlock()
	c := g.coords[addr]
	if c == nil {
		c = coordinatorv1connect.NewCoordinatorServiceClient(b.cfg.HTTPClient, addr, b.cfg.ClientOptions...)
		g.coords[addr] = c
	}
	return c, nil
}

// newMemberID is a random UUID (version 4) text.
func newMemberID() string {
	var u [16]byte
	rand.Read(u[:])
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:])
}

// groupState is a coordinator group state as Kafka names it.
func groupState(s coordinatorv1.GroupState) string {
	switch s {
	case coordinatorv1.GroupState_GROUP_STATE_EMPTY:
		return "Empty"
	case coordinatorv1.GroupState_GROUP_STATE_RECONCILING:
		return "CompletingRebalance"
	case coordinatorv1.GroupState_GROUP_STATE_STABLE:
		return "Stable"
	case coordinatorv1.GroupState_GROUP_STATE_DEAD:
		return "Dead"
	}
	return "Unknown"
}
