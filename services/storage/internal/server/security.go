package server

import (
	"context"
	"errors"
	"math"
	"time"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	"github.com/strata-mq/strata/lib/acl"
	"github.com/strata-mq/strata/lib/apierr"
	"github.com/strata-mq/strata/lib/guard"
	"github.com/strata-mq/strata/lib/metaview"
	"github.com/strata-mq/strata/lib/quota"
)

// Security on a storage node (docs/design/replication.md, "Security"):
// the node's guard (Config.Guard) authorizes each request against the
// ACLs of the node's metadata view and throttles principals over their
// quotas. Produce needs write on the topic; Fetch read, partition by
// partition; ListOffsets and OffsetForLeaderEpoch from a consumer
// describe; DescribeLog describe on the cluster; Replicate, and
// OffsetForLeaderEpoch from a follower, the identity of the storage node
// the request names. A guard that does not enforce allows all of it.

// applySecurity hands the guard the users, ACLs and quotas of v when they
// changed since the last view: the controller sends them whole, so a
// grant or a revoke takes effect with the message that carries it.
// reconcile's goroutine only.
func (n *Node) applySecurity(v *metaview.View) {
	if v.Security == n.security {
		return
	}
	n.security = v.Security
	n.cfg.Guard.Apply(v.Security)
}

// authorizeTxnID allows a transactional produce only to a principal with
// write on its transactional id, as Kafka's Produce asks (the whole
// request is refused, TRANSACTIONAL_ID_AUTHORIZATION_FAILED). A produce
// without one passes.
func (s *service) authorizeTxnID(ctx context.Context, id string) error {
	if id == "" {
		return nil
	}
	return s.n.cfg.Guard.Authorize(ctx, acl.Write, acl.TransactionalID, id)
}

// topicAccess answers whether the request of ctx may do op to topics,
// asking the guard once per topic name: a fetch names the same topic for
// many partitions.
type topicAccess struct {
	ctx     context.Context
	n       *Node
	op      acl.Operation
	refused map[string]*commonv1.ErrorDetail
}

func (s *service) topicAccess(ctx context.Context, op acl.Operation) *topicAccess {
	return &topicAccess{ctx: ctx, n: s.n, op: op}
}

// check returns the PERMISSION_DENIED detail of a partition of topic the
// request may not touch, nil when it may.
func (a *topicAccess) check(topic string) *commonv1.ErrorDetail {
	if d, ok := a.refused[topic]; ok {
		return d
	}
	var d *commonv1.ErrorDetail
	if err := a.n.cfg.Guard.Authorize(a.ctx, a.op, acl.Topic, topic); err != nil {
		d = apierr.AsDetail(err)
	}
	if a.refused == nil {
		a.refused = map[string]*commonv1.ErrorDetail{}
	}
	a.refused[topic] = d
	return d
}

// reserve admits a request of kind that expects to move bytes, charging
// its principal's quota before the request is served (lib/quota): it
// waits while the principal still owes an earlier throttle, so a client
// that did not wait its throttle_time_ms gets its answer that much later
// and ignoring the throttle gains nothing (as Kafka mutes the channel),
// and parallel requests are admitted one after another as the quota
// allows. The wait ends with the request's own deadline or cancellation,
// which is then the answer.
func (s *service) reserve(ctx context.Context, kind quota.Kind, bytes int) (quota.Reservation, error) {
	r, err := s.n.cfg.Guard.Reserve(ctx, kind, int64(bytes))
	if err == nil {
		return r, nil
	}
	d := &commonv1.ErrorDetail{Code: commonv1.Code_CODE_CANCELED, Message: "request canceled while held back for its principal's " + kind.String() + " quota"}
	if errors.Is(err, context.DeadlineExceeded) {
		d.Code, d.Reason = commonv1.Code_CODE_DEADLINE_EXCEEDED, commonv1.Reason_REASON_REQUEST_TIMED_OUT
		d.Message = "request deadline passed while held back for its principal's " + kind.String() + " quota"
	}
	return quota.Reservation{}, apierr.Error(d)
}

// settle corrects r with the bytes the request moved and returns the
// answer's throttle_time_ms: 0 within the quota or without one.
func (s *service) settle(r quota.Reservation, bytes int) int32 {
	return throttleMs(s.n.cfg.Guard.Settle(r, int64(bytes)))
}

// throttleMs rounds d up to whole milliseconds, so a client that waits
// what it is told never arrives early, capped at the field's range.
func throttleMs(d time.Duration) int32 {
	if d <= 0 {
		return 0
	}
	ms := (d + time.Millisecond - 1) / time.Millisecond
	return int32(min(ms, math.MaxInt32))
}

// quotaExchange sends the guard's quota traffic with each heartbeat and
// hands it what the controller answered, so that the storage nodes share
// each quota (lib/quota, "One quota for a cluster").
type quotaExchange struct{ g *guard.Guard }

func (q quotaExchange) QuotaUsage() []*controllerv1.QuotaUsage {
	usage := q.g.TakeQuotaUsage()
	out := make([]*controllerv1.QuotaUsage, 0, len(usage))
	for p, r := range usage {
		out = append(out, &controllerv1.QuotaUsage{Principal: p.String(), ProduceBytesPerSecond: r.ProduceBytesPerSec, FetchBytesPerSecond: r.FetchBytesPerSec})
	}
	return out
}

func (q quotaExchange) SetQuotaCluster(nodes int32, others []*controllerv1.QuotaUsage) {
	m := make(map[acl.Principal]quota.Elsewhere, len(others))
	for _, o := range others {
		p, err := acl.ParsePrincipal(o.GetPrincipal())
		if err != nil {
			continue // a principal this node cannot hold a quota for
		}
		m[p] = quota.Elsewhere{Rates: quota.Rates{ProduceBytesPerSec: o.GetProduceBytesPerSecond(), FetchBytesPerSec: o.GetFetchBytesPerSecond()},
			ProduceNodes: int(o.GetProduceNodes()), FetchNodes: int(o.GetFetchNodes())}
	}
	q.g.SetQuotaCluster(int(nodes), m)
}
