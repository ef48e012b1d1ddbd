module github.com/strata-mq/strata/loadtest

go 1.26

require connectrpc.com/connect v1.21.1
