// Package testports hands tests a base port for a strata dev cluster that
// no other test takes meanwhile, in this process or in any other test
// process on the machine: go test runs packages in parallel, and make
// test runs the Go and TypeScript suites side by side, each starting
// clusters of many ports whose nodes may bind their ports late (a node
// added by strata dev scale, a node restarted after a kill).
//
// Bases are slots of SlotSpan ports in [First, Last), below the kernel's
// ephemeral range (32768 and up on Linux, where outgoing connections and
// listeners on port 0 take ports at random). A slot is held by an
// exclusive flock on a file named after it in the temporary directory,
// from Reserve until the test ends; the kernel drops the lock of a
// process that dies. Single ports a test needs for processes it starts
// itself (tests/harness.FreePorts) are drawn from [Last, FreeLast), each
// held the same way until the test ends (ReservePort), and
// the TypeScript suites draw their bases from [FreeLast, 32500): no two
// of the three share a port, so a port in a held slot is never taken by
// another test's process (a stress run once saw a harness cluster take a
// port inside the slot the orders demo held, when single ports were
// drawn from the slots' range).
package testports

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

const (
	// First and Last bound the Go tests' bases.
	First = 20000
	Last  = 26000
	// FreeLast bounds, with Last, the single ports tests draw
	// (tests/harness.FreePorts).
	FreeLast = 28000
	// SlotSpan is the ports a slot holds: a strata dev cluster uses up
	// to its base port + 215.
	SlotSpan = 250
)

// Reserve returns the first port of a slot no other test holds, and
// releases the slot when t ends. It fails t when every slot is held.
func Reserve(t testing.TB) int {
	t.Helper()
	slots := (Last - First) / SlotSpan
	start := rand.IntN(slots)
	for i := range slots {
		base := First + ((start+i)%slots)*SlotSpan
		if hold(t, fmt.Sprintf("%d.lock", base)) {
			return base
		}
	}
	t.Fatalf("testports: all %d slots of ports %d-%d are held by other tests", slots, First, Last)
	return 0
}

// ReservePort holds one single port of [Last, FreeLast) for t, in every
// test process, until t ends: false when another test holds it. A port a
// test's process frees (a node killed, to be restarted on the same port)
// is then never drawn by another test meanwhile, as a stress run saw
// when the single ports were only checked free at the moment they were
// drawn. It does not check that the port is free of other listeners.
func ReservePort(t testing.TB, port int) bool {
	t.Helper()
	return hold(t, fmt.Sprintf("port-%d.lock", port))
}

// hold takes an exclusive flock on the named file in the lock directory
// and keeps it until t ends; false when another holds it.
func hold(t testing.TB, name string) bool {
	t.Helper()
	dir := filepath.Join(os.TempDir(), "strata-test-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		t.Fatalf("testports: %v", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		t.Fatalf("testports: %v", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return false
		}
		t.Fatalf("testports: lock %s: %v", f.Name(), err)
	}
	t.Cleanup(func() { f.Close() }) // closing drops the lock
	return true
}
