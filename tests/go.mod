module github.com/strata-mq/strata/tests

go 1.26
