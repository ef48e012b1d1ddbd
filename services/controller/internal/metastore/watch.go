package metastore

import (
	"context"
	"errors"
	"fmt"
	"time"

	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrWatchLost ends a metadata stream when the etcd watch fails (the
// member lost the quorum, or history was compacted under a slow stream).
// The client reconnects with the last version it applied.
var ErrWatchLost = errors.New("metastore: metadata watch lost")

// WatchMetadata sends the metadata stream to send until ctx ends or the
// watch fails: a snapshot (or, when fromVersion > 0 and etcd still holds
// the history after it, nothing) and then one delta per etcd revision that
// touched the metadata, built from a watch on Prefix starting right after
// the snapshot's revision, so no change is missed or repeated. Every
// keepAlive without changes it sends an empty delta (a progress notice) at
// the latest version.
func (s *Store) WatchMetadata(ctx context.Context, fromVersion int64, keepAlive time.Duration, send func(*controllerv1.WatchMetadataResponse) error) error {
	var m *Model
	if fromVersion > 0 {
		// Resume: rebuild the model at fromVersion from etcd's history.
		mm, err := Load(ctx, s.cl, fromVersion)
		if err == nil {
			m = mm
		} else if !errors.Is(err, rpctypes.ErrCompacted) && !errors.Is(err, rpctypes.ErrFutureRev) {
			return err
		}
	}
	if m == nil {
		mm, err := s.Load(ctx)
		if err != nil {
			return err
		}
		m = mm
		if err := send(&controllerv1.WatchMetadataResponse{
			Version: m.Revision,
			Change:  &controllerv1.WatchMetadataResponse_Snapshot{Snapshot: m.Snapshot()},
		}); err != nil {
			return err
		}
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := s.cl.Watch(wctx, Prefix, clientv3.WithPrefix(), clientv3.WithRev(m.Revision+1), clientv3.WithProgressNotify())
	if keepAlive <= 0 {
		keepAlive = 5 * time.Second
	}
	tick := time.NewTicker(keepAlive)
	defer tick.Stop()
	version := m.Revision
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			if err := send(&controllerv1.WatchMetadataResponse{
				Version: version,
				Change:  &controllerv1.WatchMetadataResponse_Delta{Delta: &controllerv1.MetadataDelta{}},
			}); err != nil {
				return err
			}
		case resp, ok := <-wch:
			if !ok {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return ErrWatchLost
			}
			if err := resp.Err(); err != nil {
				return fmt.Errorf("%w: %v", ErrWatchLost, err)
			}
			// Events arrive in revision order; one delta per revision.
			evs := resp.Events
			for len(evs) > 0 {
				rev := evs[0].Kv.ModRevision
				n := 1
				for n < len(evs) && evs[n].Kv.ModRevision == rev {
					n++
				}
				t := newTouched()
				if err := m.Apply(evs[:n], t); err != nil {
					return err
				}
				evs = evs[n:]
				version = rev
				if err := send(&controllerv1.WatchMetadataResponse{
					Version: rev,
					Change:  &controllerv1.WatchMetadataResponse_Delta{Delta: m.Delta(t)},
				}); err != nil {
					return err
				}
				tick.Reset(keepAlive)
			}
		}
	}
}

// RunActive is the active controller's loop: it reconciles partition state
// with node liveness (Reconcile) when a node's live key appears or
// disappears, when a topic changes (unclean election may have been turned
// on), and every interval as a safety net (a partition written from a
// view older than a node's death, a pass cut short by an error or by
// repeated conflicts). The safety net first reads etcd's revision, and
// passes when it is the one a pass last found nothing to change at:
// Reconcile decides from the records alone, so the same records need
// nothing, and an idle cluster's controller does not read every
// partition every interval. It returns when ctx ends or guard stops
// holding (ErrNotActive). onError, when not nil, sees transient failures,
// which are retried.
func (s *Store) RunActive(ctx context.Context, guard clientv3.Cmp, interval time.Duration, onChange func(int), onError func(error)) error {
	if interval <= 0 {
		interval = 2 * time.Second
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	// The watch starts before the first reconcile, so no change between the
	// two is lost.
	lw := s.cl.Watch(wctx, PrefixLive, clientv3.WithPrefix())
	tw := s.cl.Watch(wctx, PrefixTopics, clientv3.WithPrefix())
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var settled int64 // the revision the last pass found nothing to change at
	for pass := true; ; {
		if pass {
			n, rev, err := s.reconcile(ctx, guard)
			settled = rev
			if errors.Is(err, ErrNotActive) {
				return err
			}
			if err != nil && ctx.Err() == nil && onError != nil {
				onError(err)
			}
			if n > 0 && onChange != nil {
				onChange(n)
			}
		}
		pass = true
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			if settled != 0 {
				resp, err := s.cl.Get(ctx, KeyClusterID, clientv3.WithCountOnly())
				pass = err != nil || resp.Header.Revision != settled
			}
		case _, ok := <-lw:
			if !ok {
				lw = s.cl.Watch(wctx, PrefixLive, clientv3.WithPrefix())
			}
		case _, ok := <-tw:
			if !ok {
				tw = s.cl.Watch(wctx, PrefixTopics, clientv3.WithPrefix())
			}
		}
	}
}
