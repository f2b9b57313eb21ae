# amilint — make help lists the targets.
SHELL := /bin/bash
GO ?= go
BIN := bin/amilint
PKGS := ./...
FUZZTIME ?= 20s

.PHONY: help build test test-unit lint bench fuzz clean debian-root

help: ## list targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

build: ## build bin/amilint
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN) ./cmd/amilint

test: ## what CI runs: unit, differential and fuzz-seed tests
	$(GO) test -count=1 -timeout 30m $(PKGS)

lint: ## gofmt, go vet and staticcheck; fails on any finding
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) run honnef.co/go/tools/cmd/staticcheck@2025.1.1 $(PKGS)

bench: ## benchmarks, with ratios against the peers measured in the same run
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

fuzz: ## run every fuzz target for FUZZTIME each
	@for pkg in $$($(GO) list $(PKGS)); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; done

debian-root: ## build the cached Debian 12 root (.cache/debian-root) the systemd oracle tests use; needs root, ~6 min
	fixtures/debian/build.sh .cache/debian-root

.PHONY: e2e-html
e2e-html: ## render the HTML reports in headless Chromium; screenshots kept in dist/e2e-html
	AMILINT_ARTIFACTS=$(CURDIR)/dist/e2e-html $(GO) test -count=1 -run 'Chromium|BlankScreenshot' -v ./internal/report/

clean: ## remove build outputs
	rm -rf bin dist
