package clock

import (
	"testing"
	"time"
)

func TestFakeStepsWallWithoutTimePassing(t *testing.T) {
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	f := NewFake(start)
	m0 := f.Mono()
	f.StepWall(-time.Hour)
	if f.Mono() != m0 || !f.Wall().Equal(start.Add(-time.Hour)) {
		t.Fatalf("StepWall: mono %v (was %v), wall %v", f.Mono(), m0, f.Wall())
	}
	f.Advance(3 * time.Second)
	if f.Mono()-m0 != 3*time.Second || !f.Wall().Equal(start.Add(-time.Hour+3*time.Second)) {
		t.Fatalf("Advance: mono moved %v, wall %v", f.Mono()-m0, f.Wall())
	}
	// A reading 2 s ago shows as the current wall time minus 2 s.
	if got, want := WallAt(f, f.Mono()-2*time.Second), f.Wall().Add(-2*time.Second); !got.Equal(want) {
		t.Fatalf("WallAt: %v, want %v", got, want)
	}
}

func TestSystemMonoNeverDecreases(t *testing.T) {
	prev := System.Mono()
	for range 1000 {
		m := System.Mono()
		if m < prev {
			t.Fatalf("monotonic reading went from %v to %v", prev, m)
		}
		prev = m
	}
}
