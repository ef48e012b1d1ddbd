module github.com/strata-mq/strata/services/storage

go 1.26.0

require (
	connectrpc.com/connect v1.21.1
	github.com/google/uuid v1.6.0
	google.golang.org/protobuf v1.36.12
)
