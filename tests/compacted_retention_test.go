package tests

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-mq/strata/client"
	commonv1 "github.com/strata-mq/strata/gen/strata/common/v1"
	"github.com/strata-mq/strata/lib/testwait"
	"github.com/strata-mq/strata/tests/harness"
)

// TestCompactedTopicKeepsKeysPastRetention runs strata dev with the
// storage nodes' and the tier's retention every 200ms. Four topics get the
// same keyed records, stamped an hour ago, with 1 KiB segments: a compact
// and a delete topic on local disk with retention.ms=1000, and a compact
// and a delete topic tiered (remote.storage.enable, local.retention.bytes=0,
// so their sealed segments live in the tier only) with
// retention.bytes=1024. Once retention has trimmed each delete topic twice
// (the second time in a round that began after every record was written),
// both compacted topics still hold every key from offset 0, read through
// franz-go at the Kafka listener and through the Connect client, while the
// delete topics' early keys are gone for both. A record without a key is
// refused on a compacted topic: INVALID_RECORD at the Kafka listener, the
// same reason and a line saying why at the Connect API.
func TestCompactedTopicKeepsKeysPastRetention(t *testing.T) {
	t.Parallel()
	d, _ := kafkaDev(t, "STRATA_RETENTION_INTERVAL=200ms")
	ctx := harness.Deadline(t, 6*time.Minute)
	kc := kafkaClient(t, d, kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(0))
	adm := kadm.NewClient(kc)
	// The tiered topics are trimmed by size (retention.bytes), so the
	// delete topic's tier drops its oldest segments while the compact
	// topic's keeps every key whatever its size.
	tiered := map[string]string{"remote.storage.enable": "true", "local.retention.bytes": "0",
		"retention.bytes": "1024", "retention.ms": "-1"}
	type topicCase struct {
		name, policy string
		extra        map[string]string
	}
	kept := []topicCase{{"kept-keys", "compact", nil}, {"kept-keys-tiered", "compact", tiered}}
	lost := []topicCase{{"lost-keys", "delete", nil}, {"lost-keys-tiered", "delete", tiered}}
	for _, tc := range append(slices.Clone(kept), lost...) {
		cfg := map[string]*string{"cleanup.policy": kadm.StringPtr(tc.policy),
			"retention.ms": kadm.StringPtr("1000"), "segment.bytes": kadm.StringPtr("1024")}
		for k, v := range tc.extra {
			cfg[k] = kadm.StringPtr(v)
		}
		if resp, err := adm.CreateTopic(ctx, 1, 1, cfg, tc.name); err != nil || resp.Err != nil {
			t.Fatalf("create %s: %v %v", tc.name, err, resp.Err)
		}
	}

	hourAgo := time.Now().Add(-time.Hour)
	value := strings.Repeat("v", 200) // three records to a 1 KiB segment
	produce := func(topic, prefix string, n int) {
		t.Helper()
		for i := range n { // one batch each, so segments roll
			r := &kgo.Record{Topic: topic, Key: []byte(fmt.Sprintf("%s%d", prefix, i)), Value: []byte(value), Timestamp: hourAgo}
			if err := kc.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatalf("produce to %s: %v", topic, err)
			}
		}
	}
	const keys = 30
	for _, tc := range append(slices.Clone(kept), lost...) { // the kept ones first
		produce(tc.name, "k", keys)
	}
	startOf := func(topic string) int64 {
		t.Helper()
		offs, err := adm.ListStartOffsets(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		o, _ := offs.Lookup(topic, 0)
		return o.Offset
	}
	// Two trims of each delete topic: the second removes segments sealed
	// after the first was seen, so its retention round began after every
	// record of the compacted topics was acknowledged.
	for _, tc := range lost {
		var start int64
		for round := range 2 {
			if round > 0 {
				produce(tc.name, "late", 10)
			}
			prev := start
			testwait.Until(t, 2*time.Minute, fmt.Sprintf("retention trims %s past offset %d", tc.name, prev), func() error {
				if start = startOf(tc.name); start <= prev {
					return fmt.Errorf("log start %d", start)
				}
				return nil
			})
		}
	}
	for _, tc := range kept {
		if s := startOf(tc.name); s != 0 {
			t.Fatalf("retention deleted records of the compacted topic %s: log start %d", tc.name, s)
		}
	}

	// The Connect client.
	read := func(topic string, want int) []*client.Record {
		t.Helper()
		c, err := client.NewConsumer(d.Gateways[0])
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Assign(map[string]map[int32]client.Offset{topic: {0: client.StartOffset()}})
		var out []*client.Record
		testwait.Until(t, time.Minute, fmt.Sprintf("%d records of %s through the Connect client", want, topic), func() error {
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			rs, err := c.Poll(pctx)
			if err != nil && !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("poll %s: %v", topic, err)
			}
			out = append(out, rs...)
			if len(out) < want {
				return fmt.Errorf("%d records", len(out))
			}
			return nil
		})
		return out
	}
	for _, tc := range kept {
		// franz-go at the Kafka listener.
		for i, r := range consumeAll(t, d, tc.name, keys)[:keys] {
			if r.Offset != int64(i) || string(r.Key) != fmt.Sprintf("k%d", i) {
				t.Fatalf("%s: franz-go read offset %d key %q at position %d, want offset %d key k%d", tc.name, r.Offset, r.Key, i, i, i)
			}
		}
		for i, r := range read(tc.name, keys)[:keys] {
			if r.Offset != int64(i) || string(r.Key) != fmt.Sprintf("k%d", i) {
				t.Fatalf("%s: the Connect client read offset %d key %q at position %d, want offset %d key k%d", tc.name, r.Offset, r.Key, i, i, i)
			}
		}
	}
	for _, tc := range lost {
		if first := consumeAll(t, d, tc.name, 1)[0]; first.Offset == 0 {
			t.Fatalf("franz-go read %s from offset 0: retention kept it", tc.name)
		}
		if first := read(tc.name, 1)[0]; first.Offset == 0 {
			t.Fatalf("the Connect client read %s from offset 0: retention kept it", tc.name)
		}
	}
	compacted := kept[0].name

	// A record without a key.
	err := kc.ProduceSync(ctx, &kgo.Record{Topic: compacted, Value: []byte("no key")}).FirstErr()
	if !errors.Is(err, kerr.InvalidRecord) {
		t.Fatalf("a record without a key at the Kafka listener: %v, want INVALID_RECORD", err)
	}
	p, err := client.NewProducer(d.Gateways[0], client.WithAcks(client.AcksAll))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	err = p.ProduceSync(ctx, &client.Record{Topic: compacted, Value: []byte("no key")})
	if client.ReasonOf(err) != commonv1.Reason_REASON_INVALID_RECORD || !strings.Contains(err.Error(), "every record needs a key") {
		t.Fatalf("a record without a key at the Connect API: %v, want INVALID_RECORD saying a key is needed", err)
	}
}
