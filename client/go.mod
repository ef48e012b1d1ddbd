module github.com/strata-mq/strata/client

go 1.26
