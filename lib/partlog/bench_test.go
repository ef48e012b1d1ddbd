package partlog

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"

	"github.com/strata-mq/strata/lib/recordbatch"
	"github.com/strata-mq/strata/lib/vfs"
)

// benchBatch is one batch of 64 records of 1 KiB (about 65 KiB).
func benchBatch(b *testing.B) []byte {
	b.Helper()
	recs := make([]recordbatch.Record, 64)
	for i := range recs {
		recs[i] = recordbatch.Record{Value: bytes.Repeat([]byte{byte(i)}, 1024), Timestamp: int64(i)}
	}
	batch, err := recordbatch.Build(recordbatch.BuildOptions{}, recs)
	if err != nil {
		b.Fatal(err)
	}
	return batch
}

// cleanPageCache writes back every dirty page in the system so that each
// benchmark run starts from the same state instead of paying for the
// writeback of the previous run.
func cleanPageCache() { syscall.Sync() }

func openBench(b *testing.B, mode FlushMode) *Log {
	b.Helper()
	cleanPageCache()
	l, err := Open(b.TempDir(), Config{Flush: FlushPolicy{Mode: mode}, CheckpointInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	return l
}

// BenchmarkRawWrite is the baseline: sequential writes of the same batch
// bytes to a plain file.
func BenchmarkRawWrite(b *testing.B) {
	batch := benchBatch(b)
	f, err := os.Create(filepath.Join(b.TempDir(), "raw"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	cleanPageCache()
	b.SetBytes(int64(len(batch)))
	b.ResetTimer()
	for range b.N {
		if _, err := f.Write(batch); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppend(b *testing.B) {
	b.Run("flush=none", func(b *testing.B) {
		batch := benchBatch(b)
		l := openBench(b, FlushNone)
		b.SetBytes(int64(len(batch)))
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			// AppendAsLeader restamps the offset and epoch in place; the
			// CRC does not cover them, so the buffer is reusable.
			if _, err := l.AppendAsLeader(ctx, batch, 0); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkAppendSync(b *testing.B) {
	// Group commit gains with the number of appenders waiting at once, so
	// it is measured at two levels of concurrency: one round's fsync
	// covers about half of them.
	for _, appenders := range []int{32, 128} {
		b.Run(fmt.Sprintf("groupcommit/appenders=%d", appenders), func(b *testing.B) {
			proto := benchBatch(b)
			l := openBench(b, FlushSync)
			b.SetBytes(int64(len(proto)))
			b.SetParallelism(max(1, appenders/runtime.GOMAXPROCS(0)))
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				batch := bytes.Clone(proto) // each appender stamps its own copy
				for pb.Next() {
					if _, err := l.AppendAsLeader(ctx, batch, 0); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
	b.Run("fsync-per-batch", func(b *testing.B) {
		batch := benchBatch(b)
		l := openBench(b, FlushSync)
		b.SetBytes(int64(len(batch)))
		b.ResetTimer()
		for range b.N {
			if _, err := l.AppendAsLeader(ctx, batch, 0); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkRead reads sequentially through a pre-filled log (page cache)
// with 1 MiB reads: "reuse" into one pooled buffer, as a server would,
// "alloc" with a new buffer per read.
func BenchmarkRead(b *testing.B) {
	batch := benchBatch(b)
	l, err := Open(b.TempDir(), Config{SegmentBytes: 64 << 20, CheckpointInterval: -1}, WithFS(vfs.Default))
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	for range 2048 { // 128 MiB, two segments
		if _, err := l.AppendAsLeader(ctx, batch, 0); err != nil {
			b.Fatal(err)
		}
	}
	if err := l.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	leo := l.LogEndOffset()
	for _, tc := range []struct {
		name  string
		reuse bool
	}{{"reuse", true}, {"alloc", false}} {
		b.Run(tc.name, func(b *testing.B) {
			var buf []byte
			if tc.reuse {
				buf = make([]byte, 1<<20+len(batch))
			}
			var total int64
			b.ReportAllocs()
			b.ResetTimer()
			next := int64(0)
			for range b.N {
				if next >= leo {
					next = 0
				}
				res, err := l.ReadInto(buf, next, 1<<20, leo)
				if err != nil {
					b.Fatal(err)
				}
				total += int64(len(res.Batches))
				next = res.NextOffset
			}
			b.StopTimer()
			b.SetBytes(total / int64(b.N))
		})
	}
}

// BenchmarkTailRead reads the newest batch of a log of one-record 1 KiB
// batches, as a follower's fetch does after each append: the batch is
// found among the segment's recent batches, not by reading headers from
// the index entry on.
func BenchmarkTailRead(b *testing.B) {
	batch, err := recordbatch.Build(recordbatch.BuildOptions{}, []recordbatch.Record{{Value: bytes.Repeat([]byte{1}, 1024)}})
	if err != nil {
		b.Fatal(err)
	}
	l, err := Open(b.TempDir(), Config{CheckpointInterval: -1}, WithFS(vfs.Default))
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	for range 1000 {
		if _, err := l.AppendAsLeader(ctx, batch, 0); err != nil {
			b.Fatal(err)
		}
	}
	leo := l.LogEndOffset()
	buf := make([]byte, 64<<10)
	b.ReportAllocs()
	for b.Loop() {
		if res, err := l.ReadInto(buf, leo-1, len(buf), leo); err != nil || len(res.Batches) == 0 {
			b.Fatal(res, err)
		}
	}
}
