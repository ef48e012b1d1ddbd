// Package kafka is the Kafka door: it answers Kafka's protocol
// (lib/kafkawire) from Strata's own Connect services, so a Kafka client,
// kcat or a connector works against the same logs, topics and groups as
// Strata's clients. It is a door like the gateway, not ground: the
// gateway, the storage node and the coordinator each embed it for their
// --kafka-listener, and it holds per-listener protocol state (KIP-848
// members, fetch sessions).
//
// A Bridge is built by each service that opens a --kafka-listener, with
// the upstreams it has: every bridge asks a gateway (GatewayService) for
// metadata, producer ids and admin calls; a storage node's bridge also
// sends Produce, Fetch, ListOffsets and OffsetForLeaderEpoch to its own
// StorageService, so a
// partition it does not lead is answered NOT_LEADER_OR_FOLLOWER as a
// Kafka broker would; every bridge passes the group APIs to the coordinator that owns the
// group.
//
// Record batches pass through as bytes: a Produce request's RecordBatch v2
// is what the storage node validates and appends, and a Fetch returns the
// stored bytes.
//
// The files: bridge.go (configuration and the served API table),
// api_<key>_<name>.go (one API each, registered beside its handler, as
// franz-go's kfake lays them out, so the file list is the table), and
// what several APIs share: errors.go (Strata's error details as Kafka
// error codes), metadata.go (the cluster as Metadata answers it, from the
// process's own view or the gateway; brokers' Kafka addresses),
// coordinator.go (coordinators as brokers), data.go (the storage node the
// data path asks), fetchsession.go (KIP-227's sessions), admin.go
// (timeouts, topic config changes), groups.go (coordinator clients),
// classicgroup.go (the classic group protocol's errors, run by the
// coordinator), consumergroup.go (KIP-848 members the listener
// remembers), kafkaacl.go (Kafka's ACLs in Strata's terms), authz.go (the
// authorizing and throttling wrappers of the clients), listener.go (the
// flags and TLS) and refused.go (the transaction APIs, answered
// UNSUPPORTED_VERSION). The API and version table is in docs/kafka.md.
package kafka
