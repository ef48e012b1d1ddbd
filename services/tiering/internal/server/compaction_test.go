package server

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	tieringv1 "github.com/strata-mq/strata/gen/strata/tiering/v1"
	"github.com/strata-mq/strata/lib/recordbatch"
	"github.com/strata-mq/strata/services/tiering/internal/compactor"
	"github.com/strata-mq/strata/services/tiering/internal/manifest"
)

// TestCompactionLoopAndRetiredObjects: a round key-compacts a topic whose
// cleanup.policy is compact; the replaced objects survive retention's
// orphan collection for the grace period after the swap, then go.
func TestCompactionLoopAndRetiredObjects(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	var off int64
	for range 3 {
		seg := segmentBytes(t, off, 10, 100, 1)
		if _, err := f.up.Upload(ctx, header(off, seg, 1), bytes.NewReader(seg)); err != nil {
			t.Fatal(err)
		}
		off += 30
	}
	tp := &topics{describe: func(context.Context) ([]*controllerv1.TopicDescription, error) { return nil, nil }, loaded: true, lastTry: time.Now(),
		byName: map[string]*topicInfo{testPart.Topic: {ID: testTopicID, Partitions: 1, Configs: map[string]string{"cleanup.policy": "compact"}}}}
	var mu sync.Mutex
	clock := time.Now()
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	// Retention's clock runs a minute ahead, so every object is past the
	// 1ms orphan grace and only the retired hold (on its own clock) keeps
	// the replaced objects.
	ret := &retention{store: f.store, topics: tp, reader: f.rd, grace: time.Millisecond, logger: discardLogger(),
		now: func() time.Time { return time.Now().Add(time.Minute) }, retired: newRetired(time.Hour, now)}
	comp := &compaction{store: f.store, topics: tp, reader: f.rd, tombstoneRetention: time.Hour, logger: discardLogger(),
		compactor: &compactor.Compactor{Store: f.store, SpoolDir: t.TempDir(), Logger: discardLogger(), Retire: ret.retired.add}}
	old := manifest.Active(mustManifest(t, f))
	comp.round(ctx)
	m := mustManifest(t, f)
	a := manifest.Active(m)
	if len(a) != 1 || a[0].GetBaseOffset() != 0 || a[0].GetLastOffset() != 89 || !a[0].GetCompacted() {
		t.Fatalf("manifest: %v", a)
	}
	// Only the newest k0, k1, k2 survive, at their offsets.
	res, err := f.rd.Read(ctx, testPart, 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	var offs []int64
	for it := recordbatch.NewIter(res.Records, true); ; {
		_, b, ok := it.Next()
		if !ok {
			break
		}
		recs, err := recordbatch.Records(b)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			offs = append(offs, r.Offset)
		}
	}
	if len(offs) != 3 || offs[0] != 87 || offs[2] != 89 {
		t.Fatalf("survivors at %v", offs)
	}
	if err := ret.partition(ctx, testPart); err != nil {
		t.Fatal(err)
	}
	if ok, _ := f.store.Bucket.Exists(ctx, old[0].GetObjectKey()); !ok {
		t.Fatal("a retired object was deleted within its grace period")
	}
	mu.Lock()
	clock = clock.Add(2 * time.Hour)
	mu.Unlock()
	if err := ret.partition(ctx, testPart); err != nil {
		t.Fatal(err)
	}
	for _, e := range old {
		if ok, _ := f.store.Bucket.Exists(ctx, e.GetObjectKey()); ok {
			t.Fatal("a retired object outlived its grace period")
		}
	}
	if ok, _ := f.store.Bucket.Exists(ctx, a[0].GetObjectKey()); !ok {
		t.Fatal("the compacted object was deleted")
	}
}

func mustManifest(t *testing.T, f *fixture) *tieringv1.Manifest {
	t.Helper()
	m, _, err := f.store.Load(context.Background(), testPart)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
