// Package launch knows how each Strata service binary is started: the
// command line for a role and its addresses ([Controller], [Storage],
// [Gateway], [Coordinator], [Tiering]), and when a started process is ready
// ([Ready], [WaitReady]: its admin port's /readyz answers 200).
//
// `strata dev` and the cross-process test harness (tests/harness) both
// start services through it, so the flag names of the service binaries are
// written here and nowhere else outside the services. Starting and
// supervising the process stays with each caller: `strata dev` writes to
// log files and outlives its terminal's process group, the harness pipes
// output into the test log and pauses processes.
//
// A zero field leaves its flag off the command line, so the binary's own
// default applies; the defaults are the services' (see each binary's
// --help), not this package's.
package launch

import (
	"strconv"
	"strings"
	"time"
)

// Process holds the flags every service binary takes (lib/serve's Base).
type Process struct {
	// Bin is the executable, argv[0]. Required.
	Bin string
	// Listen is --listen, the API's host:port.
	Listen string
	// KafkaListener is --kafka-listener, the host:port of a Kafka
	// protocol listener (storage nodes, gateways and coordinators); empty
	// opens none. The address it binds is also the one it advertises.
	KafkaListener string
	// AdminListen is --admin-listen, the host:port of /healthz, /readyz
	// and /metrics.
	AdminListen string
	// LogFormat is --log-format: "json" or "text".
	LogFormat string
	// DrainTimeout is --drain-timeout: how long shutdown waits for
	// in-flight requests.
	DrainTimeout time.Duration
	// CORSAllowedOrigins is --cors-allowed-origins, comma-separated web
	// origins (patterns with *) answered with CORS headers. Written last
	// before Extra.
	CORSAllowedOrigins string
	// Security is the transport security and authentication every
	// service takes (lib/serve's Security); the zero value is the plain
	// cluster: no TLS, anonymous requests.
	Security Security
	// Extra are further flags appended at the end, for flags this package
	// does not name (fault injection, listeners for other networks).
	Extra []string
}

// Security holds the security flags every service binary takes, written
// after the common flags. Zero fields are left off.
type Security struct {
	// TLSCert is --tls-cert, the PEM certificate (chain) the process
	// serves and presents to the services it calls.
	TLSCert string
	// TLSKey is --tls-key, the private key of TLSCert.
	TLSKey string
	// TLSClientCA is --tls-client-ca, the PEM CA bundle that verifies
	// client certificates and the services the process calls.
	TLSClientCA string
	// RequireAuth is --require-auth: every request authenticates and
	// ACLs apply. It needs TLSCert and TLSKey.
	RequireAuth bool
	// SuperUsers is --super-users, principals allowed everything
	// ("User:admin"), written comma-separated.
	SuperUsers []string
	// AuditLog is --audit-log, the file the audit lines are appended
	// to; empty: the process log.
	AuditLog string
}

// args accumulates a command line, leaving out flags whose value is zero.
type args []string

func (a *args) str(flag, v string) {
	if v != "" {
		*a = append(*a, flag, v)
	}
}

func (a *args) int(flag string, v int) {
	if v != 0 {
		*a = append(*a, flag, strconv.Itoa(v))
	}
}

func (a *args) dur(flag string, d time.Duration) {
	if d != 0 {
		*a = append(*a, flag, d.String())
	}
}

func (a *args) list(flag string, vs []string) {
	if len(vs) > 0 {
		*a = append(*a, flag, strings.Join(vs, ","))
	}
}

func (a *args) security(s Security) {
	a.str("--tls-cert", s.TLSCert)
	a.str("--tls-key", s.TLSKey)
	a.str("--tls-client-ca", s.TLSClientCA)
	if s.RequireAuth {
		*a = append(*a, "--require-auth")
	}
	a.list("--super-users", s.SuperUsers)
	a.str("--audit-log", s.AuditLog)
}

// argv builds bin and the common flags (security included), then the
// service's own (body), then CORS and Extra.
func (p Process) argv(body func(a *args)) []string {
	a := args{p.Bin}
	a.str("--listen", p.Listen)
	a.str("--kafka-listener", p.KafkaListener)
	a.str("--admin-listen", p.AdminListen)
	a.str("--log-format", p.LogFormat)
	a.dur("--drain-timeout", p.DrainTimeout)
	a.security(p.Security)
	body(&a)
	a.str("--cors-allowed-origins", p.CORSAllowedOrigins)
	return append(a, p.Extra...)
}

// Controller is one member of the controller quorum (strata-controller).
type Controller struct {
	Process
	// ID is --id, this member's id, from 1.
	ID int
	// DataDir is --data-dir, the embedded etcd member's directory.
	DataDir string
	// Peers are the etcd peer URLs of every member, member i at index
	// i-1; written as --peers 1=URL,2=URL,...
	Peers []string
	// EtcdClient is --etcd-client, the embedded etcd's client listener:
	// unix:///PATH (a socket of mode 0600) or, with TLS, https://IP:PORT.
	// Empty: the controller's default, unix://DATA-DIR/etcd.sock.
	EtcdClient string
	// EtcdClientPort is --etcd-client-port, deprecated: with TLS the same
	// as EtcdClient https://127.0.0.1:PORT; the controller refuses it
	// without TLS. Use EtcdClient.
	EtcdClientPort int
	// NodeSessionTimeout is --node-session-timeout: how long a silent
	// storage node stays alive.
	NodeSessionTimeout time.Duration
	// SessionTimeout is --controller-session-timeout: how long a crashed
	// active controller stays active.
	SessionTimeout time.Duration
}

// Argv is the command line of c.
func (c Controller) Argv() []string {
	return c.argv(func(a *args) {
		a.int("--id", c.ID)
		a.str("--data-dir", c.DataDir)
		if len(c.Peers) > 0 {
			peers := make([]string, len(c.Peers))
			for i, u := range c.Peers {
				peers[i] = strconv.Itoa(i+1) + "=" + u
			}
			a.list("--peers", peers)
		}
		a.str("--etcd-client", c.EtcdClient)
		a.int("--etcd-client-port", c.EtcdClientPort)
		a.dur("--node-session-timeout", c.NodeSessionTimeout)
		a.dur("--controller-session-timeout", c.SessionTimeout)
	})
}

// Storage is one storage node (strata-storage).
type Storage struct {
	Process
	// NodeID is --node-id. Node 0 is a valid id, so it is always written.
	NodeID int
	// Advertise is --advertise, the URL other processes reach the node at.
	Advertise string
	// DataDir is --data-dir, the node's partition logs.
	DataDir string
	// Controllers are the controllers' base URLs (--controller).
	Controllers []string
	// Tiering is --tiering, the tiering service's base URL.
	Tiering string
	// TierInterval is --tier-interval.
	TierInterval time.Duration
	// ReplicaLagTime is --replica-lag-time: a follower not caught up for
	// this long leaves the ISR.
	ReplicaLagTime time.Duration
	// Gateway is --gateway, the gateway its Kafka listener asks for
	// metadata and admin calls; needed with KafkaListener.
	Gateway string
	// FaultInjection is --fault-injection: the node's partition logs run
	// over a filesystem whose I/O errors and power cut are driven through
	// /debug/faults on the admin port. For fault tests only; it needs
	// AdminListen.
	FaultInjection bool
}

// Argv is the command line of s.
func (s Storage) Argv() []string {
	return s.argv(func(a *args) {
		*a = append(*a, "--node-id", strconv.Itoa(s.NodeID))
		a.str("--advertise", s.Advertise)
		a.str("--data-dir", s.DataDir)
		a.list("--controller", s.Controllers)
		a.str("--tiering", s.Tiering)
		a.dur("--tier-interval", s.TierInterval)
		a.dur("--replica-lag-time", s.ReplicaLagTime)
		a.str("--gateway", s.Gateway)
		if s.FaultInjection {
			*a = append(*a, "--fault-injection")
		}
	})
}

// Gateway is one gateway (strata-gateway).
type Gateway struct {
	Process
	// Controllers are the controllers' base URLs (--controller).
	Controllers []string
	// Coordinators are the coordinators' base URLs (--coordinator); none
	// means group calls answer UNAVAILABLE.
	Coordinators []string
	// ClientListener is --client-listener: the name of the advertised
	// listeners this gateway hands its clients.
	ClientListener string
}

// Argv is the command line of g.
func (g Gateway) Argv() []string {
	return g.argv(func(a *args) {
		a.list("--controller", g.Controllers)
		a.list("--coordinator", g.Coordinators)
		a.str("--client-listener", g.ClientListener)
	})
}

// Coordinator is one coordinator instance (strata-coordinator). Its
// Postgres DSN is not a field: it goes in the environment (STRATA_DSN),
// where a password stays out of process listings and cluster.json.
type Coordinator struct {
	Process
	// InstanceID is --instance-id, unique among the instances sharing one
	// offsets database.
	InstanceID string
	// AdvertiseURL is --advertise-url, the URL clients reach it at.
	AdvertiseURL string
	// DataDir is --data-dir, where the embedded SQLite store lives when
	// no DSN is set.
	DataDir string
	// Gateway is --gateway, the gateway it reads topic metadata from.
	Gateway string
	// Controllers are the controllers' base URLs (--controller), whose
	// metadata stream brings the ACLs it enforces; needed with
	// --require-auth.
	Controllers []string
	// SessionTimeout is --session-timeout.
	SessionTimeout time.Duration
	// HeartbeatInterval is --heartbeat-interval.
	HeartbeatInterval time.Duration
	// OwnershipLease is --ownership-lease.
	OwnershipLease time.Duration
	// LagInterval is --lag-interval.
	LagInterval time.Duration
}

// Argv is the command line of c.
func (c Coordinator) Argv() []string {
	return c.argv(func(a *args) {
		a.str("--instance-id", c.InstanceID)
		a.str("--advertise-url", c.AdvertiseURL)
		a.str("--data-dir", c.DataDir)
		a.str("--gateway", c.Gateway)
		a.list("--controller", c.Controllers)
		a.dur("--session-timeout", c.SessionTimeout)
		a.dur("--heartbeat-interval", c.HeartbeatInterval)
		a.dur("--ownership-lease", c.OwnershipLease)
		a.dur("--lag-interval", c.LagInterval)
	})
}

// Tiering is one tiering instance (strata-tiering), optionally serving the
// embedded S3-compatible store from the same process.
type Tiering struct {
	Process
	// EmbeddedS3Listen is --embedded-s3-listen, the embedded S3 server's
	// host:port; empty uses an external store.
	EmbeddedS3Listen string
	// EmbeddedS3Dir is --embedded-s3-dir, the embedded store's directory.
	EmbeddedS3Dir string
	// SpoolDir is --spool-dir, where uploads are verified.
	SpoolDir string
	// Controllers are the controllers' base URLs (--controller).
	Controllers []string
}

// Argv is the command line of t.
func (t Tiering) Argv() []string {
	return t.argv(func(a *args) {
		a.str("--embedded-s3-listen", t.EmbeddedS3Listen)
		a.str("--embedded-s3-dir", t.EmbeddedS3Dir)
		a.str("--spool-dir", t.SpoolDir)
		a.list("--controller", t.Controllers)
	})
}
