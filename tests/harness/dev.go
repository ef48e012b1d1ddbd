package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/strata-mq/strata/lib/launch"
	"github.com/strata-mq/strata/lib/testports"
)

// Import paths of every binary `strata dev` runs, and of the CLI.
var devPkgs = []string{
	controllerPkg, storagePkg, gatewayPkg, coordinatorPkg,
	"github.com/strata-mq/strata/services/tiering/cmd/strata-tiering",
}

// StrataPkg is the import path of the strata CLI.
const StrataPkg = "github.com/strata-mq/strata/cmd/strata"

// Dev is a cluster started with `strata dev`: real binaries, each service
// its own process, described by DIR/cluster.json.
type Dev struct {
	Dir      string   // --dir
	BasePort int      // --base-port
	Gateways []string // every gateway's base URL, gateway 1 first
	Strata   string   // path of the strata CLI, built beside the services
	Proc     *Process // strata dev itself
	File     DevClusterFile
}

// DevClusterFile is what a test reads from cluster.json (a contract of
// strata dev; see docs/design/dev-cluster.md).
type DevClusterFile struct {
	Gateway   string       `json:"gateway"`
	Gateways  []string     `json:"gateways"`
	Processes []DevProcess `json:"processes"`
	// KafkaBootstrap is gateway 1's Kafka listener (host:port).
	KafkaBootstrap string `json:"kafka_bootstrap"`
	// KafkaSecurityProtocol is PLAINTEXT, or SASL_SSL with --secure.
	KafkaSecurityProtocol string `json:"kafka_security_protocol"`
	// TLSCA is the dev CA's certificate with --secure.
	TLSCA string `json:"tls_ca"`
}

// DevProcess is one process in cluster.json.
type DevProcess struct {
	Service      string   `json:"service"`
	ID           int      `json:"id"`
	PID          int      `json:"pid"`
	URL          string   `json:"url"`
	AdminAddress string   `json:"admin_address"`
	Argv         []string `json:"argv"`
	KafkaAddress string   `json:"kafka_address"`
	// EtcdClient is a controller's etcd client endpoint (unix:///PATH or
	// an https URL); empty for other services.
	EtcdClient string `json:"etcd_client"`
}

// BuildDev builds every binary `strata dev` runs, and the strata CLI
// beside them (Binary's shared directory), and returns the CLI's path: a
// program that starts strata dev itself finds the services next to it.
func BuildDev(t testing.TB) string {
	t.Helper()
	for _, pkg := range devPkgs {
		Binary(t, pkg)
	}
	return Binary(t, StrataPkg)
}

// StartDev builds every binary and runs `strata dev` with args (for
// example "--gateways", "2") on a random base port, trying another when
// the range is taken, and waits until it is ready. The cluster stops when
// the test ends.
func StartDev(t testing.TB, args ...string) *Dev {
	t.Helper()
	return StartDevEnv(t, nil, args...)
}

// StartDevEnv is StartDev with env added to strata dev's environment,
// which every process it starts inherits (STRATA_* settings its services
// read): what a test would otherwise set with t.Setenv, which a parallel
// test may not call.
func StartDevEnv(t testing.TB, env []string, args ...string) *Dev {
	t.Helper()
	d := &Dev{Dir: t.TempDir(), Strata: BuildDev(t)}
	for attempt := 0; ; attempt++ {
		d.BasePort = reserveBasePort(t)
		argv := append([]string{d.Strata, "dev", "--dir", d.Dir, "--base-port", fmt.Sprint(d.BasePort)}, args...)
		d.Proc = Start(t, "strata-dev", argv, env...)
		// A port taken by another process is reported on stderr and
		// strata dev exits: try another base port.
		// Four minutes: strata dev's own --ready-timeout (a test may raise
		// it) ends a start that hangs sooner.
		line, _ := d.Proc.WaitLineOrExit(Deadline(t, 4*time.Minute), func(l string) bool {
			return strings.HasPrefix(l, "strata dev: ready") || strings.Contains(l, "in use")
		})
		if strings.HasPrefix(line, "strata dev: ready") {
			break
		}
		d.Proc.Kill()
		if attempt == 4 {
			t.Fatalf("harness: no free base port for strata dev after 5 tries: %s", line)
		}
	}
	// Stop gracefully before the test's cleanup kills strata dev and
	// removes DIR: killed, strata dev leaves its children to stop on their
	// own (SIGTERM by the parent-death signal), and they would still be
	// writing DIR while it is removed.
	t.Cleanup(func() {
		d.Proc.signal(syscall.SIGINT)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		_ = d.Proc.Wait(ctx)
	})
	raw, err := os.ReadFile(filepath.Join(d.Dir, "cluster.json"))
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	if err := json.Unmarshal(raw, &d.File); err != nil {
		t.Fatalf("harness: cluster.json: %v", err)
	}
	d.Gateways = d.File.Gateways
	if len(d.Gateways) == 0 {
		d.Gateways = []string{d.File.Gateway}
	}
	return d
}

// Process returns the cluster.json entry of service id; the test fails
// when there is none.
func (d *Dev) Process(t testing.TB, service string, id int) DevProcess {
	t.Helper()
	for _, p := range d.File.Processes {
		if p.Service == service && p.ID == id {
			return p
		}
	}
	t.Fatalf("harness: no %s-%d in cluster.json", service, id)
	return DevProcess{}
}

// Kill sends SIGKILL to service id of the dev cluster.
func (d *Dev) Kill(t testing.TB, service string, id int) {
	t.Helper()
	p := d.Process(t, service, id)
	t.Logf("harness: SIGKILL %s-%d (pid %d)", service, id, p.PID)
	if err := syscall.Kill(p.PID, syscall.SIGKILL); err != nil {
		t.Fatalf("harness: kill %s-%d: %v", service, id, err)
	}
}

// DevGateway is a gateway a test started beside a strata dev cluster.
type DevGateway struct {
	URL          string // API base URL
	KafkaAddress string // its Kafka listener, host:port
	Proc         *Process
}

// StartGateway starts one more gateway in front of d's controllers and
// coordinator, with a Kafka listener, on free ports (plain cluster only:
// no security flags), and waits for its /readyz. It stops with the test.
func (d *Dev) StartGateway(t testing.TB) DevGateway {
	t.Helper()
	ports, err := FreePorts(t, 3)
	if err != nil {
		t.Fatal(err)
	}
	var ctrls []string
	for _, p := range d.File.Processes {
		if p.Service == "controller" {
			ctrls = append(ctrls, p.URL)
		}
	}
	api, admin, kafka := "127.0.0.1:"+strconv.Itoa(ports[0]), "127.0.0.1:"+strconv.Itoa(ports[1]), "127.0.0.1:"+strconv.Itoa(ports[2])
	proc := processFlags(Binary(t, gatewayPkg), api, admin)
	proc.KafkaListener = kafka
	p := Start(t, "gateway-extra", launch.Gateway{
		Process:      proc,
		Controllers:  ctrls,
		Coordinators: []string{d.Process(t, "coordinator", 1).URL},
	}.Argv())
	WaitReadyz(Deadline(t, time.Minute), t, "http://"+admin, p)
	return DevGateway{URL: "http://" + api, KafkaAddress: kafka, Proc: p}
}

// reserveBasePort picks a base port whose range no other test's cluster
// uses, in this process or any other test process (lib/testports), below
// the kernel's ephemeral range, and releases it when the test ends: a port
// a killed node left free, or one a node added later binds, is never
// taken by another test's cluster meanwhile.
func reserveBasePort(t testing.TB) int {
	return testports.Reserve(t)
}
