package server

import (
	"bytes"
	"context"
	"testing"

	"github.com/strata-mq/strata/services/tiering/internal/reader"
)

// BenchmarkUpload measures segment upload throughput (spool, verify,
// index, S3 PUT/multipart, manifest write) to the embedded S3 server over
// loopback HTTP. MB/s is the segment bytes per second.
func BenchmarkUpload(b *testing.B) {
	f := newFixture(b)
	seg := segmentBytes(b, 0, 8000, 1000, 1) // ~ 24 MB
	b.SetBytes(int64(len(seg)))
	base := int64(0)
	for b.Loop() {
		s := seg
		if base > 0 {
			s = segmentBytes(b, base, 8000, 1000, 1)
		}
		if _, err := f.up.Upload(context.Background(), header(base, s, 1), bytes.NewReader(s)); err != nil {
			b.Fatal(err)
		}
		base += 24000
	}
}

// BenchmarkColdRead reads a 1 MiB range from the tier with an empty cache
// each time (range GETs over loopback HTTP); compare with
// BenchmarkCachedRead and lib/partlog's local read benchmarks.
func BenchmarkColdRead(b *testing.B) { benchRead(b, true) }

// BenchmarkCachedRead reads the same range from a warm block cache.
func BenchmarkCachedRead(b *testing.B) { benchRead(b, false) }

func benchRead(b *testing.B, cold bool) {
	f := newFixture(b)
	seg := segmentBytes(b, 0, 8000, 1000, 1)
	if _, err := f.up.Upload(context.Background(), header(0, seg, 1), bytes.NewReader(seg)); err != nil {
		b.Fatal(err)
	}
	rd := reader.New(reader.Config{Store: f.store})
	b.SetBytes(1 << 20)
	off := int64(0)
	for b.Loop() {
		if cold {
			rd = reader.New(reader.Config{Store: f.store})
		}
		res, err := rd.Read(context.Background(), testPart, off%20000, 1<<20)
		if err != nil || len(res.Records) == 0 {
			b.Fatal(err)
		}
		off += 3000
	}
}
