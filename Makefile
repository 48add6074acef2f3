# Molecule Relay. `make help` lists the targets.
GO            ?= go
STATICCHECK   := honnef.co/go/tools/cmd/staticcheck@v0.8.2
BIN           := bin
PKGS          := ./...
# The version stamped into every binary (internal/version): the git tag, or the
# commit when untagged.
VERSION       ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS       := -X github.com/molecule-ai/molecule-relay/internal/version.Version=$(VERSION)
# Tools built from the Go module proxy (no other download), pinned.
TOOLS         := $(CURDIR)/$(BIN)/tools
HELM_VERSION  := v3.22.0
HELM          := $(TOOLS)/helm-$(HELM_VERSION)
CHART         := infra/helm/molecule-relay
KO_VERSION    := v0.19.1
KO            := $(TOOLS)/ko-$(KO_VERSION)
# goreleaser v2.16+ needs go.digitalxero.dev/go-msix, which the module proxy
# refuses (403); v2.18+ also needs Go 1.27.
GORELEASER_VERSION := v2.15.0
GORELEASER    := $(TOOLS)/goreleaser-$(GORELEASER_VERSION)
IMAGE_REPO    ?= ghcr.io/molecule-ai/molecule-relay
# local: ko builds on a two-platform base served from 127.0.0.1
# (infra/validate/cmd/localbase), for machines that reach the module proxy
# but no registry; release: the distroless base of .ko.yaml.
KO_BASE       ?= local

.PHONY: help build dev test test-short chaos chaos-connect chaos-long chaos-cluster chaos-powerloss chaos-group lint bench bench-one-at-a-time bench-fleet fuzz cover clean validate-infra image release-check

include Makefile.deploy

help: ## list targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

build: ## build the CLI and the three stage binaries into bin/
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/molecule-relay ./cmd/molecule-relay
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/poller ./functions/poller
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/dispatcher ./functions/dispatcher
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/replier ./functions/replier

# dev's binary carries no version stamp (it says "dev"): a new commit does
# not relink it, so a warm `make dev` answers within a second.
dev: ## build bin/dev/molecule-relay (with progress), then run the whole pipeline against an embedded platform double and embedded NATS
	@echo "make dev: building bin/dev/molecule-relay, then the pipeline against an embedded platform double"
	@GO='$(GO)' sh infra/dev/build-with-progress.sh $(BIN)/dev/molecule-relay ./cmd/molecule-relay -buildvcs=false
	@$(BIN)/dev/molecule-relay dev $(DEV_FLAGS)

test: ## go vet, then every test with the race detector
	$(GO) vet $(PKGS)
	$(GO) test -race -count=1 -timeout 20m $(PKGS)

chaos: ## chaos test, short: 300 messages through separate stage processes on an external nats-server, random SIGKILLs, platform 429/500/latency (internal/testkit/chaos)
	$(GO) test -count=1 -v -timeout 10m -run '^TestChaos$$' ./internal/testkit/chaos -args -chaos.msgs=$(or $(CHAOS_MSGS),300) -chaos.rate=$(or $(CHAOS_RATE),15) $(CHAOS_FLAGS)

chaos-connect: ## chaos test, short, of the main job: a `connect` process (its dispatcher posting directly) and a `dispatch` process, random SIGKILLs landing anywhere in a direct post
	$(GO) test -count=1 -v -timeout 10m -run '^TestChaos$$' ./internal/testkit/chaos -args -chaos.msgs=$(or $(CHAOS_MSGS),300) -chaos.rate=$(or $(CHAOS_RATE),15) -chaos.connect $(CHAOS_FLAGS)

chaos-long: ## chaos test, long: 10,000 messages at 40/s (CHAOS_RUNS=3 runs it three times)
	@for i in $$(seq 1 $(or $(CHAOS_RUNS),1)); do \
		echo "== chaos-long run $$i"; \
		$(GO) test -count=1 -v -timeout 60m -run '^TestChaos$$' ./internal/testkit/chaos -args -chaos.msgs=$(or $(CHAOS_MSGS),10000) -chaos.rate=$(or $(CHAOS_RATE),40) $(CHAOS_FLAGS) || exit 1; \
	done

chaos-cluster: ## chaos test on a 3-node R3 nats-server cluster: a node SIGKILLed every 12 s (back after 3 s), random stage SIGKILLs; 2,000 messages at 33/s (CHAOS_RELAY_BIN: measure another build)
	$(GO) test -count=1 -v -timeout 20m -run '^TestChaosCluster$$' ./internal/testkit/chaos -args -chaos.msgs=$(or $(CHAOS_MSGS),2000) -chaos.rate=$(or $(CHAOS_RATE),33) $(if $(CHAOS_RELAY_BIN),-chaos.relay-bin=$(CHAOS_RELAY_BIN)) $(CHAOS_FLAGS)

chaos-powerloss: ## power-loss test: connect's store on a lazyfs FUSE mount, the power cut CHAOS_CUTS times under traffic (every process SIGKILLed, unsynced writes dropped); CHAOS_FLAGS=-chaos.sync=2m (nats-server's default), -chaos.powerloss-nats (a nats-server process's store)
	$(GO) test -count=1 -v -timeout 15m -run '^TestChaosPowerLoss$$' ./internal/testkit/chaos -args -chaos.cuts=$(or $(CHAOS_CUTS),10) -chaos.msgs=$(or $(CHAOS_MSGS),600) -chaos.rate=$(or $(CHAOS_RATE),15) $(CHAOS_FLAGS)

chaos-group: ## poller group at 10,000 registry workspaces (GROUP_N): three poll processes, one SIGKILLed, one joining, 100 adds and removes under traffic; lost, twice, unwatched gaps on the shipped event streams (GROUP_SSE=false: 3 s polls, no streams, unpolled gaps) (TestPollerGroupFollowsTheRegistry, docs/fleet.md); about 5 minutes
	@echo "load average: $$(cat /proc/loadavg 2>/dev/null)"
	$(GO) test -count=1 -v -timeout 40m -run '^TestPollerGroupFollowsTheRegistry$$' ./cmd/molecule-relay -args -group-n=$(or $(GROUP_N),10000) -group-traffic=90s -group-changes=100 -group-poll=3s -group-ready=10m -group-sse=$(or $(GROUP_SSE),true) $(GROUP_FLAGS)
	@echo "load average: $$(cat /proc/loadavg 2>/dev/null)"

test-short: ## tests without the race detector (faster local loop)
	$(GO) test -count=1 $(PKGS)

lint: ## gofmt check, staticcheck (pinned) and no tracked build output (go vet runs in make test)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	.ci/check-tracked
	@bad=$$($(GO) list -f '{{range .Imports}}{{$$.ImportPath}} imports {{.}}{{"\n"}}{{end}}' ./examples/... | grep '/internal/' || true); \
		if [ -n "$$bad" ]; then echo "examples must use the public packages only (pkg/molecule, pkg/events and the root package):"; echo "$$bad"; exit 1; fi
	$(GO) run $(STATICCHECK) $(PKGS)

bench: ## benchmarks with their figures (pipeline: BENCH_COUNT=3 for medians, BENCH_FLAGS='-echo-msgs 20000')
	$(GO) test -run '^$$' -bench . -benchtime 1x -count 1 ./pkg/molecule/...
	$(GO) test -run '^$$' -bench BenchmarkPollerPath -benchtime 200x -count $(or $(BENCH_COUNT),1) ./internal/poller
	@echo "load average: $$(cat /proc/loadavg 2>/dev/null)"
	$(GO) test -run '^$$' -bench . -benchtime 1x -count $(or $(BENCH_COUNT),1) -timeout 20m ./bench $(BENCH_FLAGS)
	@echo "load average: $$(cat /proc/loadavg 2>/dev/null)"

bench-one-at-a-time: ## the floor one message at a time (BenchmarkFloorOneAtATime: 300 messages, 50-149 ms apart, per design); about 3 minutes a count (BENCH_COUNT), not in CI
	@echo "load average: $$(cat /proc/loadavg 2>/dev/null)"
	$(GO) test -run '^$$' -bench BenchmarkFloorOneAtATime -benchtime 1x -count $(or $(BENCH_COUNT),1) -timeout 30m ./bench -args -floor-one-at-a-time $(BENCH_FLAGS)
	@echo "load average: $$(cat /proc/loadavg 2>/dev/null)"

# Fleet sizes of bench-fleet (comma-separated) and extra flags, e.g.
# FLEET_FLAGS='-fleet-idle 2m -fleet-warmup 90s'.
FLEET_SIZES   ?= 100,1000,10000

bench-fleet: ## idle fleet cost of one connect process (RSS, CPU, requests/ws/min, connections, answer latency) at FLEET_SIZES workspaces, side by side (docs/fleet.md); about 20 minutes, not in CI
	$(GO) test -run '^$$' -bench BenchmarkFleet -benchtime 1x -count 1 -timeout 60m ./bench -args -fleet $(FLEET_SIZES) $(FLEET_FLAGS)
	@echo "load average: $$(cat /proc/loadavg 2>/dev/null)"

fuzz: ## fuzz the activity-row parser for 60 s
	$(GO) test -run '^$$' -fuzz FuzzParseRow -fuzztime 60s ./pkg/molecule

cover: ## statement coverage of pkg/molecule
	$(GO) test -count=1 -coverprofile=cover.out ./pkg/molecule && $(GO) tool cover -func=cover.out | tail -1

validate-infra: $(HELM) ## helm lint and template the chart; decode it and infra/k8s strictly into k8s.io/api and KEDA types (infra/validate)
	$(HELM) lint --strict $(CHART) -f $(CHART)/ci/example-values.yaml
	$(HELM) lint --strict $(CHART) -f $(CHART)/ci/example-values.yaml --set keda.enabled=true,poller.mode=deployment,poller.replicas=3,metrics.serviceMonitor.enabled=true
	$(HELM) template molecule-relay $(CHART) --namespace molecule-relay -f $(CHART)/ci/example-values.yaml > /dev/null
	cd infra/validate && $(GO) vet ./... && HELM=$(HELM) $(GO) test -count=1 ./...

image: $(KO) ## ko: linux/amd64+arm64 image as an OCI layout in bin/image (no Docker engine, no push), SPDX SBOMs, checked
	rm -rf $(BIN)/image
	cd infra/validate && $(GO) build -o $(TOOLS)/localbase ./cmd/localbase
	VERSION=$(VERSION) KO_DOCKER_REPO=$(IMAGE_REPO) $(if $(filter local,$(KO_BASE)),$(TOOLS)/localbase --) \
		$(KO) build --push=false --bare --platform=linux/amd64,linux/arm64 \
		--oci-layout-path $(BIN)/image/oci --sbom-dir $(BIN)/image/sbom ./cmd/molecule-relay
	tar -C $(BIN)/image/oci -cf $(BIN)/image/molecule-relay.oci.tar .
	cd infra/validate && IMAGE_DIR=$(CURDIR)/$(BIN)/image $(GO) test -count=1 -run TestKoImage ./...

release-check: $(GORELEASER) ## goreleaser check, then a snapshot release into dist/ (no publish) whose CLI must report its stamped version
	$(GORELEASER) check
	$(GORELEASER) release --snapshot --clean
	@v=$$(dist/molecule-relay_linux_amd64_v1/molecule-relay version); echo "  $$v"; \
		case "$$v" in *snapshot*) ;; *) echo "  the snapshot CLI does not report the snapshot version"; exit 1;; esac

$(HELM):
	GOBIN=$(TOOLS)/helm-build $(GO) install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)
	mv $(TOOLS)/helm-build/helm $@ && rmdir $(TOOLS)/helm-build

$(KO):
	GOBIN=$(TOOLS)/ko-build $(GO) install github.com/google/ko@$(KO_VERSION)
	mv $(TOOLS)/ko-build/ko $@ && rmdir $(TOOLS)/ko-build

$(GORELEASER):
	GOBIN=$(TOOLS)/goreleaser-build $(GO) install github.com/goreleaser/goreleaser/v2@$(GORELEASER_VERSION)
	mv $(TOOLS)/goreleaser-build/goreleaser $@ && rmdir $(TOOLS)/goreleaser-build

clean: ## remove build output
	rm -rf $(BIN) cover.out dist
