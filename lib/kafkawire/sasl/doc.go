// Package sasl is how a Kafka listener authenticates its connections
// (docs/kafka.md, "Security"), on the same principals as the Connect API
// (lib/authn, lib/guard): Auth builds lib/kafkawire's Auth from a
// process's guard, with the TLS client certificate first and then the
// SASL mechanisms PLAIN and OAUTHBEARER (auth.go), SCRAM-SHA-256 and
// SCRAM-SHA-512 (scram.go), each failure written to the audit log
// (audit.go). The state machine around them (SaslHandshake,
// SaslAuthenticate) is lib/kafkawire's.
package sasl
