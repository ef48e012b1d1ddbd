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
// let each principal through at its whole quota until it does.
type quotaShares struct {
	mu    sync.Mutex
	nodes map[int32]*nodeUsage
}

type nodeUsage struct {
	at    time.Time
	usage []*controllerv1.QuotaUsage
	// active is when the node last moved each principal's produce [0]
	// and fetch [1] bytes: a node counts as moving a principal for a
	// lease after its last report of it, so that one window in which a
	// busy node settled nothing does not read as the principal gone.
	active map[string][2]time.Time
}

// report records node's usage at now, forgets nodes not heard from within
// ttl, and returns how many nodes share the quotas (those heard from,
// node included) and, for each principal another node moved lately, the
// sum of the other nodes' last reported traffic and how many of them
// moved each kind within ttl.
func (q *quotaShares) report(node int32, usage []*controllerv1.QuotaUsage, now time.Time, ttl time.Duration) (int32, []*controllerv1.QuotaUsage) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.nodes == nil {
		q.nodes = map[int32]*nodeUsage{}
	}
	nu := q.nodes[node]
	if nu == nil {
		nu = &nodeUsage{active: map[string][2]time.Time{}}
		q.nodes[node] = nu
	}
	nu.at, nu.usage = now, usage
	for _, u := range usage {
		a := nu.active[u.GetPrincipal()]
		if u.GetProduceBytesPerSecond() > 0 {
			a[0] = now
		}
		if u.GetFetchBytesPerSecond() > 0 {
			a[1] = now
		}
		nu.active[u.GetPrincipal()] = a
	}
	sums := map[string]*controllerv1.QuotaUsage{}
	var order []string
	sum := func(p string) *controllerv1.QuotaUsage {
		s := sums[p]
		if s == nil {
			s = &controllerv1.QuotaUsage{Principal: p}
			sums[p] = s
			order = append(order, p)
		}
		return s
	}
	for id, o := range q.nodes {
		if now.Sub(o.at) > ttl {
			delete(q.nodes, id)
			continue
		}
		for p, a := range o.active {
			if now.Sub(a[0]) > ttl && now.Sub(a[1]) > ttl {
				delete(o.active, p)
			}
		}
		if id == node {
			continue
		}
		for _, u := range o.usage {
			s := sum(u.GetPrincipal())
			s.ProduceBytesPerSecond += u.GetProduceBytesPerSecond()
			s.FetchBytesPerSecond += u.GetFetchBytesPerSecond()
		}
		for p, a := range o.active {
			s := sum(p)
			if now.Sub(a[0]) <= ttl {
				s.ProduceNodes++
			}
			if now.Sub(a[1]) <= ttl {
				s.FetchNodes++
			}
		}
	}
	others := make([]*controllerv1.QuotaUsage, 0, len(order))
	for _, p := range order {
		others = append(others, sums[p])
	}
	return int32(len(q.nodes)), others
}
