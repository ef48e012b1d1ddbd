#!/bin/sh
# The compose cluster's certificates (compose.yaml, service "certs"): a CA,
# one certificate per Strata service naming its identity
# (spiffe://strata/<role>/<id>, docs/design/security.md) and the names it is
# reached at, and a client certificate for the admin (CN admin, principal
# User:admin, the cluster's super user).
#
#   certs.sh issue [DIR]   make what is missing or due, under DIR (default /tls)
#   certs.sh admin [DIR]   write a tar of the admin's ca.crt, tls.crt, tls.key to stdout
#
# Layout, one directory per volume in compose.yaml:
#
#   DIR/ca/ca.crt, ca.key        the CA (10 years); its key never leaves this volume
#   DIR/<service>/ca.crt         the CA, to verify peers
#   DIR/<service>/tls.crt        the service's certificate (1 year), server and client auth
#   DIR/<service>/tls.key        its key, mode 0400, owned by the services' user
#   DIR/admin/                   the admin's certificate (client auth only), same files
#   DIR/lb/ca.crt                the CA, for the load balancer's health checks
#
# Running it again keeps every certificate the current CA signed that is
# valid for 30 more days and issues the others; the services reload new
# files without a restart. All keys are ECDSA P-256, as lib/tlsconfig/devca
# makes them. STRATA_CERTS_OWNER (default 65532, the images' user) owns
# the keys.
set -eu

cmd=${1:-issue}
dir=${2:-/tls}
owner=${STRATA_CERTS_OWNER:-65532}

# The services: directory (the compose service name), identity, and the DNS
# names clients reach it at. Every service also answers as 127.0.0.1 (its
# own health check). localhost: reached from the host through the load
# balancer's published ports, which pass TLS through.
services='
controller-1      spiffe://strata/controller/1       controller-1
controller-2      spiffe://strata/controller/2       controller-2
controller-3      spiffe://strata/controller/3       controller-3
storage-1         spiffe://strata/storage/1          storage-1,localhost
storage-2         spiffe://strata/storage/2          storage-2,localhost
storage-3         spiffe://strata/storage/3          storage-3,localhost
gateway-1         spiffe://strata/gateway/1          gateway-1,lb,localhost
gateway-2         spiffe://strata/gateway/2          gateway-2,lb,localhost
gateway-internal  spiffe://strata/gateway/internal   gateway-internal
coordinator-1     spiffe://strata/coordinator/1      coordinator-1,localhost
coordinator-2     spiffe://strata/coordinator/2      coordinator-2,localhost
tiering           spiffe://strata/tiering            tiering
'

key() {
	openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null
}

# current FILE: true when FILE exists, the CA signed it and it is valid for 30 more days.
current() {
	[ -s "$1" ] &&
		openssl verify -CAfile "$dir/ca/ca.crt" "$1" >/dev/null 2>&1 &&
		openssl x509 -in "$1" -noout -checkend 2592000 >/dev/null 2>&1
}

# leaf NAME SUBJECT EXTENSIONS: a key and a certificate in DIR/NAME, unless current.
leaf() {
	d="$dir/$1"
	mkdir -p "$d"
	cp "$dir/ca/ca.crt" "$d/ca.crt.new" && mv "$d/ca.crt.new" "$d/ca.crt"
	if current "$d/tls.crt" && [ -s "$d/tls.key" ]; then
		echo "certs: $1: kept"
		return
	fi
	tmp=$(mktemp -d)
	key "$tmp/tls.key"
	printf '%s\n' "$3" >"$tmp/ext"
	openssl req -new -key "$tmp/tls.key" -subj "$2" -out "$tmp/csr"
	openssl x509 -req -in "$tmp/csr" -CA "$dir/ca/ca.crt" -CAkey "$dir/ca/ca.key" \
		-set_serial "0x$(openssl rand -hex 16)" -days 365 -extfile "$tmp/ext" -out "$tmp/tls.crt" 2>/dev/null
	chown "$owner:$owner" "$tmp/tls.key" "$tmp/tls.crt"
	chmod 0400 "$tmp/tls.key"
	chmod 0444 "$tmp/tls.crt"
	# The key first, then the certificate, each by a rename: a service that
	# reloads in between sees a pair that does not match and keeps the old
	# one until the next poll.
	mv "$tmp/tls.key" "$d/tls.key"
	mv "$tmp/tls.crt" "$d/tls.crt"
	rm -rf "$tmp"
	echo "certs: $1: issued"
}

issue() {
	mkdir -p "$dir/ca"
	chmod 0700 "$dir/ca"
	if [ ! -s "$dir/ca/ca.key" ] || [ ! -s "$dir/ca/ca.crt" ]; then
		key "$dir/ca/ca.key"
		chmod 0400 "$dir/ca/ca.key"
		openssl req -x509 -new -key "$dir/ca/ca.key" -subj "/CN=Strata compose CA" -days 3650 \
			-addext "basicConstraints=critical,CA:TRUE,pathlen:0" \
			-addext "keyUsage=critical,keyCertSign,cRLSign" -out "$dir/ca/ca.crt"
		echo "certs: a new CA"
	fi
	echo "$services" | while read -r name uri dns; do
		[ -n "$name" ] || continue
		sans="URI:$uri,IP:127.0.0.1"
		for n in $(echo "$dns" | tr ',' ' '); do sans="$sans,DNS:$n"; done
		leaf "$name" "/CN=$name" "basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth,clientAuth
subjectAltName=$sans"
	done
	leaf admin "/CN=admin" "basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=clientAuth"
	mkdir -p "$dir/lb"
	cp "$dir/ca/ca.crt" "$dir/lb/ca.crt.new" && mv "$dir/lb/ca.crt.new" "$dir/lb/ca.crt"
	chmod 0444 "$dir/lb/ca.crt"
}

case "$cmd" in
issue) issue ;;
admin) tar -C "$dir/admin" -c ca.crt tls.crt tls.key ;;
*)
	echo "certs: unknown command $cmd (want issue or admin)" >&2
	exit 2
	;;
esac
