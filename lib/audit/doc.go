// Package audit writes the security audit log: one structured line for
// every authentication failure, denied request, and change to users, ACLs
// and quotas (docs/security.md, "Audit log").
//
// Each line is a slog record whose message is "audit" and whose attributes
// are, in this order (part of the log's format: operators filter on them):
//
//	logger     always "audit", so a pipeline can route the lines apart
//	event      the kind: authentication_failure, denied, acl_change,
//	           user_change, quota_change, or suppressed (see below)
//	principal  who acted ("User:alice"); empty when unknown (a bad token)
//	source     the client's address ("10.0.0.7:51234"); empty when unknown
//	operation  what was asked ("write", "create", "SASL PLAIN")
//	resource   what it was asked of ("topic orders", "user bob")
//	outcome    "denied", "failure" or "success"
//	reason     why, in one line; never a credential
//
// The time is the record's own (slog's "time" key in JSON).
//
// Floods are sampled: each event kind and principal (or, without a
// principal, source host) has a token bucket, so one user hammering a
// topic it may not write, or one address guessing tokens, writes at most
// a burst of lines and then a line per interval. What is left out is
// counted and reported by a "suppressed" line carrying the count, written
// before the next line of that kind and principal, or by Flush. A flood
// therefore costs a bounded number of lines and is still visible.
package audit
