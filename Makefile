# txnfs — see README.md.
GO        ?= go
DATA      ?= txnfs-data
LISTEN    ?= 127.0.0.1:2049
BIN       := bin/txnfs
TESTFLAGS ?= -count=1 -timeout 30m

.PHONY: run build test deps lint bench clean

## run: build and serve ./$(DATA) over NFSv4 on $(LISTEN) (the main job)
run: build
	./$(BIN) serve --data $(DATA) --listen $(LISTEN)

build:
	$(GO) build -o $(BIN) ./cmd/txnfs

## deps: install what a fresh machine lacks for the tests
deps:
	./scripts/install-deps.sh

## lint: gofmt and go vet
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

## test: everything CI runs: deps, lint, all tests (and the race detector on the engine)
test: deps lint
	./scripts/test.sh

## bench: the storage-engine benchmarks recorded in docs/benchmarks.md
bench:
	$(GO) test -run '^$$' -bench . -benchtime 2x ./fs/ ./slice/ ./kv/...

clean:
	rm -rf bin
