package kafka

import (
	"context"

	"github.com/strata-mq/strata/lib/acl"
)

// Authorization on the Kafka listener. The listener is a door (lib/guard's
// forward.go): each request runs in the name of its connection's
// principal (guard.Forward, in handler), so the gateway, the coordinators
// and the storage node it calls check that principal's ACLs, filter what
// it may not see and charge its quotas, as for a direct call; a refusal
// comes back as PERMISSION_DENIED whose reason names the resource type,
// which errors.go turns into TOPIC_, GROUP_ or
// CLUSTER_AUTHORIZATION_FAILED. The storage node's own listener calls its
// StorageService in-process with the same principal in the context.
//
// The listener checks only what it answers itself: Metadata and
// DescribeCluster from its view (metadata.go), FindCoordinator, the log
// directories of DescribeLogDirs, and, before an admin request touches
// anything, the cluster operation Kafka's authHelper checks first (so a
// refused request is answered as Kafka answers it, before validation).

// authorizeCluster checks op on the cluster for the connection's
// principal before an admin request does anything, as Kafka's
// authHelper.authorizeClusterOperation does; the answer to a refusal is
// the request's error response. Without a guard it allows.
func (b *Bridge) authorizeCluster(ctx context.Context, op acl.Operation) error {
	if b.cfg.Guard == nil {
		return nil
	}
	return b.cfg.Guard.Authorize(ctx, op, acl.Cluster, acl.ClusterName)
}
