// Package tlsconfig is the transport security of Strata's processes: the
// TLS configs of their listeners and of their calls to each other, read
// from PEM files that are reloaded when they change, and the identities
// that certificates carry. docs/design/security.md ("Transport and
// identities") describes the model; the dev CA that issues certificates
// for `strata dev --secure` and tests is in the devca subpackage.
//
// # Files and reloading
//
// A process names its certificate chain, key and CA bundle in [Files]
// (--tls-cert, --tls-key, --tls-client-ca) and checks them at start with
// [Files.Validate]. [Load] reads them into a [Source], which polls them
// every second ([WithPollInterval]) and reloads them when their contents
// change: a certificate renewed by cert-manager, a CA bundle rotated, a
// file replaced by rename, or a Kubernetes secret volume whose symlinks
// are swapped. The configs a Source makes take the current certificate
// and CA bundle at every handshake, so the change applies to new
// connections at once and to none already open. A change that does not
// load keeps the previous files in use and, when the next poll finds it
// unchanged, is reported ([Source.Err], [WithOnReload], one warn log
// line); error strings and logs name paths, never contents.
//
// # Configs
//
// [Source.ServerConfig] and [Source.ClientConfig] make *tls.Config values
// for net/http, with these defaults:
//
//   - TLS 1.3 at least; [WithMinVersion] allows 1.2 for old peers.
//   - ALPN "h2" then "http/1.1": Connect over HTTP/2, curl over either.
//   - A server asks for client certificates when it has a CA bundle:
//     [VerifyClientCertIfGiven] on listeners users call (a client without
//     a certificate authenticates with a token), [RequireClientCert] on
//     listeners only services call.
//   - A client verifies the server against the CA bundle (the system's
//     roots without one), presents its certificate when it has one, and
//     can require the server to be a service of given roles.
//
// # Identities
//
// Services authenticate each other with mutual TLS. A service's
// certificate names its role and instance as exactly one URI SAN:
//
//	spiffe://strata/<role>[/<id>]
//
// with role controller, storage, gateway, coordinator or tiering, and id
// the storage node id (required for storage) or an optional instance
// name for the others ([Identity] has the syntax). This form is part of
// the contract, for certificates issued outside Strata too: do not change
// it. A certificate without a spiffe://strata URI is a user's, named by
// its Subject CN as the principal "User:<CN>". [PrincipalOf] and
// [PeerPrincipal] read either, and refuse a certificate with an invalid or
// ambiguous strata URI or with neither.
//
// All types are safe for concurrent use unless their doc says otherwise.
package tlsconfig
