// Package acl is Strata's authorization model, Kafka's so that operators
// who know one know the other: who (a [Principal]) may or may not
// ([Permission]) do what ([Operation]) to which resources (a
// [ResourceType] and a name, matched literally or by prefix: a
// [PatternType]). One such rule is a [Binding]; an [Authorizer] answers
// "may this principal do this?" over an immutable [Snapshot] of bindings.
//
// The rules an [Authorizer] applies, in order:
//
//   - a super user (given to [NewAuthorizer], Kafka's super.users) and a
//     service identity (a principal of type Service, which only a
//     service's certificate can carry) may do everything;
//   - a matching deny binding refuses, whatever allows it: deny wins;
//   - a matching allow binding allows;
//   - anything else is refused: nothing is allowed without an allow
//     (Kafka's allow.everyone.if.no.acl.found=false, which Strata does
//     not offer to change).
//
// A binding matches a request when its principal is the request's or the
// wildcard User:*, its operation is the request's or all, and its
// resource type is the request's with a name that is the request's
// (literal), the wildcard "*" (literal, every resource of the type) or a
// prefix of it (prefixed). As in Kafka, an allow of read, write, delete or
// alter also allows describe; a deny of them does not deny describe.
//
// The cluster itself is the one resource of type cluster, named
// [ClusterName] ("kafka-cluster", as Kafka names it, so listings read the
// same).
//
// Everything here is plain values with exported fields, so that the
// controller can store bindings and the metadata stream can carry them
// through whatever wire form it uses. Nothing in the package does I/O.
package acl
