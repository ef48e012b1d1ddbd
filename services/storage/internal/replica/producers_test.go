package replica

import (
	"errors"
	"testing"

	"github.com/strata-mq/strata/lib/recordbatch"
)

func hdr(pid int64, epoch int16, seq int32, n int32, base int64) recordbatch.Header {
	return recordbatch.Header{ProducerID: pid, ProducerEpoch: epoch, BaseSequence: seq, LastOffsetDelta: n - 1, BaseOffset: base}
}

func TestProducersCheck(t *testing.T) {
	p := newProducers()
	p.record(hdr(7, 1, 0, 2, 10)) // seq 0-1 at offsets 10-11
	p.record(hdr(7, 1, 2, 1, 12)) // seq 2 at offset 12
	for _, tc := range []struct {
		name    string
		h       recordbatch.Header
		dupBase int64 // -1: not a duplicate
		err     error
	}{
		{"not idempotent", hdr(-1, -1, -1, 1, 0), -1, nil},
		{"next in sequence", hdr(7, 1, 3, 1, 0), -1, nil},
		{"duplicate of first", hdr(7, 1, 0, 2, 0), 10, nil},
		{"duplicate of last", hdr(7, 1, 2, 1, 0), 12, nil},
		{"gap", hdr(7, 1, 5, 1, 0), -1, ErrOutOfOrderSequence},
		{"old producer epoch", hdr(7, 0, 3, 1, 0), -1, ErrInvalidProducerEpoch},
		{"new epoch from zero", hdr(7, 2, 0, 1, 0), -1, nil},
		{"new epoch not from zero", hdr(7, 2, 4, 1, 0), -1, ErrOutOfOrderSequence},
		{"unknown producer", hdr(8, 0, 42, 1, 0), -1, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dup, err := p.check(tc.h)
			if !errors.Is(err, tc.err) || (tc.err == nil && err != nil) {
				t.Fatalf("err %v, want %v", err, tc.err)
			}
			switch {
			case tc.dupBase < 0 && dup != nil:
				t.Fatalf("unexpected duplicate %+v", dup)
			case tc.dupBase >= 0 && (dup == nil || dup.firstOffset != tc.dupBase):
				t.Fatalf("duplicate %+v, want base %d", dup, tc.dupBase)
			}
		})
	}
}

func TestProducersWindow(t *testing.T) {
	p := newProducers()
	for i := range int32(8) {
		p.record(hdr(1, 0, i, 1, int64(i)))
	}
	if n := len(p.m[1].batches); n != producerWindow {
		t.Fatalf("remembered %d batches, want %d", n, producerWindow)
	}
	if dup, _ := p.check(hdr(1, 0, 7, 1, 0)); dup == nil || dup.firstOffset != 7 {
		t.Fatalf("latest batch not recognised as duplicate: %+v", dup)
	}
}
