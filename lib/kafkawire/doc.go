// Package kafkawire serves Kafka's wire protocol on a TCP listener: the
// framing (a 4-byte big-endian size, then the message), the request
// header (API key, API version, correlation id, client id and, for
// flexible versions, tagged fields), ApiVersions, and the dispatch of
// every other request to a handler. The message bodies are encoded and
// decoded by github.com/twmb/franz-go/pkg/kmsg; nothing here knows what a
// Produce or a Fetch means (that is services/kafka).
//
// One connection's requests may be pipelined: they are read ahead (up to
// Config.MaxInFlight), handled one at a time in the order they arrived and
// answered in that order, as a Kafka broker does; an idempotent
// producer's pipelined batches depend on it. Clients open separate
// connections for what must not wait behind a long poll. A handler that returns a nil
// response sends none (Produce with acks=0).
//
// Errors close the connection, as a Kafka broker does: a frame larger than
// Config.MaxRequestBytes, a header or body that does not decode, an API
// key nobody serves, a version outside the served range (except
// ApiVersions, which answers UNSUPPORTED_VERSION with the served ranges,
// KIP-511), or a handler's error. When the header was read and the
// response type has a top-level error code, the connection is sent that
// response with INVALID_REQUEST (or UNSUPPORTED_VERSION) before it is
// closed, so the client logs why. A panic in a handler is recovered and
// closes the connection; the server keeps running.
package kafkawire
