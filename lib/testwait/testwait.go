// Package testwait is the one way Strata's tests wait for something to
// happen: poll an observable condition until it holds, under a deadline
// sized for a loaded machine, and fail with what was awaited and the last
// state seen. A fixed sleep that hopes the system got there in time is a
// flaky test on a busy machine; a condition with a generous deadline costs
// nothing when the machine is idle and only waits longer when it is not.
//
// Every module can import it (it lives in the shared lib module); only
// tests should, since it reports through testing.TB.
package testwait

import (
	"errors"
	"testing"
	"time"
)

// Polling schedule of Until: the condition is checked at once, then after
// firstInterval, and the gap doubles up to maxInterval. Fast conditions
// are seen within milliseconds; slow ones (an RPC to a real process) are
// not asked more than ten times a second.
const (
	firstInterval = 10 * time.Millisecond
	maxInterval   = 100 * time.Millisecond
)

// ErrNotYet is a condition's answer when it has no better description of
// the state it saw. Prefer an error that names the value observed, like
// fmt.Errorf("ISR %v", isr): it ends up in the failure message.
var ErrNotYet = errors.New("condition not met")

// Until calls cond until it returns nil, and fails the test with t.Fatalf
// when timeout passes first. The failure message names what was awaited
// (what, a phrase like "node 3 to leave the ISR"), the timeout, how many
// times cond was asked, and the error cond returned last, so that a
// condition should describe the state it observed in its error (see
// ErrNotYet).
//
// Contract:
//   - cond is called at once, then every 10ms, doubling to every 100ms;
//   - the deadline is checked after each call, so a call that blocks
//     delays the failure by as long as it blocks (bound RPCs in cond with
//     their own timeout); cond is always called at least once;
//   - Until returns as soon as cond returns nil; it never sleeps after
//     success;
//   - like t.Fatalf, it must be called from the goroutine running the test.
//
// Size timeout for a machine whose cores are all busy with other work:
// three to five times what the wait takes on an idle one.
func Until(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	interval := firstInterval
	for checks := 1; ; checks++ {
		err := cond()
		if err == nil {
			return
		}
		if !time.Now().Before(deadline) {
			t.Fatalf("testwait: waiting for %s: not done within %v (%d checks); last seen: %v",
				what, timeout, checks, err)
			return
		}
		time.Sleep(min(interval, time.Until(deadline)))
		interval = min(2*interval, maxInterval)
	}
}

// True adapts a boolean condition for Until: it returns nil when ok is
// true and ErrNotYet otherwise. Use it only where the state has nothing
// better to say than "not yet".
func True(ok bool) error {
	if ok {
		return nil
	}
	return ErrNotYet
}
