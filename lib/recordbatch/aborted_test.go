package recordbatch

import (
	"testing"
)

// TestAbortedFilter: a producer's transactional batches are dropped from
// the first offset of its aborted transaction to its abort marker; its
// next transaction, other producers' batches and batches without a
// producer are kept, as Kafka's consumer keeps them.
func TestAbortedFilter(t *testing.T) {
	data := func(pid int64, txn bool, base int64) (Header, []byte) {
		t.Helper()
		opts := BuildOptions{ProducerID: pid, Idempotent: pid >= 0, Transactional: txn}
		b, err := Build(opts, []Record{{Value: []byte("v"), Timestamp: 1}, {Value: []byte("w"), Timestamp: 1}})
		if err != nil {
			t.Fatal(err)
		}
		SetBaseOffset(b, base)
		h, err := ParseHeader(b)
		if err != nil {
			t.Fatal(err)
		}
		return h, b
	}
	marker := func(pid int64, typ ControlType, base int64) (Header, []byte) {
		t.Helper()
		b, err := BuildMarker(pid, 0, 1, Marker{Type: typ})
		if err != nil {
			t.Fatal(err)
		}
		SetBaseOffset(b, base)
		h, err := ParseHeader(b)
		if err != nil {
			t.Fatal(err)
		}
		return h, b
	}
	type batch struct {
		name string
		h    Header
		b    []byte
		skip bool
	}
	var log []batch
	add := func(name string, skip bool, h Header, b []byte) { log = append(log, batch{name, h, b, skip}) }
	h, b := data(1, true, 0)
	add("producer 1's aborted transaction", true, h, b)
	h, b = data(2, false, 2)
	add("producer 2, idempotent", false, h, b)
	h, b = data(-1, false, 4)
	add("no producer", false, h, b)
	h, b = marker(1, ControlAbort, 6)
	add("producer 1's abort marker", false, h, b)
	h, b = data(1, true, 7)
	add("producer 1's next transaction", false, h, b)
	h, b = data(3, true, 9)
	add("producer 3's aborted transaction", true, h, b)
	h, b = data(2, true, 11)
	add("producer 2's transaction, not aborted", false, h, b)
	h, b = marker(2, ControlCommit, 13)
	add("producer 2's commit marker", false, h, b)

	f := NewAbortedFilter([]AbortedTxn{{ProducerID: 3, FirstOffset: 9}, {ProducerID: 1, FirstOffset: 0}})
	for _, c := range log {
		if got := f.Skip(c.h, c.b); got != c.skip {
			t.Errorf("%s: skip %v, want %v", c.name, got, c.skip)
		}
	}
	// Without aborted transactions (read_uncommitted, or none), nothing is
	// dropped.
	var none *AbortedFilter
	for _, c := range log {
		if none.Skip(c.h, c.b) || NewAbortedFilter(nil).Skip(c.h, c.b) {
			t.Errorf("%s: skipped without aborted transactions", c.name)
		}
	}
}
