package testports

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// TestReserveAcrossProcesses: a slot held by one process is never handed
// to another (a child test process), and a slot is free again once its
// test ends.
func TestReserveAcrossProcesses(t *testing.T) {
	if os.Getenv("TESTPORTS_CHILD") != "" {
		// The child takes every slot it can and prints them.
		var got []string
		for range (Last - First) / SlotSpan {
			got = append(got, strconv.Itoa(Reserve(t)))
		}
		os.Stdout.WriteString("slots " + strings.Join(got, ",") + "\n")
		return
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
		// A child process, which cannot get all the slots, must not get
		// any of ours: it fails when it runs out, and prints nothing.
		cmd := exec.Command(os.Args[0], "-test.run", "^TestReserveAcrossProcesses$")
		cmd.Env = append(os.Environ(), "TESTPORTS_CHILD=1")
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "held by other tests") {
			t.Fatalf("a child took every slot while 3 were held: %v\n%s", err, out)
		}
	})
	// The subtest ended: its slots are free, so a child gets all of them.
	cmd := exec.Command(os.Args[0], "-test.run", "^TestReserveAcrossProcesses$")
	cmd.Env = append(os.Environ(), "TESTPORTS_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("a child with every slot free: %v\n%s", err, out)
	}
	for b := range held {
		if !strings.Contains(string(out), strconv.Itoa(b)) {
			t.Fatalf("slot %d was not free again after its test ended: %s", b, out)
		}
	}
}
