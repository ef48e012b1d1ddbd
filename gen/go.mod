module github.com/strata-mq/strata/gen

go 1.26
