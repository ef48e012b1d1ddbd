# make/proto.mk — protobuf tooling and code generation for the Strata API.
#
# Included from the top-level Makefile. Paths are anchored to the repository root (the parent
# of this file's directory), so the targets work whatever directory make runs from.
#
# Nothing here uses globally installed generators: buf and protoc-gen-es come from
# tools/package-lock.json (npm ci) and the Go plugins from the `tool` directives in tools/go.mod (a module of its own,
# outside go.work, always built with GOWORK=off). Everything lands in .tmp/bin.
#
# Targets (each documented with `## ...` for a help target):
#   tools          install the pinned buf and Go plugins into .tmp/bin
#   generate       delete gen/strata and gen/ts/strata, run buf generate (Go and TypeScript), require in gen/go.mod the exact
#                  protobuf and connect versions the plugins were built from, go mod tidy
#   checkgenerate  generate and rebuild the console bundle, then fail if gen/ or the bundle differs
#                  from what is committed
#   buflint        buf lint and buf format check of proto/

PROTO_ROOT := $(patsubst %/,%,$(dir $(abspath $(dir $(lastword $(MAKEFILE_LIST))))))
PROTO_TMP := $(PROTO_ROOT)/.tmp
PROTO_BIN := $(PROTO_TMP)/bin
PROTO_GEN_OUT := $(PROTO_ROOT)/gen/strata
PROTO_GEN_TS_OUT := $(PROTO_ROOT)/gen/ts/strata
BUF := $(PROTO_ROOT)/tools/node_modules/.bin/buf

# File targets, rebuilt only when the pins change (or the files are gone), so `make tools` is
# cheap to repeat.
PROTO_GO_PLUGINS := $(PROTO_BIN)/protoc-gen-go $(PROTO_BIN)/protoc-gen-connect-go

.PHONY: tools generate checkgenerate buflint

tools: $(BUF) $(PROTO_GO_PLUGINS) ## Install pinned buf (npm) and protoc-gen-go/protoc-gen-connect-go (tools/go.mod) into .tmp/bin

$(PROTO_TMP)/.gitignore:
	@mkdir -p $(PROTO_TMP)
	@echo '*' > $@

$(BUF): $(PROTO_ROOT)/tools/package.json $(PROTO_ROOT)/tools/package-lock.json | $(PROTO_TMP)/.gitignore
	@echo "tools: npm ci --prefix tools"
	@npm ci --prefix $(PROTO_ROOT)/tools --no-audit --no-fund --loglevel=error
	@touch $@

$(PROTO_GO_PLUGINS) &: $(PROTO_ROOT)/tools/go.mod $(PROTO_ROOT)/tools/go.sum | $(PROTO_TMP)/.gitignore
	@echo "tools: go build protoc-gen-go protoc-gen-connect-go"
	@mkdir -p $(PROTO_BIN)
	@GOWORK=off go build -C $(PROTO_ROOT)/tools -o $(PROTO_BIN)/ \
		google.golang.org/protobuf/cmd/protoc-gen-go \
		connectrpc.com/connect/cmd/protoc-gen-connect-go
	@touch $(PROTO_GO_PLUGINS)

generate: tools ## Regenerate gen/ from proto/: delete gen/strata and gen/ts/strata, buf generate (Go and TypeScript), pin gen's runtime to the plugins' versions, go mod tidy
	@echo "generate: buf generate -> gen/strata, gen/ts/strata"
	@rm -rf $(PROTO_GEN_OUT) $(PROTO_GEN_TS_OUT)
	@cd $(PROTO_ROOT) && PATH="$(PROTO_BIN):$(PROTO_ROOT)/tools/node_modules/.bin:$$PATH" $(BUF) generate
	@pins="$$(GOWORK=off go list -C $(PROTO_ROOT)/tools -m -f '{{.Path}}@{{.Version}}' google.golang.org/protobuf connectrpc.com/connect)" && \
		cd $(PROTO_ROOT)/gen && GOWORK=off go get $$pins && GOWORK=off go mod tidy

checkgenerate: generate ## Fail if gen/ is not exactly what `make generate` produces, or the console bundle not what `make console` builds (stale or untracked files)
	@status="$$(cd $(PROTO_ROOT) && git status --porcelain --untracked-files=all -- gen/)"; \
	if [ -n "$$status" ]; then \
		echo "error: gen/ is out of date with proto/ or tools/; run 'make generate' and commit gen/:" >&2; \
		echo "$$status" >&2; \
		exit 1; \
	fi
	@$(MAKE) --no-print-directory -C $(PROTO_ROOT) console >/dev/null
	@status="$$(cd $(PROTO_ROOT) && git status --porcelain --untracked-files=all -- services/gateway/internal/console/dist/)"; \
	if [ -n "$$status" ]; then \
		echo "error: the console bundle is out of date with ts/console or gen/ts; run 'make console' and commit services/gateway/internal/console/dist/:" >&2; \
		echo "$$status" >&2; \
		exit 1; \
	fi

buflint: $(BUF) ## Lint proto/ (buf lint, STANDARD + COMMENTS rules) and check buf formatting
	@cd $(PROTO_ROOT) && $(BUF) lint
	@cd $(PROTO_ROOT) && $(BUF) format --diff --exit-code || { echo "error: proto/ is not buf-formatted; run: tools/node_modules/.bin/buf format -w" >&2; exit 1; }
