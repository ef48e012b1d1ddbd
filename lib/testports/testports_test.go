package testports

import (
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// TestReserveAcrossProcesses: a slot held by one process is never handed
// to another (a child test process), and a slot is free again once its
// test ends. Other test processes on the machine (the packages make test
// runs at once) may hold slots too: the child takes what it can.
func TestReserveAcrossProcesses(t *testing.T) {
	if os.Getenv("TESTPORTS_CHILD") != "" {
		// The child takes every slot it can, printing each as it gets it,
		// and fails once none is left.
		for range (Last - First) / SlotSpan {
			os.Stdout.WriteString("slot " + strconv.Itoa(Reserve(t)) + "\n")
		}
		return
	}
	child := func() map[int]bool {
		t.Helper()
		cmd := exec.Command(os.Args[0], "-test.run", "^TestReserveAcrossProcesses$")
		cmd.Env = append(os.Environ(), "TESTPORTS_CHILD=1")
		out, _ := cmd.CombinedOutput()
		got := map[int]bool{}
		for _, l := range strings.Split(string(out), "\n") {
			if n, ok := strings.CutPrefix(l, "slot "); ok {
				b, err := strconv.Atoi(n)
				if err != nil {
					t.Fatalf("child printed %q", l)
				}
				got[b] = true
			}
		}
		return got
	}
	held := map[int]bool{}
	t.Run("hold", func(t *testing.T) {
		for range 3 {
			b := Reserve(t)
			if held[b] || b < First || b >= Last || (b-First)%SlotSpan != 0 {
				t.Fatalf("base %d: held %v, or not a slot", b, held[b])
			}
			held[b] = true
		}
		// A child process must not get any of ours.
		for b := range child() {
			if held[b] {
				t.Fatalf("a child took slot %d while this test held it", b)
			}
		}
	})
	// The subtest ended: its slots are free, so a child gets them.
	got := child()
	for b := range held {
		if !got[b] {
			t.Fatalf("slot %d was not free again after its test ended; the child got %v", b, got)
		}
	}
}

// TestReservePortHoldsUntilTheTestEnds: a single port reserved by one
// test cannot be reserved by another until the first ends, and is free
// again after it.
func TestReservePortHoldsUntilTheTestEnds(t *testing.T) {
	var port int
	t.Run("holder", func(t *testing.T) {
		for p := Last + rand.IntN(FreeLast-Last); port == 0; p = Last + rand.IntN(FreeLast-Last) {
			if ReservePort(t, p) { // another test process may hold some
				port = p
			}
		}
		t.Run("another test", func(t *testing.T) {
			if ReservePort(t, port) {
				t.Fatalf("port %d reserved twice", port)
			}
		})
	})
	if !ReservePort(t, port) {
		t.Fatalf("port %d still held after its test ended", port)
	}
}
