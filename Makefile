GO            ?= go
STATICCHECK   ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
# -parallel 4: the end-to-end tests that mostly wait (internal/e2e's waitsMostly) and the
# live Prometheus test's three stacks run four at a time, not two (GOMAXPROCS) at a time
TEST_FLAGS    ?= -race -count=1 -timeout 15m -parallel 4
export GOFLAGS ?= -buildvcs=false

.PHONY: run test lint bench services build fmt fuzz-short docs test-realkafka

## run: start Postgres/Redis if needed, then podsvc with every role, embedded Kafka and demo data
run: services docs
	$(GO) run ./cmd/podsvc

## test: every test (unit, integration, end-to-end) against real Postgres, Redis and the
## in-process Kafka, then the end-to-end tests again on a real 3-node Kafka (test-realkafka).
## The live test of the alerts and dashboards (deploy/prometheus/livetest) runs a real
## Prometheus server: deploy/local/prometheus.sh installs Debian's where missing and prints
## its path, passed in POD_TEST_PROMETHEUS.
test: services docs
	@bash deploy/local/chromium.sh
	@prometheus=$$(bash deploy/local/prometheus.sh) && \
	echo "POD_TEST_PROMETHEUS=$$prometheus $(GO) test $(TEST_FLAGS) ./..." && \
	POD_TEST_PROMETHEUS=$$prometheus $(GO) test $(TEST_FLAGS) ./...
	@$(MAKE) --no-print-directory test-realkafka
	@$(MAKE) --no-print-directory fuzz-short

## test-realkafka: the end-to-end tests on a real 3-node Kafka (and the realkafka-tagged
## checks of the shared-cluster settings): each test's podsvc uses a topic and group prefix of
## its own, dropped when the test ends. Starts the local cluster (deploy/local/kafka.sh; the
## first start fetches Kafka with Maven), passes its brokers in POD_TEST_KAFKA_BROKERS, and
## stops the cluster afterwards whatever the result.
test-realkafka: services docs
	@out=$$(bash deploy/local/kafka.sh start) || { bash deploy/local/kafka.sh stop; exit 1; }; \
	brokers=$$(printf '%s\n' "$$out" | sed -n 's/^KAFKA_BROKERS=//p'); \
	if [ -z "$$brokers" ]; then echo "deploy/local/kafka.sh start printed no KAFKA_BROKERS line"; bash deploy/local/kafka.sh stop; exit 1; fi; \
	echo "POD_TEST_KAFKA_BROKERS=$$brokers"; rc=0; \
	POD_TEST_KAFKA_BROKERS=$$brokers $(GO) test -tags realkafka $(TEST_FLAGS) ./internal/e2e/ || rc=$$?; \
	bash deploy/local/kafka.sh stop; exit $$rc

## fuzz-short: a short fuzz run of each fuzz target (count-based: time-based runs can end
## with a spurious "context deadline exceeded" in Go's fuzz runner)
FUZZ_EXECS ?= 20000x
## FuzzAPI sends each input to a running podsvc: fewer, costlier executions
FUZZ_API_EXECS ?= 2000x
fuzz-short:
	$(GO) test -run '^$$' -fuzz '^FuzzCreateOrder$$' -fuzztime $(FUZZ_EXECS) ./commands/order/
	$(GO) test -run '^$$' -fuzz '^FuzzCheckURL$$' -fuzztime $(FUZZ_EXECS) ./delivery/
	$(GO) test -run '^$$' -fuzz '^FuzzAPI$$' -fuzztime $(FUZZ_API_EXECS) -parallel 1 ./internal/e2e/

## lint: formatting, vet, staticcheck, and the deploy files (promtool, deploy/validate)
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...
	GO=$(GO) bash deploy/lint.sh

## bench: Go benchmarks
bench: services
	$(GO) test -run '^$$' -bench . -benchmem ./...

## build: binaries into bin/
build: docs
	$(GO) build -o bin/ ./cmd/...

services:
	@bash deploy/local/services.sh

fmt:
	gofmt -w $$(git ls-files '*.go')

## docs: the API docs page's renderer (Redoc, from npm) into http/docsassets, embedded by
## http/docs.go; rebuilt only when web/docs's lock file, package.json or build script is
## newer than the last build's manifest (its stamp)
DOCS_STAMP := http/docsassets/manifest.json
docs: $(DOCS_STAMP)
$(DOCS_STAMP): web/docs/package-lock.json web/docs/package.json web/docs/build.mjs web/docs/.npmrc
	@command -v npm >/dev/null || { echo "make docs: npm (Node.js) is needed to build the docs page's renderer from web/docs"; exit 1; }
	cd web/docs && npm ci --no-audit --no-fund --ignore-scripts && node build.mjs
