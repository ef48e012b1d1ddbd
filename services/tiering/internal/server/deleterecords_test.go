package server

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"connectrpc.com/connect"

	controllerv1 "github.com/strata-mq/strata/gen/strata/controller/v1"
	tieringv1 "github.com/strata-mq/strata/gen/strata/tiering/v1"
	"github.com/strata-mq/strata/lib/recordbatch"
	"github.com/strata-mq/strata/services/tiering/internal/manifest"
	"github.com/strata-mq/strata/services/tiering/internal/reader"
	"github.com/strata-mq/strata/services/tiering/internal/uploader"
)

// TestDeleteRecordsInTheTier: DeleteRecords at an offset inside a tiered
// segment makes the tier serve nothing below it (out of range, with the
// log start at the offset) and the batch holding it first; it only grows;
// retention deletes the segments wholly below it and keeps the one that
// holds it; a segment wholly below it offered again is expired; past the
// tier's end, the tier is empty at its end, and GetTieredState reports
// the offset for the storage node to start the partition at.
func TestDeleteRecordsInTheTier(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	var off int64
	for range 3 {
		seg := segmentBytes(t, off, 10, 100, 1) // 30 offsets, batches of 3
		if _, err := f.up.Upload(ctx, header(off, seg, 1), bytes.NewReader(seg)); err != nil {
			t.Fatal(err)
		}
		off += 30
	}
	ti := &topicInfo{ID: testTopicID, Partitions: 1, Configs: map[string]string{"cleanup.policy": "delete", "retention.ms": "-1"}}
	tp := &topics{describe: func(context.Context) ([]*controllerv1.TopicDescription, error) { return nil, nil }, loaded: true, lastTry: time.Now(),
		byName: map[string]*topicInfo{testPart.Topic: ti}}
	svc := NewService(f.store, f.up, f.rd, tp, discardLogger())
	del := func(offset int64) *tieringv1.DeleteRecordsResponse {
		t.Helper()
		resp, err := svc.DeleteRecords(ctx, connect.NewRequest(&tieringv1.DeleteRecordsRequest{Topic: testPart.Topic, Partition: 0, Offset: offset}))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Msg
	}

	if r := del(40); r.GetDeleteRecordsOffset() != 40 || r.GetLogStartOffset() != 40 {
		t.Fatalf("delete below 40: %+v", r)
	}
	var oor *reader.OutOfRangeError
	if _, err := f.rd.Read(ctx, testPart, 39, 1); !errors.As(err, &oor) || oor.LogStart != 40 {
		t.Fatalf("read at 39: %v, want out of range from 40", err)
	}
	res, err := f.rd.Read(ctx, testPart, 40, 1)
	if err != nil || res.LogStart != 40 {
		t.Fatalf("read at 40: %v, log start %d", err, res.LogStart)
	}
	if first := firstOffset(t, res.Records); first != 39 {
		t.Fatalf("read at 40 starts at %d, want the batch holding it, from 39", first)
	}
	if r := del(10); r.GetDeleteRecordsOffset() != 40 {
		t.Fatalf("a lower offset moved it back: %+v", r)
	}

	ret := &retention{store: f.store, topics: tp, reader: f.rd, grace: time.Hour, logger: discardLogger(), now: time.Now}
	if err := ret.partition(ctx, testPart); err != nil {
		t.Fatal(err)
	}
	m := mustManifest(t, f)
	if a := manifest.Active(m); len(a) != 2 || a[0].GetBaseOffset() != 30 {
		t.Fatalf("after retention: active segments %v, want the two from 30", a)
	}
	if st := stateOf(testPart, m); st.GetLogStartOffset() != 40 || st.GetDeleteRecordsOffset() != 40 || st.GetTieredEndOffset() != 90 {
		t.Fatalf("tiered state %+v", st)
	}
	seg := segmentBytes(t, 0, 10, 100, 1)
	if _, err := f.up.Upload(ctx, header(0, seg, 1), bytes.NewReader(seg)); !errors.Is(err, uploader.ErrExpired) {
		t.Fatalf("upload of a deleted segment: %v, want ErrExpired", err)
	}

	// Past the tier's end.
	del(100)
	st := stateOf(testPart, mustManifest(t, f))
	if st.GetLogStartOffset() != 90 || st.GetTieredEndOffset() != 90 || st.GetDeleteRecordsOffset() != 100 {
		t.Fatalf("after deleting past the end: %+v, want an empty tier at 90 and the offset 100", st)
	}
	if _, err := f.rd.Read(ctx, testPart, 60, 1); !errors.As(err, &oor) {
		t.Fatalf("read at 60 after deleting below 100: %v, want out of range", err)
	}
}

// firstOffset is the base offset of the first batch in b.
func firstOffset(t *testing.T, b []byte) int64 {
	t.Helper()
	h, err := recordbatch.PeekHeader(b)
	if err != nil {
		t.Fatal(err)
	}
	return h.BaseOffset
}
