package client

import (
	"context"
	"errors"
	"sync"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	coordinatorv1 "github.com/strata-mq/strata/gen/strata/coordinator/v1"
	"github.com/strata-mq/strata/gen/strata/coordinator/v1/coordinatorv1connect"
	gatewayv1 "github.com/strata-mq/strata/gen/strata/gateway/v1"
)

// coordinatorLink calls the coordinator instance that owns one key, a
// transactional id or a group: found with the gateway's FindCoordinator
// (with the key's type, as Kafka's FindCoordinator), followed to the
// owner a NOT_COORDINATOR answer names, and found again when it cannot be
// reached. The transactional producer uses one for its transactional id
// and one per group it commits offsets for (transaction.go); a group
// consumer one for its group, with retry loops of its own (coordCall and
// the heartbeat). Safe for concurrent use.
type coordinatorLink struct {
	cl      *cluster
	cfg     *config
	key     string
	keyType coordinatorv1.CoordinatorKeyType

	mu      sync.Mutex
	addr    string // the owner's address; "" until found (or after it failed)
	clients map[string]coordinatorv1connect.CoordinatorServiceClient
}

func newCoordinatorLink(cl *cluster, cfg *config, key string, keyType coordinatorv1.CoordinatorKeyType) *coordinatorLink {
	return &coordinatorLink{cl: cl, cfg: cfg, key: key, keyType: keyType,
		clients: map[string]coordinatorv1connect.CoordinatorServiceClient{}}
}

// coordinator returns a client of the key's owner, asking the gateway when
// none is known.
func (l *coordinatorLink) coordinator(ctx context.Context) (coordinatorv1connect.CoordinatorServiceClient, string, error) {
	l.mu.Lock()
	addr := l.addr
	l.mu.Unlock()
	if addr == "" {
		cctx, cancel := context.WithTimeout(ctx, l.cfg.requestTimeout)
		resp, err := l.cl.gw.FindCoordinator(cctx, connect.NewRequest(&gatewayv1.FindCoordinatorRequest{GroupId: l.key, KeyType: l.keyType}))
		cancel()
		if err != nil {
			return nil, "", err
		}
		addr = resp.Msg.GetAddress()
		if addr == "" {
			return nil, "", connect.NewError(connect.CodeUnavailable, errors.New("the gateway named no coordinator"))
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.addr = addr
	c := l.clients[addr]
	if c == nil {
		c = coordinatorv1connect.NewCoordinatorServiceClient(l.cl.httpc, addr, l.cl.copts...)
		l.clients[addr] = c
	}
	return c, addr, nil
}

// forget drops addr as the owner, unless another call replaced it already;
// next is the owner a NOT_COORDINATOR answer named ("" to ask the gateway).
func (l *coordinatorLink) forget(addr, next string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.addr == addr {
		l.addr = next
	}
}

// call runs fn against the key's owner until it succeeds, fails for good,
// or ctx ends (each try bounded by RequestTimeout), with the client's
// backoff between tries, each reported to OnRetry. Retried, as Kafka's
// producer retries them: NOT_COORDINATOR (at the owner it names),
// COORDINATOR_LOADING, CONCURRENT_TRANSACTIONS (the previous transaction's
// markers are still being written), and an owner that cannot be reached
// or is unavailable (found again). The error returned is an *Error, or
// ctx's error wrapping the last failure's text when ctx ended first.
func (l *coordinatorLink) call(ctx context.Context, fn func(context.Context, coordinatorv1connect.CoordinatorServiceClient) error) error {
	bo := newBackoff(l.cfg)
	for attempt := 1; ; attempt++ {
		c, addr, err := l.coordinator(ctx)
		if err == nil {
			cctx, cancel := context.WithTimeout(ctx, l.cfg.requestTimeout)
			err = fn(cctx, c)
			cancel()
			if err == nil {
				return nil
			}
			if !l.retriable(err, addr) {
				return fromConnect(err)
			}
		} else if !coordinatorUnreachable(err) {
			return fromConnect(err)
		}
		if ctx.Err() != nil {
			return errors.Join(ctx.Err(), fromConnect(err))
		}
		wait := bo.NextBackOff()
		if ReasonOf(err) == commonv1.Reason_REASON_CONCURRENT_TRANSACTIONS {
			// The previous transaction's markers take a few milliseconds:
			// Kafka's producer retries these at 20 ms, not at its backoff
			// (TransactionManager's ADD_PARTITIONS_RETRY_BACKOFF_MS), so
			// a transaction right after a commit is not held up 100 ms.
			wait = min(concurrentTxnBackoff, l.cfg.retryBackoff)
		}
		l.cfg.retried(coordinatorRetry(fromConnect(err), attempt, wait))
		if serr := sleep(ctx, wait); serr != nil {
			return errors.Join(serr, fromConnect(err))
		}
	}
}

// retriable reports whether a call that failed at addr with err is worth
// another try, and points the link at the owner to try.
func (l *coordinatorLink) retriable(err error, addr string) bool {
	d := DetailOf(err)
	switch d.GetReason() {
	case commonv1.Reason_REASON_NOT_COORDINATOR:
		l.forget(addr, d.GetCoordinator().GetAddress())
		return true
	case commonv1.Reason_REASON_COORDINATOR_LOADING, commonv1.Reason_REASON_CONCURRENT_TRANSACTIONS:
		return true
	}
	if coordinatorUnreachable(err) {
		l.forget(addr, "")
		return true
	}
	return false
}

// concurrentTxnBackoff is the wait before retrying a call answered
// CONCURRENT_TRANSACTIONS.
const concurrentTxnBackoff = 20 * time.Millisecond

// coordinatorUnreachable reports whether err says the node could not be
// reached or could not serve: another try, after finding the owner again,
// may succeed.
func coordinatorUnreachable(err error) bool {
	if connectionBroke(err) {
		return true
	}
	switch connect.CodeOf(err) {
	case connect.CodeUnavailable, connect.CodeUnknown, connect.CodeDeadlineExceeded:
		return true
	}
	return false
}
