GO            ?= go
STATICCHECK   ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
TEST_FLAGS    ?= -race -count=1 -timeout 15m
export GOFLAGS ?= -buildvcs=false

.PHONY: run test lint bench services build fmt fuzz-short

## run: start Postgres/Redis if needed, then podsvc with every role, embedded Kafka and demo data
run: services
	$(GO) run ./cmd/podsvc

## test: every test (unit, integration, end-to-end) against real Postgres, Redis and in-process Kafka
test: services
	$(GO) test $(TEST_FLAGS) ./...
	@$(MAKE) --no-print-directory fuzz-short

## fuzz-short: a short fuzz run of each fuzz target (count-based: time-based runs can end
## with a spurious "context deadline exceeded" in Go's fuzz runner)
FUZZ_EXECS ?= 20000x
fuzz-short:
	$(GO) test -run '^$$' -fuzz '^FuzzCreateOrder$$' -fuzztime $(FUZZ_EXECS) ./commands/order/
	$(GO) test -run '^$$' -fuzz '^FuzzCheckURL$$' -fuzztime $(FUZZ_EXECS) ./delivery/

## lint: formatting, vet, staticcheck
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

## bench: Go benchmarks
bench: services
	$(GO) test -run '^$$' -bench . -benchmem ./...

## build: binaries into bin/
build:
	$(GO) build -o bin/ ./cmd/...

services:
	@bash deploy/local/services.sh

fmt:
	gofmt -w $$(git ls-files '*.go')
