package server

import (
	"context"
	"time"

	"connectrpc.com/connect"
	"github.com/cenkalti/backoff/v5"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	"github.com/strata-mq/strata/gen/strata/storage/v1/storagev1connect"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/lib/quota"
)

// maxRetryBackoff caps the wait between data-path attempts (before jitter).
const maxRetryBackoff = time.Second

// retryJitter spreads each data-path wait by ±20% at random, so the many
// requests that wait on one leader election do not reach the new leader in
// step, while a request's wait stays close to the doubling its deadline
// is measured against.
const retryJitter = 0.2

// leader is where to send a data-path request for one partition.
type leader struct {
	nodeID int32
	addr   string
	epoch  int32
}

// leaderOf looks the partition's leader up in the cache. It fails with
// NOT_FOUND when the topic or partition does not exist, and UNAVAILABLE
// (retryable) when the partition has no leader or its node is not known.
func (g *Gateway) leaderOf(topic string, partition int32) (leader, error) {
	st := g.cache.Load()
	if st == nil {
		return leader{}, errNoMetadata()
	}
	if st.Topics[topic] == nil {
		return leader{}, errTopicNotFound(topic)
	}
	p := st.Partition(topic, partition)
	if p == nil {
		return leader{}, apierr.New(connect.CodeNotFound, commonv1.Reason_REASON_UNKNOWN_TOPIC_OR_PARTITION,
			"partition %d of topic %q does not exist", partition, topic)
	}
	if p.GetLeaderId() < 0 {
		return leader{}, apierr.New(connect.CodeUnavailable, commonv1.Reason_REASON_UNSPECIFIED,
			"partition %d of topic %q has no leader", partition, topic)
	}
	addr, ok := st.NodeAddress(p.GetLeaderId())
	if !ok {
		return leader{}, apierr.New(connect.CodeUnavailable, commonv1.Reason_REASON_UNSPECIFIED,
			"leader node %d of partition %d of topic %q is not reachable", p.GetLeaderId(), partition, topic)
	}
	return leader{nodeID: p.GetLeaderId(), addr: addr, epoch: p.GetLeaderEpoch()}, nil
}

// onLeader runs call against the partition's leader, and again against the
// leader it learns of (the error's LeaderHint, or the cache once the
// controller's metadata moved) while the error is retryable, with backoff,
// until ctx ends. The leader's UNKNOWN_TOPIC_OR_PARTITION is retryable too:
// the metadata names the partition, so the leader is about to create it. The last error is returned unchanged.
func (g *Gateway) onLeader(ctx context.Context, topic string, partition int32, call func(context.Context, storagev1connect.StorageServiceClient, leader) error) error {
	var hint, tried *leader
	bo := &backoff.ExponentialBackOff{
		InitialInterval:     g.retryBackoff,
		RandomizationFactor: retryJitter,
		Multiplier:          2,
		MaxInterval:         maxRetryBackoff,
	}
	bo.Reset()
	for {
		l, err := g.leaderOf(topic, partition)
		if hint != nil && useHint(*hint, l, err, tried) {
			l, err = *hint, nil
		}
		fromNode := false
		if err == nil {
			tried = &l
			err = call(ctx, g.storageClient(l.addr), l)
			if err == nil {
				return nil
			}
			fromNode = true
		}
		// A leader answers UNKNOWN_TOPIC_OR_PARTITION for a partition the
		// metadata has but it has not created yet (a topic created a
		// moment ago): retriable, as in Kafka. The cache's own NOT_FOUND
		// (no such topic or partition) stays final.
		newReplica := fromNode && apierr.DetailOf(err).GetReason() == commonv1.Reason_REASON_UNKNOWN_TOPIC_OR_PARTITION
		if !retryableOnLeader(err) && !newReplica {
			return err
		}
		hint = nil
		if lh := apierr.DetailOf(err).GetLeader(); lh != nil && lh.GetLeaderId() >= 0 && lh.GetLeaderAddress() != "" {
			hint = &leader{nodeID: lh.GetLeaderId(), addr: lh.GetLeaderAddress(), epoch: lh.GetLeaderEpoch()}
		}
		wait := bo.NextBackOff()
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
			return err
		}
		if quota.Delay(ctx, wait) != nil { // a back-off is a wait, not handling
			return err
		}
	}
}

// useHint reports whether a LeaderHint beats the cache's answer (l, err):
// when the cache has no usable leader, knows an older epoch than the hint,
// or still names the leader that just refused.
func useHint(hint, l leader, err error, tried *leader) bool {
	if err != nil {
		return connect.CodeOf(err) != connect.CodeNotFound
	}
	if hint.epoch > l.epoch {
		return true
	}
	return tried != nil && tried.nodeID == l.nodeID && tried.epoch == l.epoch && hint.nodeID != l.nodeID
}
