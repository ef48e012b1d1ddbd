package server

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	"github.com/strata-mq/strata/services/tiering/internal/manifest"
	"github.com/strata-mq/strata/services/tiering/internal/uploader"
)

// TestTierKeepsItsExtentWhenRetentionEmptiesIt: when total retention
// expires every tiered segment, the manifest still says where the log
// starts (one past the last expired offset), so the tiered state reports
// an empty tier at that offset rather than no tier at all. A node that
// heard "nothing is tiered" uploaded the expired segments again every
// round and never deleted its local copies. An upload of an expired
// segment is refused and adds nothing; the tier continues at its log
// start and refuses a gap after it.
func TestTierKeepsItsExtentWhenRetentionEmptiesIt(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	var off int64
	for range 3 {
		seg := segmentBytes(t, off, 10, 100, 1) // stamped in 2023
		if _, err := f.up.Upload(ctx, header(off, seg, 1), bytes.NewReader(seg)); err != nil {
			t.Fatal(err)
		}
		off += 30
	}
	ti := &topicInfo{ID: testTopicID, Partitions: 1, Configs: map[string]string{"cleanup.policy": "delete", "retention.ms": "1000"}}
	tp := &topics{describe: func(context.Context) ([]*controllerv1.TopicDescription, error) { return nil, nil }, loaded: true, lastTry: time.Now(),
		byName: map[string]*topicInfo{testPart.Topic: ti}}
	ret := &retention{store: f.store, topics: tp, reader: f.rd, grace: time.Hour, logger: discardLogger(), now: time.Now}
	checkEmptyAt := func(when string, start int64) {
		t.Helper()
		m := mustManifest(t, f)
		if n := len(manifest.Active(m)); n != 0 {
			t.Fatalf("%s: %d active entries, want none", when, n)
		}
		st := stateOf(testPart, m)
		if st.GetLogStartOffset() != start || st.GetTieredEndOffset() != start || st.GetObjectCount() != 0 {
			t.Fatalf("%s: tiered state start %d end %d objects %d, want an empty tier at %d",
				when, st.GetLogStartOffset(), st.GetTieredEndOffset(), st.GetObjectCount(), start)
		}
	}
	if err := ret.partition(ctx, testPart); err != nil {
		t.Fatal(err)
	}
	checkEmptyAt("after retention expired everything", 90)
	if err := ret.partition(ctx, testPart); err != nil {
		t.Fatal(err)
	}
	checkEmptyAt("after another retention round", 90)

	// The segment the tier just expired, uploaded again.
	seg := segmentBytes(t, 30, 10, 100, 1)
	if _, err := f.up.Upload(ctx, header(30, seg, 1), bytes.NewReader(seg)); !errors.Is(err, uploader.ErrExpired) {
		t.Fatalf("upload of an expired segment: %v, want ErrExpired", err)
	}
	checkEmptyAt("after uploading an expired segment", 90)

	// A segment after the log start leaves a gap; the one at it continues.
	seg = segmentBytes(t, 120, 10, 100, 1)
	if _, err := f.up.Upload(ctx, header(120, seg, 1), bytes.NewReader(seg)); !errors.Is(err, uploader.ErrGap) {
		t.Fatalf("upload after a gap: %v, want ErrGap", err)
	}
	seg = segmentBytes(t, 90, 10, 100, 1)
	if _, err := f.up.Upload(ctx, header(90, seg, 1), bytes.NewReader(seg)); err != nil {
		t.Fatal(err)
	}
	if st := stateOf(testPart, mustManifest(t, f)); st.GetLogStartOffset() != 90 || st.GetTieredEndOffset() != 120 {
		t.Fatalf("after continuing the tier: start %d end %d, want 90, 120", st.GetLogStartOffset(), st.GetTieredEndOffset())
	}
}
