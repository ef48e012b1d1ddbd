package metastore

import (
	"context"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
)

// countingKV is the etcd client's KV seen by a Store under test: it counts
// range reads by key (a Get, or a get inside a transaction's branches) and
// runs a hook once, right before the next transaction that writes is
// sent, as another writer racing it would.
type countingKV struct {
	clientv3.KV
	mu    sync.Mutex
	reads map[string]int
	hook  func(kv clientv3.KV)
}

// countKV puts a countingKV in s's client.
func countKV(s *Store) *countingKV {
	c := &countingKV{KV: s.cl.KV, reads: map[string]int{}}
	s.cl.KV = c
	return c
}

func (c *countingKV) read(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reads[key]++
}

// readsOf is how many range reads started at key.
func (c *countingKV) readsOf(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reads[key]
}

func (c *countingKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	c.read(key)
	return c.KV.Get(ctx, key, opts...)
}

func (c *countingKV) Txn(ctx context.Context) clientv3.Txn {
	return &countingTxn{Txn: c.KV.Txn(ctx), kv: c}
}

type countingTxn struct {
	clientv3.Txn
	kv     *countingKV
	writes bool
}

func (t *countingTxn) If(cs ...clientv3.Cmp) clientv3.Txn {
	t.Txn = t.Txn.If(cs...)
	return t
}

func (t *countingTxn) ops(ops []clientv3.Op) {
	for _, op := range ops {
		switch {
		case op.IsGet():
			t.kv.read(string(op.KeyBytes()))
		case op.IsPut(), op.IsDelete():
			t.writes = true
		}
	}
}

func (t *countingTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	t.ops(ops)
	t.Txn = t.Txn.Then(ops...)
	return t
}

func (t *countingTxn) Else(ops ...clientv3.Op) clientv3.Txn {
	t.Txn = t.Txn.Else(ops...)
	return t
}

func (t *countingTxn) Commit() (*clientv3.TxnResponse, error) {
	if t.writes {
		t.kv.mu.Lock()
		hook := t.kv.hook
		t.kv.hook = nil
		t.kv.mu.Unlock()
		if hook != nil {
			hook(t.kv.KV)
		}
	}
	return t.Txn.Commit()
}

// wideTopic is a store with nodes 1, 2, 3 and topic "wide" of n
// partitions on all three, a third of them led by node 1.
func wideTopic(t *testing.T, n int32) *Store {
	t.Helper()
	s := startStore(t, 6*time.Second)
	for id := int32(1); id <= 3; id++ {
		register(t, s, id, "")
	}
	if _, err := s.CreateTopic(context.Background(), CreateTopicRequest{Name: "wide", Partitions: n, ReplicationFactor: 3}); err != nil {
		t.Fatal(err)
	}
	return s
}

// checkWithout fails unless no partition of "wide" lists node in its ISR
// or is led by it, and returns the model it read.
func checkWithout(t *testing.T, s *Store, node int32) *Model {
	t.Helper()
	m, err := s.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for idx, p := range m.Partitions["wide"] {
		if p.GetLeaderId() == node || slices.Contains(p.GetIsr(), node) {
			t.Fatalf("wide-%d still has node %d: %v", idx, node, p)
		}
	}
	return m
}

// A node's death changes every partition it holds in a few transactions
// (one etcd revision each), those that lose their leader first.
func TestReconcileBatches(t *testing.T) {
	const n = 300 // more than two batches
	s := wideTopic(t, n)
	ctx := context.Background()
	m0, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	expire(t, s, 1)
	rev0 := revision(t, s)
	changed, err := s.Reconcile(ctx, alwaysActive)
	if err != nil || changed != n {
		t.Fatalf("Reconcile: %d changed, %v; want %d", changed, err, n)
	}
	if txns, want := revision(t, s)-rev0, int64((n+maxBatch-1)/maxBatch); txns != want {
		t.Fatalf("%d partitions written in %d transactions, want %d", n, txns, want)
	}
	m := checkWithout(t, s, 1)
	led := 0
	for idx, p := range m0.Partitions["wide"] {
		if p.GetLeaderId() == 1 {
			led++
			if rev := m.PartitionRevs["wide"][idx]; rev != rev0+1 {
				t.Fatalf("wide-%d lost its leader but was written at revision %d, not in the first transaction (%d)", idx, rev, rev0+1)
			}
		}
	}
	if led == 0 || led > maxBatch {
		t.Fatalf("node 1 led %d partitions; the test wants some, fewer than a batch", led)
	}
	if again, err := s.Reconcile(ctx, alwaysActive); err != nil || again != 0 {
		t.Fatalf("second Reconcile: %d changed, %v; want nothing", again, err)
	}
}

// A partition changed by someone else between Reconcile's read and its
// write fails that batch; the batch is written again, the changed
// partition decided from what it holds now, not from what was read.
func TestReconcileConflictInBatch(t *testing.T) {
	const n = 300
	s := wideTopic(t, n)
	ctx := context.Background()
	ck := countKV(s)
	expire(t, s, 1)
	// A leader's ISR change to a partition led by node 2 or 3 lands first:
	// it drops the third node too.
	idx := int32(0)
	for partition(t, s, "wide", idx).GetLeaderId() == 1 {
		idx++
	}
	p0 := partition(t, s, "wide", idx)
	drop := int32(3)
	if p0.GetLeaderId() == 3 {
		drop = 2
	}
	raced := proto.Clone(p0).(*commonv1.PartitionMetadata)
	raced.Isr = slices.DeleteFunc(slices.Clone(raced.Isr), func(r int32) bool { return r == drop })
	delete(raced.IsrNodeEpochs, drop)
	raced.PartitionEpoch++
	ck.hook = func(kv clientv3.KV) {
		b, _ := proto.Marshal(raced)
		if _, err := kv.Put(ctx, partitionKey("wide", idx), string(b)); err != nil {
			t.Error(err)
		}
	}
	rev0 := revision(t, s)
	changed, err := s.Reconcile(ctx, alwaysActive)
	if err != nil || changed != n {
		t.Fatalf("Reconcile: %d changed, %v; want %d", changed, err, n)
	}
	// The racing write, the two batches that did not hold the partition,
	// and its batch again.
	if txns := revision(t, s) - rev0; txns != 4 {
		t.Fatalf("%d revisions, want 4 (the racing write and three batches)", txns)
	}
	checkWithout(t, s, 1)
	p := partition(t, s, "wide", idx)
	if slices.Contains(p.GetIsr(), drop) || len(p.GetIsr()) != 1 || p.GetPartitionEpoch() != raced.GetPartitionEpoch()+1 {
		t.Fatalf("wide-%d is %v; want the racing change kept (node %d out) and node 1 removed after it", idx, p, drop)
	}
}

// A deposed controller's Reconcile writes nothing and says so.
func TestReconcileDeposed(t *testing.T) {
	s := wideTopic(t, 200)
	ctx := context.Background()
	expire(t, s, 1)
	rev0 := revision(t, s)
	deposed := clientv3.Compare(clientv3.CreateRevision(KeyClusterID), "=", -1)
	changed, err := s.Reconcile(ctx, deposed)
	if err != ErrNotActive || changed != 0 {
		t.Fatalf("deposed Reconcile: %d changed, %v; want 0, ErrNotActive", changed, err)
	}
	if rev := revision(t, s); rev != rev0 {
		t.Fatalf("deposed Reconcile wrote: revision %d, was %d", rev, rev0)
	}
}

// With no move running, StepReassignments reads a few keys instead of
// every partition, and still steps a move another controller starts, and
// one a drain starts.
func TestStepWithoutMovesDoesNotLoad(t *testing.T) {
	s, _ := oneTopic(t, 4)
	ctx := context.Background()
	ck := countKV(s)
	loads := func() int { return ck.readsOf(Prefix) }
	for range 3 {
		if n, err := s.StepReassignments(ctx, alwaysActive); err != nil || n != 0 {
			t.Fatalf("step: %d, %v", n, err)
		}
	}
	if loads() != 1 {
		t.Fatalf("%d full loads in three idle steps; want only the first", loads())
	}

	// Another controller (another Store on the same etcd) starts a move.
	other := New(s.cl, 0)
	if _, err := other.AlterPartitionReassignments(ctx, []MoveRequest{{Topic: "t", Partition: 0, Replicas: []int32{4, 2, 3}}}, 0); err != nil {
		t.Fatal(err)
	}
	setISR(t, s, "t", 0, 1, 2, 3, 4)
	before := loads()
	step(t, s)
	if p := partition(t, s, "t", 0); Moving(p) || p.GetLeaderId() != 4 || !slices.Equal(p.GetReplicas(), []int32{4, 2, 3}) {
		t.Fatalf("move not stepped: %v", p)
	}
	if loads() == before {
		t.Fatal("the move was stepped without loading the partitions")
	}
	before = loads()
	if _, err := s.StepReassignments(ctx, alwaysActive); err != nil {
		t.Fatal(err)
	}
	if loads() != before {
		t.Fatal("a step after the move ended loaded every partition again")
	}

	// A drained node that leads: its leadership moves off.
	if _, err := other.DrainNode(ctx, 4, false, 0, nil); err != nil {
		t.Fatal(err)
	}
	step(t, s)
	if p := partition(t, s, "t", 0); p.GetLeaderId() == 4 {
		t.Fatalf("drained node 4 still leads: %v", p)
	}
}

// The active loop's safety net reads every partition only when something
// changed since a pass found nothing to do; a node's death is still
// acted on at once.
func TestRunActiveIdleDoesNotReload(t *testing.T) {
	s := wideTopic(t, 30)
	ck := countKV(s)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.RunActive(ctx, alwaysActive, 20*time.Millisecond, nil, nil) }()
	defer func() {
		cancel()
		if err := <-done; err != context.Canceled {
			t.Errorf("RunActive: %v", err)
		}
	}()
	time.Sleep(500 * time.Millisecond) // 25 intervals
	if n := ck.readsOf(PrefixPartitions); n != 1 {
		t.Fatalf("%d reads of every partition over 25 idle intervals; want the first pass's only", n)
	}
	expire(t, s, 1)
	deadline := time.Now().Add(10 * time.Second)
	for {
		m, err := s.Load(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if slices.IndexFunc(slices.Collect(maps.Values(m.Partitions["wide"])), func(p *commonv1.PartitionMetadata) bool {
			return slices.Contains(p.GetIsr(), 1)
		}) < 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("node 1's death not reconciled")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A leader's ISR changes to many partitions are written in few
// transactions; when one partition changed under its batch, every item
// of the batch is answered as if sent alone.
func TestAlterPartitionBatches(t *testing.T) {
	const n = 300
	s := wideTopic(t, n)
	ctx := context.Background()
	m, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Node 2 drops node 1 from the ISR of every partition it leads.
	shrink := func(m *Model) []*controllerv1.AlterPartitionItem {
		var items []*controllerv1.AlterPartitionItem
		for _, idx := range slices.Sorted(maps.Keys(m.Partitions["wide"])) {
			p := m.Partitions["wide"][idx]
			if p.GetLeaderId() != 2 || !slices.Contains(p.GetIsr(), 1) {
				continue
			}
			isr := slices.DeleteFunc(slices.Clone(p.GetIsr()), func(r int32) bool { return r == 1 })
			items = append(items, &controllerv1.AlterPartitionItem{Topic: "wide", Partition: idx, LeaderEpoch: p.GetLeaderEpoch(),
				PartitionEpoch: p.GetPartitionEpoch(), NewIsr: isr})
		}
		return items
	}
	items := shrink(m)
	if len(items) < 10 {
		t.Fatalf("node 2 leads %d partitions; the test wants more", len(items))
	}
	epoch := m.Live[2].Epoch
	ck := countKV(s)
	// Half the items first, one partition changed under their batch.
	first := items[:len(items)/2]
	raced := proto.Clone(m.Partitions["wide"][first[3].Partition]).(*commonv1.PartitionMetadata)
	raced.PartitionEpoch++
	ck.hook = func(kv clientv3.KV) {
		b, _ := proto.Marshal(raced)
		if _, err := kv.Put(ctx, partitionKey("wide", raced.Partition), string(b)); err != nil {
			t.Error(err)
		}
	}
	res, err := s.AlterPartition(ctx, 2, epoch, first)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		switch {
		case i == 3 && r.GetError().GetReason() != commonv1.Reason_REASON_STALE_PARTITION_EPOCH:
			t.Fatalf("item on the raced partition: %v, want STALE_PARTITION_EPOCH", r)
		case i != 3 && (r.GetError() != nil || slices.Contains(r.GetState().GetIsr(), 1)):
			t.Fatalf("item %d: %v, want applied", i, r)
		case r.GetPartition() != first[i].Partition:
			t.Fatalf("result %d is for partition %d, item for %d", i, r.GetPartition(), first[i].Partition)
		}
	}
	// The other half: one transaction.
	rev0 := revision(t, s)
	res, err = s.AlterPartition(ctx, 2, epoch, items[len(items)/2:])
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.GetError() != nil || slices.Contains(r.GetState().GetIsr(), 1) || r.GetState().GetPartitionEpoch() != items[len(items)/2+i].PartitionEpoch+1 {
			t.Fatalf("item %d: %v, want applied", i, r)
		}
	}
	if txns := revision(t, s) - rev0; txns != 1 {
		t.Fatalf("%d ISR changes written in %d transactions, want 1", len(res), txns)
	}
	if m, err = s.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if left := shrink(m); len(left) != 1 || left[0].Partition != raced.Partition {
		t.Fatalf("left with node 1 in the ISR: %v, want only the raced partition", left)
	}
}
