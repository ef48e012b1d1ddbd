package manifest

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	tieringv1 "github.com/strata-mq/strata/gen/strata/tiering/v1"
	"github.com/strata-mq/strata/services/tiering/internal/objstore"
	"github.com/strata-mq/strata/services/tiering/internal/objstore/s3test"
)

func seedManifest() *tieringv1.Manifest {
	m := New(Partition{Topic: "orders", TopicID: "0e8a1c2e-7a53-4d0c-9c4e-3f0c5b1d2a11", Partition: 3})
	log, idx, tidx := SegmentKeys("strata", Partition{Topic: "orders", Partition: 3}, 0, "s1")
	m.Segments = append(m.Segments, &tieringv1.SegmentEntry{
		SegmentId: "s1", ObjectKey: log, BaseOffset: 0, LastOffset: 99, SizeBytes: 4096,
		MinTimestampMs: 1, MaxTimestampMs: 9, OffsetIndexKey: idx, TimeIndexKey: tidx,
		LeaderEpochs: []*tieringv1.EpochStart{{Epoch: 1, StartOffset: 0}},
	})
	return m
}

func TestDecode(t *testing.T) {
	m := seedManifest()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(b)
	if err != nil || !proto.Equal(got, m) {
		t.Fatalf("Decode = %v, %v", got, err)
	}
	m.FormatVersion = FormatVersion + 1
	b, _ = proto.Marshal(m)
	if _, err := Decode(b); !errors.Is(err, ErrFormat) || !errors.Is(err, errVersion) {
		t.Fatalf("another version: %v", err)
	}
	if _, err := Decode([]byte{0xff, 0xff}); !errors.Is(err, ErrFormat) || errors.Is(err, errVersion) {
		t.Fatalf("garbage: %v", err)
	}
}

// FuzzDecodeManifest: Decode never panics, every error wraps ErrFormat,
// and a manifest that decodes encodes and decodes again to the same value.
func FuzzDecodeManifest(f *testing.F) {
	for _, m := range []*tieringv1.Manifest{New(Partition{Topic: "t"}), seedManifest()} {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b)
		if err != nil {
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("error wraps no ErrFormat: %v", err)
			}
			return
		}
		again, err := proto.Marshal(m)
		if err != nil {
			t.Fatalf("decoded manifest does not encode: %v", err)
		}
		m2, err := Decode(again)
		if err != nil || !proto.Equal(m, m2) {
			t.Fatalf("re-decoded manifest differs: %v", err)
		}
	})
}

// newFaultyStore is a Store on the embedded S3 server behind a fault
// injector.
func newFaultyStore(t *testing.T) (*Store, *objstore.Faulty) {
	t.Helper()
	b := s3test.Bucket(t)
	f := objstore.NewFaulty(b)
	return &Store{Bucket: f, Prefix: "strata"}, f
}

// TestUpdateRetriesLostRaces: a conditional put another writer beat is
// reloaded and fn applied again, up to updateTries times; then
// ErrConflict.
func TestUpdateRetriesLostRaces(t *testing.T) {
	ctx := context.Background()
	s, f := newFaultyStore(t)
	p := Partition{Topic: "orders", TopicID: "id-1", Partition: 0}
	addSegment := func(calls *int) func(m *tieringv1.Manifest) error {
		return func(m *tieringv1.Manifest) error {
			*calls++
			m.Segments = append(m.Segments, &tieringv1.SegmentEntry{SegmentId: "s", BaseOffset: 0, LastOffset: 9})
			return nil
		}
	}

	f.AddFault(objstore.Fault{Op: objstore.OpPutIf, Err: objstore.ErrPrecondition, Count: updateTries - 1})
	var calls int
	m, err := s.Update(ctx, p, addSegment(&calls))
	if err != nil {
		t.Fatalf("Update after %d lost races: %v", updateTries-1, err)
	}
	if calls != updateTries || m.GetVersion() != 1 || len(m.GetSegments()) != 1 {
		t.Errorf("fn called %d times (want %d); version %d, %d segments", calls, updateTries, m.GetVersion(), len(m.GetSegments()))
	}

	f.Clear()
	f.AddFault(objstore.Fault{Op: objstore.OpPutIf, Err: objstore.ErrPrecondition})
	calls = 0
	if _, err := s.Update(ctx, p, addSegment(&calls)); !errors.Is(err, ErrConflict) {
		t.Fatalf("Update losing every race: %v, want ErrConflict", err)
	}
	if calls != updateTries {
		t.Errorf("fn called %d times, want %d", calls, updateTries)
	}

	// Any other failure is not retried.
	f.Clear()
	boom := errors.New("boom")
	calls = 0
	if _, err := s.Update(ctx, p, func(*tieringv1.Manifest) error { calls++; return boom }); !errors.Is(err, boom) || calls != 1 {
		t.Errorf("fn failing: err %v after %d calls, want boom after 1", err, calls)
	}
	f.AddFault(objstore.Fault{Op: objstore.OpPutIf, Err: boom})
	calls = 0
	if _, err := s.Update(ctx, p, addSegment(&calls)); !errors.Is(err, boom) || calls != 1 {
		t.Errorf("put failing: err %v after %d calls, want boom after 1", err, calls)
	}
}

// TestLoadRetriesAFailedRead: a read that fails (a torn object on a store
// that writes in place) is tried again, loadTries times in all; a manifest
// of another format version is not.
func TestLoadRetriesAFailedRead(t *testing.T) {
	ctx := context.Background()
	s, f := newFaultyStore(t)
	p := Partition{Topic: "orders", TopicID: "id-1", Partition: 0}
	if _, err := s.Update(ctx, p, func(m *tieringv1.Manifest) error {
		m.Segments = append(m.Segments, &tieringv1.SegmentEntry{SegmentId: "s", BaseOffset: 0, LastOffset: 9})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	torn := errors.New("unexpected EOF")
	f.AddFault(objstore.Fault{Op: objstore.OpGet, Err: torn, Count: loadTries - 1})
	m, etag, err := s.Load(ctx, p)
	if err != nil || etag == "" || m.GetVersion() != 1 {
		t.Fatalf("Load after %d failed reads: version %d, etag %q, err %v", loadTries-1, m.GetVersion(), etag, err)
	}

	f.Clear()
	f.AddFault(objstore.Fault{Op: objstore.OpGet, Err: torn})
	if _, _, err := s.Load(ctx, p); !errors.Is(err, torn) {
		t.Errorf("Load failing every read: %v, want the read's error", err)
	}

	f.Clear()
	other := New(p)
	other.FormatVersion = FormatVersion + 1
	data, _ := proto.Marshal(other)
	_, etag, _ = s.Load(ctx, p)
	if _, err := s.Bucket.PutIf(ctx, Key(s.Prefix, p), data, etag); err != nil {
		t.Fatal(err)
	}
	before := f.Calls(objstore.OpGet)
	if _, _, err := s.Load(ctx, p); !errors.Is(err, errVersion) {
		t.Errorf("Load of another format version: %v", err)
	}
	if n := f.Calls(objstore.OpGet) - before; n != 1 {
		t.Errorf("another format version read %d times, want once", n)
	}
}

// TestLogStartOutlivesTheSegments: the log start written is the first
// active entry's base offset; while every entry is being deleted, one past
// the last of them; once they are dropped, the previous log start, so an
// emptied manifest keeps its extent. A manifest that never held anything
// stays at -1.
func TestLogStartOutlivesTheSegments(t *testing.T) {
	ctx := context.Background()
	s, _ := newFaultyStore(t)
	p := Partition{Topic: "t", TopicID: "0b7e1f4e-5a0c-4d8e-8f6a-3c2d1b0a9f88"}
	step := func(what string, want int64, fn func(m *tieringv1.Manifest)) {
		t.Helper()
		m, err := s.Update(ctx, p, func(m *tieringv1.Manifest) error { fn(m); return nil })
		if err != nil {
			t.Fatal(err)
		}
		if m.GetLogStartOffset() != want || TieredEnd(m) < want {
			t.Fatalf("%s: log start %d, tiered end %d; want log start %d", what, m.GetLogStartOffset(), TieredEnd(m), want)
		}
	}
	step("never held anything", -1, func(*tieringv1.Manifest) {})
	step("two entries", 10, func(m *tieringv1.Manifest) {
		for _, base := range []int64{10, 20} {
			m.Segments = append(m.Segments, &tieringv1.SegmentEntry{SegmentId: fmt.Sprint(base), BaseOffset: base, LastOffset: base + 9,
				State: tieringv1.SegmentState_SEGMENT_STATE_ACTIVE})
		}
	})
	step("all being deleted", 30, func(m *tieringv1.Manifest) {
		for _, e := range m.Segments {
			e.State = tieringv1.SegmentState_SEGMENT_STATE_DELETING
		}
	})
	step("all dropped", 30, func(m *tieringv1.Manifest) { m.Segments = nil })
	step("written again", 30, func(*tieringv1.Manifest) {})
}
