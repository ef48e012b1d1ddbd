package partlog

import (
	"flag"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/strata-mq/strata/lib/recordbatch"
)

var cleanerBenchKeys = flag.Int("cleaner-bench-keys", 1<<20, "key space of BenchmarkCleaner")

// BenchmarkCleaner measures one cleaning pass over a log on the OS
// filesystem holding every key of the key space twice (the second copy
// overwrites the first): records of a 16-byte key and a 100-byte value,
// 100 records a batch, 64 MiB segments. The MB/s figure is the bytes of
// the dirty log per second of the pass, whose cleaned segments are
// fsynced; the pass reads them twice (to map and to rewrite). kept/dirty
// is the share of the bytes still in the log after it (about a half).
func BenchmarkCleaner(b *testing.B) {
	keys := *cleanerBenchKeys
	b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
		var dirty int64
		for range b.N {
			b.StopTimer()
			l := dirtyLog(b, keys, b.TempDir())
			before := l.Stats().Bytes
			cleanPageCache()
			b.StartTimer()
			res, err := l.Clean(ctx, everything())
			b.StopTimer()
			if err != nil || !res.Cleaned || res.RecordsRemoved < int64(keys)-100 {
				b.Fatalf("pass %+v: %v", res, err)
			}
			dirty += before
			b.ReportMetric(float64(l.Stats().Bytes)/float64(before), "kept/dirty")
			l.Close()
		}
		b.SetBytes(dirty / int64(b.N))
	})
}

// dirtyLog opens a log in dir holding every key of the key space twice
// (the second copy overwrites the first), 16-byte keys and 100-byte
// values, 100 records a batch, in 64 MiB segments, all of them sealed,
// committed and written back: the log BenchmarkCleaner cleans.
func dirtyLog(b *testing.B, keys int, dir string) *Log {
	b.Helper()
	cleanPageCache()
	l, err := Open(dir, Config{SegmentBytes: 64 << 20, CheckpointInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	value := make([]byte, 100)
	recs := make([]recordbatch.Record, 100)
	for round := range 2 {
		for k := 0; k < keys; k += len(recs) {
			for i := range recs {
				recs[i] = recordbatch.Record{Key: fmt.Appendf(nil, "key-%012d", k+i), Value: value, Timestamp: int64(round)}
			}
			batch, err := recordbatch.Build(recordbatch.BuildOptions{}, recs)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := l.AppendAsLeader(ctx, batch, 0); err != nil {
				b.Fatal(err)
			}
		}
	}
	// Seal the last segment and commit everything.
	if err := l.roll0(); err != nil {
		b.Fatal(err)
	}
	l.SetHighWatermark(l.LogEndOffset())
	if err := l.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	return l
}

// BenchmarkAppendWhileCleaning measures what a cleaning pass costs the
// producers: the latency of appends of a 65 KiB batch (benchBatch)
// issued open loop, one every millisecond, while one pass cleans the log
// of BenchmarkCleaner, against the same appends with the cleaner idle.
// "same" appends to the log being cleaned (its active segment), the
// compacted partition's own producers; "other" appends to another log
// on the same filesystem, a neighbour partition on the node. A latency
// runs from the append's planned start, so a stall also delays the
// appends planned during it. The idle run makes as many appends as the
// pass lasted milliseconds. Figures: p50, p99, p99.9 and max in
// microseconds.
func BenchmarkAppendWhileCleaning(b *testing.B) {
	keys := *cleanerBenchKeys
	for _, target := range []string{"same", "other"} {
		for _, cleaning := range []bool{true, false} {
			name := fmt.Sprintf("keys=%d/appends=%s/cleaner=idle", keys, target)
			if cleaning {
				name = fmt.Sprintf("keys=%d/appends=%s/cleaner=running", keys, target)
			}
			b.Run(name, func(b *testing.B) {
				var lat []time.Duration
				for range b.N {
					b.StopTimer()
					l := dirtyLog(b, keys, b.TempDir())
					dst := l
					if target == "other" {
						dst = openBench(b, FlushNone)
					}
					batch := benchBatch(b)
					cleanPageCache()
					b.StartTimer()
					done := make(chan error, 1)
					n := 0
					if cleaning {
						go func() {
							res, err := l.Clean(ctx, everything())
							if err == nil && !res.Cleaned {
								err = fmt.Errorf("the pass cleaned nothing: %+v", res)
							}
							done <- err
						}()
					} else {
						n = int(cleanPassHint / time.Millisecond)
					}
					start := time.Now()
					for i := 0; ; i++ {
						if cleaning {
							select {
							case err := <-done:
								if err != nil {
									b.Fatal(err)
								}
								n = -1
							default:
							}
							if n < 0 {
								break
							}
						} else if i >= n {
							break
						}
						planned := start.Add(time.Duration(i) * time.Millisecond)
						if d := time.Until(planned); d > 0 {
							time.Sleep(d)
						}
						if _, err := dst.AppendAsLeader(ctx, batch, 0); err != nil {
							b.Fatal(err)
						}
						lat = append(lat, time.Since(planned))
					}
					if cleaning {
						cleanPassHint = time.Since(start)
					}
					b.StopTimer()
					l.Close()
				}
				slices.Sort(lat)
				q := func(f float64) float64 {
					return float64(lat[min(len(lat)-1, int(f*float64(len(lat))))].Microseconds())
				}
				b.ReportMetric(q(0.5), "p50-us")
				b.ReportMetric(q(0.99), "p99-us")
				b.ReportMetric(q(0.999), "p99.9-us")
				b.ReportMetric(float64(lat[len(lat)-1].Microseconds()), "max-us")
				b.ReportMetric(float64(len(lat))/float64(b.N), "appends/op")
			})
		}
	}
}

// cleanPassHint is how long the last measured pass lasted: the idle runs
// make as many appends as it lasted milliseconds (3 s before any pass).
var cleanPassHint = 3 * time.Second

// roll0 seals the active segment (for benchmarks and tests that need
// every appended batch cleanable).
func (l *Log) roll0() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.roll()
}
