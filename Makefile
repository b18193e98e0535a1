# starlog: the two set-up commands are `make run` and `make test`.
SHELL := /bin/bash
GO ?= go
TOOLS := $(CURDIR)/.tools
export STARLOG_TOOLS := $(TOOLS)
export STARLOG_NODE_TOOLS := $(CURDIR)/.ci/tools/node_modules

VERSITYGW_VERSION := v1.8.0

.PHONY: all build test test-go lint tools fuzz bench run clean

all: build

build:
	$(GO) build ./...

## tools: pinned test services (versitygw, DynamoDB Local) in project-local folders.
tools: $(TOOLS)/bin/versitygw $(STARLOG_NODE_TOOLS)/.installed

$(TOOLS)/bin/versitygw:
	GOBIN=$(TOOLS)/bin $(GO) install github.com/versity/versitygw/cmd/versitygw@$(VERSITYGW_VERSION)

$(STARLOG_NODE_TOOLS)/.installed: .ci/tools/package.json .ci/tools/package-lock.json
	cd .ci/tools && npm ci --no-audit --no-fund
	touch $@

## test: the whole suite (conformance suites against real protocol servers, fuzz seed corpora).
test: tools lint test-go

test-go:
	$(GO) test -count=1 -timeout 20m ./...

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '^infra/')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

## fuzz: every fuzz target for FUZZTIME each (default 30s).
FUZZTIME ?= 30s
fuzz:
	@for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

## bench: Go benchmarks (figures go in docs/bench.md).
BENCHTIME ?= 1s
bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) ./shared/...

## proto: regenerate shared/api/s2pb from shared/api/s2/v1/s2.proto (needs protoc on PATH:
## apt-get install protobuf-compiler). The generated file is checked in; CI never runs this.
PROTOC_GEN_GO_VERSION := v1.36.12
.PHONY: proto
proto: $(TOOLS)/bin/protoc-gen-go
	protoc --plugin=protoc-gen-go=$(TOOLS)/bin/protoc-gen-go -I shared/api \
	  --go_out=. --go_opt=module=github.com/starlog/starlog shared/api/s2/v1/s2.proto

$(TOOLS)/bin/protoc-gen-go:
	GOBIN=$(TOOLS)/bin $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)

clean:
	rm -rf bin build
