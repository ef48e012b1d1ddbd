package testwait

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// recordingT is a testing.TB whose Fatalf records the message and ends
// the calling goroutine, as the real one does.
type recordingT struct {
	testing.TB
	msg string
}

func (r *recordingT) Helper() {}

func (r *recordingT) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls Until with a recordingT on its own goroutine, as Fatalf ends
// that goroutine, and returns the failure message ("" when it returned).
func run(timeout time.Duration, what string, cond func() error) string {
	rt := &recordingT{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Until(rt, timeout, what, cond)
	}()
	<-done
	return rt.msg
}

func TestUntilReturnsOnceTheConditionHolds(t *testing.T) {
	var calls atomic.Int32
	msg := run(time.Minute, "the third call", func() error {
		if calls.Add(1) < 3 {
			return ErrNotYet
		}
		return nil
	})
	if msg != "" || calls.Load() != 3 {
		t.Fatalf("Until failed with %q after %d calls; want success on the third", msg, calls.Load())
	}
}

func TestUntilChecksAtOnce(t *testing.T) {
	var calls atomic.Int32
	// A zero timeout still asks once; a condition that holds then passes.
	if msg := run(0, "anything", func() error { calls.Add(1); return nil }); msg != "" || calls.Load() != 1 {
		t.Fatalf("zero timeout: %q after %d calls, want success after 1", msg, calls.Load())
	}
}

func TestUntilFailureNamesWhatAndLastState(t *testing.T) {
	var calls atomic.Int32
	msg := run(50*time.Millisecond, "node 3 to leave the ISR", func() error {
		return fmt.Errorf("ISR [1 2 %d]", calls.Add(1))
	})
	n := calls.Load()
	for _, want := range []string{"waiting for node 3 to leave the ISR", "not done within 50ms", fmt.Sprintf("(%d checks)", n), fmt.Sprintf("last seen: ISR [1 2 %d]", n)} {
		if !strings.Contains(msg, want) {
			t.Errorf("failure message %q lacks %q", msg, want)
		}
	}
}

func TestTrue(t *testing.T) {
	if True(true) != nil || !errors.Is(True(false), ErrNotYet) {
		t.Fatalf("True(true) = %v, True(false) = %v", True(true), True(false))
	}
}
