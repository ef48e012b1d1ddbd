// Package clock is a storage node's time source. It keeps apart the two
// things a clock is used for:
//
//   - Wall time, for timestamps people read (DescribeLog's last caught-up
//     time). An operator or NTP may step it backwards or forwards at any
//     moment.
//   - Elapsed time, for leases, replica lag and every other "has this much
//     time passed" decision. It comes from a monotonic reading that never
//     steps, so a stepped wall clock can neither keep a cut-off leader
//     believing its lease holds nor fence a healthy node.
//
// Code that decides anything from time takes a Clock and subtracts Mono
// readings; System is the process's clock and Fake lets tests step the
// wall clock and move monotonic time independently.
package clock

import (
	"sync"
	"time"
)

// Clock reads wall and monotonic time. Implementations are safe for
// concurrent use.
type Clock interface {
	// Wall is the wall-clock time. It may jump in either direction; never
	// compare two readings to decide that time has passed.
	Wall() time.Time
	// Mono is a monotonic reading: time elapsed since an arbitrary origin
	// fixed for the life of the Clock. It never decreases and is not
	// affected by changes of the wall clock. Only differences of two
	// readings of the same Clock mean anything.
	Mono() time.Duration
}

// System is the process's clock: Wall is time.Now and Mono is the time
// since the process loaded this package, read from Go's monotonic clock.
var System Clock = systemClock{}

// origin is the monotonic origin of System. time.Since on a time.Time
// that carries a monotonic reading uses only the monotonic clock.
var origin = time.Now()

type systemClock struct{}

func (systemClock) Wall() time.Time     { return time.Now() }
func (systemClock) Mono() time.Duration { return time.Since(origin) }

// WallAt converts a monotonic reading of c into the wall time it
// corresponded to, as well as the wall clock can tell now: the current wall
// time minus the monotonic time elapsed since. For display only.
func WallAt(c Clock, mono time.Duration) time.Time {
	return c.Wall().Add(mono - c.Mono())
}

// Fake is a Clock for tests whose wall and monotonic readings move only
// when told to. The zero value is not usable; create one with NewFake.
type Fake struct {
	mu   sync.Mutex
	wall time.Time
	mono time.Duration
}

// NewFake returns a fake clock reading wall, with a monotonic reading of
// one hour (so readings taken "before" it are positive too).
func NewFake(wall time.Time) *Fake { return &Fake{wall: wall, mono: time.Hour} }

// Wall implements Clock.
func (f *Fake) Wall() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.wall
}

// Mono implements Clock.
func (f *Fake) Mono() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mono
}

// Advance lets d pass: both readings move forward by d. A negative d is
// taken as zero, as real time does not go back.
func (f *Fake) Advance(d time.Duration) {
	d = max(d, 0)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.wall = f.wall.Add(d)
	f.mono += d
}

// StepWall steps the wall clock by d (backwards when negative), as an
// operator or NTP would, without any time passing: Mono does not move.
func (f *Fake) StepWall(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.wall = f.wall.Add(d)
}
