GO ?= go
BIN := bin

.PHONY: build test bench run fuzz vet clean soak

# bin/fencepost-bench is the CLI with the benchmark harness (it links an
# embedded nats-server); bin/fencepost runs it for `fencepost bench`.
build:
	$(GO) build -o $(BIN)/ ./cmd/...
	$(GO) build -tags bench -o $(BIN)/fencepost-bench ./cmd/fencepost

# The README's test command. One package at a time (-p 1): several suites
# start 3-node clusters and real processes with sub-second leases, and on a
# 2-core machine they would starve each other's renewals.
test:
	$(GO) test -race -count=1 -p 1 -timeout 15m ./...

vet:
	gofmt -l . | (! grep .) && $(GO) vet ./... && $(GO) vet -tags bench ./cmd/fencepost

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# Every fuzz target (docs/fuzzing.md), one at a time, each for FUZZTIME
# (1000000x: a million executions; or a duration such as 60s), with
# FUZZPAR workers. The corpus kept in <pkg>/testdata/fuzz runs as seeds in
# `make test` too.
FUZZTIME ?= 1000000x
FUZZPAR ?= 1
FUZZ_TARGETS := \
	internal/wire:FuzzIDCodec internal/wire:FuzzDecodeID internal/wire:FuzzDecodeRecord \
	internal/wire:FuzzEncodeRecord internal/wire:FuzzValidateWorld \
	queue:FuzzValidateHeader queue:FuzzValidateFrom queue:FuzzValidateMsgID \
	internal/wire:FuzzDecodeCursor internal/wire:FuzzDecodeLock mailbox:FuzzDecodeDeadLetter internal/jsapi:FuzzRawFromDirect \
	internal/wire:FuzzPlainRecord queue:FuzzUserHeaders \
	world:FuzzDecodeConfigMeta world:FuzzConfigValidate world:FuzzConfigSizes \
	daemon:FuzzDecodeConfig daemon:FuzzConfigDuration daemon:FuzzParseFlags daemon:FuzzJudge bench:FuzzParseOwnerLine \
	verify:FuzzReadHistory internal/wire:FuzzDecodeShardCursor internal/wire:FuzzDecodeReminder

fuzz:
	@set -e; for pt in $(FUZZ_TARGETS); do \
		pkg=$${pt%%:*}; t=$${pt##*:}; \
		echo "== $$t ./$$pkg/ ($(FUZZTIME))"; \
		$(GO) test -run '^$$' -fuzz "^$$t\$$" -fuzztime $(FUZZTIME) -parallel $(FUZZPAR) ./$$pkg/; \
	done

# The soak of docs/reliability.md: fault rounds (owner processes killed and
# paused, connections cut, delayed and refused, server processes crashed,
# cluster members killed) for SOAK (default 30m, at least one round), every
# round checked by testkit/history, then a summary.
SOAK ?= 30m
soak:
	$(GO) test -run 'TestSoak$$' -timeout 0 -v ./testkit/faults/ -soak $(SOAK)

# Start the server on the embedded default (127.0.0.1:4222, ./data).
run:
	$(GO) run ./cmd/fencepostd

clean:
	rm -rf $(BIN) data
