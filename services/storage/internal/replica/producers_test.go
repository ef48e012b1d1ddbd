package replica

import (
	"context"
	"errors"
	"testing"

	"github.com/strata-mq/strata/lib/partlog"
	"github.com/strata-mq/strata/lib/recordbatch"
)

func hdr(pid int64, epoch int16, seq int32, n int32) recordbatch.Header {
	return recordbatch.Header{ProducerID: pid, ProducerEpoch: epoch, BaseSequence: seq, LastOffsetDelta: n - 1, RecordCount: n}
}

// logWith opens a log holding one batch of each header (stamped from
// offset 0).
func logWith(t *testing.T, hs ...recordbatch.Header) *partlog.Log {
	t.Helper()
	l, err := partlog.Open(t.TempDir(), partlog.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	for _, h := range hs {
		opts := recordbatch.BuildOptions{Idempotent: h.ProducerID >= 0, ProducerID: h.ProducerID, ProducerEpoch: h.ProducerEpoch, BaseSequence: h.BaseSequence}
		recs := make([]recordbatch.Record, h.RecordCount)
		for i := range recs {
			recs[i].Value = []byte("v")
		}
		b, err := recordbatch.Build(opts, recs)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.AppendAsLeader(context.Background(), b, 0); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

func TestCheckProducers(t *testing.T) {
	// Producer 7: sequences 0-1 at offsets 0-1, 2 at offset 2; then a
	// plain batch at 3; producer 7 again: 3-4 at offsets 4-5.
	l := logWith(t, hdr(7, 1, 0, 2), hdr(7, 1, 2, 1), hdr(-1, -1, -1, 1), hdr(7, 1, 3, 2))
	for _, tc := range []struct {
		name    string
		req     []recordbatch.Header
		dup     *duplicate // nil: append
		wantErr error
	}{
		{"not idempotent", []recordbatch.Header{hdr(-1, -1, -1, 1)}, nil, nil},
		{"next in sequence", []recordbatch.Header{hdr(7, 1, 5, 1)}, nil, nil},
		{"two batches in sequence", []recordbatch.Header{hdr(7, 1, 5, 1), hdr(7, 1, 6, 3)}, nil, nil},
		{"duplicate of the first", []recordbatch.Header{hdr(7, 1, 0, 2)}, &duplicate{0, 1}, nil},
		{"duplicate of the last", []recordbatch.Header{hdr(7, 1, 3, 2)}, &duplicate{4, 5}, nil},
		{"duplicates back to back", []recordbatch.Header{hdr(7, 1, 0, 2), hdr(7, 1, 2, 1)}, &duplicate{0, 2}, nil},
		{"duplicates with a gap in the log", []recordbatch.Header{hdr(7, 1, 2, 1), hdr(7, 1, 3, 2)}, nil, ErrDuplicateInRequest},
		{"duplicate then new", []recordbatch.Header{hdr(7, 1, 3, 2), hdr(7, 1, 5, 1)}, nil, ErrDuplicateInRequest},
		{"new then duplicate", []recordbatch.Header{hdr(7, 1, 5, 1), hdr(7, 1, 3, 2)}, nil, ErrDuplicateInRequest},
		{"duplicate and a plain batch", []recordbatch.Header{hdr(7, 1, 3, 2), hdr(-1, -1, -1, 1)}, nil, ErrDuplicateInRequest},
		{"gap", []recordbatch.Header{hdr(7, 1, 9, 1)}, nil, ErrOutOfOrderSequence},
		{"gap in the second batch", []recordbatch.Header{hdr(7, 1, 5, 1), hdr(7, 1, 9, 1)}, nil, ErrOutOfOrderSequence},
		{"batch repeated in the request", []recordbatch.Header{hdr(7, 1, 5, 1), hdr(7, 1, 5, 1)}, nil, ErrOutOfOrderSequence},
		{"old producer epoch", []recordbatch.Header{hdr(7, 0, 5, 1)}, nil, ErrInvalidProducerEpoch},
		{"old epoch after a good batch", []recordbatch.Header{hdr(7, 1, 5, 1), hdr(7, 0, 6, 1)}, nil, ErrInvalidProducerEpoch},
		{"new epoch from zero", []recordbatch.Header{hdr(7, 2, 0, 1)}, nil, nil},
		{"new epoch, then in sequence", []recordbatch.Header{hdr(7, 2, 0, 1), hdr(7, 2, 1, 1)}, nil, nil},
		{"new epoch, then the old one", []recordbatch.Header{hdr(7, 2, 0, 1), hdr(7, 1, 5, 1)}, nil, ErrInvalidProducerEpoch},
		{"new epoch not from zero", []recordbatch.Header{hdr(7, 2, 4, 1)}, nil, ErrOutOfOrderSequence},
		{"unknown producer", []recordbatch.Header{hdr(8, 0, 42, 1)}, nil, nil},
		{"unknown producer, then a gap", []recordbatch.Header{hdr(8, 0, 42, 1), hdr(8, 0, 50, 1)}, nil, ErrOutOfOrderSequence},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dup, err := checkProducers(l, tc.req)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Fatalf("err %v, want %v", err, tc.wantErr)
			}
			switch {
			case tc.dup == nil && dup != nil:
				t.Fatalf("unexpected duplicate %+v", dup)
			case tc.dup != nil && (dup == nil || *dup != *tc.dup):
				t.Fatalf("duplicate %+v, want %+v", dup, tc.dup)
			}
		})
	}
}

// Sequences wrap from 2^31-1 to 0.
func TestCheckProducersSequenceWraps(t *testing.T) {
	l := logWith(t, hdr(3, 0, 1<<31-2, 2)) // sequences 2^31-2 and 2^31-1
	if _, err := checkProducers(l, []recordbatch.Header{hdr(3, 0, 0, 1)}); err != nil {
		t.Fatalf("sequence 0 after 2^31-1: %v", err)
	}
	if _, err := checkProducers(l, []recordbatch.Header{hdr(3, 0, 1, 1)}); !errors.Is(err, ErrOutOfOrderSequence) {
		t.Fatalf("sequence 1 after 2^31-1: %v", err)
	}
}

// A request may carry at most ProducerWindow batches of one producer, so
// that a retry of it is always recognised whole.
func TestValidateRequestLimitsBatchesPerProducer(t *testing.T) {
	var req []byte
	for i := range int32(partlog.ProducerWindow + 1) {
		b, err := recordbatch.Build(recordbatch.BuildOptions{Idempotent: true, ProducerID: 1, BaseSequence: i}, []recordbatch.Record{{Value: []byte("v")}})
		if err != nil {
			t.Fatal(err)
		}
		req = append(req, b...)
		_, err = validateRequest(req, partlog.DefaultMaxBatchBytes, recordbatch.TopicRules{})
		if too := i >= partlog.ProducerWindow; too != errors.Is(err, partlog.ErrInvalidBatch) {
			t.Fatalf("%d batches: %v", i+1, err)
		}
	}
	// A batch over max.message.bytes is refused as too large, unread.
	if _, err := validateRequest(req, recordbatch.HeaderSize, recordbatch.TopicRules{}); !errors.Is(err, partlog.ErrBatchTooLarge) {
		t.Fatalf("batch over the limit: %v", err)
	}
}
