package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	"github.com/strata-mq/strata/lib/fakecluster"
	"github.com/strata-mq/strata/lib/testwait"
)

// Batches refused as too large are split (KIP-126); batches stay within a
// topic's max.message.bytes when its metadata says it.

// produceAll produces a record of each value to topic t, flushes, and
// returns their errors by index once every callback ran.
func produceAll(t *testing.T, ctx context.Context, p *Producer, vals [][]byte) []error {
	t.Helper()
	errs, wait := produceEach(ctx, p, vals)
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	wait()
	return errs
}

// produceEach produces a record of each value to topic t and returns the
// slice their errors go to, by index, and a wait for every callback.
func produceEach(ctx context.Context, p *Producer, vals [][]byte) (errs []error, wait func()) {
	errs = make([]error, len(vals))
	var wg sync.WaitGroup
	wg.Add(len(vals))
	for i, v := range vals {
		p.Produce(ctx, &Record{Topic: "t", Value: v}, func(_ *Record, err error) {
			errs[i] = err
			wg.Done()
		})
	}
	return errs, wg.Wait
}

// The producer learns of the topic's max.message.bytes only from the
// leader's refusal (the limit is set after the producer cached the
// topic): the refused batch is split into halves until they fit, every
// record lands once and in order, and later batches are cut smaller
// from the start. A record too large on its own fails alone.
func TestProducerSplitsABatchRefusedAsTooLarge(t *testing.T) {
	fc := newFake(t, 1, "t", 1)
	p := newProducer(t, fc, Linger(time.Minute))
	ctx := ctxT(t)
	if errs := produceAll(t, ctx, p, [][]byte{[]byte("first")}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	// The node refuses batches over max.message.bytes + 64 KiB of framing.
	fc.UpdateTopicConfigs("t", func(c map[string]string) { c["max.message.bytes"] = "1000" })
	const n = 200
	vals := [][]byte{[]byte("first")}
	var batch [][]byte
	for i := range n {
		v := bytes.Repeat([]byte{'a' + byte(i%26)}, 1000)
		if i == n/2 {
			v = bytes.Repeat([]byte{'!'}, 70<<10) // over the limit alone
		}
		batch = append(batch, v)
	}
	errs := produceAll(t, ctx, p, batch)
	for i, err := range errs {
		if i == n/2 {
			if ReasonOf(err) != commonv1.Reason_REASON_RECORD_TOO_LARGE {
				t.Fatalf("record %d, over the limit alone: %v, want RECORD_TOO_LARGE", i, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		vals = append(vals, batch[i])
	}
	recs, err := fc.Records("t", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != len(vals) {
		t.Fatalf("log holds %d records, want %d", len(recs), len(vals))
	}
	for i, r := range recs {
		if !bytes.Equal(r.Value, vals[i]) {
			t.Fatalf("offset %d holds %.10q, want %.10q", i, r.Value, vals[i])
		}
	}
	refused := 0
	for _, c := range fc.Produced() {
		if ReasonOf(c.Err) == commonv1.Reason_REASON_RECORD_TOO_LARGE {
			refused++
		}
	}
	if refused == 0 {
		t.Fatal("no batch was refused as too large: nothing was split")
	}
	// More records: cut at the size learned, none is refused.
	errs = produceAll(t, ctx, p, batch[:n/2])
	for i, err := range errs {
		if err != nil {
			t.Fatalf("record %d after learning the limit: %v", i, err)
		}
	}
	for _, c := range fc.Produced() {
		if ReasonOf(c.Err) == commonv1.Reason_REASON_RECORD_TOO_LARGE {
			refused--
		}
	}
	if refused != 0 {
		t.Fatalf("%d more batches refused as too large after the limit was learned", -refused)
	}
}

// A topic whose metadata sets max.message.bytes gets batches no larger
// than that from the start (the new user: 4096 bytes, 12000
// small records).
func TestProducerCapsBatchesAtMaxMessageBytes(t *testing.T) {
	fc := newFake(t, 1, "t", 1)
	fc.UpdateTopicConfigs("t", func(c map[string]string) { c["max.message.bytes"] = "4096" })
	p := newProducer(t, fc, Linger(50*time.Millisecond))
	ctx := ctxT(t)
	const n = 12000
	vals := make([][]byte, n)
	for i := range vals {
		vals[i] = []byte(fmt.Sprintf("record-%05d", i))
	}
	for i, err := range produceAll(t, ctx, p, vals) {
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	const header = 61 // a RecordBatch header
	for _, h := range fc.Batches("t", 0) {
		if h.Size() > 4096+header {
			t.Fatalf("a batch of %d bytes (%d records), over max.message.bytes 4096", h.Size(), h.RecordCount)
		}
	}
	recs, err := fc.Records("t", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != n {
		t.Fatalf("log holds %d records, want %d", len(recs), n)
	}
}

// A batch whose answer was lost after it was appended, and whose retry is
// refused as too large (the topic's max.message.bytes lowered between the
// attempts), may be in the log: it fails with ErrOutcomeUnknown instead of
// being split, since its halves go on the partition's next epoch, where no
// leader could recognize them as the copy it holds. Every record is in the
// log once.
func TestProducerDoesNotSplitABatchThatMayHaveLanded(t *testing.T) {
	fc := newFake(t, 1, "t", 1)
	p := newProducer(t, fc, Linger(time.Minute))
	ctx := ctxT(t)
	if errs := produceAll(t, ctx, p, [][]byte{[]byte("first")}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	// Four records of 30 KiB, one batch of about 120 KiB: fine at the
	// default limit, over 1000 bytes plus the node's 64 KiB of framing.
	var batch [][]byte
	for i := range 4 {
		batch = append(batch, bytes.Repeat([]byte{'a' + byte(i)}, 30<<10))
	}
	lost := fc.AddFault(&fakecluster.Fault{Method: "Produce", Topic: "t", Partition: 0, AfterAppend: true, Hang: true})
	errs, wait := produceEach(ctx, p, batch)
	flushed := make(chan error, 1)
	go func() { flushed <- p.Flush(ctx) }()
	testwait.Until(t, 30*time.Second, "the batch appended and its answer held", func() error {
		return testwait.True(fc.Fired(lost) == 1)
	})
	fc.UpdateTopicConfigs("t", func(c map[string]string) { c["max.message.bytes"] = "1000" })
	fc.RemoveFault(lost) // the held call fails UNAVAILABLE: its answer is lost
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
	wait()
	for i, err := range errs {
		if !errors.Is(err, ErrOutcomeUnknown) || ReasonOf(err) != commonv1.Reason_REASON_RECORD_TOO_LARGE {
			t.Fatalf("record %d: %v, want outcome unknown after RECORD_TOO_LARGE", i, err)
		}
	}
	// The partition goes on, within the new limit.
	if errs := produceAll(t, ctx, p, [][]byte{[]byte("after")}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	want := []string{"first"}
	for _, v := range batch {
		want = append(want, string(v))
	}
	want = append(want, "after")
	if got := logValues(t, fc, 0); !slices.Equal(got, want) {
		t.Fatalf("log holds %d records, want %d: each record of the batch once, then after", len(got), len(want))
	}
}
