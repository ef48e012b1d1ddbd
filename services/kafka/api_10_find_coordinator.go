package kafka

import (
	"context"
	"hash/fnv"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/kafkawire"
	"github.com/strata-mq/strata/lib/serve"
)

func (b *Bridge) findCoordinatorAPI() kafkawire.API {
	return kafkawire.API{Key: kmsg.FindCoordinator, MinVersion: 0, MaxVersion: 4, Handle: handler(b.findCoordinator)}
}

// groupBroker is the broker FindCoordinator names for a key when its
// coordinator has no Kafka listener: one of the live brokers, chosen by a
// hash of the key, so every bridge answers alike and a group's members
// meet in one bridge.
func groupBroker(bs []broker, key string) (broker, bool) {
	if len(bs) == 0 {
		return broker{}, false
	}
	h := fnv.New32a()
	h.Write([]byte(key))
	return bs[h.Sum32()%uint32(len(bs))], true
}

// groupCoordinator is the broker FindCoordinator names for key, a group
// or a transactional id (kind): the Kafka listener of the coordinator
// instance that owns it, as the gateway locates it, or else groupBroker's
// storage node, whose listener passes the key's calls on to the owner.
func (b *Bridge) groupCoordinator(ctx context.Context, bs []broker, group string, kind coordinatorv1.CoordinatorKeyType) (broker, bool) {
	loc, err := b.cfg.Gateway.FindCoordinator(ctx, connect.NewRequest(&gatewayv1.FindCoordinatorRequest{GroupId: group, Listener: serve.KafkaListenerName, KeyType: kind}))
	if err == nil {
		if br, ok := coordinatorBroker(loc.Msg.GetCoordinatorId(), loc.Msg.GetAddress(), bs); ok {
			b.located.Note(loc.Msg.GetCoordinatorId(), loc.Msg.GetAddress())
			return br, true
		}
	}
	return groupBroker(bs, group)
}

func (b *Bridge) findCoordinator(ctx context.Context, version int16, req *kmsg.FindCoordinatorRequest) (kmsg.Response, error) {
	resp := kmsg.NewPtrFindCoordinatorResponse()
	keys := req.CoordinatorKeys
	if version < 4 {
		keys = []string{req.CoordinatorKey}
	}
	md, err := b.clusterMetadata(ctx, []string{})
	var bs []broker
	if err == nil {
		bs = brokers(md.GetNodes())
	}
	for _, key := range keys {
		c := kmsg.NewFindCoordinatorResponseCoordinator()
		c.Key, c.NodeID = key, -1
		kind := coordinatorv1.CoordinatorKeyType_COORDINATOR_KEY_TYPE_GROUP
		switch {
		case req.CoordinatorType == 1 && !b.cfg.Transactions, req.CoordinatorType > 1:
			// Transaction coordinators are offered with the transaction
			// APIs (txn.go); share groups are not Strata's.
			c.ErrorCode = kerr.UnsupportedVersion.Code
		case req.CoordinatorType == 1:
			// As Kafka: describe on the transactional id.
			kind = coordinatorv1.CoordinatorKeyType_COORDINATOR_KEY_TYPE_TRANSACTION
			if b.cfg.Guard != nil && !b.cfg.Guard.Allowed(ctx, acl.Describe, acl.TransactionalID, key) {
				c.ErrorCode = kerr.TransactionalIDAuthorizationFailed.Code
			}
		case b.cfg.Guard != nil && !b.cfg.Guard.Allowed(ctx, acl.Describe, acl.Group, key):
			// As Kafka: describe on the group, as for the Connect API's
			// FindCoordinator.
			c.ErrorCode = kerr.GroupAuthorizationFailed.Code
		}
		if c.ErrorCode == 0 {
			if br, ok := b.groupCoordinator(ctx, bs, key, kind); ok {
				c.NodeID, c.Host, c.Port = br.id, br.host, br.port
			} else {
				c.ErrorCode = kerr.CoordinatorNotAvailable.Code
			}
		}
		resp.Coordinators = append(resp.Coordinators, c)
	}
	if version < 4 && len(resp.Coordinators) == 1 {
		c := resp.Coordinators[0]
		resp.ErrorCode, resp.NodeID, resp.Host, resp.Port = c.ErrorCode, c.NodeID, c.Host, c.Port
	}
	return resp, nil
}
