module github.com/strata-mq/strata/client

go 1.26

require (
	connectrpc.com/connect v1.21.1
	go.opentelemetry.io/otel v1.47.0
	go.opentelemetry.io/otel/trace v1.47.0
	google.golang.org/protobuf v1.36.12
)
