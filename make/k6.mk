# make/k6.mk — the k6 load scripts in loadtest/k6.
#
# k6 itself cannot be installed here, so the scripts are type-checked against @types/k6 with
# TypeScript (pinned in loadtest/k6/package-lock.json), and tests/k6_test.go sends the requests
# they send to a real cluster. `make test` runs the type-check.

K6_DIR := $(patsubst %/,%,$(dir $(abspath $(dir $(lastword $(MAKEFILE_LIST))))))/loadtest/k6
K6_TSC := $(K6_DIR)/node_modules/.bin/tsc

.PHONY: loadcheck

$(K6_TSC): $(K6_DIR)/package.json $(K6_DIR)/package-lock.json
	@echo "loadcheck: npm ci --prefix loadtest/k6"
	@npm ci --prefix $(K6_DIR) --no-audit --no-fund --loglevel=error
	@touch $@

loadcheck: $(K6_TSC) ## Type-check the k6 scripts (loadtest/k6) against @types/k6
	cd $(K6_DIR) && ./node_modules/.bin/tsc -p .

test: loadcheck
