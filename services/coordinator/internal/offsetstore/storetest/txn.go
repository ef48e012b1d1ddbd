package storetest

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/strata-mq/strata/services/coordinator/internal/offsetstore"
)

// txnTests are the suite's transaction-state behaviours (Run runs them).
var txnTests = []struct {
	name string
	fn   func(t *testing.T, s offsetstore.Store)
}{
	{"TxnKeysApartFromGroups", testTxnKeysApart},
	{"TxnUpdateRoundTrip", testTxnRoundTrip},
	{"TxnUpdateFenced", testTxnFenced},
	{"TxnStagedOffsetsCommitOrDrop", testTxnStaged},
}

func claimTxn(t *testing.T, s offsetstore.Store, id, owner string, lease time.Duration) (offsetstore.Ownership, bool) {
	t.Helper()
	o, ok, err := s.ClaimTxn(ctx(t), id, owner, "http://"+owner, lease)
	if err != nil {
		t.Fatalf("ClaimTxn(%s, %s): %v", id, owner, err)
	}
	return o, ok
}

// write replaces the row under f.
func write(t *testing.T, s offsetstore.Store, f offsetstore.Fence, row offsetstore.Txn, staged offsetstore.StagedOffsets) {
	t.Helper()
	if err := s.UpdateTxn(ctx(t), f, func(*offsetstore.Txn) (offsetstore.TxnWrite, error) {
		return offsetstore.TxnWrite{Row: &row, Staged: staged}, nil
	}); err != nil {
		t.Fatalf("UpdateTxn(%s): %v", f.GroupID, err)
	}
}

// A transactional id and a group of the same name are different keys:
// each has its own owner and owner epoch, and fences only its own writes.
func testTxnKeysApart(t *testing.T, s offsetstore.Store) {
	g, ok := claim(t, s, "x", "a", time.Minute)
	if !ok {
		t.Fatal("group claim refused")
	}
	x, ok := claimTxn(t, s, "x", "b", time.Minute)
	if !ok || x.OwnerEpoch != 1 || x.Kind != offsetstore.TxnKey {
		t.Fatalf("transactional id claim beside a group of its name = %+v, %v; want owner b epoch 1", x, ok)
	}
	if o, _, err := s.TxnOwner(ctx(t), "x"); err != nil || o.OwnerID != "b" {
		t.Fatalf("TxnOwner = %+v, %v; want b", o, err)
	}
	if o, _, err := s.Owner(ctx(t), "x"); err != nil || o.OwnerID != "a" {
		t.Fatalf("Owner of the group = %+v, %v; want a", o, err)
	}
	if err := s.Renew(ctx(t), x.Fence(), time.Minute); err != nil {
		t.Fatalf("renew the transactional id: %v", err)
	}
	if err := s.Release(ctx(t), x.Fence()); err != nil {
		t.Fatalf("release the transactional id: %v", err)
	}
	if o, _, _ := s.Owner(ctx(t), "x"); !o.Live(time.Now()) {
		t.Fatal("releasing the transactional id released the group")
	}
	if err := s.CommitOffsets(ctx(t), g.Fence(), []offsetstore.Offset{{Topic: "t", Offset: 1}}); err != nil {
		t.Fatalf("the group's commit after the transactional id's release: %v", err)
	}
}

// A row, its partitions and groups read back as written; a later write
// replaces them whole; ListTxns filters by state.
func testTxnRoundTrip(t *testing.T, s offsetstore.Store) {
	o, _ := claimTxn(t, s, "tx", "a", time.Minute)
	if _, ok, err := s.LoadTxn(ctx(t), "tx"); err != nil || ok {
		t.Fatalf("LoadTxn before any write = %v, %v; want none", ok, err)
	}
	var sawNil bool
	if err := s.UpdateTxn(ctx(t), o.Fence(), func(cur *offsetstore.Txn) (offsetstore.TxnWrite, error) {
		sawNil = cur == nil
		return offsetstore.TxnWrite{}, nil
	}); err != nil || !sawNil {
		t.Fatalf("UpdateTxn of a new id: cur nil %v, %v", sawNil, err)
	}
	now := time.UnixMilli(time.Now().UnixMilli())
	row := offsetstore.Txn{ID: "tx", ProducerID: 42, ProducerEpoch: 3, LastProducerID: 42, LastProducerEpoch: 2,
		State: offsetstore.TxnOngoing, TimeoutMs: 60000, Started: now, Updated: now,
		Partitions: []offsetstore.TxnPartition{{Topic: "a", Partition: 0}, {Topic: "a", Partition: 1}, {Topic: "b", Partition: 0}},
		Groups:     []string{"g1", "g2"}}
	write(t, s, o.Fence(), row, offsetstore.KeepStaged)
	got, ok, err := s.LoadTxn(ctx(t), "tx")
	if err != nil || !ok || !reflect.DeepEqual(got, row) {
		t.Fatalf("LoadTxn = %+v, %v, %v; want %+v", got, ok, err, row)
	}
	var seen offsetstore.Txn
	if err := s.UpdateTxn(ctx(t), o.Fence(), func(cur *offsetstore.Txn) (offsetstore.TxnWrite, error) {
		seen = *cur
		return offsetstore.TxnWrite{}, nil
	}); err != nil || !reflect.DeepEqual(seen, row) {
		t.Fatalf("UpdateTxn saw %+v, %v; want %+v", seen, err, row)
	}

	row.State, row.Started, row.Partitions, row.Groups = offsetstore.TxnCompleteCommit, time.Time{}, nil, nil
	write(t, s, o.Fence(), row, offsetstore.KeepStaged)
	if got, _, _ := s.LoadTxn(ctx(t), "tx"); !reflect.DeepEqual(got, row) {
		t.Fatalf("after the second write LoadTxn = %+v; want %+v", got, row)
	}
	o2, _ := claimTxn(t, s, "other", "a", time.Minute)
	write(t, s, o2.Fence(), offsetstore.Txn{ID: "other", ProducerID: 7, LastProducerID: -1, LastProducerEpoch: -1,
		State: offsetstore.TxnEmpty, TimeoutMs: 1000, Updated: now}, offsetstore.KeepStaged)
	list, err := s.ListTxns(ctx(t))
	if err != nil || len(list) != 2 || list[0].ID != "other" || list[1].ID != "tx" || list[1].ProducerEpoch != 3 {
		t.Fatalf("ListTxns = %+v, %v; want other and tx", list, err)
	}
	list, err = s.ListTxns(ctx(t), offsetstore.TxnEmpty, offsetstore.TxnOngoing)
	if err != nil || len(list) != 1 || list[0].ID != "other" {
		t.Fatalf("ListTxns(Empty, Ongoing) = %+v, %v; want other", list, err)
	}

	// An expired id is deleted whole; its ownership stays.
	g, _ := claim(t, s, "g", "a", time.Minute)
	if err := s.StageTxnOffsets(ctx(t), g.Fence(), "other", func(*offsetstore.Txn) error { return nil }, []offsetstore.Offset{{Topic: "t", Offset: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := s.UpdateTxn(ctx(t), o2.Fence(), func(*offsetstore.Txn) (offsetstore.TxnWrite, error) {
		return offsetstore.TxnWrite{Delete: true}, nil
	}); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, ok, err := s.LoadTxn(ctx(t), "other"); err != nil || ok {
		t.Fatalf("LoadTxn after the delete = %v, %v; want none", ok, err)
	}
	if _, staged, _ := s.StagedTxnOffsets(ctx(t), "other"); len(staged) != 0 {
		t.Fatalf("staged offsets left after the delete: %+v", staged)
	}
	if o, ok, _ := s.TxnOwner(ctx(t), "other"); !ok || o.OwnerEpoch != 1 {
		t.Fatalf("the ownership row after the delete: %+v, %v", o, ok)
	}
}

// Once another instance claimed the transactional id, the old owner's
// update fails and writes nothing; fn's own error is returned as it is,
// and nothing is written either.
func testTxnFenced(t *testing.T, s offsetstore.Store) {
	old, _ := claimTxn(t, s, "tx", "a", time.Millisecond)
	time.Sleep(5 * time.Millisecond)
	now := time.Now()
	row := offsetstore.Txn{ID: "tx", ProducerID: 1, LastProducerID: -1, LastProducerEpoch: -1, State: offsetstore.TxnEmpty, TimeoutMs: 1000, Updated: now}
	nu, ok := claimTxn(t, s, "tx", "b", time.Minute)
	if !ok || nu.OwnerEpoch != 2 {
		t.Fatalf("claim after expiry = %+v, %v", nu, ok)
	}
	called := false
	err := s.UpdateTxn(ctx(t), old.Fence(), func(*offsetstore.Txn) (offsetstore.TxnWrite, error) {
		called = true
		return offsetstore.TxnWrite{Row: &row}, nil
	})
	if !errors.Is(err, offsetstore.ErrNotOwner) || called {
		t.Fatalf("the old owner's update = %v (fn called %v); want ErrNotOwner before fn", err, called)
	}
	boom := errors.New("refused")
	err = s.UpdateTxn(ctx(t), nu.Fence(), func(*offsetstore.Txn) (offsetstore.TxnWrite, error) {
		return offsetstore.TxnWrite{Row: &row}, boom
	})
	if err != boom {
		t.Fatalf("fn's error came back as %v", err)
	}
	if _, ok, _ := s.LoadTxn(ctx(t), "tx"); ok {
		t.Fatal("a refused update wrote the row")
	}
	if err := s.UpdateTxn(ctx(t), offsetstore.Fence{GroupID: "tx", OwnerID: "b", OwnerEpoch: 2}, func(*offsetstore.Txn) (offsetstore.TxnWrite, error) {
		return offsetstore.TxnWrite{}, nil
	}); err == nil {
		t.Fatal("UpdateTxn under a group's fence was accepted")
	}
}

// Staged offsets are invisible to the group until the update that
// commits them, which moves them into its committed offsets; an abort
// drops them. Staging is refused, writing nothing, when the check refuses
// or the group's fence no longer holds.
func testTxnStaged(t *testing.T, s offsetstore.Store) {
	g, _ := claim(t, s, "g", "a", time.Minute)
	x, _ := claimTxn(t, s, "tx", "a", time.Minute)
	now := time.Now()
	row := offsetstore.Txn{ID: "tx", ProducerID: 1, LastProducerID: -1, LastProducerEpoch: -1, State: offsetstore.TxnOngoing,
		TimeoutMs: 1000, Started: now, Updated: now, Groups: []string{"g"}}
	write(t, s, x.Fence(), row, offsetstore.KeepStaged)
	if err := s.CommitOffsets(ctx(t), g.Fence(), []offsetstore.Offset{{Topic: "t", Partition: 0, Offset: 5, LeaderEpoch: -1}}); err != nil {
		t.Fatal(err)
	}
	var checked *offsetstore.Txn
	stage := func(f offsetstore.Fence, check func(*offsetstore.Txn) error, offs ...offsetstore.Offset) error {
		return s.StageTxnOffsets(ctx(t), f, "tx", check, offs)
	}
	pass := func(cur *offsetstore.Txn) error { checked = cur; return nil }
	if err := stage(g.Fence(), pass, offsetstore.Offset{Topic: "t", Partition: 0, Offset: 9, LeaderEpoch: 2, Metadata: "m"},
		offsetstore.Offset{Topic: "t", Partition: 1, Offset: 3, LeaderEpoch: -1}); err != nil {
		t.Fatalf("stage: %v", err)
	}
	if checked == nil || checked.State != offsetstore.TxnOngoing || !reflect.DeepEqual(checked.Groups, []string{"g"}) {
		t.Fatalf("check saw %+v; want the Ongoing row with its group", checked)
	}
	groups, staged, err := s.StagedTxnOffsets(ctx(t), "tx")
	if err != nil || len(staged) != 2 || groups[0] != "g" || staged[0].Offset != 9 || staged[0].Metadata != "m" {
		t.Fatalf("StagedTxnOffsets = %v %+v, %v", groups, staged, err)
	}
	if offs, _ := s.FetchOffsets(ctx(t), "g"); len(offs) != 1 || offs[0].Offset != 5 {
		t.Fatalf("staged offsets visible before the commit: %+v", offs)
	}
	if unstable, err := s.UnstableTxnOffsets(ctx(t), "g"); err != nil || len(unstable) != 2 || unstable[0].Partition != 0 || unstable[1].Partition != 1 {
		t.Fatalf("UnstableTxnOffsets(g) = %+v, %v; want t-0 and t-1", unstable, err)
	}
	if unstable, err := s.UnstableTxnOffsets(ctx(t), "other"); err != nil || len(unstable) != 0 {
		t.Fatalf("UnstableTxnOffsets(other) = %+v, %v; want none", unstable, err)
	}
	boom := errors.New("not ongoing")
	if err := stage(g.Fence(), func(*offsetstore.Txn) error { return boom }, offsetstore.Offset{Topic: "t", Partition: 2, Offset: 1}); err != boom {
		t.Fatalf("a refused stage = %v; want the check's error", err)
	}
	stale := g.Fence()
	stale.OwnerEpoch--
	if err := stage(stale, pass, offsetstore.Offset{Topic: "t", Partition: 2, Offset: 1}); !errors.Is(err, offsetstore.ErrNotOwner) {
		t.Fatalf("a stage under a stale group fence = %v; want ErrNotOwner", err)
	}

	row.State = offsetstore.TxnPrepareCommit
	write(t, s, x.Fence(), row, offsetstore.CommitStaged)
	offs, err := s.FetchOffsets(ctx(t), "g")
	if err != nil || len(offs) != 2 || offs[0].Offset != 9 || offs[0].LeaderEpoch != 2 || offs[0].Metadata != "m" || offs[1].Offset != 3 {
		t.Fatalf("after the commit FetchOffsets = %+v, %v; want 9 and 3", offs, err)
	}
	if _, staged, _ := s.StagedTxnOffsets(ctx(t), "tx"); len(staged) != 0 {
		t.Fatalf("staged offsets left after the commit: %+v", staged)
	}
	if unstable, _ := s.UnstableTxnOffsets(ctx(t), "g"); len(unstable) != 0 {
		t.Fatalf("partitions still unstable after the commit: %+v", unstable)
	}

	row.State = offsetstore.TxnOngoing
	write(t, s, x.Fence(), row, offsetstore.KeepStaged)
	if err := stage(g.Fence(), pass, offsetstore.Offset{Topic: "t", Partition: 0, Offset: 20}); err != nil {
		t.Fatal(err)
	}
	row.State = offsetstore.TxnPrepareAbort
	write(t, s, x.Fence(), row, offsetstore.DropStaged)
	if offs, _ := s.FetchOffsets(ctx(t), "g"); offs[0].Offset != 9 {
		t.Fatalf("an aborted transaction's offset was committed: %+v", offs)
	}
	if _, staged, _ := s.StagedTxnOffsets(ctx(t), "tx"); len(staged) != 0 {
		t.Fatalf("staged offsets left after the abort: %+v", staged)
	}
}
