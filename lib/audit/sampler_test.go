package audit

import (
	"fmt"
	"testing"
	"time"
)

// fakeClock is a clock tests move by hand.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func TestSampler(t *testing.T) {
	alice := Key{Kind: Denied, Who: "User:alice"}
	bob := Key{Kind: Denied, Who: "User:bob"}
	aliceAuth := Key{Kind: AuthFailure, Who: "User:alice"}
	type step struct {
		advance   time.Duration
		key       Key
		n         int   // events of key sent in this step
		admitted  int   // how many of them are admitted
		summaries int64 // events reported suppressed in this step
	}
	cases := []struct {
		name  string
		cfg   SamplerConfig
		steps []step
	}{
		{"a burst passes whole", SamplerConfig{Burst: 3, Every: time.Second}, []step{
			{key: alice, n: 3, admitted: 3},
		}},
		{"past the burst events are counted, not written", SamplerConfig{Burst: 3, Every: time.Second}, []step{
			{key: alice, n: 10, admitted: 3},
		}},
		{"a refill admits one and reports what was left out", SamplerConfig{Burst: 3, Every: time.Second}, []step{
			{key: alice, n: 10, admitted: 3},
			{advance: time.Second, key: alice, n: 1, admitted: 1, summaries: 7},
			{key: alice, n: 1, admitted: 0},
		}},
		{"principals have their own buckets", SamplerConfig{Burst: 2, Every: time.Second}, []step{
			{key: alice, n: 5, admitted: 2},
			{key: bob, n: 5, admitted: 2},
		}},
		{"kinds have their own buckets", SamplerConfig{Burst: 2, Every: time.Second}, []step{
			{key: alice, n: 5, admitted: 2},
			{key: aliceAuth, n: 5, admitted: 2},
		}},
		{"a flood costs a line per interval", SamplerConfig{Burst: 5, Every: time.Second}, []step{
			{key: alice, n: 10000, admitted: 5},
			{advance: 10 * time.Second, key: alice, n: 10000, admitted: 5, summaries: 9995},
		}},
		{"the bucket never holds more than the burst", SamplerConfig{Burst: 2, Every: time.Millisecond}, []step{
			{advance: time.Hour, key: alice, n: 10, admitted: 2},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
			tc.cfg.Now = clk.now
			s := NewSampler(tc.cfg)
			for i, st := range tc.steps {
				clk.advance(st.advance)
				admitted, suppressed := 0, int64(0)
				for range st.n {
					ok, sums := s.Admit(st.key)
					if ok {
						admitted++
					}
					for _, sum := range sums {
						if sum.Key != st.key {
							t.Errorf("step %d: summary of %v, want %v", i, sum.Key, st.key)
						}
						suppressed += sum.N
					}
				}
				if admitted != st.admitted || suppressed != st.summaries {
					t.Errorf("step %d: %d admitted, %d reported suppressed; want %d and %d", i, admitted, suppressed, st.admitted, st.summaries)
				}
			}
		})
	}
}

func TestSamplerDrain(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	s := NewSampler(SamplerConfig{Burst: 1, Every: time.Minute, Now: clk.now})
	for range 4 {
		s.Admit(Key{Kind: Denied, Who: "User:alice"})
	}
	sums := s.Drain()
	if len(sums) != 1 || sums[0].N != 3 || !sums[0].Since.Equal(clk.t) {
		t.Fatalf("Drain = %+v, want one summary of 3 since %v", sums, clk.t)
	}
	if again := s.Drain(); len(again) != 0 {
		t.Fatalf("second Drain = %+v, want nothing: counts are reported once", again)
	}
}

// Many principals cannot grow the sampler past MaxKeys: the extra ones
// share one bucket per kind, which samples them together.
func TestSamplerMaxKeys(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	s := NewSampler(SamplerConfig{Burst: 1, Every: time.Minute, MaxKeys: 10, Now: clk.now})
	admitted := 0
	for i := range 1000 {
		// Each principal twice: the second of each is over its burst, so
		// no bucket is ever idle enough to evict.
		for range 2 {
			if ok, _ := s.Admit(Key{Kind: Denied, Who: fmt.Sprintf("User:u%d", i)}); ok {
				admitted++
			}
		}
	}
	if n := len(s.buckets); n > 11 {
		t.Fatalf("%d buckets, want at most MaxKeys+1 (the overflow)", n)
	}
	if admitted != 11 {
		t.Fatalf("%d admitted, want 10 (one per tracked principal) + 1 (the overflow bucket's burst)", admitted)
	}
	// Once the tracked buckets are full again, new principals get their
	// own buckets again.
	clk.advance(time.Hour)
	s.Drain()
	if ok, _ := s.Admit(Key{Kind: Denied, Who: "User:late"}); !ok {
		t.Fatal("a new principal after the flood was not admitted")
	}
	if _, ok := s.buckets[Key{Kind: Denied, Who: "User:late"}]; !ok {
		t.Fatal("a new principal after the flood shares the overflow bucket: idle buckets were not evicted")
	}
}
