# Strata's developer entry points. `make help` lists them.
#
# Tools that generate code are pinned in tools/ and installed into .tmp/bin,
# so nothing here depends on what happens to be installed globally.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

# Every Go module in the workspace, read from go.work so there is one list.
# Packages are addressed through these because `./...` does not span
# workspace modules.
MODULES := $(shell sed -n 's|^[[:space:]]*\./||p' go.work)
PKGS := $(MODULES:%=./%/...)
# Every main package: the CLI, one binary per service and the load programs.
CMDS := $(wildcard cmd/* services/*/cmd/* loadtest/cmd/*)

GO ?= go
# -trimpath keeps directory names out of compiled code, so the build cache
# does not depend on where the checkout is: a fresh clone (CI's) reuses what
# any earlier build of the same code compiled instead of compiling the
# whole tree again (about 200 s of make test's CPU on this machine).
GOFLAGS += -trimpath
export GOFLAGS
# The race detector doubles test time on this 2-core machine but catches the
# reader/appender bugs the partition log is most exposed to, so it is on.
# go test stops a package's tests after 10 minutes by default; the
# real-process tests take about 2 minutes on an idle machine and several
# times that on a loaded one, so the limit is 30 minutes.
# -parallel 4: the real-process tests (tests/, each t.Parallel) spend
# three quarters of their time waiting on clusters (make test-profile:
# 148 s of CPU in 574 s run one at a time), so four at once keep the two
# cores busy without starving each other.
TESTFLAGS ?= -race -count=1 -timeout 30m -parallel 4
# The fault suite's short schedule runs beside the other packages and the
# TypeScript suites (make test's three parts run at once): its schedule is
# paced by its faults, not by the CPU, and its checker asserts outcomes,
# not timings.
NEMESIS_PKG := ./tests/nemesis/
# make test-stress: how many runs of make test, and how many busy loops
# keep cores occupied meanwhile.
STRESS_RUNS ?= 5
BUSY ?= 1
BENCHTIME ?= 2s
FUZZTIME ?= 60s

include make/proto.mk
include make/k6.mk

.PHONY: help
help: ## Describe the make targets
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | sort | \
		awk 'BEGIN {FS = ":.*?## "}; {printf "  %-16s %s\n", $$1, $$2}'

.PHONY: build
build: ## Compile every module and put every binary (strata and each service) in bin/
	@mkdir -p bin
	$(GO) build $(PKGS)
	$(if $(CMDS),$(GO) build -o bin/ $(CMDS:%=./%))

# The services that fault tests run with the race detector
# (harness ClusterConfig.Race): built once here, as bin/ is.
RACE_CMDS := services/storage/cmd/strata-storage services/controller/cmd/strata-controller

.PHONY: build-race
build-race: ## Put strata-storage and strata-controller built with -race in bin/race/ (for the fault tests that run them)
	@mkdir -p bin/race
	$(GO) build -race -o bin/race/ $(RACE_CMDS:%=./%)

.PHONY: lint
lint: buflint ## Run buf lint, gofmt and go vet
	@out=$$(gofmt -l $(MODULES)); if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

.PHONY: modules-check
modules-check: ## Build and vet each module on its own (GOWORK=off), so each go.mod requires what it imports
	@for m in $(MODULES); do \
		echo "modules-check: $$m"; \
		(cd $$m && GOWORK=off $(GO) build -o /dev/null ./... && GOWORK=off $(GO) vet ./...) || exit 1; \
	done

.PHONY: test
test: ## Run the fast test suite (units, fuzz seeds, fault injection, the fault suite's short schedule) with the race detector, beside the TypeScript client's (ts-test) and the console's browser tests (console-test)
	$(GO) vet $(PKGS)
	$(MAKE) build ts
	$(MAKE) -j3 --output-sync=target test-go test-nemesis-short test-ts

# The Go packages that take longest (make test-profile), listed first so
# that go test links and starts them first: go test runs packages in the
# order it is given them, and the real-process tests (./tests), which
# mostly wait on their clusters, left last had the machine half idle for
# their last minutes.
SLOW_FIRST := ./tests ./services/controller/internal/metastore ./cmd/strata/internal/devcluster \
	./client ./lib/recordbatch ./lib/partlog ./services/storage/internal/server ./deploy/check

# make test's three parts, which it runs at once (each one's output is
# printed whole when it ends). Every part needs bin/ and the TypeScript
# build, which make test makes first so they do not build them twice.
# STRATA_BIN points the Go tests' harness at bin/ (tests/harness/build.go),
# so no test package links its own copies of strata dev's binaries.
.PHONY: test-go test-nemesis-short test-ts
test-go: build build-race
	STRATA_BIN=$(CURDIR)/bin STRATA_RACE_BIN=$(CURDIR)/bin/race $(GO) test $(TESTFLAGS) $$($(GO) list $(SLOW_FIRST) $(PKGS) | grep -v '/tests/nemesis$$')
test-nemesis-short: build
	STRATA_BIN=$(CURDIR)/bin $(GO) test $(TESTFLAGS) $(NEMESIS_PKG)
test-ts:
	$(MAKE) ts-test
	$(MAKE) console-test

# The TypeScript workspace (ts/): npm ci only when the lockfile or a
# package.json changed, so `make ts` is cheap to repeat.
TS_STAMP := ts/node_modules/.strata-installed

$(TS_STAMP): ts/package.json ts/package-lock.json ts/client/package.json ts/console/package.json
	cd ts && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

.PHONY: ts
ts: $(TS_STAMP) ## Install the TypeScript workspace (npm ci) and build @strata-mq/client (ESM + .d.ts in ts/client/dist)
	cd ts && npm run build

# The console (ts/console) is built into the gateway's embed directory,
# which is committed like gen/, so `make build` and `make run` need only Go.
CONSOLE_DIST := services/gateway/internal/console/dist

.PHONY: console
console: $(TS_STAMP) ## Rebuild the Strata Console (ts/console, React + Vite) into services/gateway/internal/console/dist, which the gateway embeds
	cd ts/console && npm run build

.PHONY: console-test
console-test: $(TS_STAMP) build ## Run the console's browser tests: headless Chromium against a real strata dev cluster (screenshots in tests/console/screenshots/)
	cd ts/console && STRATA_BIN=$(CURDIR)/bin npm test

.PHONY: ts-test
ts-test: ts build ## Run the TypeScript client's tests: codec and partitioner vectors, a local HTTP/2 server (tokens, TLS, refusals, throttling), then a real strata dev cluster (Go interop, groups, leader kill, headless Chromium, two gateways behind HAProxy) and strata dev --secure
	cd ts/client && STRATA_BIN=$(CURDIR)/bin npm test

# make test-profile: the same runs as make test, each Go test binary under
# tests/cmd/testprofile (go test -exec) so its CPU time, its cluster's
# included, is recorded beside go test's wall times; the TypeScript and
# browser suites are measured as steps. The table goes to stdout and to
# .tmp/profile/table.md (docs/design/testing.md keeps one).
PROFILE_DIR := .tmp/profile

.PHONY: test-profile
test-profile: build ## Run the fast suite once and print its slowest packages, steps and tests (wall and CPU time) as a table
	@rm -rf $(PROFILE_DIR) && mkdir -p $(PROFILE_DIR)/records
	$(GO) build -o $(PROFILE_DIR)/testprofile ./tests/cmd/testprofile
	status=0; export STRATA_BIN=$(CURDIR)/bin; \
	exec="$(CURDIR)/$(PROFILE_DIR)/testprofile exec -out $(CURDIR)/$(PROFILE_DIR)/records"; \
	$(GO) test $(TESTFLAGS) -json -exec "$$exec" $$($(GO) list $(PKGS) | grep -v '/tests/nemesis$$') > $(PROFILE_DIR)/go.json || status=1; \
	$(GO) test $(TESTFLAGS) -json -exec "$$exec" $(NEMESIS_PKG) >> $(PROFILE_DIR)/go.json || status=1; \
	$(PROFILE_DIR)/testprofile run -out $(PROFILE_DIR)/records -name ts-test -- $(MAKE) ts-test || status=1; \
	$(PROFILE_DIR)/testprofile run -out $(PROFILE_DIR)/records -name console-test -- $(MAKE) console-test || status=1; \
	$(PROFILE_DIR)/testprofile report -json $(PROFILE_DIR)/go.json -out $(PROFILE_DIR)/records | tee $(PROFILE_DIR)/table.md; \
	grep -h '"Action":"fail"' $(PROFILE_DIR)/go.json | grep -v '"Test"' || true; \
	exit $$status

.PHONY: test-stress
test-stress: ## Run make test STRESS_RUNS times (default 5) while BUSY busy loops (default 1) load the cores; prints each run's result and time
	RUNS=$(STRESS_RUNS) BUSY=$(BUSY) MAKE="$(MAKE)" make/test-stress.sh

.PHONY: test-long
test-long: ## Run the long suites: fuzzing for FUZZTIME, and 20,000 crash trials on a fresh seed
	cd lib && $(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) ./recordbatch/
	cd lib && $(GO) test -run '^$$' -fuzz '^FuzzProducerSnapshot$$' -fuzztime $(FUZZTIME) ./partlog/
	cd lib && $(GO) test -run '^$$' -fuzz '^FuzzDecodeIndex$$' -fuzztime $(FUZZTIME) ./partlog/
	cd services/tiering && $(GO) test -run '^$$' -fuzz '^FuzzDecodeManifest$$' -fuzztime $(FUZZTIME) ./internal/manifest/
	cd lib && $(GO) test -run '^$$' -fuzz '^FuzzApplyDelta$$' -fuzztime $(FUZZTIME) ./metaview/
	cd lib && $(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) ./kafkawire/
	cd lib && $(GO) test -run '^$$' -fuzz '^FuzzFraming$$' -fuzztime $(FUZZTIME) ./kafkawire/
	cd lib && $(GO) test -run '^$$' -fuzz '^FuzzSASLMessages$$' -fuzztime $(FUZZTIME) ./kafkawire/sasl/
	cd lib && $(GO) test -run '^$$' -fuzz '^FuzzSCRAMMessages$$' -fuzztime $(FUZZTIME) ./kafkawire/sasl/
	cd lib && $(GO) test -count=1 -run '^TestRandomizedCrashes$$' ./partlog/ -args -crash-seed 0 -crash-trials 20000

# The fault suite's random schedules (tests/nemesis, build tag nemesis):
# DURATION of faults drawn from SEED (0: from the clock; the run prints it).
# Without -race: the run is long and the cluster needs the cores.
DURATION ?= 30m
SEED ?= 0

.PHONY: test-nemesis
test-nemesis: ## Run the fault suite's random schedule for DURATION (default 30m; SEED=N replays one) and print its figures
	cd tests && $(GO) test -tags nemesis -count=1 -timeout 0 -v -run '^TestNemesisRandom$$' ./nemesis/ \
		-args -nemesis.duration $(DURATION) -nemesis.seed $(SEED)

# The elastic-storage suite with its heavy tests (a move's source or target
# killed mid-copy, the rebalance measurement), which build only with the
# "scale" tag. Without -race: the measurement times real work.
SCALE_MB ?= 256
SCALE_THROTTLE ?= 10000000

.PHONY: test-scale
test-scale: ## Run the elastic-storage suite with its heavy tests and print the rebalance measurement (SCALE_MB of data, SCALE_THROTTLE bytes/s)
	cd tests && $(GO) test -tags scale -count=1 -timeout 120m -v \
		-run '^(TestScaleOutUnderLoad|TestDrainUnderLoad|TestLeadersReturnToPreferred|TestMoveSurvives.*|TestMoveTargetKillRollsBack|TestMeasureRebalance)$$' . \
		-args -rebalance-mb $(SCALE_MB) -rebalance-throttle $(SCALE_THROTTLE)

.PHONY: test-kafka
test-kafka: ts build ## Run the Kafka protocol's long suite against strata dev (franz-go failover under SIGKILL, groups with a member killed, fetch sessions across a leader kill, librdkafka's cooperative-sticky and transactions), the Kafka tests make test holds (franz-go, kadm, kcat, sarama, segmentio/kafka-go, kafkajs), and franz-go's own pkg/kgo suite
	cd tests && $(GO) test -tags kafka -count=1 -timeout 20m -v -run '^TestKafka' .
	cd ts/client && STRATA_BIN=$(CURDIR)/bin npm run test:kafka
	make/kgo-suite.sh

.PHONY: bench
bench: ## Run the benchmarks (append, read, group commit, the log cleaner over 1M keys, codecs, validation, a request's stack, the leader's produce path, the acks=all round trip) and print figures
	cd lib && $(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) ./partlog/ ./recordbatch/ ./serve/
	$(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) ./services/storage/internal/replica/ ./services/storage/internal/server/

.PHONY: load
load: build ## Load a throwaway 3-node cluster: produce, open-loop latency, consume; RF=3 acks=all vs RF=1 acks=leader (LOADFLAGS for strata-load)
	loadtest/run-local.sh $(LOADFLAGS)

.PHONY: ts-load
ts-load: build ts ## Compare the TypeScript client's produce and consume MB/s with the Go client's, alternating on one throwaway cluster (ROUNDS, RECORDS; TS_BEFORE=other/load.js adds another TS build's runs)
	loadtest/ts-vs-go.sh

.PHONY: bench-cluster
bench-cluster: build ## Benchmark every scenario on a throwaway cluster beside the peers (BENCH_MATRIX=full for all; docs/performance.md)
	loadtest/bench-cluster.sh

# make bench-partitions: the partition counts (the first is the baseline),
# the base port of its throwaway clusters and where the JSON report goes.
SCALE_SIZES ?= 12,1000,10000
SCALE_BASE_PORT ?= 22092
SCALE_OUT ?= bench-out

.PHONY: bench-partitions
bench-partitions: build ## Idle CPU, memory, files, metadata size, creation, failover and produce at 1,000 and 10,000 partitions against 12 (SCALE_SIZES, SCALE_FLAGS; docs/performance.md)
	@mkdir -p $(SCALE_OUT)
	bin/strata-scale --sizes $(SCALE_SIZES) --base-port $(SCALE_BASE_PORT) --json-file $(SCALE_OUT)/partitions.json $(SCALE_FLAGS)

.PHONY: bench-peers
bench-peers: ## Benchmark NATS JetStream and Redis Streams on the same workload, if their benchmark is checked out (PEERS_DIR)
	loadtest/bench-peers.sh

.PHONY: run
run: build ## Start a local 3-node cluster on embedded defaults (strata dev; Ctrl-C stops it)
	bin/strata dev --dir strata-dev --storage-nodes 3

# make demo: the orders story's programs, built beside the services (which
# strata dev needs) into bin/orders/. DEMOFLAGS go to the demo driver
# (--duration, --rate, --dsn, --keep; `bin/orders/demo --help`).
DEMO_PROGRAMS := shop billing analytics demo

.PHONY: demo
demo: build ## Run the orders story on strata dev --postgres (shop, billing exactly once into Postgres, analytics; a billing member and a storage node killed midway) and print its report; last line demo ok/FAILED (DEMOFLAGS)
	@mkdir -p bin/orders
	$(GO) build -o bin/orders/ $(DEMO_PROGRAMS:%=./examples/orders/%)
	bin/orders/demo $(DEMOFLAGS)

.PHONY: clean
clean: ## Remove build output and local tools
	rm -rf bin .tmp
