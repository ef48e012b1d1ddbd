package server

import (
	"sync"
	"time"

	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
)

// quotaShares gathers what each storage node reports with its heartbeat
// of the traffic of principals with a quota, and answers each node with
// what the other nodes moved, so that the nodes share each quota across
// the cluster (lib/quota's SetCluster). It is soft state, kept in memory
// by whichever controller the nodes heartbeat to: a controller that has
// just taken over knows nothing for a heartbeat or two, and the nodes then
// hold to an equal share of each quota until it does.
type quotaShares struct {
	mu    sync.Mutex
	nodes map[int32]nodeUsage
}

type nodeUsage struct {
	at    time.Time
	usage []*controllerv1.QuotaUsage
}

// report records node's usage at now, forgets nodes not heard from within
// ttl, and returns how many nodes share the quotas (those heard from,
// node included) and, for each principal another node reported, the sum
// of the other nodes' traffic.
func (q *quotaShares) report(node int32, usage []*controllerv1.QuotaUsage, now time.Time, ttl time.Duration) (int32, []*controllerv1.QuotaUsage) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.nodes == nil {
		q.nodes = map[int32]nodeUsage{}
	}
	q.nodes[node] = nodeUsage{at: now, usage: usage}
	sums := map[string]*controllerv1.QuotaUsage{}
	var order []string
	for id, nu := range q.nodes {
		if now.Sub(nu.at) > ttl {
			delete(q.nodes, id)
			continue
		}
		if id == node {
			continue
		}
		for _, u := range nu.usage {
			s := sums[u.GetPrincipal()]
			if s == nil {
				s = &controllerv1.QuotaUsage{Principal: u.GetPrincipal()}
				sums[u.GetPrincipal()] = s
				order = append(order, u.GetPrincipal())
			}
			s.ProduceBytesPerSecond += u.GetProduceBytesPerSecond()
			s.FetchBytesPerSecond += u.GetFetchBytesPerSecond()
		}
	}
	others := make([]*controllerv1.QuotaUsage, 0, len(order))
	for _, p := range order {
		others = append(others, sums[p])
	}
	return int32(len(q.nodes)), others
}
