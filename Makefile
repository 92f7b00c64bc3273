# troy: build, test, bench, lint. `make help` lists the targets.
GO      ?= go
BIN     ?= bin/troy
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)

.PHONY: help build install demo test test-deps test-short bench fuzz lint schemas clean

help:
	@echo "make build   - build $(BIN)"
	@echo "make install - install troy into GOBIN (or GOPATH/bin), so the README's troy … commands run as written"
	@echo "make demo    - audit the shipped example traces, then run the offline example agent (embedded NATS, no key)"
	@echo "make test    - unit, component and end-to-end tests, race detector on"
	@echo "make bench   - evaluator and audit-batch benchmarks (figures on stdout)"
	@echo "make fuzz    - every fuzz target for FUZZTIME each (default 30s)"
	@echo "make lint    - gofmt and go vet"
	@echo "make schemas - regenerate schemas/ from the Go types"

build:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/troy

install:
	$(GO) install -trimpath -ldflags '$(LDFLAGS)' ./cmd/troy
	@echo "installed troy to $$($(GO) env GOBIN || true)$$([ -n "$$($(GO) env GOBIN)" ] || echo "$$($(GO) env GOPATH)/bin") (put it on your PATH)"

demo: build
	$(BIN) audit-batch examples/traces examples/policy.yaml --out-dir logs/demo
	@echo "open logs/demo/summary.md"
	$(BIN) agent run examples/agents/offline.yaml "Profile examples/data/sales.csv and name the top 3 regions" --out-dir logs/demo-agent

test: test-deps
	@# gotestsum: go test's results, every skipped test with its reason, and a count at the end
	$(GO) tool gotestsum --format pkgname-and-test-fails --format-icons text --format-hide-empty-pkg -- -race -count=1 -timeout 20m ./...
	cd sdk/langchaingo && GOWORK=off $(GO) test -race -count=1 -timeout 10m ./...
	cd sdk/python && python3 -m unittest discover -s tests
	cd sdk/typescript && npm ci --silent --no-audit --no-fund && npm test --silent

test-deps:
	@bash scripts/test-deps.sh

test-short:
	$(GO) test -short -count=1 ./...

bench: build
	bash scripts/bench.sh

fuzz:
	bash scripts/fuzz.sh

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); echo "gofmt: files above need formatting"; exit 1)
	$(GO) vet ./...
	cd sdk/langchaingo && GOWORK=off $(GO) vet ./...

schemas:
	UPDATE_SCHEMAS=1 $(GO) test ./schemas/ -run TestSchemas -count=1

clean:
	rm -rf bin logs .troy
