package replica

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/strata-mq/strata/lib/recordbatch"
)

// BenchmarkProduce is the leader's produce path on one replica (RF=1,
// acks=leader, no fsync): validation of every record, the idempotence
// checks, the append. The batches are 64 records of 1 KiB JSON-like values
// (64 KiB before compression), as in lib's BenchmarkDecode. "append-only"
// is the partition log's append without the replica in front, the cost the
// produce path had before it validated batches.
func BenchmarkProduce(b *testing.B) {
	recs := benchRecords()
	var size int64
	for _, r := range recs {
		size += int64(len(r.Key) + len(r.Value))
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	open := func(b *testing.B) *Replica {
		r, err := Open(b.TempDir(), "bench", "bench-id", 0, Config{MinISR: 1}, Options{NodeID: 1, Logger: quiet})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = r.Close() })
		r.ApplyState(State{LeaderID: 1, LeaderEpoch: 1, PartitionEpoch: 1, Replicas: []int32{1}, ISR: []int32{1}})
		return r
	}
	batch := func(b *testing.B, codec recordbatch.Codec, idempotent bool) []byte {
		opts := recordbatch.BuildOptions{Codec: codec, Idempotent: idempotent, ProducerID: 1}
		out, err := recordbatch.Build(opts, recs)
		if err != nil {
			b.Fatal(err)
		}
		return out
	}
	b.Run("append-only", func(b *testing.B) {
		r := open(b)
		src := batch(b, recordbatch.CodecNone, false)
		buf := make([]byte, len(src))
		b.SetBytes(size)
		b.ReportAllocs()
		for b.Loop() {
			copy(buf, src)
			if _, err := r.Log().AppendAsLeader(context.Background(), buf, 1); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, codec := range []recordbatch.Codec{recordbatch.CodecNone, recordbatch.CodecLZ4, recordbatch.CodecZstd} {
		b.Run(codec.String(), func(b *testing.B) {
			r := open(b)
			src := batch(b, codec, false)
			buf := make([]byte, len(src))
			b.SetBytes(size)
			b.ReportAllocs()
			for b.Loop() {
				copy(buf, src)
				if _, err := r.Produce(context.Background(), buf, AcksLeader, 1, time.Second); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("none-idempotent", func(b *testing.B) {
		r := open(b)
		src := batch(b, recordbatch.CodecNone, true)
		buf := make([]byte, len(src))
		seq := int32(0)
		b.SetBytes(size)
		b.ReportAllocs()
		for b.Loop() {
			copy(buf, src)
			setSequence(buf, seq)
			seq += int32(len(recs))
			if _, err := r.Produce(context.Background(), buf, AcksLeader, 1, time.Second); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// setSequence rewrites a batch's base sequence and its CRC.
func setSequence(b []byte, seq int32) {
	b[53], b[54], b[55], b[56] = byte(seq>>24), byte(seq>>16), byte(seq>>8), byte(seq)
	crc := recordbatch.ComputeCRC(b)
	b[17], b[18], b[19], b[20] = byte(crc>>24), byte(crc>>16), byte(crc>>8), byte(crc)
}

// benchRecords is 64 records of 1 KiB JSON-like values drawn from a small
// vocabulary, so the codecs compress them about as much as real traffic.
func benchRecords() []recordbatch.Record {
	rng := rand.New(rand.NewPCG(1, 2))
	words := []string{"user", "id", "event", "click", "view", "ts", "region", "eu-west-1",
		"session", "true", "false", "null", "price", "sku", "cart", "checkout"}
	recs := make([]recordbatch.Record, 64)
	now := time.Now().UnixMilli()
	for i := range recs {
		var v bytes.Buffer
		for v.Len() < 1024 {
			fmt.Fprintf(&v, `{"%s":%d,"%s":"%s"},`, words[rng.IntN(len(words))], rng.IntN(100000),
				words[rng.IntN(len(words))], words[rng.IntN(len(words))])
		}
		recs[i] = recordbatch.Record{Key: fmt.Appendf(nil, "user-%d", rng.IntN(1000)), Value: v.Bytes()[:1024], Timestamp: now}
	}
	return recs
}
