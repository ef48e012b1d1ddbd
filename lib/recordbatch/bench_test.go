package recordbatch

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// benchRecords is 64 records of 1 KiB values: JSON-like text drawn from a
// small vocabulary, so the codecs have something realistic to compress
// (roughly 3-5x) rather than all zeros or pure noise.
func benchRecords() []Record {
	rng := rand.New(rand.NewPCG(1, 2))
	words := []string{"user", "id", "event", "click", "view", "ts", "region", "eu-west-1",
		"session", "true", "false", "null", "price", "sku", "cart", "checkout"}
	recs := make([]Record, 64)
	for i := range recs {
		v := make([]byte, 0, 1024)
		for len(v) < 1024 {
			v = fmt.Appendf(v, `{"%s":%d,"%s":"%s"},`, words[rng.IntN(len(words))], rng.IntN(100000),
				words[rng.IntN(len(words))], words[rng.IntN(len(words))])
		}
		recs[i] = Record{
			Key:       fmt.Appendf(nil, "user-%d", rng.IntN(1000)),
			Value:     v[:1024],
			Timestamp: 1_700_000_000_000 + int64(i),
			Headers:   []RecordHeader{{Key: "content-type", Value: []byte("application/json")}},
		}
	}
	return recs
}

// recordsBytes is the key and value payload of recs, the figure SetBytes
// reports against.
func recordsBytes(recs []Record) int64 {
	var n int64
	for _, r := range recs {
		n += int64(len(r.Key) + len(r.Value))
	}
	return n
}

func BenchmarkBuild(b *testing.B) {
	recs := benchRecords()
	for _, codec := range allCodecs {
		b.Run(codec.String(), func(b *testing.B) {
			b.SetBytes(recordsBytes(recs))
			b.ReportAllocs()
			var size int
			for b.Loop() {
				batch, err := Build(BuildOptions{Codec: codec}, recs)
				if err != nil {
					b.Fatal(err)
				}
				size = len(batch)
			}
			b.ReportMetric(float64(size), "batch-bytes")
		})
	}
}

func BenchmarkDecode(b *testing.B) {
	recs := benchRecords()
	for _, codec := range allCodecs {
		b.Run(codec.String(), func(b *testing.B) {
			batch := mustBuild(b, BuildOptions{Codec: codec}, recs)
			b.SetBytes(recordsBytes(recs))
			b.ReportAllocs()
			defer reportCPU(b)()
			for b.Loop() {
				if _, err := Decode(batch); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(batch)), "batch-bytes")
		})
	}
}

// reportCPU starts measuring the process's CPU time; the returned function
// reports it per operation as cpu-ns/op. On a machine shared with other
// work that figure is steadier than ns/op, which counts waiting for a CPU.
func reportCPU(b *testing.B) func() {
	start := processCPU()
	return func() {
		if d := processCPU() - start; d > 0 && b.N > 0 {
			b.ReportMetric(float64(d.Nanoseconds())/float64(b.N), "cpu-ns/op")
		}
	}
}

// BenchmarkValidate is the check the leader runs on every produced batch
// (ValidateProduced), on the same 64 KiB batches as BenchmarkDecode; the
// "crc-only" case is Verify, all the produce path checked before.
func BenchmarkValidate(b *testing.B) {
	recs := benchRecords()
	batch := mustBuild(b, BuildOptions{}, recs)
	b.Run("crc-only", func(b *testing.B) {
		b.SetBytes(recordsBytes(recs))
		b.ReportAllocs()
		defer reportCPU(b)()
		for b.Loop() {
			if _, err := Verify(batch); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, codec := range allCodecs {
		b.Run(codec.String(), func(b *testing.B) {
			batch := mustBuild(b, BuildOptions{Codec: codec}, recs)
			b.SetBytes(recordsBytes(recs))
			b.ReportAllocs()
			defer reportCPU(b)()
			for b.Loop() {
				if _, err := ValidateProduced(batch); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(batch)), "batch-bytes")
		})
	}
}

// BenchmarkLeaderRewrites is what a topic's configs add to the leader's
// work per produced batch, on the same 64 KiB batches: the log-append
// time (one CRC over the batch) and recompression from the producer's
// codec to the topic's compression.type (inflate, deflate, CRC).
func BenchmarkLeaderRewrites(b *testing.B) {
	recs := benchRecords()
	b.Run("log-append-time", func(b *testing.B) {
		batch := mustBuild(b, BuildOptions{}, recs)
		b.SetBytes(recordsBytes(recs))
		b.ReportAllocs()
		defer reportCPU(b)()
		ts := int64(1_800_000_000_000)
		for b.Loop() {
			ts++
			SetLogAppendTime(batch, ts)
		}
	})
	for _, c := range []struct{ from, to Codec }{{CodecNone, CodecLZ4}, {CodecLZ4, CodecZstd}, {CodecSnappy, CodecNone}, {CodecNone, CodecZstd}} {
		b.Run(c.from.String()+"-to-"+c.to.String(), func(b *testing.B) {
			batch := mustBuild(b, BuildOptions{Codec: c.from}, recs)
			b.SetBytes(recordsBytes(recs))
			b.ReportAllocs()
			defer reportCPU(b)()
			for b.Loop() {
				if _, err := Recompress(batch, c.to); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
