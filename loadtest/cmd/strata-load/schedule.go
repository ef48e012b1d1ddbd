package main

import (
	"context"
	"time"
)

// clock is what the open-loop schedule needs of time, so a test can drive
// it without sleeping.
type clock interface {
	Now() time.Time
	// Sleep waits d or until ctx ends (then it returns ctx.Err()).
	Sleep(ctx context.Context, d time.Duration) error
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// openLoop calls send for record i at its intended time start + i/rate,
// for n records (n = 0: no limit) or until the intended time reaches
// until (zero: no limit), whichever comes first.
//
// The schedule never waits for the system under test: when send is slow
// (the producer's buffer is full, the generator is starved of CPU), the
// records whose time has passed are sent back to back, and each keeps its
// intended time. Latency measured from the intended time therefore counts
// the wait a real client arriving on schedule would have had, instead of
// leaving it out because the generator stopped offering load while the
// system stalled (coordinated omission).
//
// It returns how many records were sent and how far, at worst, a send
// started after its intended time: when that is large compared with the
// latencies, the generator, not the cluster, could not keep the rate.
func openLoop(ctx context.Context, clk clock, start time.Time, perSecond float64, n int, until time.Time,
	send func(i int, intended time.Time)) (sent int, maxLag time.Duration, err error) {
	interval := float64(time.Second) / perSecond
	for i := 0; n == 0 || i < n; i++ {
		intended := start.Add(time.Duration(float64(i) * interval))
		if !until.IsZero() && !intended.Before(until) {
			break
		}
		if d := intended.Sub(clk.Now()); d > 0 {
			if err := clk.Sleep(ctx, d); err != nil {
				return i, maxLag, err
			}
		} else if ctx.Err() != nil {
			return i, maxLag, ctx.Err()
		}
		maxLag = max(maxLag, clk.Now().Sub(intended))
		send(i, intended)
		sent = i + 1
	}
	return sent, maxLag, nil
}
