module github.com/strata-mq/strata/lib

go 1.26
