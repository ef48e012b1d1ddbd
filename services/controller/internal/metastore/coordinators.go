package metastore

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	"github.com/strata-mq/strata/lib/kafkawire/brokerid"
	"github.com/strata-mq/strata/lib/serve"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
)

// Coordinator registrations (docs/design/controller.md, "Coordinators"):
// a coordinator instance announces its Connect address and listeners (its
// Kafka listener among them) under /strata/coordinators/<kafka node id>,
// attached to a lease it renews, so the metadata stream lists exactly the
// live coordinators and every gateway can name them to Kafka clients.
// Keying by the Kafka broker id makes that id unique among live
// coordinators: a second instance whose id hashes to a held one is refused
// in the same transaction that would write it.

// MinCoordinatorNodeID is the lowest Kafka broker id of a coordinator:
// coordinators hash their instance id into the top 2^20 ids of int32
// (lib/kafkawire/brokerid).
const MinCoordinatorNodeID = brokerid.CoordinatorBase

func coordinatorKey(nodeID int32) string { return fmt.Sprintf("%s%010d", PrefixCoordinators, nodeID) }

// checkCoordinator validates a registration as RegisterCoordinator gets it.
func checkCoordinator(c *controllerv1.CoordinatorRegistration) error {
	id := c.GetCoordinatorId()
	if id == "" || len(id) > 255 || strings.ContainsAny(id, " \t\r\n") {
		return errf(commonv1.Code_CODE_INVALID_ARGUMENT, 0, "coordinator id %q must be 1 to 255 characters without spaces", id)
	}
	if c.GetKafkaNodeId() < MinCoordinatorNodeID {
		return errf(commonv1.Code_CODE_INVALID_ARGUMENT, 0, "coordinator %s: kafka node id %d is below the coordinators' range (%d and up)", id, c.GetKafkaNodeId(), MinCoordinatorNodeID)
	}
	if err := serve.CheckBaseURL(c.GetAddress()); err != nil {
		return errf(commonv1.Code_CODE_INVALID_ARGUMENT, 0, "coordinator %s: address %q is not an http(s) URL", id, c.GetAddress())
	}
	if c.GetIncarnationId() == "" {
		return errf(commonv1.Code_CODE_INVALID_ARGUMENT, 0, "coordinator %s: empty incarnation id", id)
	}
	names := map[string]bool{}
	for _, l := range c.GetListeners() {
		if err := serve.CheckListenerName(l.GetName()); err != nil {
			return errf(commonv1.Code_CODE_INVALID_ARGUMENT, 0, "coordinator %s: %v", id, err)
		}
		if names[l.GetName()] {
			return errf(commonv1.Code_CODE_INVALID_ARGUMENT, 0, "coordinator %s: listener %q named twice", id, l.GetName())
		}
		names[l.GetName()] = true
		check := serve.CheckBaseURL
		if l.GetName() == serve.KafkaListenerName {
			check = serve.CheckKafkaURL
		}
		if err := check(l.GetAddress()); err != nil {
			return errf(commonv1.Code_CODE_INVALID_ARGUMENT, 0, "coordinator %s: listener %q: %v", id, l.GetName(), err)
		}
	}
	return nil
}

// RegisterCoordinator records c under a new lease of NodeTTL and returns
// the lease id (the registration id). The same incarnation registering
// again renews and keeps its lease; another incarnation of the same
// coordinator id (a restarted instance) replaces the registration, and
// its old lease is revoked; another coordinator id holding the Kafka node
// id is refused with ALREADY_EXISTS.
func (s *Store) RegisterCoordinator(ctx context.Context, c *controllerv1.CoordinatorRegistration) (int64, error) {
	if err := checkCoordinator(c); err != nil {
		return 0, err
	}
	rec, err := proto.Marshal(c)
	if err != nil {
		return 0, err
	}
	key := coordinatorKey(c.GetKafkaNodeId())
	for attempt := 0; attempt < 5; attempt++ {
		resp, err := s.cl.Get(ctx, key)
		if err != nil {
			return 0, err
		}
		var cmp clientv3.Cmp
		var old clientv3.LeaseID
		if len(resp.Kvs) == 1 {
			kv := resp.Kvs[0]
			held := &controllerv1.CoordinatorRegistration{}
			if err := proto.Unmarshal(kv.Value, held); err != nil {
				return 0, fmt.Errorf("metastore: decode %s: %w", key, err)
			}
			if held.GetCoordinatorId() != c.GetCoordinatorId() {
				return 0, errf(commonv1.Code_CODE_ALREADY_EXISTS, 0,
					"coordinator %s: kafka node id %d is held by live coordinator %s; give one of them another instance id",
					c.GetCoordinatorId(), c.GetKafkaNodeId(), held.GetCoordinatorId())
			}
			if proto.Equal(held, c) {
				// A retry of the same registration: renew and answer the same lease.
				if _, err := s.cl.KeepAliveOnce(ctx, clientv3.LeaseID(kv.Lease)); err == nil {
					return kv.Lease, nil
				}
				continue
			}
			cmp = clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision)
			old = clientv3.LeaseID(kv.Lease)
		} else {
			cmp = clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
		}
		lease, err := s.cl.Grant(ctx, s.ttlSeconds())
		if err != nil {
			return 0, err
		}
		tx, err := s.cl.Txn(ctx).If(cmp).Then(clientv3.OpPut(key, string(rec), clientv3.WithLease(lease.ID))).Commit()
		if err != nil {
			s.cl.Revoke(context.WithoutCancel(ctx), lease.ID)
			return 0, err
		}
		if tx.Succeeded {
			if old != 0 {
				// The key is on the new lease now: revoking the old one
				// removes nothing, and ends the old incarnation's heartbeats.
				s.cl.Revoke(ctx, old)
			}
			return int64(lease.ID), nil
		}
		s.cl.Revoke(ctx, lease.ID)
	}
	return 0, errf(commonv1.Code_CODE_UNAVAILABLE, 0, "coordinator %s registration raced repeatedly; retry", c.GetCoordinatorId())
}

// CoordinatorHeartbeat renews registration id of the coordinator holding
// Kafka node id nodeID and returns the lease TTL; NOT_FOUND when that
// registration is gone (expired or replaced).
func (s *Store) CoordinatorHeartbeat(ctx context.Context, nodeID int32, id int64) (time.Duration, error) {
	resp, err := s.cl.Get(ctx, coordinatorKey(nodeID))
	if err != nil {
		return 0, err
	}
	gone := errf(commonv1.Code_CODE_NOT_FOUND, 0, "coordinator registration %x of kafka node id %d is gone; register again", id, nodeID)
	if len(resp.Kvs) == 0 || resp.Kvs[0].Lease != id {
		return 0, gone
	}
	ka, err := s.cl.KeepAliveOnce(ctx, clientv3.LeaseID(id))
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return 0, gone
	}
	if err != nil {
		return 0, err
	}
	return time.Duration(ka.TTL) * time.Second, nil
}

// UnregisterCoordinator revokes registration id's lease, which deletes
// the registration it still carries (none when it was replaced). An
// unknown id is not an error.
func (s *Store) UnregisterCoordinator(ctx context.Context, id int64) error {
	_, err := s.cl.Revoke(ctx, clientv3.LeaseID(id))
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return nil
	}
	return err
}

// CoordinatorRegistry renders the live coordinator registrations, sorted
// by Kafka node id.
func (m *Model) CoordinatorRegistry() *controllerv1.CoordinatorRegistry {
	r := &controllerv1.CoordinatorRegistry{}
	for _, c := range m.Coordinators {
		r.Coordinators = append(r.Coordinators, c)
	}
	sort.Slice(r.Coordinators, func(i, j int) bool {
		return r.Coordinators[i].GetKafkaNodeId() < r.Coordinators[j].GetKafkaNodeId()
	})
	return r
}
