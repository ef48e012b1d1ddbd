package checker

import (
	"fmt"
	"testing"
	"time"

	"github.com/strata-mq/strata/tests/nemesis/history"
)

// eventTime returns the time of the event at index.
func eventTime(t *testing.T, evs []history.Event, index int64) time.Time {
	t.Helper()
	for _, ev := range evs {
		if ev.Index == index {
			return ev.Time
		}
	}
	t.Fatalf("no event %d", index)
	return time.Time{}
}

func TestUnavailabilityDuringAFault(t *testing.T) {
	b := newBuilder()
	b.sent("p", "a", 0, 0) // events 1, 2
	kill := b.rec.StartFault(history.FaultKill, "node 2")
	for i := range 8 {
		b.wait(500 * time.Millisecond)
		b.failed("p", fmt.Sprintf("f%d", i)) // first invoke is event 4
	}
	b.wait(500 * time.Millisecond)
	b.sent("p", "b", 0, 1) // events 20, 21
	kill.Stop("restarted")
	b.poll("c", r(0, 0, "a"), r(0, 1, "b"))
	evs := b.rec.Events()

	res := Check(evs, Options{})
	av := res.SendAvailability
	if av.Windows.Count != 1 {
		t.Fatalf("%d send windows, want 1:\n%v", av.Windows.Count, res)
	}
	w := av.Windows.First[0]
	start, end := eventTime(t, evs, 4), eventTime(t, evs, 21)
	if !w.Start.Equal(start) || !w.End.Equal(end) || w.Length != end.Sub(start) {
		t.Fatalf("window %v to %v (%v), want %v to %v: it starts at the first attempt after the success", w.Start, w.End, w.Length, start, end)
	}
	if w.LastOk != 2 || w.NextOk != 21 || w.Attempts != 9 {
		t.Fatalf("window after %d until %d with %d attempts, want 2, 21, 9", w.LastOk, w.NextOk, w.Attempts)
	}
	if len(w.Faults) != 1 || w.Faults[0] != (ActiveFault{Kind: history.FaultKill, Description: "node 2", Start: 3}) {
		t.Fatalf("faults %+v", w.Faults)
	}
	if len(av.Longest) != 1 || av.Longest[history.FaultKill] != w.Length || av.Total != w.Length {
		t.Fatalf("longest %v, total %v", av.Longest, av.Total)
	}
	if res.PollAvailability.Windows.Count != 0 || res.Faults[history.FaultKill] != 1 {
		t.Fatalf("poll windows %d, faults %v", res.PollAvailability.Windows.Count, res.Faults)
	}
	if !res.Ok() {
		t.Fatalf("unavailability is no anomaly:\n%v", res)
	}
}

func TestUnavailabilityWindows(t *testing.T) {
	cases := []struct {
		name  string
		opts  Options
		build func(b *builder)
		// want is the windows' lengths, rounded to 100ms, and their
		// fault kinds.
		want    []time.Duration
		longest map[string]time.Duration
	}{{
		name: "an idle gap is no window",
		build: func(b *builder) {
			b.sent("p", "a", 0, 0)
			b.wait(5 * time.Second)
			b.sent("p", "b", 0, 1)
		},
	}, {
		name: "a gap shorter than the threshold",
		build: func(b *builder) {
			b.sent("p", "a", 0, 0)
			h := b.send("p", "b", "b")
			b.wait(900 * time.Millisecond)
			h.SendOk(0, 1)
		},
	}, {
		name: "a gap longer than a lower threshold",
		opts: Options{UnavailableAfter: 500 * time.Millisecond},
		build: func(b *builder) {
			b.sent("p", "a", 0, 0)
			h := b.send("p", "b", "b")
			b.wait(900 * time.Millisecond)
			h.SendOk(0, 1)
		},
		want:    []time.Duration{900 * time.Millisecond},
		longest: map[string]time.Duration{NoFault: 900 * time.Millisecond},
	}, {
		name: "an attempt in flight across the last success starts the window there",
		build: func(b *builder) {
			slow := b.send("p", "a", "a")
			b.sent("q", "b", 0, 0)
			b.wait(3 * time.Second)
			slow.Info(errTimeout)
			b.sent("q", "c", 0, 1)
		},
		want:    []time.Duration{3 * time.Second},
		longest: map[string]time.Duration{NoFault: 3 * time.Second},
	}, {
		name: "a pending attempt lasts to the end of the history",
		build: func(b *builder) {
			b.sent("p", "a", 0, 0)
			b.send("p", "b", "b")
			b.wait(2 * time.Second)
			b.poll("c", r(0, 0, "a"))
		},
		want:    []time.Duration{2 * time.Second},
		longest: map[string]time.Duration{NoFault: 2 * time.Second},
	}, {
		name: "nothing ever succeeded",
		build: func(b *builder) {
			for range 4 {
				b.failed("p", "x")
				b.wait(time.Second)
			}
		},
		want:    []time.Duration{3 * time.Second},
		longest: map[string]time.Duration{NoFault: 3 * time.Second},
	}, {
		name: "each window counts for every fault active in it",
		build: func(b *builder) {
			b.sent("p", "a", 0, 0)
			pause := b.rec.StartFault(history.FaultPause, "node 1")
			h := b.send("p", "b", "b")
			b.wait(2 * time.Second)
			h.SendOk(0, 1)
			pause.Stop("")
			h = b.send("p", "c", "c")
			b.rec.StartFault(history.FaultS3Slow, "never stopped")
			b.wait(3 * time.Second)
			h.SendOk(0, 2)
			b.rec.StartFault(history.FaultKill, "after the windows")
		},
		want:    []time.Duration{2 * time.Second, 3 * time.Second},
		longest: map[string]time.Duration{history.FaultPause: 2 * time.Second, history.FaultS3Slow: 3 * time.Second},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := newBuilder()
			tc.build(b)
			av := Check(b.rec.Events(), tc.opts).SendAvailability
			var got []time.Duration
			for _, w := range av.Windows.First {
				got = append(got, w.Length.Round(100*time.Millisecond))
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("windows %v, want %v: %v", got, tc.want, av.Windows.First)
			}
			rounded := map[string]time.Duration{}
			for k, d := range av.Longest {
				rounded[k] = d.Round(100 * time.Millisecond)
			}
			if fmt.Sprint(rounded) != fmt.Sprint(tc.longest) && len(rounded)+len(tc.longest) > 0 {
				t.Fatalf("longest %v, want %v", rounded, tc.longest)
			}
		})
	}
}
