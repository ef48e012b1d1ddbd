package audit

import (
	"sync"
	"time"
)

// SamplerConfig bounds how many lines a flood writes. The zero value
// takes every default.
type SamplerConfig struct {
	// Burst is how many events of one key are written back to back
	// before sampling starts. Default 20.
	Burst int
	// Every is how often one more event of a key is let through once its
	// burst is spent. Default 1s: a flood of one kind from one principal
	// writes about one line a second.
	Every time.Duration
	// MaxKeys bounds the keys tracked at once; events of keys beyond it
	// share one bucket per kind, so many principals cannot grow the map
	// without limit. Default 4096.
	MaxKeys int
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

func (c *SamplerConfig) defaults() {
	if c.Burst <= 0 {
		c.Burst = 20
	}
	if c.Every <= 0 {
		c.Every = time.Second
	}
	if c.MaxKeys <= 0 {
		c.MaxKeys = 4096
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Key is what a sampler counts events by: their kind and who caused them.
type Key struct {
	Kind Kind
	Who  string
}

// overflowWho is the Who of the shared bucket for keys past MaxKeys.
const overflowWho = "*"

// Summary counts the events of Key left out since Since.
type Summary struct {
	Key   Key
	N     int64
	Since time.Time
}

// Sampler is a token bucket per key. Safe for concurrent use.
type Sampler struct {
	cfg     SamplerConfig
	mu      sync.Mutex
	buckets map[Key]*bucket
}

type bucket struct {
	tokens     float64   // events that may be written now, at most Burst
	last       time.Time // when tokens was last refilled
	suppressed int64     // events left out since the last summary
	since      time.Time // when the first of them was left out
}

// NewSampler returns a Sampler with cfg's limits.
func NewSampler(cfg SamplerConfig) *Sampler {
	cfg.defaults()
	return &Sampler{cfg: cfg, buckets: map[Key]*bucket{}}
}

// Admit reports whether an event of k may be written now, and returns
// the summaries to write before it: k's own, when events of k were left
// out and this one is admitted.
func (s *Sampler) Admit(k Key) (bool, []Summary) {
	now := s.cfg.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.buckets[k]
	if b == nil {
		if len(s.buckets) >= s.cfg.MaxKeys {
			s.evictIdle(now)
		}
		if len(s.buckets) >= s.cfg.MaxKeys {
			k.Who = overflowWho
			b = s.buckets[k]
		}
		if b == nil {
			b = &bucket{tokens: float64(s.cfg.Burst), last: now}
			s.buckets[k] = b
		}
	}
	b.refill(now, s.cfg)
	if b.tokens < 1 {
		if b.suppressed == 0 {
			b.since = now
		}
		b.suppressed++
		return false, nil
	}
	b.tokens--
	if b.suppressed == 0 {
		return true, nil
	}
	sum := Summary{Key: k, N: b.suppressed, Since: b.since}
	b.suppressed = 0
	return true, []Summary{sum}
}

// Drain returns a summary for every key with events left out, and
// forgets those counts.
func (s *Sampler) Drain() []Summary {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Summary
	for k, b := range s.buckets {
		if b.suppressed > 0 {
			out = append(out, Summary{Key: k, N: b.suppressed, Since: b.since})
			b.suppressed = 0
		}
	}
	return out
}

// evictIdle forgets the keys whose buckets are full again and owe no
// summary: they would start the same way if seen again.
func (s *Sampler) evictIdle(now time.Time) {
	for k, b := range s.buckets {
		b.refill(now, s.cfg)
		if b.suppressed == 0 && b.tokens >= float64(s.cfg.Burst) {
			delete(s.buckets, k)
		}
	}
}

func (b *bucket) refill(now time.Time, cfg SamplerConfig) {
	if d := now.Sub(b.last); d > 0 {
		b.tokens = min(float64(cfg.Burst), b.tokens+float64(d)/float64(cfg.Every))
		b.last = now
	}
}
