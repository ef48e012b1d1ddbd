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
// errors.go (Strata's error details as Kafka error codes), metadata.go
// (Metadata, DescribeCluster, the brokers' Kafka addresses), data.go
// (Produce, Fetch, ListOffsets), admin.go (topics and configs, producer
// ids), groups.go (FindCoordinator, offsets, listing and describing
// groups), classicgroup.go (the classic group protocol, run by the
// coordinator), consumergroup.go (KIP-848), api_<key>_<name>.go (one admin
// API each, registered beside its handler: OffsetForLeaderEpoch, the ACL
// APIs, ElectLeaders, the partition reassignment APIs), kafkaacl.go
// (Kafka's ACLs in Strata's terms) and refused.go (the transaction APIs, answered
// UNSUPPORTED_VERSION). The API and version table is in docs/kafka.md.
package kafka
