package metastore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
)

// maxBatch is how many partition records one guarded batch (putBatch)
// writes. Each record brings one compare and one put, the election guard
// one more compare, and the else branch reads every record back beside
// the guard's check, so 127 keeps each list of the transaction within
// etcd's default --max-txn-ops of 128. The embedded member allows more
// (etcdmember: a topic's creation writes all its partitions at once), but
// a larger transaction loses more to one partition that changed under it,
// and during a failover the leaders' AlterPartition calls change
// partitions all the time.
const maxBatch = 127

// partWrite is one partition record to write over the version read at
// rev (its key's ModRevision).
type partWrite struct {
	topic string
	index int32
	rev   int64
	prev  *commonv1.PartitionMetadata
	next  *commonv1.PartitionMetadata
}

func (w partWrite) key() string { return partitionKey(w.topic, w.index) }

// putBatch writes batch (at most maxBatch records, no partition twice) in
// one transaction guarded by every record's ModRevision and by guard (the
// active controller's election key): all of it or nothing. It returns nil
// when written; ErrNotActive when guard failed; errConflict when some
// record changed since it was read, with what each key holds now (nil for
// a key gone with its topic), read in the same transaction, so the caller
// can decide again from the current records without loading the model.
func (s *Store) putBatch(ctx context.Context, guard clientv3.Cmp, batch []partWrite) ([]*mvccpb.KeyValue, error) {
	cmps := make([]clientv3.Cmp, 0, len(batch)+1)
	puts := make([]clientv3.Op, 0, len(batch))
	gets := make([]clientv3.Op, 0, len(batch)+1)
	cmps = append(cmps, guard)
	gets = append(gets, clientv3.OpTxn([]clientv3.Cmp{guard}, nil, nil))
	for _, w := range batch {
		b, err := proto.Marshal(w.next)
		if err != nil {
			return nil, err
		}
		k := w.key()
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(k), "=", w.rev))
		puts = append(puts, clientv3.OpPut(k, string(b)))
		gets = append(gets, clientv3.OpGet(k))
	}
	tx, err := s.cl.Txn(ctx).If(cmps...).Then(puts...).Else(gets...).Commit()
	if err != nil {
		return nil, err
	}
	if tx.Succeeded {
		return nil, nil
	}
	if !tx.Responses[0].GetResponseTxn().GetSucceeded() {
		return nil, ErrNotActive
	}
	cur := make([]*mvccpb.KeyValue, len(batch))
	for i, r := range tx.Responses[1:] {
		if kvs := r.GetResponseRange().GetKvs(); len(kvs) == 1 {
			cur[i] = kvs[0]
		}
	}
	return cur, errConflict
}

// decideFunc says again what to write over a partition's current record
// after a batch found it changed: the record and true, or false when it
// needs nothing any more.
type decideFunc func(topic string, index int32, cur *commonv1.PartitionMetadata) (*commonv1.PartitionMetadata, bool)

// writes is what decide changes in m: a write for every partition it
// answers true for, in topic and index order.
func (m *Model) writes(decide decideFunc) []partWrite {
	var ws []partWrite
	for _, name := range m.TopicNames() {
		for _, idx := range slices.Sorted(maps.Keys(m.Partitions[name])) {
			p := m.Partitions[name][idx]
			if next, ok := decide(name, idx, p); ok {
				ws = append(ws, partWrite{name, idx, m.PartitionRevs[name][idx], p, next})
			}
		}
	}
	return ws
}

// putAll writes ws (no partition twice) with putBatch, maxBatch records at
// a time, in order. When a batch finds records changed, the unchanged ones
// are written again as they were and decide is asked about each changed
// one, given what it holds now; all of them go in a later round. What
// still conflicts after ten rounds is left to the caller's next pass. It
// returns the records written, and stops at the first error other than a
// conflict (ErrNotActive when guard failed).
func (s *Store) putAll(ctx context.Context, guard clientv3.Cmp, ws []partWrite, decide decideFunc) ([]partWrite, error) {
	var done []partWrite
	for round := 0; len(ws) > 0 && round < 10; round++ {
		var again []partWrite
		for batch := range slices.Chunk(ws, maxBatch) {
			cur, err := s.putBatch(ctx, guard, batch)
			if err == nil {
				done = append(done, batch...)
				continue
			}
			if !errors.Is(err, errConflict) {
				return done, err
			}
			for i, w := range batch {
				switch kv := cur[i]; {
				case kv == nil:
					// deleted with its topic
				case kv.ModRevision == w.rev:
					again = append(again, w)
				default:
					p := &commonv1.PartitionMetadata{}
					if err := proto.Unmarshal(kv.Value, p); err != nil {
						return done, fmt.Errorf("metastore: decode %s: %w", kv.Key, err)
					}
					if next, ok := decide(w.topic, w.index, p); ok {
						again = append(again, partWrite{w.topic, w.index, kv.ModRevision, p, next})
					}
				}
			}
		}
		ws = again
	}
	return done, nil
}
