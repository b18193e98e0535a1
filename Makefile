# starlog: the two set-up commands are `make run` and `make test`.
SHELL := /bin/bash
GO ?= go
TOOLS := $(CURDIR)/.tools
export STARLOG_TOOLS := $(TOOLS)
export STARLOG_NODE_TOOLS := $(CURDIR)/.ci/tools/node_modules

VERSITYGW_VERSION := v1.8.0
# The Lambda Runtime Interface Emulator has no tagged versions: pin the pseudo-version.
RIE_VERSION := v0.0.0-20261030222936-bef5c4ba774d

.PHONY: all build test test-go lint tools fuzz bench run cluster clean lambda verify soak

all: build

## build: compile every package and the star binary (bin/star).
build:
	$(GO) build ./...
	$(GO) build -o bin/star ./star

## run: one embedded star (`star dev`) on ./data at 127.0.0.1:$(PORT);
## Ctrl-C stops it, and a restart on the same data keeps every ack.
PORT ?= 7480
DATA ?= ./data
run:
	$(GO) build -o bin/star ./star
	bin/star dev --data $(DATA) --listen 127.0.0.1:$(PORT)

## cluster: three stars on consecutive ports from $(PORT) sharing one SQLite
## metastore and one directory store under ./data-cluster; kill -9 one and
## watch its streams move (short dead-after for the demo).
cluster:
	$(GO) build -o bin/star ./star
	bin/star dev --stars 3 --data ./data-cluster --listen 127.0.0.1:$(PORT) --dead-after 5s --registry-heartbeat 1s

## tools: pinned test services (versitygw, DynamoDB Local, local SQS, the Lambda
## Runtime Interface Emulator) in project-local folders.
tools: $(TOOLS)/bin/versitygw $(TOOLS)/bin/aws-lambda-rie $(STARLOG_NODE_TOOLS)/.installed
	bash .ci/kcat.sh

$(TOOLS)/bin/versitygw:
	GOBIN=$(TOOLS)/bin $(GO) install github.com/versity/versitygw/cmd/versitygw@$(VERSITYGW_VERSION)

$(TOOLS)/bin/aws-lambda-rie:
	GOBIN=$(TOOLS)/bin $(GO) install github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie@$(RIE_VERSION)

## lambda: the auditor functions as linux/arm64 `bootstrap` binaries, one folder
## per job under build/lambda (what the CDK stack packages).
LAMBDA_DIR := build/lambda
LAMBDA_JOBS := plan janitor settle trim chain-settle
lambda:
	@for j in $(LAMBDA_JOBS); do \
	  echo "building $(LAMBDA_DIR)/$$j/bootstrap"; mkdir -p $(LAMBDA_DIR)/$$j; rm -f $(LAMBDA_DIR)/$$j/bootstrap; \
	  GOOS=linux GOARCH=arm64 CGO_ENABLED=0 $(GO) build -trimpath -tags lambda.norpc -o $(LAMBDA_DIR)/$$j/bootstrap ./functions/$$j || exit 1; \
	done

# npm ci empties node_modules first: through a link to another checkout's
# install (a worktree sharing it) it would empty that one; say so instead.
$(STARLOG_NODE_TOOLS)/.installed: .ci/tools/package.json .ci/tools/package-lock.json
	@if [ -L .ci/tools/node_modules ]; then \
	  echo "note: .ci/tools/node_modules links to $$(readlink .ci/tools/node_modules): not reinstalling through the link (run make tools there)"; \
	else cd .ci/tools && npm ci --no-audit --no-fund && touch node_modules/.installed; fi

## test: the whole suite (conformance suites against real protocol servers, fuzz seed corpora),
## the CDK tests and the deploy rehearsal of the synthesized stack.
# On two cores most phases wait (on the network, on servers, on timers) more
# than they compute, so test runs them in lanes: first the installs beside
# lint (vet compiles what the tests will need); then the root module's tests
# beside the e2e module's tests and the soak, and beside synth, the infra
# tests and the functions package's tests with the rehearsal (one test
# binary; the root lane, the longest, leaves that package to this one). -k: every lane runs to its end and any failure
# fails test; --output-sync: a target's output is printed whole when it ends,
# and every phase keeps its own log in build/.
# Each phase prints its wall and CPU time (bash's time: the phase's processes
# and their children), so a slow run says where the time went.
TEST_SYNC := --no-print-directory -k --output-sync=target
PHASE_TIME = TIMEFORMAT='phase $(1): %R s wall, %U s user, %S s sys'; time
test:
	@$(call PHASE_TIME,tools+cdk-cli+lint) $(MAKE) $(TEST_SYNC) -j3 tools cdk-cli lint
	@st=0; $(call PHASE_TIME,all test lanes) $(MAKE) $(TEST_SYNC) -j3 GO_TEST_ROOT_EXCLUDE=$(FUNCTIONS_PKG) test-go-root test-lane-e2e test-lane-infra || st=1; \
	  $(MAKE) --no-print-directory GO_TEST_LOGS="$(GO_TEST_LOGS) build/go-test-functions.log" test-go-summary || st=1; exit $$st

.PHONY: test-lane-e2e test-lane-infra test-go-root test-go-e2e test-go-summary
test-lane-e2e:
	@st=0; { $(call PHASE_TIME,test-go-e2e) $(MAKE) --no-print-directory test-go-e2e; } || st=1; \
	  { $(call PHASE_TIME,soak-short) $(MAKE) --no-print-directory soak-short; } || st=1; { $(call PHASE_TIME,kafka-suite) $(MAKE) --no-print-directory kafka-suite; } || st=1; exit $$st
test-lane-infra:
	@$(call PHASE_TIME,synth+test-infra+functions) $(MAKE) --no-print-directory -k -j1 test-infra test-go-functions

# Top-level test results and package lines are printed (the conformance
# suites by name, so a run shows them passing against versitygw and DynamoDB
# Local); the full -v log is kept in build/go-test.log (the root module's,
# then the e2e module's: build/go-test-root.log and build/go-test-e2e.log;
# in make test, then the functions package's: build/go-test-functions.log).
#
# make test's test binaries skip go test's own vet pass and DWARF:
# `make lint`, which make test runs first, vets every module in full, and
# panics and stack traces do not need DWARF. On a cold build cache this
# took the root module's test builds from 555 to 419 CPU-seconds, and
# make test's CPU is saturated on two cores, so CPU-seconds are wall time.
GO_TEST_BUILD := -vet=off -ldflags=-w
GO_TEST_FLAGS := -count=1 -timeout 20m -v $(GO_TEST_BUILD) -skip '^TestRehearsal|^TestSoak$$'
GO_TEST_SHOW := '^(ok |FAIL|--- |panic:)|^    --- FAIL'
test-go:
	@st=0; $(MAKE) $(TEST_SYNC) -j2 test-go-root test-go-e2e || st=1; \
	  $(MAKE) --no-print-directory test-go-summary || st=1; exit $$st

# The root module's packages share one DynamoDB Local (.ci/dynamo-local.sh,
# through STARLOG_TEST_DYNAMO_ENDPOINT; tables carry the test process's pid)
# instead of a JVM each: nine packages started one, 3-4 s of CPU each on an
# idle machine and 35 s seen at load ~20. One already named is used as is.
#
# go test starts packages in the order it is given them (./... alone is
# alphabetical, which left star/*, the slowest, to run last, two at a time,
# with the other lanes done and the CPU 20-90 % idle for two minutes): the
# slowest go first, by their times in a clean-clone run (longest first).
GO_TEST_ROOT_FIRST := ./functions ./shared/settle ./star/node ./star/durable ./star/sim/catalogsim \
  ./shared/chain ./star/server ./star/servecmd ./star/loglet ./shared/auditjob ./star/kafka \
  ./star/clientcmd ./shared/sdk ./functions/internal/handler ./shared/objstore/fs ./shared/objstore/s3 \
  ./star/sim/chainsim ./shared/meta/dynamo ./star/auditor
# GO_TEST_ROOT_EXCLUDE: an import path left out (make test runs the functions
# package in the infra lane).
GO_TEST_ROOT_EXCLUDE ?=
FUNCTIONS_PKG := github.com/starlog/starlog/functions
test-go-root:
	@mkdir -p build
	@set -o pipefail; if [ -z "$${STARLOG_TEST_DYNAMO_ENDPOINT:-}" ]; then \
	  STARLOG_TEST_DYNAMO_ENDPOINT=$$(.ci/dynamo-local.sh start build/dynamo-local-root) || exit 1; export STARLOG_TEST_DYNAMO_ENDPOINT; \
	  trap '.ci/dynamo-local.sh stop build/dynamo-local-root' EXIT; fi; \
	  $(call PHASE_TIME,test-go-root) { pkgs=$$($(GO) list $(GO_TEST_ROOT_FIRST) ./... | grep -vxF '$(GO_TEST_ROOT_EXCLUDE)') && \
	  $(GO) test $(GO_TEST_FLAGS) $$pkgs 2>&1 | tee build/go-test-root.log | grep -E $(GO_TEST_SHOW); }

test-go-e2e:
	@mkdir -p build
	@set -o pipefail; cd star/e2e && $(GO) test $(GO_TEST_FLAGS) ./... 2>&1 | tee $(CURDIR)/build/go-test-e2e.log | grep -E $(GO_TEST_SHOW)

GO_TEST_LOGS := build/go-test-root.log build/go-test-e2e.log
# The summary counts the logs of GO_TEST_LOGS (both modules', and in make
# test the functions package's); it fails when either module's go
# test did (a FAIL line: a test, a build or a panicked binary) or left no log.
test-go-summary:
	@cat $(GO_TEST_LOGS) > build/go-test.log || exit 1; \
	  p=$$(grep -c '^--- PASS' build/go-test.log); f=$$(grep -c '^--- FAIL' build/go-test.log); k=$$(grep -c '^--- SKIP' build/go-test.log); \
	  echo "go test: $$p passed, $$f failed, $$k skipped"; \
	  if [ $$f -ne 0 ] || grep -q '^FAIL' build/go-test.log; then echo "go test failed: see build/go-test.log"; exit 1; fi

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '^infra/')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	cd star/e2e && $(GO) vet ./...
	bash .ci/layers.sh
	bash .ci/docrefs.sh
	$(GO) test -count=1 $(GO_TEST_BUILD) ./star/docscheck

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

## kafka-suite: franz-go's own kgo test suite (the go.mod version) against a
## star dev's Kafka face; in make test after the soak (docs/kafka.md).
.PHONY: kafka-suite
kafka-suite:
	bash .ci/kgo-suite.sh

## bench-density: metastore writes and object requests per GiB against the
## stream count (issue 15): one Standard loglet at 4 MiB/s of 1 KiB records
## over N = 1, 100, 1,000 and 10,000 streams, on SQLite and on DynamoDB
## Local, DENSITY_SECONDS (60) each at least (longer until three steady
## absorb passes have ended), each row in its own process so its peak RSS is its
## own, then a timed takeover of the row's backlog; the load average is
## logged before every row (figures in docs/bench.md, "Density").
DENSITY_SECONDS ?= 60
DENSITY_METAS ?= sqlite dynamo
DENSITY_STREAMS ?= 1 100 1000 10000
.PHONY: bench-density
bench-density:
	@mkdir -p build
	@: > build/bench-density.log
	@set -o pipefail; for m in $(DENSITY_METAS); do for n in $(DENSITY_STREAMS); do \
	  echo "load average before meta=$$m/streams=$$n: $$(cut -d' ' -f1-3 /proc/loadavg)" | tee -a build/bench-density.log; \
	  DENSITY_SECONDS=$(DENSITY_SECONDS) $(GO) test -count=1 -timeout 60m -run '^$$' -bench "^BenchmarkDensity\$$/^meta=$$m\$$/^streams=$$n\$$" -benchtime 1x ./star/loglet 2>&1 \
	    | tee -a build/bench-density.log | grep -E '^(Benchmark|ok |FAIL|panic:)' || exit 1; \
	done; done; echo "load average after: $$(cut -d' ' -f1-3 /proc/loadavg)" | tee -a build/bench-density.log

## bench-density-star: the whole `star dev` on its defaults (its in-process
## auditor included) at DENSITY_STAR_MIBPS (2) of 1 KiB records over N =
## DENSITY_STAR_STREAMS (1, 1,000, 10,000) streams: metastore writes by writer
## and row kind (starlog_meta_writes_total), the auditor's object requests,
## peak RSS and a kill -9 takeover, each row after DENSITY_STAR_WARMUP s of
## paced ingest over DENSITY_STAR_SECONDS s (issue 31; figures in
## docs/bench.md, "Density of the whole star"). The auditor settles at the
## 15 min age cap beyond a few streams: a row that should count it needs a
## warm-up of 900 s and a window of 600 s.
DENSITY_STAR_STREAMS ?= 1 1000 10000
DENSITY_STAR_WARMUP ?= 120
DENSITY_STAR_SECONDS ?= 120
DENSITY_STAR_MIBPS ?= 2
.PHONY: bench-density-star
bench-density-star:
	@mkdir -p build
	@set -o pipefail; cd star/e2e && DENSITY_STAR=1 DENSITY_STAR_STREAMS="$(DENSITY_STAR_STREAMS)" DENSITY_STAR_WARMUP=$(DENSITY_STAR_WARMUP) \
	  DENSITY_STAR_SECONDS=$(DENSITY_STAR_SECONDS) DENSITY_STAR_MIBPS=$(DENSITY_STAR_MIBPS) \
	  $(GO) test -count=1 -timeout 120m -run '^TestDensityOfTheWholeStar$$' -v ./density 2>&1 | tee ../../build/bench-density-star.log | grep -E 'density_test|^(ok |FAIL|---|panic:)'

## bench-settle-density: the auditor's requests per GiB (settle, trim, the
## janitor's reclaim) against the stream count (issue 15): 4 MiB/s of 1 KiB
## records over N = 1, 100, 1,000 and 10,000 streams of one star, Standard
## and Express at the star's default flush and flight, simulated clock (mem
## object store, SQLite); DENSITY_CLASSES, DENSITY_STREAMS and
## DENSITY_SETTLE_SECONDS narrow it (figures in docs/bench.md, "Settle").
.PHONY: bench-settle-density
bench-settle-density:
	@mkdir -p build
	@set -o pipefail; SETTLE_DENSITY=1 $(GO) test -count=1 -timeout 180m -run '^$$' -bench '^BenchmarkSettleDensity$$' -benchtime 1x -v ./shared/settle 2>&1 \
	  | tee build/bench-settle-density.log | grep -E '^(Benchmark|ok |FAIL|panic:|\s+densitybench_test)'

## settle-era: the settle function, as built for the stack, under the Lambda
## Runtime Interface Emulator on one era of 10,000 streams, within the memory,
## /tmp and timeout the stack gives it (issue 15; figures in docs/settle.md).
.PHONY: settle-era
settle-era:
	STARLOG_ERA_TEST=1 $(GO) test -count=1 -timeout 45m -run '^TestSettleEraOf10000StreamsFitsTheLambda$$' -v ./functions

## verify: the chain simulation (sim, SIM_MINUTES) and the catalog
## simulation (sim-catalog, CATSIM_BUDGET) first, then the long linearizability run
## (issue 6): clients append, read and
## check-tail through three `star serve` processes (one SQLite metastore, one
## object folder) while the nemesis kills stars with kill -9 and restarts them,
## hands streams off under load, and slows or downs buckets and the metastore;
## every 20 s history is checked with porcupine and read back. Per minute: 6
## kills, 6 handoffs, 9 bucket/metastore faults and 2 zone-halts (Express epochs
## halted with one zone black-holed), 3 deletes and re-creates of a stream
## (or the whole basin) of the catalog basin under the same names; per 5
## minutes (at least one): a 120 s
## metastore outage on every star (acks counted in 10 s windows). Each outage
## adds its 2 minutes to the run. VERIFY_MINUTES (10) sets the length (`make
## test` runs 12 s with a few faults, one zone-halt, two re-creates and a 3 s
## outage). Log:
## build/verify.log. Before it, the full fence races of shared/chain
## (1,000 randomized runs and 10 on versitygw and DynamoDB Local; `make
## test` runs 250 and 4).
VERIFY_MINUTES ?= 10
verify: sim sim-catalog
	@mkdir -p build
	$(GO) test -count=1 -timeout 30m -run '^TestFenceRace' ./shared/chain -args -chain.fence-long
	@set -o pipefail; m=$(VERIFY_MINUTES); cd star/e2e && $(GO) test -count=1 -timeout $$((m*6+30))m -v -run TestLinearizable ./verify -args \
	  -verify.duration=$${m}m -verify.round=20s -verify.stars=3 \
	  -verify.kills=$$((m*6)) -verify.handoffs=$$((m*6)) -verify.store-faults=$$((m*9)) \
	  -verify.zone-halts=$$((m*2)) -verify.zone-tail=5s -verify.recreates=$$((m*3)) \
	  -verify.meta-outages=$$(((m+4)/5)) -verify.meta-outage=120s -verify.ack-window=10s \
	  -verify.max-down=4s -verify.max-hold=4s -verify.producers=1 -verify.kafka=1 2>&1 | tee $(CURDIR)/build/verify.log

## soak: the compressed-time lifecycle soak (issue 14, star/e2e/soak): three
## `star serve` processes and the in-process auditor with settle timers of
## seconds (1 s linger, 2 s age cap, 2 s read grace, 1 MiB output cap), hot,
## slow, idle and infinite-retention streams with retention of seconds,
## trim commands, a stream deleted and re-created under its name every
## minute, and a kill -9 every 40 s. Every 5 s it measures every stream from
## the object directory and the metastore (stored vs retained bytes,
## objects, rows), asserts stored <= 1.1 x retained + one output cap, and
## reads every stream back. SOAK_MINUTES (10) sets the length (`make test`
## runs 40 s with one kill and one delete). Writes docs/soak.csv,
## docs/soak-totals.csv and docs/soak.png; log: build/soak.log.
SOAK_MINUTES ?= 10
## soak-short: the soak's 40 s run (its flags' defaults); part of `make test`.
.PHONY: soak-short
soak-short:
	@mkdir -p build
	@set -o pipefail; cd star/e2e && $(GO) test -count=1 -timeout 10m -v $(GO_TEST_BUILD) -run '^TestSoak$$' ./soak 2>&1 | tee $(CURDIR)/build/soak-short.log

soak:
	@mkdir -p build
	@set -o pipefail; m=$(SOAK_MINUTES); cd star/e2e && $(GO) test -count=1 -timeout $$((m+15))m -v -run '^TestSoak$$' ./soak -args \
	  -soak.duration=$${m}m -soak.sample=5s -soak.stars=3 -soak.kills=$$((m*3/2)) -soak.deletes=$$m \
	  -soak.trim-every=30s -soak.retention=60s -soak.hot-kib=96 -soak.drain=2m \
	  -soak.out=$(CURDIR)/docs 2>&1 | tee $(CURDIR)/build/soak.log

## sim: the chain simulation (issue 11, star/sim/chainsim): the randomized
## run for SIM_MINUTES of wall time (each seed draws its sizes and faults,
## then heals and demands a settlement; SIM_SEEDS > 0 runs exactly that
## many seeds instead) and the deep exhaustive cases. `make test` runs the
## seeds for their default budget (10 s; with the catalog simulation's
## 20 s, 30 s of seeds: the suite's total time is tight)
## and the short exhaustive cases. A failing seed prints its trace and the
## one command that replays and shrinks it. Log: build/sim.log.
SIM_MINUTES ?= 20
SIM_SEEDS ?= 0
.PHONY: sim
sim:
	@mkdir -p build
	@set -o pipefail; $(GO) test -count=1 -timeout 4h -v -run 'TestSimSeeds$$|TestExhaustive$$' ./star/sim/chainsim \
	  -args -chainsim.budget=$(SIM_MINUTES)m -chainsim.seeds=$(SIM_SEEDS) -chainsim.deep 2>&1 | tee build/sim.log \
	  | grep -E '^(ok |FAIL|--- |panic:)|^    --- |(sim|exhaustive)_test.go:[0-9]+: [^ ]|^        replay and shrink:'

## sim-catalog: the catalog simulation (issue 26, star/sim/catalogsim): real
## stars over a scheduled metastore, clients deleting and re-creating the same
## names, crashes, partitions, handoffs, leaves, drains and held replies, for
## CATSIM_BUDGET of wall time, then the found-defect cases and the
## determinism check (a seed run twice gives one trace). `make test` runs the
## seeds for their default budget (20 s), the found-defect cases and the
## determinism check. A failing seed prints its trace and the
## command that replays it. Log: build/sim-catalog.log.
CATSIM_BUDGET ?= 10m
.PHONY: sim-catalog
sim-catalog:
	@mkdir -p build
	@set -o pipefail; $(GO) test -count=1 -timeout 4h -v -run 'TestCatalogSeeds$$|TestCatalogDefects$$|TestCatalogDeterminism$$' ./star/sim/catalogsim \
	  -args -catalogsim.budget=$(CATSIM_BUDGET) 2>&1 | tee build/sim-catalog.log \
	  | grep -E '^(ok |FAIL|--- |panic:)|^    --- |(sim|defects)_test.go:[0-9]+: [^ ]'

## upgrade: the rolling-upgrade test (issue 32 item 5; docs/deploy.md
## "Upgrades"): builds UPGRADE_FROM (the previous release: the last commit
## CI landed; move it forward at each release) and this tree, then runs a
## three-star cluster and an auditor process from the old build through
## the linearizability workload while each is replaced by the new build
## (about 5 minutes; UPGRADE_ARGS passes -verify.* flags).
UPGRADE_FROM ?= bc8dc19
.PHONY: upgrade
upgrade:
	UPGRADE_FROM=$(UPGRADE_FROM) bash .ci/upgrade.sh

## failover-bench: failover time (issue 6): kill -9 of a stream's leader, then
## the first ack through the other star, FAILOVER_KILLS kills at leader backlogs
## of 0, 100 and 1000 flights; prints the table (figures in docs/bench.md).
FAILOVER_KILLS ?= 20
.PHONY: failover-bench
failover-bench:
	@mkdir -p build
	@set -o pipefail; cd star/e2e && $(GO) test -count=1 -timeout 60m -v -run TestFailoverBench ./failover \
	  -args -failover.kills=$(FAILOVER_KILLS) -failover.backlogs=0,100,1000 2>&1 | tee $(CURDIR)/build/failover-bench.log

## bench-subs: what idle Durable Streams subscriptions cost to drive
## (issue 18): S = 100 and 1,000 subscriptions of one stream each on
## N = 1 and 3 in-process stars sharing one SQLite metastore, metastore
## requests by row kind and HEADs per second at the default audit period
## (figures in docs/bench.md, "Durable Streams subscriptions").
SUBS_WINDOW ?= 20s
.PHONY: bench-subs
bench-subs:
	@mkdir -p build
	@set -o pipefail; $(GO) test -count=1 -timeout 30m -run '^$$' -bench '^BenchmarkSubscriptionDriving$$' -benchtime 1x ./star/server \
	  -args -subs.window=$(SUBS_WINDOW) 2>&1 | tee build/bench-subs.log | grep -E '^(Benchmark|ok |FAIL|panic:)'

## bench-curve: ack latency against ingest (issue 31 item 6): star/loglet's
## BenchmarkLatencyCurve drives each class at the star's default flush
## settings on the latency-injecting store (Standard PUT p50 40 / p99 150 ms,
## Express 5 / 20 ms), 16 streams open loop, at each rate of CURVE_RATES
## (MiB/s, ascending; a class stops at the first it does not sustain) for
## CURVE_SECONDS each; star/e2e/latcurve draws docs/bench-curve.png beside
## the anchors' figures. CSV and log in build/ (figures in docs/bench.md).
CURVE_RATES ?= 1,2,5,10,20,50,100,200
CURVE_SECONDS ?= 3
.PHONY: bench-curve
bench-curve:
	@mkdir -p build
	@echo "load average before: $$(cut -d' ' -f1-3 /proc/loadavg)" | tee build/bench-curve.log
	@set -o pipefail; $(GO) test -count=1 -timeout 30m -run '^$$' -bench '^BenchmarkLatencyCurve$$' -benchtime 1x ./star/loglet \
	  -args -curve.rates=$(CURVE_RATES) -curve.dur=$(CURVE_SECONDS)s -curve.csv=$(CURDIR)/build/bench-curve.csv 2>&1 \
	  | tee -a build/bench-curve.log | grep -E '^(Benchmark|ok |FAIL|panic:)'
	cd star/e2e && $(GO) run ./latcurve -csv $(CURDIR)/build/bench-curve.csv -png $(CURDIR)/docs/bench-curve.png

## bench-read: catch-up reads (issue 19): whole streams of READ_BYTES of 1 KiB
## records from seq 0, from settled objects and Standard/Express transit, on
## the directory store and behind S3-like GET latency, with and without
## read-ahead, S2S and SSE; then the tailing fan-out at READ_FANOUT readers
## (figures in docs/bench.md). READ_COUNT runs of each give medians.
READ_BYTES ?= 2147483648
READ_COUNT ?= 1
READ_FANOUT ?= 1000
.PHONY: bench-read
bench-read:
	@mkdir -p build
	@set -o pipefail; $(GO) test -count=$(READ_COUNT) -timeout 60m -run '^$$' -bench 'BenchmarkCatchUp' -benchtime 1x ./star/reader \
	  -args -catchup.bytes=$(READ_BYTES) 2>&1 | tee build/bench-read.log
	@set -o pipefail; $(GO) test -count=1 -timeout 30m -v -run 'TestTailFanOut$$' ./star/server \
	  -args -fanout.readers=$(READ_FANOUT) 2>&1 | tee -a build/bench-read.log

## bench-read-cli: `star read` from seq 0 of a 1 GiB stream of 1 KiB records
## against `star dev`, to /dev/null (issue 31), from transit and from settled
## objects: READ_CLI_RUNS runs, medians, client and star CPU per GiB, the
## load average beside each run, and CPU profiles of both sides
## (build/bench-read-cli; figures in docs/bench.md). READ_CLI_BASE=<git rev>
## builds that revision too and runs it interleaved with this tree's, for a
## before/after ratio in one run. The streams are written once and kept.
READ_CLI_RUNS ?= 5
READ_CLI_BASE ?=
.PHONY: bench-read-cli
bench-read-cli:
	@mkdir -p build/bench-read-cli
	$(GO) build -o bin/star ./star
	@if [ -n "$(READ_CLI_BASE)" ]; then \
	  rm -rf build/bench-read-cli/base-src && mkdir -p build/bench-read-cli/base-src && \
	  git archive $(READ_CLI_BASE) | tar -x -C build/bench-read-cli/base-src && \
	  (cd build/bench-read-cli/base-src && $(GO) build -o ../star-base ./star) || exit 1; \
	fi
	READ_CLI_RUNS=$(READ_CLI_RUNS) bash .ci/bench-read-cli.sh $(if $(READ_CLI_BASE),base=build/bench-read-cli/star-base) now=bin/star

## bench-peer: starlog against NATS JetStream (issue 17, star/e2e/peerbench): a
## pinned nats-server with file storage and fsync on every message
## (sync_interval: always) next to `star dev` on its directory store, the six
## workloads of the issue's table (1 KiB messages; one producer or 16, one in
## flight, 500 in flight, batches of 500), interleaved, PEER_RUNS runs of
## PEER_SECONDS each; prints each row's medians and ratio and both servers'
## peak RSS, writes docs/bench-peer.png, and CPU profiles of star dev (first
## run of each workload) into build/bench-peer. Log: build/bench-peer.log.
## The last row reads (issue 19): PEER_READ_MESSAGES messages written once
## into one stream on each system, read from the start every run (a
## JetStream ordered consumer against a star read session); 0 drops it.
NATS_SERVER_VERSION := v2.15.2
PEER_RUNS ?= 9
PEER_SECONDS ?= 5
PEER_READ_MESSAGES ?= 1000000
.PHONY: bench-peer
bench-peer: $(TOOLS)/bin/nats-server
	@mkdir -p build
	$(GO) build -o bin/star ./star
	cd star/e2e && $(GO) build -o $(CURDIR)/bin/peerbench ./peerbench/cmd/peerbench
	@set -o pipefail; bin/peerbench --nats-server $(TOOLS)/bin/nats-server --star bin/star \
	  --runs $(PEER_RUNS) --duration $(PEER_SECONDS)s --read-messages $(PEER_READ_MESSAGES) --work build/bench-peer --png docs/bench-peer.png 2>&1 | tee build/bench-peer.log

$(TOOLS)/bin/nats-server:
	GOBIN=$(TOOLS)/bin $(GO) install github.com/nats-io/nats-server/v2@$(NATS_SERVER_VERSION)

## bench-ds: the Durable Streams face against the protocol's reference server
## (issue 31, star/e2e/dsbench): @durable-streams/server (pinned below, npm
## into build/ds-ref) in file mode, an fdatasync per append, beside `star dev
## --open`; 1 KiB appends from a keep-alive HTTP/1.1 client, one stream, 16
## streams and an idempotent producer, interleaved, DS_RUNS runs of
## DS_SECONDS each; prints each run with the load average, the medians and
## ratios and both servers' CPU per append; CPU profiles of the star (first
## run of each row) go to build/bench-ds. Log: build/bench-ds.log.
DS_SERVER_VERSION := 0.3.7
DS_RUNS ?= 5
DS_SECONDS ?= 5
.PHONY: bench-ds
bench-ds: build/ds-ref/node_modules/@durable-streams/server/package.json
	@mkdir -p build
	$(GO) build -o bin/star ./star
	cd star/e2e && $(GO) build -o $(CURDIR)/bin/dsbench ./dsbench/cmd/dsbench
	@set -o pipefail; bin/dsbench --star bin/star --server build/ds-ref/node_modules/@durable-streams/server \
	  --runs $(DS_RUNS) --duration $(DS_SECONDS)s --work build/bench-ds 2>&1 | tee build/bench-ds.log

build/ds-ref/node_modules/@durable-streams/server/package.json:
	npm install --prefix build/ds-ref --no-audit --no-fund @durable-streams/server@$(DS_SERVER_VERSION)

## bench-kafka: the Kafka face beside the S2 face (issue 30, star/e2e/kafkabench):
## one `star dev --open` serving both, 1 KiB records produced through kgo
## (acks=all) and through the Go SDK's S2S append sessions, 1 and 16
## producers, interleaved, KAFKA_RUNS runs of KAFKA_SECONDS each; a second
## star dev with S3 Express-like latency (--dev-express-latency) for the
## Express rows' ack p99; and a partition of KAFKA_READ_BYTES read from its
## start through a kgo consumer, an S2S read session and `star read`.
## Prints medians and ratios; CPU profiles of the star (first run of each
## row and face) go to build/bench-kafka. Log: build/bench-kafka.log.
KAFKA_RUNS ?= 4
KAFKA_SECONDS ?= 4
KAFKA_READ_BYTES ?= 1073741824
.PHONY: bench-kafka
bench-kafka:
	@mkdir -p build
	$(GO) build -o bin/star ./star
	cd star/e2e && $(GO) build -o $(CURDIR)/bin/kafkabench ./kafkabench/cmd/kafkabench
	@set -o pipefail; bin/kafkabench --star bin/star --runs $(KAFKA_RUNS) --duration $(KAFKA_SECONDS)s \
	  --read-bytes $(KAFKA_READ_BYTES) --work build/bench-kafka 2>&1 | tee build/bench-kafka.log

## dashboards: images of both operator dashboards from a real run (issue 32,
## star/e2e/dashboards): star dev under appends and tailing reads on both
## classes for DASH_LOAD, a DASH_SETTLE idle round, a catch-up read, /metrics
## scraped every 5 s; every Grafana panel and every widget of the synthesized
## stack's CloudWatch dashboard evaluated over the scrapes, drawn to
## docs/grafana-dashboard.png and docs/cloudwatch-dashboard.png (about 2.5
## minutes plus the synth). Log: build/dashboards.log.
DASH_LOAD ?= 60s
DASH_SETTLE ?= 45s
.PHONY: dashboards
dashboards: synth
	@mkdir -p build
	$(GO) build -o bin/star ./star
	cd star/e2e && $(GO) build -o $(CURDIR)/bin/dashboards ./dashboards/cmd/dashboards
	@set -o pipefail; bin/dashboards --star bin/star --load $(DASH_LOAD) --settle $(DASH_SETTLE) \
	  --template cdk.out/Starlog.template.json --work build/dashboards 2>&1 | tee build/dashboards.log

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

# --- infra (CDK) ---
# The CDK app is its own Go module (infra/); the CLI is pinned by a lockfile
# in a dot-folder so Go tooling never walks its *.template.go files. Caches
# stay inside the workspace.
INFRA_ENV := JSII_RUNTIME_PACKAGE_CACHE_ROOT=$(TOOLS)/jsii-cache CDK_HOME=$(TOOLS)/cdk-home \
	JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION=20 CDK_DISABLE_VERSION_CHECK=1
CDK_CLI_DIR := infra/.cdk-cli
CDK_CLI := $(CDK_CLI_DIR)/node_modules/.bin/cdk
INFRA_STAR := build/star-linux-arm64/star
INFRA_LAMBDA_DIR := build/lambda
INFRA_JOBS := plan janitor settle trim chain-settle
# Placeholders carry this marker; the app refuses them unless the synth says
# it expects them (starlog:allowPlaceholderBinaries), which `make synth` does.
INFRA_PLACEHOLDER_MARKER := STARLOG-PLACEHOLDER-BINARY

.PHONY: synth test-infra cdk-cli infra-binaries rehearsal

## cdk-cli: the pinned AWS CDK CLI (npm ci in infra/.cdk-cli).
cdk-cli: $(CDK_CLI_DIR)/node_modules/.installed

$(CDK_CLI_DIR)/node_modules/.installed: $(CDK_CLI_DIR)/package.json $(CDK_CLI_DIR)/package-lock.json
	@if [ -L $(CDK_CLI_DIR)/node_modules ]; then \
	  echo "note: $(CDK_CLI_DIR)/node_modules links to $$(readlink $(CDK_CLI_DIR)/node_modules): not reinstalling through the link (run make cdk-cli there)"; \
	else cd $(CDK_CLI_DIR) && npm ci --no-audit --no-fund && touch node_modules/.installed; fi

## infra-binaries: what the stack packages: the star (linux/arm64) and one
## Lambda bootstrap per auditor job. Builds every one whose source exists;
## writes a marked placeholder (with a warning) for the others.
infra-binaries:
	@mkdir -p $(dir $(INFRA_STAR))
	@if [ "$$($(GO) list -f '{{.Name}}' ./star 2>/dev/null)" = main ]; then \
	  echo "building $(INFRA_STAR)"; \
	  rm -f $(INFRA_STAR); \
	  GOOS=linux GOARCH=arm64 CGO_ENABLED=0 $(GO) build -trimpath -o $(INFRA_STAR) ./star || exit 1; \
	else \
	  echo "WARNING: ./star has no main package yet: $(INFRA_STAR) is a placeholder; the synthesized stack is not deployable"; \
	  printf '#!/bin/sh\n# %s: star was not built (no source yet); written by make infra-binaries\necho "starlog placeholder: star was not built" >&2\nexit 1\n' $(INFRA_PLACEHOLDER_MARKER) > $(INFRA_STAR); \
	  chmod 0755 $(INFRA_STAR); \
	fi
	@built_by_lambda=; \
	if $(MAKE) -n lambda >/dev/null 2>&1; then $(MAKE) lambda || exit 1; built_by_lambda=1; fi; \
	for j in $(INFRA_JOBS); do \
	  out=$(INFRA_LAMBDA_DIR)/$$j/bootstrap; mkdir -p $$(dirname $$out); \
	  if [ "$$($(GO) list -f '{{.Name}}' ./functions/$$j 2>/dev/null)" = main ]; then \
	    if [ -z "$$built_by_lambda" ] || [ ! -f $$out ]; then \
	      echo "building $$out"; \
	      rm -f $$out; \
	      GOOS=linux GOARCH=arm64 CGO_ENABLED=0 $(GO) build -trimpath -tags lambda.norpc -o $$out ./functions/$$j || exit 1; \
	    fi; \
	  elif [ ! -f $$out ] || grep -q $(INFRA_PLACEHOLDER_MARKER) $$out; then \
	    echo "WARNING: ./functions/$$j has no main package yet: $$out is a placeholder; the synthesized stack is not deployable"; \
	    printf '#!/bin/sh\n# %s: %s was not built (no source yet); written by make infra-binaries\necho "starlog placeholder: %s was not built" >&2\nexit 1\n' $(INFRA_PLACEHOLDER_MARKER) $$j $$j > $$out; \
	    chmod 0755 $$out; \
	  fi; \
	done

## synth: the CloudFormation template in cdk.out, offline (fixed zones in
## cdk.json, no lookups, no version reporting or notices).
synth: cdk-cli infra-binaries
	rm -rf cdk.out
	$(INFRA_ENV) $(CDK_CLI) synth --no-version-reporting --no-notices -q -c starlog:allowPlaceholderBinaries=true
	@echo "wrote cdk.out/$$(cd cdk.out && ls *.template.json)"

## test-infra: gofmt, vet and the CDK assertion tests of infra/ (needs node).
test-infra: synth
	@cd infra && out=$$(gofmt -l $$(find . -mindepth 1 -name '.*' -prune -o -name '*.go' -print) 2>&1); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	cd infra && $(INFRA_ENV) $(GO) vet ./...
	cd infra && $(INFRA_ENV) $(GO) test -count=1 -timeout 20m $(GO_TEST_BUILD) ./...

# test-go-functions: the functions package's tests and the rehearsal in one
# test binary (make test's infra lane).
.PHONY: test-go-functions
test-go-functions: synth
	@mkdir -p build
	@set -o pipefail; STARLOG_REHEARSAL_ASSEMBLY=$(CURDIR)/cdk.out $(GO) test -count=1 -timeout 20m -v $(GO_TEST_BUILD) ./functions/ 2>&1 \
	  | tee build/go-test-functions.log | grep -E $(GO_TEST_SHOW)'|^    --- |rehearsal_test.go:[0-9]+: (star [0-9]|rehearsal done|[0-9]+ settings)|iam_coverage_test.go:[0-9]+: (iam|mutation)'

## rehearsal: the deploy rehearsal (issue 12) on the template `synth` wrote:
## the star's systemd unit from the launch template's user data runs for real
## (two stars, kill -9, takeover) and every auditor function runs under the
## Lambda emulator with the template's environment, against versitygw,
## DynamoDB Local and local-aws-sqs (functions/rehearsal_test.go lists the
## only substitutions). Log: build/rehearsal.log.
rehearsal: synth
	@mkdir -p build
	@set -o pipefail; STARLOG_REHEARSAL_ASSEMBLY=$(CURDIR)/cdk.out $(GO) test -count=1 -timeout 10m -v $(GO_TEST_BUILD) -run '^TestRehearsal' ./functions/ 2>&1 \
	  | tee build/rehearsal.log | grep -E '^(ok |FAIL|--- |panic:)|^    --- |rehearsal_test.go:[0-9]+: (star [0-9]|rehearsal done|[0-9]+ settings)|iam_coverage_test.go:[0-9]+: (iam|mutation)'
# --- end infra ---
