// Package devcluster implements `strata dev`: a whole Strata cluster on one
// machine, every service in its own OS process, for development and for
// tests that need real processes to kill and restart.
//
// [Main] is the command. It plans the processes and their ports from
// --base-port (see layout.go and docs/design/dev-cluster.md), finds the
// service binaries next to the running strata or on $PATH, checks that every
// port is free, starts the controllers, waits for their /readyz, starts the
// storage nodes and the gateway, waits for them, and then supervises them in
// the foreground until SIGINT, SIGTERM or the end of its context.
//
// Plain, the cluster has no TLS and no authentication, for local use only,
// and says so. With --secure (secure.go) it runs as a secured deployment
// would: a dev CA and a certificate per process under DIR/tls, TLS and
// mutual TLS everywhere, authentication and ACLs required, and
// DIR/admin.env, whose export lines make the CLI the cluster's admin.
//
// DIR/cluster.json describes the running cluster (clusterfile.go). Its field
// names are a contract with tests outside this module: add fields, never
// rename or remove one.
package devcluster
