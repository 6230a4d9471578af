GO ?= go
BIN := bin

.PHONY: build test bench run fuzz vet clean

build:
	$(GO) build -o $(BIN)/ ./cmd/...

# The README's test command. One package at a time (-p 1): several suites
# start 3-node clusters and real processes with sub-second leases, and on a
# 2-core machine they would starve each other's renewals.
test:
	$(GO) test -race -count=1 -p 1 ./...

vet:
	gofmt -l . | (! grep .) && $(GO) vet ./...

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzIDCodec -fuzztime 30s ./internal/wire/
	$(GO) test -run '^$$' -fuzz FuzzDecodeID -fuzztime 30s ./internal/wire/
	$(GO) test -run '^$$' -fuzz FuzzDecodeRecord -fuzztime 30s ./internal/wire/

# Start the server on the embedded default (127.0.0.1:4222, ./data).
run:
	$(GO) run ./cmd/fencepostd

clean:
	rm -rf $(BIN) data
