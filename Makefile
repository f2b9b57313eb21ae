# amilint — make help lists the targets.
SHELL := /bin/bash
GO ?= go
BIN := bin/amilint
PKGS := ./...
FUZZTIME ?= 20s
MUTATIONS ?= 5000
# CACHE keeps what is slow to build (Packer) across clones on one machine.
CACHE ?= $(HOME)/.cache/amilint
PACKER_BIN ?= $(CACHE)/packer-1.14.3
PLUGIN_VERSION ?= 0.1.0
# The release's version and the container image it builds; the DaemonSet
# (deploy/daemonset.yaml) names $(IMAGE):$(VERSION).
VERSION ?= v$(PLUGIN_VERSION)
IMAGE ?= ghcr.io/amilint/amilint
# The release's link flags: the container image's binaries are built with
# them (a release may instead pass its own binaries to deploy/image).
LDFLAGS ?= -s -w -X github.com/amilint/amilint/internal/cli.Version=$(VERSION)
IMAGE_DIR ?= dist/image
# File times and the image's creation time: the last commit's, so a
# rebuild of one commit gives the same image digest.
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
# GoReleaser v2.17 and later import nfpm's msix packager, whose dependency
# go.digitalxero.dev/go-msix the module proxy does not serve: v2.16.0 is the
# newest that builds here. Built once per machine into CACHE, like Packer.
GORELEASER_VERSION := v2.16.0
GORELEASER ?= $(CACHE)/goreleaser-$(GORELEASER_VERSION)
RELEASE_VERSION ?= $(VERSION:v%=%)
# GoReleaser reads the origin's URL; a checkout without one (a worktree, a
# copy) gets the project's, from the environment, so a snapshot never
# degrades to v0.0.0. Nothing is fetched.
SNAPSHOT_ORIGIN := GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=remote.origin.url GIT_CONFIG_VALUE_0=https://github.com/amilint/amilint.git
ARM64_ROOT ?= .cache/arm64-root

.PHONY: help build test test-prereqs test-unit test-plugin plugin-generate-check plugin e2e-packer lint bench fuzz clean debian-root trixie-root wide-root wide-trixie-root

help: ## list targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

build: ## build bin/amilint
	CGO_ENABLED=0 $(GO) build -buildvcs=auto -trimpath -o $(BIN) ./cmd/amilint

test: test-prereqs test-unit test-plugin test-image ## what CI runs: unit, differential and fuzz-seed tests of the engine, the Packer plugin and the image builder

test-prereqs: ## check what make test needs (tools, the Debian roots, root); one line naming what is missing and how to get it
	@scripts/test-prereqs.sh

test-unit: ## the engine's tests (root module)
	$(GO) test -count=1 -timeout 30m $(PKGS)

test-plugin: plugin-generate-check ## the Packer plugin's tests (its own module)
	cd packer-plugin && GOFLAGS=-mod=mod $(GO) test -count=1 ./...

plugin-generate-check: ## fail if regenerating the plugin's HCL2 spec changes it
	cd packer-plugin && GOFLAGS=-mod=mod $(GO) build -o $(CURDIR)/bin/packer-sdc github.com/hashicorp/packer-plugin-sdk/cmd/packer-sdc
	cd packer-plugin && GOFLAGS=-mod=mod PATH=$(CURDIR)/bin:$$PATH $(GO) generate ./...
	@out=$$(git status --porcelain -- packer-plugin/provisioner); if [ -n "$$out" ]; then echo "regenerating the HCL2 spec changed:"; echo "$$out"; git diff -- packer-plugin/provisioner; exit 1; fi

guest-binaries: ## the guest build of amilint (-tags amilint_guest) for linux/amd64 and arm64, compressed into packer-plugin/guest/bin for the plugin to embed
	cd packer-plugin && $(GO) run ./guest/mkguest

plugin: guest-binaries ## build the Packer plugin for this host into dist/, with the guest binaries embedded
	cd packer-plugin && GOFLAGS=-mod=mod CGO_ENABLED=0 $(GO) build -trimpath -o $(CURDIR)/dist/packer-plugin-amilint_v$(PLUGIN_VERSION)_x5.0_$$($(GO) env GOOS)_$$($(GO) env GOARCH) .

e2e-packer: guest-binaries ## build Packer v1.14.3 (cached), then real packer builds over SSH with the plugin; works on a fresh clone
	@command -v sshd >/dev/null || test -x /usr/sbin/sshd || { echo "e2e-packer: sshd is missing: apt-get install openssh-server" >&2; exit 2; }
	packer-plugin/e2e/build-packer.sh $(PACKER_BIN)
	cd packer-plugin && GOFLAGS=-mod=mod $(GO) build -o $(CURDIR)/bin/packer-sdc github.com/hashicorp/packer-plugin-sdk/cmd/packer-sdc
	cd packer-plugin && GOFLAGS=-mod=mod $(GO) build -o $(CURDIR)/bin/packer-plugin-amilint . && \
	  cd $(CURDIR)/bin && ./packer-sdc plugin-check packer-plugin-amilint
	cd packer-plugin && GOFLAGS=-mod=mod PACKER_BIN=$(PACKER_BIN) $(GO) test -count=1 -tags e2e -timeout 20m -run TestPackerBuild -v ./e2e/

.PHONY: guest-binaries release-snapshot e2e-release arm64-root
release-snapshot: ## the whole release (CLI, Packer plugin zips, checksums) as tag v$(RELEASE_VERSION) makes it, offline, into dist/release
	scripts/build-goreleaser.sh $(GORELEASER) $(GORELEASER_VERSION)
	GORELEASER_CURRENT_TAG=v$(RELEASE_VERSION) $(SNAPSHOT_ORIGIN) $(GORELEASER) release --snapshot --clean
	@cd dist/release && ls -l *.tar.gz *.zip *SHA256SUMS

arm64-root: ## the cached Debian 12 arm64 root with systemd and sshd (.cache/arm64-root) an arm64 Packer guest runs from under qemu-user; root
	packer-plugin/e2e/build-arm64-root.sh $(ARM64_ROOT)

e2e-release: release-snapshot arm64-root ## check the release as Packer consumes it, install the plugin from it by path, packer build an arm64 guest through required_plugins
	@command -v sshd >/dev/null || test -x /usr/sbin/sshd || { echo "e2e-release: sshd is missing: apt-get install openssh-server" >&2; exit 2; }
	packer-plugin/e2e/build-packer.sh $(PACKER_BIN)
	cd packer-plugin && PACKER_BIN=$(PACKER_BIN) AMILINT_RELEASE_DIR=$(CURDIR)/dist/release AMILINT_RELEASE_VERSION=$(RELEASE_VERSION) \
	  AMILINT_ARM64_ROOT=$(abspath $(ARM64_ROOT)) $(GO) test -count=1 -tags e2e -timeout 30m -run TestRelease -v ./e2e/

lint: lint-actions ## gofmt, go mod tidy, go vet, staticcheck, actionlint and shellcheck; fails on any finding
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt:"; echo "$$out"; exit 1; fi
	$(GO) mod tidy -diff
	$(GO) vet $(PKGS)
	$(GO) vet -tags amilint_guest $(PKGS)
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.7.0 $(PKGS)
	cd packer-plugin && GOFLAGS=-mod=mod $(GO) vet ./... && GOFLAGS=-mod=mod $(GO) vet -tags e2e ./...
	cd deploy/image && GOFLAGS=-mod=mod $(GO) vet ./... && GOFLAGS=-mod=mod $(GO) vet -tags e2e ./...

bench: build ## benchmarks, with ratios against the peers measured in the same run
	scripts/bench-units.sh $(BIN) .cache/debian-root 20
	$(GO) test -run '^$$' -bench 'Commands|Scale|AMI' -benchtime 1x -timeout 60m ./internal/cli
	$(GO) test -run '^$$' -bench 'ListVsSystemctl' -benchtime 20x ./internal/systemd/install
	$(GO) test -run '^$$' -bench 'BootDebian|EvaluateDLAMI|BuildDLAMI|PlanDlami' -benchtime 10x ./internal/systemd/boot ./internal/audit/policy ./internal/audit/facts ./internal/audit/fix
	$(GO) test -run '^$$' -bench 'OpenImage|OpenFormats|^BenchmarkUnits$$' -benchtime 3x ./internal/cli
	$(GO) test -run '^$$' -bench 'Zombies' -benchtime 3x ./internal/host/cgroup
	$(GO) test -run '^$$' -bench 'Report10k|Rollout10k' -benchtime 1x ./internal/cli ./internal/report
	scripts/bench-security.sh $(BIN) .cache/debian-root 20
	$(GO) test -run '^$$' -bench 'SecurityVsUnits' -benchtime 10x ./internal/systemd/security
	scripts/bench-guest-size.sh

fuzz: ## run every fuzz target (the Packer plugin's too) for FUZZTIME each; prints each target's executions
	@n=0; for mod in . packer-plugin; do \
	  for pkg in $$(cd $$mod && GOFLAGS=-mod=mod $(GO) list ./...); do \
	    for f in $$(cd $$mod && GOFLAGS=-mod=mod $(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	      out=$$(scripts/fuzz-target.sh $(GO) $$mod $$pkg $$f $(FUZZTIME)) || { echo "$$out"; echo "FAIL $$pkg $$f"; exit 1; }; \
	      execs=$$(echo "$$out" | grep -o 'execs: [0-9]*' | tail -1 | cut -d' ' -f2); n=$$((n+1)); \
	      printf '%-58s %-26s %10s execs\n' $$pkg $$f "$$execs"; \
	    done; done; done; echo "$$n fuzz targets, each clean for $(FUZZTIME)"
	@# The checksum mutation harness: ten times the flips of make test, a new seed each run.
	set -o pipefail; AMILINT_MUTATIONS=$(MUTATIONS) AMILINT_MUTATION_SEED=$$(date +%s) $(GO) test -count=1 -timeout 120m -run '^TestMutations$$' -v ./internal/cli | grep -A9 -e 'mutation harness, seed' -e '--- FAIL' -e 'replay:'

debian-root: ## build the cached Debian 12 root (.cache/debian-root, systemd 252) the systemd oracle tests use; needs root, ~6 min
	fixtures/debian/build.sh .cache/debian-root bookworm

trixie-root: ## build the cached Debian 13 root (.cache/trixie-root, systemd 257), the second systemd oracle; needs root, ~6 min
	fixtures/debian/build.sh .cache/trixie-root trixie

# The packages whose systemd generators the boot model runs (pkggen.go).
WIDE_PACKAGES = postgresql openvpn postfix nfs-common nfs-kernel-server sysstat

wide-root: ## build the cached Debian 12 root with $(WIDE_PACKAGES) too (.cache/wide-root), the generator oracle; needs root, ~2 min
	fixtures/debian/build.sh .cache/wide-root bookworm $(WIDE_PACKAGES)

wide-trixie-root: ## the same over Debian 13 (.cache/wide-trixie-root, systemd 257); needs root, ~2 min
	fixtures/debian/build.sh .cache/wide-trixie-root trixie $(WIDE_PACKAGES)

.PHONY: e2e-html
e2e-html: ## render the HTML reports in headless Chromium; screenshots kept in dist/e2e-html
	AMILINT_ARTIFACTS=$(CURDIR)/dist/e2e-html $(GO) test -count=1 -run 'Chromium|BlankScreenshot' -v ./internal/report/

.PHONY: e2e-harden
e2e-harden: ## boot the Debian root and the wide root, of Debian 12 and 13, under systemd-nspawn plain and hardened by fix --harden: every catalog entry keeps its service working; root, ~8 min
	time $(GO) test -tags e2e -count=1 -timeout 40m -run TestE2EHarden -v ./internal/cli/

LIVE_ROOT ?= .cache/live-root
.PHONY: e2e-live
e2e-live: build ## boot systemd in systemd-nspawn (crash loop + enabled ecs.service), audit it with amilint live; root, ~1 min
	@test -x $(LIVE_ROOT)/lib/systemd/systemd || { rm -rf $(LIVE_ROOT).partial && debootstrap --variant=minbase --include=systemd,systemd-sysv,dbus bookworm $(LIVE_ROOT).partial && mv $(LIVE_ROOT).partial $(LIVE_ROOT); }
	time AMILINT_E2E_ROOT=$(abspath $(LIVE_ROOT)) AMILINT_E2E_BIN=$(abspath $(BIN)) $(GO) test -tags e2e -count=1 -timeout 15m -run TestE2ELive -v ./internal/cli/

clean: ## remove build outputs
	rm -rf bin dist

.PHONY: image image-push test-image e2e-image
image: ## build the container image (linux/amd64 + arm64, no Docker engine) into dist/image: OCI layout, pinned reference, pinned DaemonSet
	@for arch in amd64 arm64; do \
	  echo "go build linux/$$arch"; \
	  CGO_ENABLED=0 GOOS=linux GOARCH=$$arch $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(IMAGE_DIR)/amilint-linux-$$arch ./cmd/amilint || exit 1; \
	done
	cd deploy/image && GOFLAGS=-mod=mod $(GO) run . build -version $(VERSION) -image $(IMAGE) -created $(SOURCE_DATE_EPOCH) \
	  -binary linux/amd64=$(CURDIR)/$(IMAGE_DIR)/amilint-linux-amd64 -binary linux/arm64=$(CURDIR)/$(IMAGE_DIR)/amilint-linux-arm64 \
	  -daemonset $(CURDIR)/deploy/daemonset.yaml -out $(CURDIR)/$(IMAGE_DIR)

image-push: image ## push the image built by make image to $(IMAGE):$(VERSION) (credentials of ~/.docker/config.json)
	cd deploy/image && GOFLAGS=-mod=mod $(GO) run . push -layout $(CURDIR)/$(IMAGE_DIR)/oci -to $(IMAGE):$(VERSION)

test-image: ## the image builder's tests (its own module): layers, refusals, registry round trip, skopeo
	cd deploy/image && GOFLAGS=-mod=mod $(GO) test -count=1 ./...

e2e-image: image ## push the image to an in-process registry, pull it, run it as the DaemonSet does against systemd booted in nspawn; root, ~2 min
	@test -x $(LIVE_ROOT)/lib/systemd/systemd || { echo "e2e-image: no Debian root with systemd at $(LIVE_ROOT) (make e2e-live LIVE_ROOT=$(LIVE_ROOT) debootstraps one, or LIVE_ROOT=.cache/debian-root after make debian-root)"; exit 1; }
	cd deploy/image && AMILINT_E2E_ROOT=$(abspath $(LIVE_ROOT)) AMILINT_IMAGE_DIR=$(abspath $(IMAGE_DIR)) AMILINT_VERSION=$(VERSION) \
	  GOFLAGS=-mod=mod $(GO) test -tags e2e -count=1 -timeout 10m -run TestE2EImage -v .

.PHONY: lint-actions
lint-actions: ## actionlint (v1.7.12, with shellcheck) on the workflows, the Action and the example pipeline; shellcheck on the Action's scripts
	$(GO) run github.com/rhysd/actionlint/cmd/actionlint@v1.7.12 .github/workflows/*.yml integrations/github/golden-image.yml
	shellcheck integrations/github/*.sh scripts/test-prereqs.sh scripts/fuzz-target.sh

ORACLE_TREES ?= 5000
.PHONY: oracle
oracle: ## the systemd 252 and 257 differential tests over ORACLE_TREES seeded random trees each (default 5000; make test runs 500 boot and 200 enablement trees); root
	AMILINT_ORACLE_SEEDS=$(ORACLE_TREES) AMILINT_RANDOM_TREES=$(ORACLE_TREES) $(GO) test -count=1 -timeout 12h -run 'TestOracleRandom|TestRandomTreesMatchSystemctl' ./internal/systemd/boot ./internal/systemd/install
