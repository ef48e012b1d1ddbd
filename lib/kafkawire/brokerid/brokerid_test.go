package brokerid

import "testing"

func TestCoordinator(t *testing.T) {
	for _, id := range []string{"", "coordinator-0", "c1", "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"} {
		n := Coordinator(id)
		if n < CoordinatorBase || n != Coordinator(id) {
			t.Errorf("%q: %d", id, n)
		}
	}
	if Coordinator("c1") == Coordinator("c2") {
		t.Error("two coordinators, one broker id")
	}
	// Registrations and clients hold these ids across restarts and
	// upgrades: the hash must not change.
	if got := Coordinator("coordinator-0"); got != 2147250604 {
		t.Errorf("coordinator-0 is broker %d, was 2147250604", got)
	}
}
