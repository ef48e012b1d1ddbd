package main

import (
	"sync"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// Latencies are kept in an HDR histogram (HdrHistogram's Go port) rather
// than a slice of every sample: memory stays fixed however long a run is,
// and p999 and max keep 3 significant digits from a microsecond to a
// minute. The library is the reference implementation of the format the
// benchmarks this one is shaped after report in, and pulls in nothing at
// run time.
const (
	histLowest  = 1                        // µs
	histHighest = int64(time.Minute / 1e3) // µs; slower samples are clamped to it
	histDigits  = 3
)

// latency is a histogram of durations safe for concurrent Record calls
// (producer callbacks run on one goroutine per partition).
type latency struct {
	mu sync.Mutex
	h  *hdrhistogram.Histogram
}

func newLatency() *latency {
	return &latency{h: hdrhistogram.New(histLowest, histHighest, histDigits)}
}

// Record adds one sample. Samples below a microsecond count as one and
// above a minute as a minute, so no sample is dropped.
func (l *latency) Record(d time.Duration) {
	us := d.Microseconds()
	us = max(us, histLowest)
	us = min(us, histHighest)
	l.mu.Lock()
	_ = l.h.RecordValue(us) // cannot fail: us is inside the trackable range
	l.mu.Unlock()
}

// Count is the number of samples recorded.
func (l *latency) Count() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.h.TotalCount()
}

// Summary is a latency distribution in milliseconds, as printed and as
// written to JSON.
type Summary struct {
	Count int64   `json:"count"`
	P50   float64 `json:"p50_ms"`
	P99   float64 `json:"p99_ms"`
	P999  float64 `json:"p999_ms"`
	Max   float64 `json:"max_ms"`
}

// Summary returns the distribution so far; nil when nothing was recorded.
func (l *latency) Summary() *Summary {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.h.TotalCount() == 0 {
		return nil
	}
	ms := func(us int64) float64 { return float64(us) / 1e3 }
	return &Summary{
		Count: l.h.TotalCount(),
		P50:   ms(l.h.ValueAtQuantile(50)),
		P99:   ms(l.h.ValueAtQuantile(99)),
		P999:  ms(l.h.ValueAtQuantile(99.9)),
		Max:   ms(l.h.Max()),
	}
}
