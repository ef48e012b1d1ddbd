package server

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"

	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	"github.com/strata-mq/strata/lib/recordbatch"
	"github.com/strata-mq/strata/lib/recordbatch/batchtest"
)

// A batch whose CRC is right but whose inside is broken (a record count
// that does not match, a payload that does not inflate, records that do
// not parse, ...) is refused before anything is appended, alone or with
// good batches in the same request, so no consumer of the partition ever
// meets it. It is INVALID_RECORD, as Kafka answers a batch whose records
// do not add up; a batch whose CRC is wrong is CORRUPT_RECORD (Kafka's
// CORRUPT_MESSAGE).
func TestProduceRefusesPoisonBatches(t *testing.T) {
	c := newCluster(t, 1, 10*time.Second)
	c.createTopic("poison", 1, 1)
	leader := c.storage(1)
	r := c.node(1).node.replica("poison", 0)

	for _, p := range batchtest.Poisons(t) {
		for _, req := range []struct {
			name  string
			bytes []byte
		}{
			{"alone", bytes.Clone(p.Batch)},
			{"after a good batch", slices.Concat(batch(t, "good"), p.Batch)},
		} {
			_, err := produce(leader, "poison", acksAll, 1, req.bytes, 5*time.Second)
			if connect.CodeOf(err) != connect.CodeInvalidArgument || reason(err) != commonv1.Reason_REASON_INVALID_RECORD {
				t.Errorf("%s, %s: got %v, want INVALID_ARGUMENT INVALID_RECORD", p.Name, req.name, err)
			}
			if leo := r.Log().LogEndOffset(); leo != 0 {
				t.Fatalf("%s, %s: log end %d after a refused produce, want 0", p.Name, req.name, leo)
			}
		}
	}

	damaged := batch(t, "x")
	damaged[len(damaged)-1] ^= 0xff // the CRC no longer matches
	if _, err := produce(leader, "poison", acksAll, 1, damaged, 5*time.Second); connect.CodeOf(err) != connect.CodeInvalidArgument || reason(err) != commonv1.Reason_REASON_CORRUPT_RECORD {
		t.Errorf("a batch with a wrong CRC: got %v, want INVALID_ARGUMENT CORRUPT_RECORD", err)
	}

	// The partition stays readable: a good batch goes in and comes out.
	resp, err := produce(leader, "poison", acksAll, 1, batch(t, "a", "b"), 5*time.Second)
	if err != nil || resp.GetBaseOffset() != 0 {
		t.Fatalf("good produce: %v %v", resp, err)
	}
	if got := values(t, fetch(t, leader, "poison", 0, time.Second).GetRecords()); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("fetched %q", got)
	}
}

// A request that mixes a batch appended before with a new one cannot be
// answered with one base offset: it is refused whole, nothing appended.
func TestProduceRefusesMixOfDuplicateAndNew(t *testing.T) {
	c := newCluster(t, 1, 10*time.Second)
	c.createTopic("mix", 1, 1)
	leader := c.storage(1)
	mk := func(seq int32) []byte {
		return batchtest.Build(t, recordbatch.BuildOptions{Idempotent: true, ProducerID: 3, BaseSequence: seq}, batchtest.Records(2))
	}
	if _, err := produce(leader, "mix", acksAll, 1, mk(0), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	_, err := produce(leader, "mix", acksAll, 1, slices.Concat(mk(0), mk(2)), 5*time.Second)
	if connect.CodeOf(err) != connect.CodeInvalidArgument || reason(err) != commonv1.Reason_REASON_DUPLICATE_SEQUENCE {
		t.Fatalf("mixed request: %v, want INVALID_ARGUMENT DUPLICATE_SEQUENCE", err)
	}
	if leo := c.node(1).node.replica("mix", 0).Log().LogEndOffset(); leo != 2 {
		t.Fatalf("log end %d after a refused request, want 2", leo)
	}
	resp, err := produce(leader, "mix", acksAll, 1, mk(0), 5*time.Second)
	if err != nil || !resp.GetDuplicate() || resp.GetBaseOffset() != 0 {
		t.Fatalf("retry alone: %v %v, want duplicate at 0", resp, err)
	}
}
