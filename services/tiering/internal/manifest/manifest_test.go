package manifest

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	tieringv1 "github.com/strata-mq/strata/gen/strata/tiering/v1"
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
