package replication

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"connectrpc.com/connect"

	storagev1 "github.com/strata-mq/strata/gen/strata/storage/v1"
	"github.com/strata-mq/strata/gen/strata/storage/v1/storagev1connect"
	"github.com/strata-mq/strata/services/storage/internal/replica"
)

// Fetcher is this node's fetch session with one leader node, as Kafka's
// replica fetcher: one Replicate long poll at a time carries every
// partition the node follows from that leader, so the number of RPCs (and
// of parked long polls) grows with the leader nodes, not the partitions.
//
// Every rule of a follower holds per partition as it did with a loop per
// partition: each partition carries the leader epoch it follows and is
// fenced by the leader on it; the answer for a partition is applied only
// if the Follower is still registered and its ctx alive, and the replica
// refuses it anyway unless it still follows at that epoch (truncation,
// resets and appends alike); the high watermark comes from the leader's
// answer; and the node epoch of the request is read from the node at every
// call, so a position the leader records always belongs to the current
// incarnation. A partition whose result failed is left out of the session
// for a short backoff without holding back the others.
//
// Add and Remove are safe for concurrent use with Run.
type Fetcher struct {
	NodeID int32
	// Leader returns the leader node's client, or nil while its address
	// is unknown.
	Leader    func() storagev1connect.StorageServiceClient
	NodeEpoch func() int64
	MaxWait   time.Duration // long-poll wait; default 500ms
	Logger    *slog.Logger

	mu    sync.Mutex
	parts map[partKey]*Follower
	added chan struct{} // closed and replaced by Add
}

type partKey struct {
	topic     string
	partition int32
}

// backoff is how long a failed call, or a partition whose result failed,
// waits before the next try.
const backoff = 50 * time.Millisecond

// Add puts fl's partition in the session until ctx ends or Remove, in
// place of any Follower of the same partition. The call in flight is cut
// short so the next one carries it.
func (f *Fetcher) Add(ctx context.Context, fl *Follower) {
	fl.ctx = ctx
	f.mu.Lock()
	defer f.mu.Unlock()
	f.initLocked()
	f.parts[partKey{fl.Replica.Topic, fl.Replica.Partition}] = fl
	close(f.added)
	f.added = make(chan struct{})
}

// Remove takes fl's partition out of the session if fl is still the one
// registered for it.
func (f *Fetcher) Remove(fl *Follower) {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := partKey{fl.Replica.Topic, fl.Replica.Partition}
	if f.parts[k] == fl {
		delete(f.parts, k)
	}
}

// Len is the number of partitions in the session.
func (f *Fetcher) Len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.parts)
}

func (f *Fetcher) initLocked() {
	if f.parts == nil {
		f.parts = map[partKey]*Follower{}
		f.added = make(chan struct{})
	}
}

// current reports whether fl is still registered and alive.
func (f *Fetcher) current(fl *Follower) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return fl.ctx.Err() == nil && f.parts[partKey{fl.Replica.Topic, fl.Replica.Partition}] == fl
}

// due returns the partitions to fetch now, in a stable order, the channel
// Add closes, and the earliest end of a partition's backoff (zero when
// none waits).
func (f *Fetcher) due(now time.Time) ([]*Follower, <-chan struct{}, time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.initLocked()
	var out []*Follower
	var next time.Time
	for k, fl := range f.parts {
		if fl.ctx.Err() != nil {
			delete(f.parts, k)
			continue
		}
		if now.Before(fl.retryAt) {
			if next.IsZero() || fl.retryAt.Before(next) {
				next = fl.retryAt
			}
			continue
		}
		out = append(out, fl)
	}
	slices.SortFunc(out, func(a, b *Follower) int {
		return cmp.Or(cmp.Compare(a.Replica.Topic, b.Replica.Topic), cmp.Compare(a.Replica.Partition, b.Replica.Partition))
	})
	return out, f.added, next
}

// Run fetches until ctx ends.
func (f *Fetcher) Run(ctx context.Context) {
	if f.MaxWait <= 0 {
		f.MaxWait = 500 * time.Millisecond
	}
	for ctx.Err() == nil {
		batch, added, next := f.due(time.Now())
		if len(batch) == 0 {
			wait(ctx, added, next)
			continue
		}
		cl := f.Leader()
		if cl == nil {
			sleep(ctx, backoff)
			continue
		}
		req := &storagev1.ReplicateRequest{
			ReplicaId: f.NodeID,
			NodeEpoch: f.NodeEpoch(),
			MaxWaitMs: int32(f.MaxWait / time.Millisecond),
			MinBytes:  1,
		}
		offsets := make([]int64, len(batch))
		for i, fl := range batch {
			fetchOffset, lastEpoch, logStart := fl.Replica.FollowerPosition()
			offsets[i] = fetchOffset
			req.Partitions = append(req.Partitions, &storagev1.ReplicatePartition{
				Topic: fl.Replica.Topic, Partition: fl.Replica.Partition,
				CurrentLeaderEpoch: fl.LeaderEpoch, FetchOffset: fetchOffset,
				LastFetchedEpoch: lastEpoch, LogStartOffset: logStart,
			})
		}
		// A partition added meanwhile cuts the long poll short, so the
		// next call carries it without waiting for this one's answer.
		rctx, cancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-added:
				cancel()
			case <-rctx.Done():
			}
		}()
		resp, err := cl.Replicate(rctx, connect.NewRequest(req))
		cut := rctx.Err() != nil && ctx.Err() == nil
		cancel()
		if err != nil {
			if cut {
				continue // a partition was added
			}
			if ctx.Err() == nil {
				f.Logger.Debug("replicate failed", "err", err)
			}
			sleep(ctx, backoff)
			continue
		}
		f.apply(batch, offsets, resp.Msg.GetPartitions())
	}
}

// apply hands each partition's result to its Follower; results match the
// request's partitions by position.
func (f *Fetcher) apply(batch []*Follower, offsets []int64, results []*storagev1.ReplicatePartitionResult) {
	now := time.Now()
	for i, fl := range batch {
		if !f.current(fl) {
			continue // removed or superseded while the call was in flight
		}
		if i >= len(results) || results[i].GetTopic() != fl.Replica.Topic || results[i].GetPartition() != fl.Replica.Partition {
			fl.Logger.Warn("replicate answer does not match the request")
			fl.retryAt = now.Add(backoff)
			continue
		}
		if err := fl.handle(fl.ctx, results[i], offsets[i]); err != nil {
			if !errors.Is(err, replica.ErrNotLeader) && fl.ctx.Err() == nil {
				fl.Logger.Warn("replicate result not applied", "err", err)
			}
			fl.retryAt = now.Add(backoff)
		}
	}
}

// wait blocks until ctx ends, added is closed, or next (when not zero).
func wait(ctx context.Context, added <-chan struct{}, next time.Time) {
	var timeout <-chan time.Time
	if !next.IsZero() {
		t := time.NewTimer(time.Until(next))
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-ctx.Done():
	case <-added:
	case <-timeout:
	}
}
