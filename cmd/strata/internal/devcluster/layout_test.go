package devcluster

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestLayoutPorts(t *testing.T) {
	for _, tc := range []struct {
		base                                  int
		gateway, coordinator, tiering, s3     int
		controller1, controller2, controller5 int
		storage1, storage9                    int
		gateway2, gateway9                    int
		etcdPeer1                             int
	}{
		{9092, 9092, 9094, 9095, 9096, 9093, 9114, 9117, 9103, 9111, 9124, 9131, 9293},
		{20000, 20000, 20002, 20003, 20004, 20001, 20022, 20025, 20011, 20019, 20032, 20039, 20201},
	} {
		t.Run(fmt.Sprint(tc.base), func(t *testing.T) {
			l := layout{tc.base}
			for _, c := range []struct {
				name      string
				got, want int
			}{
				{"gateway", l.gateway(), tc.gateway},
				{"coordinator", l.coordinator(), tc.coordinator},
				{"tiering", l.tiering(), tc.tiering},
				{"s3", l.s3(), tc.s3},
				{"controller 1", l.controller(1), tc.controller1},
				{"controller 2", l.controller(2), tc.controller2},
				{"controller 5", l.controller(5), tc.controller5},
				{"storage 1", l.storage(1), tc.storage1},
				{"storage 9", l.storage(9), tc.storage9},
				{"gateway 1", l.gatewayN(1), tc.gateway},
				{"gateway 2", l.gatewayN(2), tc.gateway2},
				{"gateway 9", l.gatewayN(9), tc.gateway9},
				{"etcd peer 1", l.etcdPeer(1), tc.etcdPeer1},
				{"gateway admin", admin(l.gateway()), tc.gateway + 100},
				{"storage 1 admin", admin(l.storage(1)), tc.storage1 + 100},
			} {
				if c.got != c.want {
					t.Errorf("%s: %d, want %d", c.name, c.got, c.want)
				}
			}
		})
	}
}

// TestLayoutNoCollisions checks the largest cluster: every port, including
// every extra port, is distinct and within base..base+maxOffset.
func TestLayoutNoCollisions(t *testing.T) {
	const base = 30000
	pl := makePlan("/d", base, maxControllers, maxStorageNodes, maxGateways, map[string]string{}, false)
	seen := map[int]string{}
	add := func(port int, what string) {
		if prev, dup := seen[port]; dup {
			t.Errorf("port %d used by %s and %s", port, prev, what)
		}
		if port < base || port > base+maxOffset {
			t.Errorf("port %d (%s) outside base..base+%d", port, what, maxOffset)
		}
		seen[port] = what
	}
	for _, s := range pl.all() {
		for _, pu := range s.ports() {
			add(pu.port, pu.what)
		}
	}
	if got, want := len(pl.all()), maxControllers+maxStorageNodes+maxGateways+2; got != want {
		t.Errorf("%d processes, want %d", got, want)
	}
	if base+maxOffset != base+215 || maxBasePort != 65320 {
		t.Errorf("maxOffset %d, maxBasePort %d", maxOffset, maxBasePort)
	}
}

// TestPlanArgv pins the command line of every service: these flags must
// match services/*/cmd/*/main.go.
func TestPlanArgv(t *testing.T) {
	bins := map[string]string{
		serviceController:  "/bin/strata-controller",
		serviceStorage:     "/bin/strata-storage",
		serviceGateway:     "/bin/strata-gateway",
		serviceCoordinator: "/bin/strata-coordinator",
		serviceTiering:     "/bin/strata-tiering",
	}
	pl := makePlan("/dev-dir", 9092, 3, 2, 2, bins, false)
	var got []string
	for _, s := range pl.all() {
		got = append(got, s.name()+": "+strings.Join(s.argv, " "))
	}
	want := []string{
		"controller-1: /bin/strata-controller --listen 127.0.0.1:9093 --admin-listen 127.0.0.1:9193 --log-format text --id 1 --data-dir /dev-dir/controller-1 --peers 1=http://127.0.0.1:9293,2=http://127.0.0.1:9294,3=http://127.0.0.1:9295 --etcd-client unix:///dev-dir/controller-1/etcd.sock",
		"controller-2: /bin/strata-controller --listen 127.0.0.1:9114 --admin-listen 127.0.0.1:9214 --log-format text --id 2 --data-dir /dev-dir/controller-2 --peers 1=http://127.0.0.1:9293,2=http://127.0.0.1:9294,3=http://127.0.0.1:9295 --etcd-client unix:///dev-dir/controller-2/etcd.sock",
		"controller-3: /bin/strata-controller --listen 127.0.0.1:9115 --admin-listen 127.0.0.1:9215 --log-format text --id 3 --data-dir /dev-dir/controller-3 --peers 1=http://127.0.0.1:9293,2=http://127.0.0.1:9294,3=http://127.0.0.1:9295 --etcd-client unix:///dev-dir/controller-3/etcd.sock",
		"storage-1: /bin/strata-storage --listen 127.0.0.1:9103 --kafka-listener 127.0.0.1:9133 --admin-listen 127.0.0.1:9203 --log-format text --node-id 1 --advertise http://127.0.0.1:9103 --data-dir /dev-dir/storage-1 --controller http://127.0.0.1:9093,http://127.0.0.1:9114,http://127.0.0.1:9115 --tiering http://127.0.0.1:9095 --gateway http://127.0.0.1:9092 --cors-allowed-origins http://localhost:*,http://127.0.0.1:*,http://[::1]:*",
		"storage-2: /bin/strata-storage --listen 127.0.0.1:9104 --kafka-listener 127.0.0.1:9134 --admin-listen 127.0.0.1:9204 --log-format text --node-id 2 --advertise http://127.0.0.1:9104 --data-dir /dev-dir/storage-2 --controller http://127.0.0.1:9093,http://127.0.0.1:9114,http://127.0.0.1:9115 --tiering http://127.0.0.1:9095 --gateway http://127.0.0.1:9092 --cors-allowed-origins http://localhost:*,http://127.0.0.1:*,http://[::1]:*",
		"gateway-1: /bin/strata-gateway --listen 127.0.0.1:9092 --kafka-listener 127.0.0.1:9097 --admin-listen 127.0.0.1:9192 --log-format text --controller http://127.0.0.1:9093,http://127.0.0.1:9114,http://127.0.0.1:9115 --coordinator http://127.0.0.1:9094 --cors-allowed-origins http://localhost:*,http://127.0.0.1:*,http://[::1]:*",
		"gateway-2: /bin/strata-gateway --listen 127.0.0.1:9124 --admin-listen 127.0.0.1:9224 --log-format text --controller http://127.0.0.1:9093,http://127.0.0.1:9114,http://127.0.0.1:9115 --coordinator http://127.0.0.1:9094 --cors-allowed-origins http://localhost:*,http://127.0.0.1:*,http://[::1]:*",
		"coordinator-1: /bin/strata-coordinator --listen 127.0.0.1:9094 --kafka-listener 127.0.0.1:9098 --admin-listen 127.0.0.1:9194 --log-format text --instance-id coordinator-1 --advertise-url http://127.0.0.1:9094 --data-dir /dev-dir/coordinator-1 --gateway http://127.0.0.1:9092 --controller http://127.0.0.1:9093,http://127.0.0.1:9114,http://127.0.0.1:9115 --cors-allowed-origins http://localhost:*,http://127.0.0.1:*,http://[::1]:*",
		"tiering-1: /bin/strata-tiering --listen 127.0.0.1:9095 --admin-listen 127.0.0.1:9195 --log-format text --embedded-s3-listen 127.0.0.1:9096 --embedded-s3-dir /dev-dir/s3 --spool-dir /dev-dir/tiering-1/spool --controller http://127.0.0.1:9093,http://127.0.0.1:9114,http://127.0.0.1:9115",
	}
	if !slices.Equal(got, want) {
		t.Errorf("argv:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if pl.gateways[1].dataDir != "" || pl.storage[1].log != "/dev-dir/logs/storage-2.log" {
		t.Errorf("gateway data dir %q, storage-2 log %q", pl.gateways[1].dataDir, pl.storage[1].log)
	}
	if got := pl.gatewayURLs(); !slices.Equal(got, []string{"http://127.0.0.1:9092", "http://127.0.0.1:9124"}) {
		t.Errorf("gateway URLs %v", got)
	}
}

// TestSecurePlanArgv: with --secure every process gets its certificate
// from DIR/tls, the dev CA, --require-auth, the admin as super user and
// an audit log in DIR/logs, and
// every URL between the services is https (etcd's peer URLs stay its own).
func TestSecurePlanArgv(t *testing.T) {
	bins := map[string]string{
		serviceController:  "/bin/strata-controller",
		serviceStorage:     "/bin/strata-storage",
		serviceGateway:     "/bin/strata-gateway",
		serviceCoordinator: "/bin/strata-coordinator",
		serviceTiering:     "/bin/strata-tiering",
	}
	pl := makePlan("/d", 9092, 1, 1, 1, bins, true)
	sec := func(name string) string {
		return "--tls-cert /d/tls/" + name + ".pem --tls-key /d/tls/" + name + "-key.pem --tls-client-ca /d/tls/ca.pem --require-auth --super-users User:admin --audit-log /d/logs/" + name + ".audit.log"
	}
	var got []string
	for _, s := range pl.all() {
		got = append(got, s.name()+": "+strings.Join(s.argv, " "))
	}
	want := []string{
		"controller-1: /bin/strata-controller --listen 127.0.0.1:9093 --admin-listen 127.0.0.1:9193 --log-format text " + sec("controller-1") +
			" --id 1 --data-dir /d/controller-1 --peers 1=http://127.0.0.1:9293 --etcd-client unix:///d/controller-1/etcd.sock",
		"storage-1: /bin/strata-storage --listen 127.0.0.1:9103 --kafka-listener 127.0.0.1:9133 --admin-listen 127.0.0.1:9203 --log-format text " + sec("storage-1") +
			" --node-id 1 --advertise https://127.0.0.1:9103 --data-dir /d/storage-1 --controller https://127.0.0.1:9093 --tiering https://127.0.0.1:9095" +
			" --gateway https://127.0.0.1:9092 --cors-allowed-origins http://localhost:*,http://127.0.0.1:*,http://[::1]:*",
		"gateway-1: /bin/strata-gateway --listen 127.0.0.1:9092 --kafka-listener 127.0.0.1:9097 --admin-listen 127.0.0.1:9192 --log-format text " + sec("gateway-1") +
			" --controller https://127.0.0.1:9093 --coordinator https://127.0.0.1:9094 --cors-allowed-origins http://localhost:*,http://127.0.0.1:*,http://[::1]:*",
		"coordinator-1: /bin/strata-coordinator --listen 127.0.0.1:9094 --kafka-listener 127.0.0.1:9098 --admin-listen 127.0.0.1:9194 --log-format text " + sec("coordinator-1") +
			" --instance-id coordinator-1 --advertise-url https://127.0.0.1:9094 --data-dir /d/coordinator-1 --gateway https://127.0.0.1:9092" +
			" --controller https://127.0.0.1:9093 --cors-allowed-origins http://localhost:*,http://127.0.0.1:*,http://[::1]:*",
		"tiering-1: /bin/strata-tiering --listen 127.0.0.1:9095 --admin-listen 127.0.0.1:9195 --log-format text " + sec("tiering-1") +
			" --embedded-s3-listen 127.0.0.1:9096 --embedded-s3-dir /d/s3 --spool-dir /d/tiering-1/spool --controller https://127.0.0.1:9093",
	}
	if !slices.Equal(got, want) {
		t.Errorf("argv:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got := pl.gatewayURLs(); !slices.Equal(got, []string{"https://127.0.0.1:9092"}) {
		t.Errorf("gateway URLs %v", got)
	}
	if got := pl.controllerURLs(); !slices.Equal(got, []string{"https://127.0.0.1:9093"}) {
		t.Errorf("controller URLs %v", got)
	}
}

// TestKafkaPorts checks the contract's Kafka listeners: gateway 1 at P+5
// (the bootstrap), the coordinator at P+6, storage node i at P+40+i, and
// none in a secure cluster (the listener has no TLS yet).
func TestKafkaPorts(t *testing.T) {
	const base = 9092
	pl := makePlan("/d", base, 1, 3, 2, map[string]string{}, false)
	if got := pl.kafkaBootstrap(); got != "127.0.0.1:9097" {
		t.Errorf("bootstrap %q, want 127.0.0.1:9097", got)
	}
	if got := pl.gateways[1].kafkaPort; got != 0 {
		t.Errorf("gateway-2 has a Kafka listener on %d", got)
	}
	if got := pl.coordinator.kafkaPort; got != base+6 {
		t.Errorf("coordinator Kafka port %d, want %d", got, base+6)
	}
	for i, s := range pl.storage {
		if want := base + 40 + i + 1; s.kafkaPort != want {
			t.Errorf("%s Kafka port %d, want %d", s.name(), s.kafkaPort, want)
		}
	}
	// A secure cluster opens the same listeners; they take the
	// process's TLS and --require-auth.
	secure := makePlan("/d", base, 1, 3, 1, map[string]string{}, true)
	for _, s := range secure.storage {
		if s.kafkaPort == 0 || !slices.Contains(s.argv, "--kafka-listener") || !slices.Contains(s.argv, "--require-auth") {
			t.Errorf("secure %s: Kafka port %d, argv %v", s.name(), s.kafkaPort, s.argv)
		}
	}
	if got := secure.kafkaBootstrap(); got != hostPort(base+5) {
		t.Errorf("secure cluster's Kafka bootstrap %q", got)
	}
}
