# rotor's build, test and demo entry points. Everything a fresh machine needs
# beyond Go is installed by the targets themselves (see e2e).
GO      ?= go
BIN     := bin/rotor
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse --short HEAD 2>/dev/null)
LDFLAGS := -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT)

.PHONY: build release test lint docs bench bench-load soak demo sim e2e clean

# Static, like the release archives: no C library mapped into every serve.
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/rotor

# Release archives for every OS and architecture rotor ships to, with README,
# LICENSE and checksums.txt, in dist/ (see cmd/rotor-release). Entries are
# dated by the commit, so a rerun at that commit gives the same archives.
# TARGETS=linux/amd64,darwin/arm64 builds only those.
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null)
release:
	rm -rf dist
	$(GO) run ./cmd/rotor-release -version '$(VERSION)' -commit '$(COMMIT)' -date '$(SOURCE_DATE_EPOCH)' -targets '$(TARGETS)'

# The whole suite: unit, integration (real loopback servers, real rotor
# processes) and, when the npm registry answers, real-client end-to-end tests.
# The last line says whether the end-to-end client tests ran, and if not, why.
test:
	@mkdir -p bin && rm -f bin/e2e-report
	@ROTOR_E2E_REPORT=$(CURDIR)/bin/e2e-report $(GO) test -race -count=1 -timeout 20m ./...; status=$$?; \
	  echo; cat bin/e2e-report 2>/dev/null || echo "end-to-end client tests: no report (cmd/rotor's tests did not finish)"; \
	  exit $$status

# gofmt, then go build and go vet (tests included) for every OS rotor ships
# to: Codex CLI's users run Linux, macOS and Windows.
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	GOOS=darwin $(GO) build ./... && GOOS=darwin $(GO) vet ./...
	GOOS=windows $(GO) build ./... && GOOS=windows $(GO) vet ./...

# docs/commands.md and docs/errors.md, written from the code: the CLI's help
# table and flag sets (cmd/rotor/help.go) and the errors table (errors/).
# make test fails (TestDocsAreCurrent) when either differs from what this
# would write; running it again changes nothing.
docs:
	$(GO) test -count=1 -run '^TestDocsAreCurrent$$' ./cmd/rotor -args -update-docs

# Speed and memory targets live here, not in timed unit tests.
bench:
	$(GO) test -run '^$$' -bench . -benchmem -count=1 ./rotation/ ./proxy/ ./proxy/chat/

# rotor side by side with a naive httputil.ReverseProxy and with no proxy,
# on loopback, interleaved; prints a markdown table (docs/PERFORMANCE.md).
# BENCH_ARGS="-rounds 3" for steadier numbers, "-only streams" for a part.
bench-load: build
	$(GO) run ./cmd/rotor-bench -rotor $(BIN) $(BENCH_ARGS)

# A real serve under load and random faults for a bounded time (SOAK=10m
# for longer); fails when a request is lost, a healthy account is blamed,
# or a file in ROTOR_HOME no longer loads. A 10 s version runs in make test.
soak: build
	$(GO) run ./cmd/rotor-soak -rotor $(BIN)

# Quota stewardship (docs/selection.md): week-long workloads (testdata/sim) replayed
# through rotor's real selector on a fake clock, against round-robin,
# fill-first and least-used; prints one markdown table per workload
# (docs/PERFORMANCE.md). SIM_ARGS="-seeds 16" summarises 16 weeks of each.
sim:
	$(GO) run ./cmd/rotor-sim -dir testdata/sim $(SIM_ARGS)

# A first look with no real account: a fake upstream, three demo accounts
# (one at its usage limit), a real proxy, a streamed answer and a failover.
demo: build
	$(GO) run ./cmd/rotor-demo -rotor $(BIN)

clean:
	rm -rf bin .cache dist
