package devcluster

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"

	"github.com/strata-mq/strata/lib/launch"
)

// Service names, as they appear in cluster.json and in file names. Part of
// the contract with tests: do not change.
const (
	serviceGateway     = "gateway"
	serviceController  = "controller"
	serviceCoordinator = "coordinator"
	serviceTiering     = "tiering"
	serviceS3          = "s3"
	serviceStorage     = "storage"
)

// Port offsets from the base port P. The first five and the storage rule
// are the contract in DESIGN.md ("Dev ports"); the rest are this package's
// choices, documented in docs/design/dev-cluster.md.
const (
	offGateway     = 0   // gateway P
	offController1 = 1   // controller 1 at P+1
	offCoordinator = 2   // coordinator P+2
	offTiering     = 3   // tiering P+3
	offS3          = 4   // embedded S3 P+4
	offKafkaGW     = 5   // gateway 1's Kafka listener P+5 (the Kafka bootstrap)
	offKafkaCoord  = 6   // the coordinator's Kafka listener P+6
	offKafkaStore  = 40  // storage node i's Kafka listener at P+40+i
	offStorage     = 10  // storage node i at P+10+i, i = 1..9
	offController  = 20  // controller i >= 2 at P+20+i (P+22..P+25)
	offGateways    = 30  // gateway i >= 2 at P+30+i (P+32..P+39)
	offAdmin       = 100 // a service's admin port is its API port + 100
	offEtcdPeer    = 200 // controller i's etcd peer port at P+200+i
	// P+211..P+215 were the controllers' etcd client ports; etcd's client
	// listener is a Unix socket now (etcdSocket), and the range stays
	// reserved so the --base-port limits do not change.
	offEtcdClient = 210

	// maxOffset is the highest offset reserved: the former etcd client
	// port of controller 5.
	maxOffset = offEtcdClient + maxControllers
)

// Limits of the flags, which the port layout imposes.
const (
	maxStorageNodes = 9 // P+19 is the last storage port before controllers' P+22
	maxControllers  = 5
	maxGateways     = 9 // P+39 is the last gateway port; admin ports +100 stay below etcd's
	minBasePort     = 1024
	maxBasePort     = 65535 - maxOffset
)

// host is the address every dev process listens on: loopback only, so a dev
// cluster is never reachable from the network.
const host = "127.0.0.1"

// devCORSOrigins are the web origins a dev cluster's gateway, storage nodes
// and coordinator answer CORS for (--cors-allowed-origins): pages served
// from this machine on any port, so a browser application using the
// TypeScript client works against `strata dev` with nothing to configure.
// Services started any other way allow no origin unless told.
const devCORSOrigins = "http://localhost:*,http://127.0.0.1:*,http://[::1]:*"

// layout computes the ports of a dev cluster from its base port.
type layout struct {
	base int
}

func (l layout) gateway() int     { return l.base + offGateway }
func (l layout) coordinator() int { return l.base + offCoordinator }
func (l layout) tiering() int     { return l.base + offTiering }
func (l layout) s3() int          { return l.base + offS3 }

// Kafka protocol listeners (docs/kafka.md): gateway 1's is the bootstrap.
func (l layout) kafkaGateway() int     { return l.base + offKafkaGW }
func (l layout) kafkaCoordinator() int { return l.base + offKafkaCoord }
func (l layout) kafkaStorage(id int) int {
	return l.base + offKafkaStore + id
}

// storage is the API port of storage node id (1..9).
func (l layout) storage(id int) int { return l.base + offStorage + id }

// gatewayN is the API port of gateway id (1..9): the first is the
// contract's P, so a cluster with one gateway is laid out as before.
func (l layout) gatewayN(id int) int {
	if id == 1 {
		return l.gateway()
	}
	return l.base + offGateways + id
}

// controller is the API port of controller id (1..5).
func (l layout) controller(id int) int {
	if id == 1 {
		return l.base + offController1
	}
	return l.base + offController + id
}

func (l layout) etcdPeer(id int) int { return l.base + offEtcdPeer + id }

// etcdSocket is the Unix socket of the etcd client listener of the
// controller whose data directory is dataDir: the controller's default,
// written out so cluster.json can name it.
func etcdSocket(dataDir string) string { return "unix://" + filepath.Join(dataDir, etcdSocketName) }

// etcdSocketName is the socket's file name in a controller's data
// directory (strata-controller's default).
const etcdSocketName = "etcd.sock"

// admin is the admin port (/healthz, /readyz, /metrics) of the service
// whose API listens on port.
func admin(port int) int { return port + offAdmin }

func hostPort(port int) string { return net.JoinHostPort(host, strconv.Itoa(port)) }
func httpURL(port int) string  { return "http://" + hostPort(port) }
func httpsURL(port int) string { return "https://" + hostPort(port) }

// procSpec is one process of the plan: what to run and where it listens.
type procSpec struct {
	service   string
	id        int
	port      int    // API port
	adminPort int    // admin port
	dataDir   string // DIR/<service>-<id>; empty for a service without data
	log       string // DIR/logs/<service>-<id>.log
	argv      []string
	// env is added to the process's environment (after strata dev's own),
	// for what must stay out of argv and cluster.json: the coordinator's
	// STRATA_DSN with --postgres. Empty for most.
	env []string
	// extraPorts are ports the process binds besides port and adminPort
	// (a controller's etcd ports), each with what it is for.
	extraPorts []portUse
	// etcdClient is a controller's etcd client endpoint (a unix:// socket),
	// named in cluster.json as etcd_client; empty for other services.
	etcdClient string
	// kafkaPort is the port of the process's Kafka protocol listener; 0
	// for none (controllers, tiering, gateways after the first). In a
	// secure cluster it speaks TLS and SASL like the process's API.
	kafkaPort int
}

// name is how the process is called in messages and file names.
func (p procSpec) name() string { return p.service + "-" + strconv.Itoa(p.id) }

// portUse is one port the cluster binds and what binds it.
type portUse struct {
	port int
	what string // "storage-1 API", "controller-1 etcd peer"
}

// ports lists every port p binds.
func (p procSpec) ports() []portUse {
	out := []portUse{
		{p.port, p.name() + " API"},
		{p.adminPort, p.name() + " admin"},
	}
	return append(out, p.extraPorts...)
}

// plan is the whole cluster: the processes in start order.
type plan struct {
	controllers []procSpec
	storage     []procSpec
	gateways    []procSpec // gateway 1 first, on the contract's P
	coordinator procSpec
	tiering     procSpec
	s3Port      int // the embedded S3 server, served by the tiering process
	// secure is --secure: every process serves TLS with its certificate
	// from DIR/tls (secure.go) and requires authentication, so every
	// API and admin URL is https://.
	secure bool
	// postgres is true with --postgres: the coordinator's offsets are in
	// PostgreSQL (postgres.go).
	postgres bool
}

// url is the base URL of the API or admin listener on port: https:// in a
// secure cluster.
func (pl plan) url(port int) string {
	if pl.secure {
		return httpsURL(port)
	}
	return httpURL(port)
}

// all returns the processes in start order: controllers, then the data
// plane (storage, gateways, coordinator, tiering).
func (pl plan) all() []procSpec {
	out := append([]procSpec(nil), pl.controllers...)
	return append(out, pl.dataPlane()...)
}

// dataPlane is what starts once the controllers are ready: storage nodes,
// the gateways, the coordinator and tiering, together (the coordinator reads
// metadata through the gateway and retries until it answers; storage nodes
// reach tiering only for topics with remote.storage.enable).
func (pl plan) dataPlane() []procSpec {
	out := append([]procSpec(nil), pl.storage...)
	out = append(out, pl.gateways...)
	return append(out, pl.coordinator, pl.tiering)
}

// gatewayURLs lists the gateways' API base URLs in id order.
func (pl plan) gatewayURLs() []string {
	var out []string
	for _, g := range pl.gateways {
		out = append(out, pl.url(g.port))
	}
	return out
}

// kafkaBootstrap is the host:port Kafka clients bootstrap from (gateway
// 1's Kafka listener), or "" when the cluster has none.
func (pl plan) kafkaBootstrap() string {
	if len(pl.gateways) == 0 || pl.gateways[0].kafkaPort == 0 {
		return ""
	}
	return hostPort(pl.gateways[0].kafkaPort)
}

// controllerURLs lists the controllers' API base URLs in id order.
func (pl plan) controllerURLs() []string {
	var out []string
	for _, c := range pl.controllers {
		out = append(out, pl.url(c.port))
	}
	return out
}

// binaryName is the program that runs service.
func binaryName(service string) string { return "strata-" + service }

// makePlan builds the processes of a cluster in dir (absolute) with the
// given counts (gateways >= 1) and base port, running the binaries in bins (service name to
// absolute path). With secure, every process gets its certificate from
// DIR/tls, the dev CA as --tls-client-ca, --require-auth and the admin as
// super user, and every URL is https:// (secure.go makes the files). It
// is pure: it starts nothing and touches no file.
//
// The flags passed to each service are written by lib/launch, which the
// test harness shares.
func makePlan(dir string, basePort, controllers, storageNodes, gateways int, bins map[string]string, secure bool) plan {
	l := layout{basePort}
	pl := plan{secure: secure}
	url := pl.url
	spec := func(service string, id, port int, withData bool) procSpec {
		s := procSpec{
			service:   service,
			id:        id,
			port:      port,
			adminPort: admin(port),
			log:       filepath.Join(dir, "logs", fmt.Sprintf("%s-%d.log", service, id)),
		}
		if withData {
			s.dataDir = filepath.Join(dir, fmt.Sprintf("%s-%d", service, id))
		}
		return s
	}
	// common is every process's flags; cors is --cors-allowed-origins,
	// empty for processes no web page calls (controllers, tiering).
	common := func(s procSpec, cors string) launch.Process {
		p := launch.Process{
			Bin:                bins[s.service],
			Listen:             hostPort(s.port),
			AdminListen:        hostPort(s.adminPort),
			LogFormat:          "text",
			CORSAllowedOrigins: cors,
		}
		if secure {
			p.Security = processSecurity(dir, s)
		}
		return p
	}

	var peers []string
	for id := 1; id <= controllers; id++ {
		peers = append(peers, httpURL(l.etcdPeer(id)))
	}
	for id := 1; id <= controllers; id++ {
		s := spec(serviceController, id, l.controller(id), true)
		s.extraPorts = []portUse{{l.etcdPeer(id), s.name() + " etcd peer"}}
		s.etcdClient = etcdSocket(s.dataDir)
		s.argv = launch.Controller{
			Process:    common(s, ""),
			ID:         id,
			DataDir:    s.dataDir,
			Peers:      peers,
			EtcdClient: s.etcdClient,
		}.Argv()
		pl.controllers = append(pl.controllers, s)
	}
	ctrlURLs := pl.controllerURLs()

	// withKafka gives s a Kafka listener on port; in a secure cluster it
	// takes the process's TLS and --require-auth (SASL_SSL).
	withKafka := func(s *procSpec, p *launch.Process, port int) {
		s.kafkaPort = port
		s.extraPorts = append(s.extraPorts, portUse{port, s.name() + " kafka"})
		p.KafkaListener = hostPort(port)
	}
	for id := 1; id <= storageNodes; id++ {
		s := spec(serviceStorage, id, l.storage(id), true)
		st := launch.Storage{
			Process:     common(s, devCORSOrigins),
			NodeID:      id,
			Advertise:   url(s.port),
			DataDir:     s.dataDir,
			Controllers: ctrlURLs,
			Tiering:     url(l.tiering()),
		}
		withKafka(&s, &st.Process, l.kafkaStorage(id))
		if st.KafkaListener != "" {
			st.Gateway = url(l.gateway())
		}
		s.argv = st.Argv()
		pl.storage = append(pl.storage, s)
	}

	// Gateways keep no data; they forward group calls to the coordinator.
	// All are alike, so any of them can stand behind a load balancer.
	for id := 1; id <= max(gateways, 1); id++ {
		s := spec(serviceGateway, id, l.gatewayN(id), false)
		gw := launch.Gateway{
			Process:      common(s, devCORSOrigins),
			Controllers:  ctrlURLs,
			Coordinators: []string{url(l.coordinator())},
		}
		if id == 1 {
			withKafka(&s, &gw.Process, l.kafkaGateway())
		}
		s.argv = gw.Argv()
		pl.gateways = append(pl.gateways, s)
	}

	// One coordinator keeps group offsets in embedded SQLite in its data
	// directory (no DSN): nothing to install for a dev cluster. It reads
	// topic metadata from gateway 1.
	pl.coordinator = spec(serviceCoordinator, 1, l.coordinator(), true)
	coord := launch.Coordinator{
		Process:      common(pl.coordinator, devCORSOrigins),
		InstanceID:   "coordinator-1",
		AdvertiseURL: url(l.coordinator()),
		DataDir:      pl.coordinator.dataDir,
		Gateway:      url(l.gateway()),
		// The coordinator registers with the controllers, so every
		// gateway names its Kafka listener; with --require-auth it also
		// watches their metadata stream for the ACLs it enforces.
		Controllers: ctrlURLs,
	}
	withKafka(&pl.coordinator, &coord.Process, l.kafkaCoordinator())
	pl.coordinator.argv = coord.Argv()

	// Tiering serves the embedded S3-compatible store on P+4 from its own
	// process, backed by a directory, so tiered storage needs nothing
	// installed.
	pl.tiering = spec(serviceTiering, 1, l.tiering(), true)
	pl.tiering.extraPorts = []portUse{{l.s3(), "embedded s3"}}
	pl.s3Port = l.s3()
	pl.tiering.argv = launch.Tiering{
		Process:          common(pl.tiering, ""),
		EmbeddedS3Listen: hostPort(l.s3()),
		EmbeddedS3Dir:    filepath.Join(dir, "s3"),
		SpoolDir:         filepath.Join(pl.tiering.dataDir, "spool"),
		Controllers:      ctrlURLs,
	}.Argv()
	return pl
}

// services lists the services whose binaries makePlan runs, in start order.
var services = []string{serviceController, serviceStorage, serviceGateway, serviceCoordinator, serviceTiering}
