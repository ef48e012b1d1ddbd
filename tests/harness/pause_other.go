//go:build !linux

package harness

// threadsStopped cannot be observed here: Stop returns once the signal
// is sent, and a test relying on the process being still may race it.
func threadsStopped(int) (bool, error) { return false, errUnobservable }

// pipeUnread cannot be observed here.
func pipeUnread(uintptr) (int, error) { return 0, errUnobservable }
