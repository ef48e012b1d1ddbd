package tests

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/strata-mq/strata/lib/launch"
	"github.com/strata-mq/strata/tests/harness"
)

// TestLaunchFlagsAreTheBinariesFlags holds lib/launch to the service
// binaries: a command line with every field set parses. Each binary runs
// with --probe against a closed port, which parses all flags first (an
// unknown flag or a bad value exits 2 with "bad config"), then fails the
// probe with exit 1 without starting anything.
func TestLaunchFlagsAreTheBinariesFlags(t *testing.T) {
	t.Parallel()
	bin := func(service string) string {
		return harness.Binary(t, "github.com/strata-mq/strata/services/"+service+"/cmd/strata-"+service)
	}
	proc := func(service string) launch.Process {
		return launch.Process{Bin: bin(service), Listen: "127.0.0.1:1", AdminListen: "127.0.0.1:2", LogFormat: "text",
			DrainTimeout: time.Second, CORSAllowedOrigins: "http://localhost:*"}
	}
	// The Kafka listener's flags, on the services that take them.
	kafka := func(p launch.Process) launch.Process {
		p.KafkaListener = "127.0.0.1:10"
		return p
	}
	dir := t.TempDir()
	for _, tc := range []struct {
		service string
		argv    []string
	}{
		{"controller", launch.Controller{Process: proc("controller"), ID: 1, DataDir: dir, Peers: []string{"http://127.0.0.1:3"},
			EtcdClient: "unix://" + dir + "/etcd.sock", EtcdClientPort: 4, NodeSessionTimeout: time.Second, SessionTimeout: time.Second}.Argv()},
		{"storage", launch.Storage{Process: kafka(proc("storage")), Gateway: "http://127.0.0.1:8", NodeID: 1, Advertise: "http://127.0.0.1:1", DataDir: dir,
			Controllers: []string{"http://127.0.0.1:5"}, Tiering: "http://127.0.0.1:6", TierInterval: time.Second,
			ReplicaLagTime: time.Second}.Argv()},
		{"gateway", launch.Gateway{Process: kafka(proc("gateway")), Controllers: []string{"http://127.0.0.1:5"},
			Coordinators: []string{"http://127.0.0.1:7"}, ClientListener: "external"}.Argv()},
		{"coordinator", launch.Coordinator{Process: kafka(proc("coordinator")), InstanceID: "c1", AdvertiseURL: "http://127.0.0.1:1",
			DataDir: dir, Gateway: "http://127.0.0.1:8", SessionTimeout: time.Second, HeartbeatInterval: time.Second / 5,
			OwnershipLease: time.Second, LagInterval: time.Second}.Argv()},
		{"tiering", launch.Tiering{Process: proc("tiering"), EmbeddedS3Listen: "127.0.0.1:9", EmbeddedS3Dir: dir, SpoolDir: dir,
			Controllers: []string{"http://127.0.0.1:5"}}.Argv()},
	} {
		t.Run(tc.service, func(t *testing.T) {
			argv := append(tc.argv, "--probe", "http://127.0.0.1:1/readyz")
			out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(out), "--probe") {
				t.Fatalf("%s: err %v, output %q; want the probe to fail (exit 1) after every flag parsed", strings.Join(argv, " "), err, out)
			}
		})
	}
}
