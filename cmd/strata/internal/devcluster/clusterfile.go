package devcluster

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// clusterFileName is the file in DIR that describes the running cluster.
const clusterFileName = "cluster.json"

// clusterFile is the content of DIR/cluster.json. The JSON names are a
// contract with tests outside this module (see docs/design/dev-cluster.md):
// add fields, never rename or remove one.
type clusterFile struct {
	// Dir is the cluster's directory, absolute.
	Dir string `json:"dir"`
	// BasePort is --base-port; every port derives from it.
	BasePort int `json:"base_port"`
	// Gateway is the gateway's base URL, what the CLI's --gateway takes.
	Gateway string `json:"gateway"`
	// Gateways are every gateway's base URL in id order (--gateways);
	// the first is Gateway.
	Gateways []string `json:"gateways"`
	// KafkaBootstrap is the host:port Kafka clients bootstrap from
	// (gateway 1's Kafka listener, P+5); absent when the cluster has no
	// Kafka listeners.
	KafkaBootstrap string `json:"kafka_bootstrap,omitempty"`
	// KafkaSecurityProtocol is what Kafka clients set as
	// security.protocol: PLAINTEXT, or SASL_SSL for a secure cluster
	// (TLS verified by TLSCA; SASL PLAIN or OAUTHBEARER, or the admin's
	// client certificate with SSL). Absent without Kafka listeners.
	KafkaSecurityProtocol string `json:"kafka_security_protocol,omitempty"`
	// Controllers are the controllers' API base URLs in id order.
	Controllers []string `json:"controllers"`
	// PID is the pid of `strata dev` itself: SIGTERM to it stops the cluster.
	PID int `json:"pid"`
	// Ready is true once every process answered /readyz with 200 after the
	// start; it stays true when a process dies later and turns false when
	// the cluster stops.
	Ready bool `json:"ready"`
	// Control is the Unix socket `strata dev scale` reaches this strata dev
	// at (control.go); empty until the cluster is up, and after it stops.
	Control string `json:"control,omitempty"`
	// Secure is true for a cluster started with --secure: every URL is
	// https:// and every request must authenticate.
	Secure bool `json:"secure,omitempty"`
	// TLSCA is the dev CA's certificate (DIR/tls/ca.pem) that verifies
	// every process of a secure cluster; absent for a plain one. Only
	// paths are written here, never a key or a token.
	TLSCA string `json:"tls_ca,omitempty"`
	// AdminEnv is DIR/admin.env of a secure cluster, the file to source
	// for the admin's credentials; absent for a plain one.
	AdminEnv string `json:"admin_env,omitempty"`
	// Postgres is true for a cluster started with --postgres: the
	// coordinator keeps group offsets in that PostgreSQL database. Its
	// argv does not carry the DSN (a password would show in process
	// listings and here): restart it with STRATA_DSN set.
	Postgres bool `json:"postgres,omitempty"`
	// Processes are the processes started so far, in start order:
	// controllers, storage nodes, gateway, coordinator, tiering (which also
	// serves the embedded S3).
	Processes []processEntry `json:"processes"`
}

// processEntry is one service process in cluster.json.
type processEntry struct {
	// Service is "controller", "storage", "gateway", "coordinator" or
	// "tiering".
	Service string `json:"service"`
	// ID is the controller id or storage node id, from 1; the others are 1.
	ID int `json:"id"`
	// PID is the process id strata dev started. When Running is false it is
	// the pid the process had.
	PID int `json:"pid"`
	// Running is false once strata dev saw the process exit. strata dev
	// does not know about a process a test started again with Argv.
	Running bool `json:"running"`
	// Exit is why the process ended ("signal: killed", "exit status 1");
	// empty while it runs.
	Exit string `json:"exit,omitempty"`
	// Address is the host:port of the Connect API.
	Address string `json:"address"`
	// URL is the base URL of the Connect API.
	URL string `json:"url"`
	// AdminAddress is the host:port serving /healthz, /readyz and /metrics.
	AdminAddress string `json:"admin_address"`
	// KafkaAddress is the host:port of the process's Kafka protocol
	// listener (docs/kafka.md); absent for a process without one.
	KafkaAddress string `json:"kafka_address,omitempty"`
	// EtcdClient is a controller's etcd client endpoint: unix:///PATH of
	// its socket (mode 0600, only the controller's user may connect), or
	// an https URL; absent for other services. Nothing but the controller
	// itself needs it; it is here so an operator or a test can find it.
	EtcdClient string `json:"etcd_client,omitempty"`
	// DataDir is the process's data directory; empty for the gateway.
	DataDir string `json:"data_dir,omitempty"`
	// Argv is the full command line; Argv[0] is the binary's absolute path.
	// Running it again (with any working directory) restarts the process
	// with the same identity, ports and data.
	Argv []string `json:"argv"`
	// Log is the file the process's stdout and stderr are appended to.
	Log string `json:"log"`
}

// writeClusterFile replaces dir/cluster.json with f atomically: it writes a
// temporary file in dir and renames it over the old one, so a reader sees
// the old content or the new, never a part.
func writeClusterFile(dir string, f *clusterFile) error {
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return fmt.Errorf("cluster.json: %w", err)
	}
	b = append(b, '\n')
	tmp, err := os.CreateTemp(dir, "."+clusterFileName+".*.tmp")
	if err != nil {
		return fmt.Errorf("cluster.json: %w", err)
	}
	defer os.Remove(tmp.Name()) // fails harmlessly after the rename
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("cluster.json: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("cluster.json: %w", err)
	}
	// CreateTemp makes the file 0600; cluster.json has nothing secret.
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return fmt.Errorf("cluster.json: %w", err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, clusterFileName)); err != nil {
		return fmt.Errorf("cluster.json: %w", err)
	}
	return nil
}
