package main

import (
	"context"
	"testing"
	"time"
)

// fakeClock advances only when Sleep is called or a test moves it.
type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time { return c.now }

func (c *fakeClock) Sleep(_ context.Context, d time.Duration) error {
	c.now = c.now.Add(d)
	return nil
}

func TestOpenLoopKeepsTheScheduleThroughAStall(t *testing.T) {
	start := time.Unix(1000, 0)
	clk := &fakeClock{now: start}
	const perSecond = 1000 // one record a millisecond
	type send struct {
		intended, at time.Time
	}
	var sends []send
	sent, lag, err := openLoop(context.Background(), clk, start, perSecond, 200, time.Time{}, func(i int, intended time.Time) {
		sends = append(sends, send{intended, clk.Now()})
		if i == 10 {
			clk.now = clk.now.Add(50 * time.Millisecond) // the producer blocks for 50 ms
		}
	})
	if err != nil || sent != 200 || len(sends) != 200 {
		t.Fatalf("sent %d (%d calls), err %v; want 200", sent, len(sends), err)
	}
	for i, s := range sends {
		if want := start.Add(time.Duration(i) * time.Millisecond); !s.intended.Equal(want) {
			t.Fatalf("record %d intended at %v, want %v: the schedule must not move with a stall", i, s.intended.Sub(start), want.Sub(start))
		}
	}
	// Records 11..60 were due during the stall: each is sent at once
	// after it, late by up to the stall, instead of being spread out.
	if late := sends[11].at.Sub(sends[11].intended); late != 49*time.Millisecond {
		t.Fatalf("record 11 sent %v late, want 49ms", late)
	}
	if !sends[30].at.Equal(sends[11].at) {
		t.Fatalf("record 30 sent at %v, want back to back with record 11 at %v", sends[30].at.Sub(start), sends[11].at.Sub(start))
	}
	if lag != 49*time.Millisecond {
		t.Fatalf("max lag %v, want 49ms", lag)
	}
	// After catching up the generator is on time again.
	if late := sends[100].at.Sub(sends[100].intended); late != 0 {
		t.Fatalf("record 100 sent %v late, want on time", late)
	}
}

func TestOpenLoopStopsAtTheDeadline(t *testing.T) {
	start := time.Unix(1000, 0)
	clk := &fakeClock{now: start}
	sent, _, err := openLoop(context.Background(), clk, start, 100, 0, start.Add(time.Second), func(int, time.Time) {})
	if err != nil || sent != 100 {
		t.Fatalf("sent %d, err %v; want 100 records in one second at 100/s", sent, err)
	}
}

func TestOpenLoopStopsWithTheContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	start := time.Unix(1000, 0)
	clk := &fakeClock{now: start.Add(time.Hour)} // far behind: no sleeping
	sent, _, err := openLoop(ctx, clk, start, 100, 0, time.Time{}, func(i int, _ time.Time) {
		if i == 4 {
			cancel()
		}
	})
	if err == nil || sent != 5 {
		t.Fatalf("sent %d, err %v; want 5 and the context's error", sent, err)
	}
}
