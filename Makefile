# Snorkel — run `make help` for the targets.
SHELL := /bin/bash
GO ?= go
CACHE := $(CURDIR)/.cache
BIN := $(CURDIR)/bin
TOOLS := $(CACHE)/bin
STATICCHECK_VERSION := v0.8.2
# An execution count, not a duration: go1.26's fuzz coordinator can fail a
# target at the end of a -fuzztime duration with a bare "context deadline
# exceeded" (go.dev/issue/75804); a count has no deadline to race.
FUZZTIME ?= 20000x
TRANSPORT ?= wireguard
IMAGE ?= ghcr.io/snorkel-net/snorkel:dev
# One build configuration for what is built from this module, the tests,
# vet, the image's static binary and the binaries the labs build alike: no
# cgo, paths trimmed; so a cold run compiles each package once.
export CGO_ENABLED := 0
export GOFLAGS := $(strip $(shell $(GO) env GOFLAGS) -trimpath)
# The API server the control-plane tests run against, built from the Go
# module proxy (controller/kubelocal/build-kube) and cached.
KUBE_VERSION := v1.37.2
KUBE_APISERVER := $(TOOLS)/kube-apiserver-$(KUBE_VERSION)
export SNORKEL_KUBE_APISERVER := $(KUBE_APISERVER)
# What the real-node lab runs besides: a kubelet and kube-proxy per node, a
# controller manager and scheduler per cluster, and kubectl for the
# tutorial's commands; same build, same cache.
KUBE_NODE_COMMANDS := kubelet kube-proxy kube-controller-manager kube-scheduler kubectl
KUBE_NODE_TOOLS := $(foreach c,$(KUBE_NODE_COMMANDS),$(TOOLS)/$(c)-$(KUBE_VERSION))
export SNORKEL_KUBE_TOOLS := $(TOOLS)
export SNORKEL_KUBE_VERSION := $(KUBE_VERSION)
# CoreDNS, which the dnsd tests resolve through and the DNS benchmark
# compares against, and the real-node lab's cluster DNS image; built static
# from the Go module proxy and cached.
COREDNS_VERSION := v1.15.0
COREDNS := $(TOOLS)/coredns-$(COREDNS_VERSION)
export SNORKEL_COREDNS := $(COREDNS)
export PATH := $(TOOLS):$(PATH)

.PHONY: help build test lint unit static fuzz bench perf lab node-lab image kind-lab kind-lab-down tools clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-8s %s\n", $$1, $$2}'

build: ## build bin/snorkel
	$(GO) build -o $(BIN)/snorkel ./cmd/snorkel

test: tools ## the whole suite: lint, unit/e2e tests (netns ones need root), the image's static build, short fuzz runs; every step runs even when one before it fails
	@failed=; for step in lint unit static fuzz; do \
	  $(MAKE) --no-print-directory $$step || failed="$$failed $$step"; \
	done; \
	echo "packages: $$(grep -c '^ok ' $(CACHE)/unit.log) passed, $$(grep -c '^FAIL[[:space:]]' $(CACHE)/unit.log) failed"; \
	if [ -n "$$failed" ]; then echo "make test: failed:$$failed"; exit 1; fi

lint: tools ## gofmt, go vet, staticcheck
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt wants to reformat:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(TOOLS)/staticcheck ./...

unit: tools ## go test ./... (root runs the network-namespace tests too)
	@mkdir -p $(CACHE); set -o pipefail; $(GO) test -count=1 -timeout 30m ./... 2>&1 | tee $(CACHE)/unit.log

static: ## build bin/snorkel-static as the image's build stage does; check it is static and takes every flag the manifests pass
	deploy/build-static.sh $(BIN)/snorkel-static static-check
	SNORKEL_STATIC_BINARY=$(BIN)/snorkel-static SNORKEL_STATIC_VERSION=static-check $(GO) test -count=1 -run '^TestStaticBinary$$' ./deploy/

fuzz: ## run every fuzz target for FUZZTIME executions (default 20000x); a failure prints the crasher
	@set -e; for f in $$(git grep -l '^func Fuzz' -- '*_test.go'); do \
	  pkg=./$$(dirname $$f); \
	  for target in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$f); do \
	    echo "fuzz $$pkg $$target"; \
	    $(GO) test -run '^$$' -fuzz "^$$target$$" -fuzztime $(FUZZTIME) $$pkg >$(CACHE)/fuzz.log 2>&1 || { \
	      cat $(CACHE)/fuzz.log; \
	      for c in $$(sed -n 's/.*Failing input written to \(testdata[^ ]*\).*/\1/p' $(CACHE)/fuzz.log); do \
	        echo "crasher $$pkg/$$c:"; cat $$pkg/$$c; \
	      done; \
	      exit 1; }; \
	  done; \
	done

bench: ## Go benchmarks (decode, checksum, route lookup, transport seal/open)
	$(GO) test -run '^$$' -bench . -benchmem ./...

perf: build tools ## data path against every baseline, all workloads, Globalnet on and off (root)
	$(BIN)/snorkel benchmark all --transport all --globalnet --baseline all --reps 3 --duration 10s

lab: build ## the two-cluster lab: up, demo, down (root); TRANSPORT=wireguard|vxlan
	$(BIN)/snorkel lab run --transport $(TRANSPORT)

# The real-node lab runs this binary both as the CLI and as the program of
# Snorkel's image, which has no libc: so the static build.
node-lab: tools ## the real-node lab: clusters of kubelet nodes, Snorkel installed by deploy-broker and join, the tutorial checked, torn down (root); TRANSPORT=wireguard|esp|vxlan
	deploy/build-static.sh $(BIN)/snorkel-static
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/pause ./deploy/imagetar/pause
	SNORKEL_PAUSE=$(BIN)/pause $(BIN)/snorkel-static lab run --nodes --transport $(TRANSPORT)

image: ## the container image (deploy/Dockerfile) with docker or podman, else bin/snorkel-image.tar for ctr/docker/kind to load; IMAGE=ghcr.io/snorkel-net/snorkel:dev
	deploy/image.sh $(IMAGE)

kind-lab: build ## the Submariner tutorial on Kind (docker, kind, kubectl): clusters, Snorkel, exports, demo; TRANSPORT=wireguard|esp|vxlan
	deploy/kind/lab.sh check
	deploy/image.sh $(IMAGE)
	IMAGE=$(IMAGE) CABLE_DRIVER=$(TRANSPORT) deploy/kind/lab.sh run

kind-lab-down: ## delete the Kind lab's clusters
	deploy/kind/lab.sh down

tools: $(TOOLS)/staticcheck $(TOOLS)/wireguard-go $(KUBE_APISERVER) $(KUBE_NODE_TOOLS) $(COREDNS) ## build the tools the tests use, cached in .cache/bin

$(TOOLS)/staticcheck:
	GOBIN=$(TOOLS) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

# Plain wireguard-go, the baseline the throughput comparison runs against;
# the version is the one go.mod pins for the wireguard transport.
$(TOOLS)/wireguard-go: go.mod
	$(GO) build -o $@ golang.zx2c4.com/wireguard

# All six in one build, the first time; the version is in the names. With
# cgo as the machine offers it, not this module's setting above: Kubernetes
# builds its kubelet with cgo.
$(KUBE_APISERVER) $(KUBE_NODE_TOOLS) &:
	mkdir -p $(TOOLS)
	env -u CGO_ENABLED KUBE_VERSION=$(KUBE_VERSION) nice controller/kubelocal/build-kube $(TOOLS) $(CACHE)/kube-build kube-apiserver $(KUBE_NODE_COMMANDS)

$(COREDNS):
	mkdir -p $(TOOLS)
	COREDNS_VERSION=$(COREDNS_VERSION) nice deploy/build-coredns $@ $(CACHE)/coredns-build

clean: ## remove build outputs and the tool cache
	rm -rf $(BIN) $(CACHE)
