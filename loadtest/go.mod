module github.com/strata-mq/strata/loadtest

go 1.26.0

require (
	connectrpc.com/connect v1.21.1
	github.com/HdrHistogram/hdrhistogram-go v1.4.0
)
