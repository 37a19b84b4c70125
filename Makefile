# Sluice — the two commands a new user needs:
#   make run    build and start the broker on its embedded default with the example config
#   make test   install what the tests need (Go modules, staticcheck, Kafka from Maven
#               Central, kinesalite from npm, Debian's rabbitmq-server) and run every test
SHELL := bash
GO ?= go
BIN := bin/sluice
CONFIG ?= examples/demo.yaml
ADDR ?= :8080
GOBIN := $(shell $(GO) env GOPATH)/bin
STATICCHECK_VERSION := v0.8.2

.PHONY: all build run test deps lint unit fuzz bench secure-bench faults clean chromium rabbitmq-server screenshots

all: build

build:
	$(GO) build -o $(BIN) ./cmd/sluice

run: build
	$(BIN) serve --config $(CONFIG) --addr $(ADDR)

# deps installs everything the tests use: Go modules, staticcheck, and Kafka's jars
# (through Maven, cached under .cache/).
deps:
	$(GO) mod download
	@test -x $(GOBIN)/staticcheck || $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

lint: deps
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GOBIN)/staticcheck ./...

# test starts a real single-node Kafka (jars from Maven Central, cached under .cache/) for
# the kafka channel tests, a Kinesis-compatible server (kinesalite from npm, cached
# there too) for the kinesis channel tests and a DynamoDB-compatible one (dynalite from
# npm, cached) for its lease tables, and a private RabbitMQ node (Debian's rabbitmq-server,
# scripts/rabbitmq.sh) for the rabbitmq channel tests, runs every test, and stops them
# whatever happens.
# test/cluster starts its own 3-node NATS and 3-broker Kafka clusters
# (scripts/nats-cluster.sh, scripts/kafka.sh start-cluster) once for its kill tests. Under CI=true a dependency that does not start fails the run; elsewhere its
# tests skip, saying why. test/e2e runs last, alone: its kill -9 tests drive their own
# load (1,000-2,000 events/s) across a broker's death and restart and need the machine's CPU to
# themselves; beside test/cluster's and test/deploy's clusters on a slow 2-core machine
# their generator fell short of its schedule.
test: deps lint chromium rabbitmq-server
	@set -uo pipefail; \
	trap 'scripts/kafka.sh stop >/dev/null 2>&1; scripts/kinesis.sh stop >/dev/null 2>&1; scripts/dynalite.sh stop >/dev/null 2>&1; scripts/rabbitmq.sh stop >/dev/null 2>&1' EXIT; \
	if out=$$(scripts/kafka.sh start); then \
		eval "$$out"; export SLUICE_KAFKA_BROKERS; \
	elif [ "$${CI:-}" = true ]; then \
		echo "make test: Kafka did not start, and CI needs it" >&2; exit 1; \
	else \
		echo "make test: Kafka did not start; the kafka tests will skip" >&2; \
	fi; \
	if out=$$(scripts/kinesis.sh start); then \
		eval "$$out"; export SLUICE_KINESIS_ENDPOINT; \
	elif [ "$${CI:-}" = true ]; then \
		echo "make test: the Kinesis-compatible server did not start, and CI needs it" >&2; exit 1; \
	else \
		echo "make test: the Kinesis-compatible server did not start; the kinesis tests will skip" >&2; \
	fi; \
	if out=$$(scripts/dynalite.sh start); then \
		eval "$$out"; export SLUICE_DYNAMODB_ENDPOINT; \
	elif [ "$${CI:-}" = true ]; then \
		echo "make test: the DynamoDB-compatible server did not start, and CI needs it" >&2; exit 1; \
	else \
		echo "make test: the DynamoDB-compatible server did not start; the kinesis lease tests will skip" >&2; \
	fi; \
	if out=$$(scripts/rabbitmq.sh start); then \
		eval "$$out"; export SLUICE_RABBITMQ_URL; \
	elif [ "$${CI:-}" = true ]; then \
		echo "make test: RabbitMQ did not start, and CI needs it (apt-get install -y rabbitmq-server)" >&2; exit 1; \
	else \
		echo "make test: RabbitMQ did not start; the rabbitmq tests will skip (apt-get install -y rabbitmq-server)" >&2; \
	fi; \
	rc=0; \
	$(GO) test -count=1 -timeout 20m $$($(GO) list ./... | grep -v '/test/e2e$$') || rc=1; \
	$(GO) test -count=1 -timeout 20m ./test/e2e || rc=1; \
	exit $$rc

# bench runs the whole-system benchmark suite (scripts/benchsuite, ~35 minutes on 2 cores) and
# rewrites docs/benchmarks/README.md, docs/benchmarks/results/ and README.md's performance
# table (between its bench-table markers; not with --quick). It starts Kafka for the
# kafka scenario; without Kafka that scenario is marked "not run".
# BENCHFLAGS=--quick for a smoke run of a minute or two.
BENCHFLAGS ?=
bench: build
	@set -uo pipefail; \
	if out=$$(scripts/kafka.sh start); then \
		eval "$$out"; export SLUICE_KAFKA_BROKERS; trap 'scripts/kafka.sh stop >/dev/null 2>&1' EXIT; \
	else \
		echo "make bench: Kafka did not start; the kafka scenario will be marked not run" >&2; \
	fi; \
	$(GO) run ./scripts/benchsuite --sluice $(BIN) $(BENCHFLAGS)

# faults runs the fault-injection suite's long form (test/faults with SLUICE_FAULTS=long:
# every toxic on every path for 20 s, engines down 20 s, 30 s of misbehaving subscribers,
# the disk filled), then the soak (SOAK, default 30m, at SOAK_RATE events/s), and writes
# docs/reliability/README.md (every scenario, from .cache/faults-results.jsonl) and
# docs/reliability/soak.md (plots).
# Kafka's jars come from scripts/kafka.sh (started once to resolve them, then stopped).
SOAK ?= 30m
SOAK_RATE ?= 1000
faults: build
	@set -uo pipefail; \
	scripts/kafka.sh start >/dev/null && scripts/kafka.sh stop >/dev/null || echo "make faults: Kafka's jars unavailable; the kafka scenarios will skip" >&2; \
	mkdir -p docs/reliability .cache; out=$(CURDIR)/.cache/faults-results.jsonl; rm -f $$out; \
	SLUICE_FAULTS=long SLUICE_FAULTS_OUT=$$out SLUICE_SOAK=$(SOAK) SLUICE_SOAK_RATE=$(SOAK_RATE) SLUICE_SOAK_DIR=$(CURDIR)/docs/reliability \
		$(GO) test -count=1 -timeout 0 -v ./test/faults/ 2>&1 | tee .cache/faults.log; status=$${PIPESTATUS[0]}; \
	$(GO) run ./test/faults/report -in $$out -out docs/reliability/README.md \
		-title "Fault injection: long form and $(SOAK) soak" \
		-intro "\`make faults\` on $$(date -u +%F), 2 shared cores. Soak report: [soak.md](soak.md). Full log: .cache/faults.log."; \
	exit $$status

# chromium installs Debian's chromium with apt-get when no Chrome is on PATH, for the
# dashboard's browser test (ui). Under CI=true a failed install fails the run; elsewhere
# the browser test skips, saying why. apt-get is retried while another dpkg holds its lock.
chromium:
	@set -uo pipefail; \
	for b in chromium chromium-browser google-chrome; do command -v $$b >/dev/null && exit 0; done; \
	sudo=; [ "$$(id -u)" = 0 ] || sudo="sudo -n"; \
	echo "make: installing chromium with apt-get for the browser test" >&2; \
	for i in 1 2 3 4 5 6; do \
		if $$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq chromium >/dev/null; then exit 0; fi; \
		echo "make: apt-get failed (is another dpkg holding its lock?); retrying in 10 s" >&2; sleep 10; \
	done; \
	if [ "$${CI:-}" = true ]; then echo "make test: chromium could not be installed, and CI needs it" >&2; exit 1; fi; \
	echo "make test: chromium could not be installed; the browser test will skip" >&2

# rabbitmq-server installs Debian's rabbitmq-server with apt-get when it is missing, for the
# rabbitmq channel tests (scripts/rabbitmq.sh runs a private node of it; the package's own
# service is not used). Under CI=true a failed install fails the run; elsewhere those tests
# skip, saying why.
rabbitmq-server:
	@set -uo pipefail; \
	test -x /usr/lib/rabbitmq/bin/rabbitmq-server && exit 0; \
	sudo=; [ "$$(id -u)" = 0 ] || sudo="sudo -n"; \
	echo "make: installing rabbitmq-server with apt-get for the rabbitmq channel tests" >&2; \
	for i in 1 2 3 4 5 6; do \
		if $$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq rabbitmq-server >/dev/null; then exit 0; fi; \
		echo "make: apt-get failed (is another dpkg holding its lock?); retrying in 10 s" >&2; sleep 10; \
	done; \
	if [ "$${CI:-}" = true ]; then echo "make test: rabbitmq-server could not be installed, and CI needs it" >&2; exit 1; fi; \
	echo "make test: rabbitmq-server could not be installed; the rabbitmq tests will skip" >&2

# screenshots reruns the browser tests and keeps their screenshots of GET /ui under load and
# of a bench report in docs/images/ (the README shows them).
screenshots: chromium
	SLUICE_SCREENSHOTS=$(CURDIR)/docs/images $(GO) test -count=1 -run TestDashboardInChromium -v ./ui
	SLUICE_SCREENSHOTS=$(CURDIR)/docs/images $(GO) test -count=1 -run TestReportInChromium -v ./loadtest/report
# secure-bench measures the ingress throughput with TLS, a bearer token and an
# EventPolicy as a ratio of plain HTTP, alternating the two (~1 minute; docs/security.md).
secure-bench: build
	$(GO) run ./scripts/securebench --sluice $(BIN) --rounds 3

# unit runs the tests without starting Kafka (its tests skip, saying why).
unit:
	$(GO) test -count=1 ./...

# fuzz runs every fuzz target of the module (found by `go test -list`) for FUZZTIME; new
# interesting inputs land in the fuzz cache (copy them to the package's
# testdata/fuzz/<Target> to keep them). Every target's committed corpus also runs as plain
# tests in make test. FUZZ=FuzzParse narrows it to targets of that name.
FUZZTIME ?= 30s
FUZZ ?= ^Fuzz
fuzz:
	@set -e; for pkg in $$(git ls-files '*_test.go' | xargs grep -l '^func Fuzz' | xargs -n1 dirname | sort -u); do \
		for t in $$($(GO) test -list "$(FUZZ)" ./$$pkg | grep '^Fuzz'); do \
			echo "== $$t (./$$pkg, $(FUZZTIME))"; \
			$(GO) test -run XX -fuzz "^$$t\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 5s ./$$pkg; \
		done; \
	done

clean:
	rm -rf bin
