module github.com/strata-mq/strata/services/storage

go 1.26.0

require (
	connectrpc.com/connect v1.21.1
	github.com/google/uuid v1.6.0
	golang.org/x/time v0.15.0
	google.golang.org/protobuf v1.36.12
)
