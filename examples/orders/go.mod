module github.com/strata-mq/strata/examples/orders

go 1.26.0

require (
	connectrpc.com/connect v1.21.1
	github.com/jackc/pgx/v5 v5.12.0
)

require (
	github.com/cenkalti/backoff/v5 v5.0.3 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/go-logr/logr v1.4.4 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/klauspost/compress v1.20.4 // indirect
	github.com/pierrec/lz4/v4 v4.1.33 // indirect
	go.opentelemetry.io/auto/sdk v1.2.1 // indirect
	go.opentelemetry.io/otel v1.47.0 // indirect
	go.opentelemetry.io/otel/log v1.47.0 // indirect
	go.opentelemetry.io/otel/metric v1.47.0 // indirect
	go.opentelemetry.io/otel/trace v1.47.0 // indirect
	golang.org/x/sync v0.23.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

// Sibling modules of this repository, from the working tree (go.work
// selects the same directories; these make the module build on its own).
require (
	github.com/strata-mq/strata/client v0.0.0-00010101000000-000000000000
	github.com/strata-mq/strata/client/pgsink v0.0.0-00010101000000-000000000000
	github.com/strata-mq/strata/gen v0.0.0-00010101000000-000000000000
	github.com/strata-mq/strata/lib v0.0.0-00010101000000-000000000000 // indirect
)

replace (
	github.com/strata-mq/strata/client => ../../client
	github.com/strata-mq/strata/client/pgsink => ../../client/pgsink
	github.com/strata-mq/strata/gen => ../../gen
	github.com/strata-mq/strata/lib => ../../lib
)
