# Sluice — the two commands a new user needs:
#   make run    build and start the broker on its embedded default with the example config
#   make test   install what the tests need (Go modules, staticcheck, Kafka from Maven
#               Central, kinesalite from npm) and run every test
SHELL := bash
GO ?= go
BIN := bin/sluice
CONFIG ?= examples/demo.yaml
ADDR ?= :8080
GOBIN := $(shell $(GO) env GOPATH)/bin
STATICCHECK_VERSION := v0.8.2

.PHONY: all build run test deps lint unit fuzz bench secure-bench clean

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
# the kafka channel tests and a Kinesis-compatible server (kinesalite from npm, cached
# there too) for the kinesis channel tests, runs every test, and stops both whatever
# happens. Under CI=true a dependency that does not start fails the run; elsewhere its
# tests skip, saying why.
test: deps lint
	@set -uo pipefail; \
	trap 'scripts/kafka.sh stop >/dev/null 2>&1; scripts/kinesis.sh stop >/dev/null 2>&1' EXIT; \
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
	$(GO) test -count=1 -timeout 20m ./...

# bench runs the whole-system benchmark suite (scripts/benchsuite, ~12 minutes) and
# rewrites docs/benchmarks/README.md and docs/benchmarks/results/. It starts Kafka for the
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

# secure-bench measures the ingress throughput with TLS, a bearer token and an
# EventPolicy as a ratio of plain HTTP, alternating the two (~1 minute; docs/security.md).
secure-bench: build
	$(GO) run ./scripts/securebench --sluice $(BIN) --rounds 3

# unit runs the tests without starting Kafka (its tests skip, saying why).
unit:
	$(GO) test -count=1 ./...

# fuzz runs each fuzz target briefly; new interesting inputs land in testdata/fuzz.
FUZZTIME ?= 30s
fuzz:
	$(GO) test -run XX -fuzz FuzzParse -fuzztime $(FUZZTIME) ./event/

clean:
	rm -rf bin
