# rubick — build, demo and test entry points. `make help` lists them.
GO        ?= go
BIN       := bin
PKGS      := ./...
LAB       ?= /tmp/rubick-lab
export LAB

.PHONY: help build demo check test vet lint fmt-check man man-check alerts-check bench integration integration-2411 e2e lab-up lab-down generate clean

help: ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

build: ## build every command into bin/
	$(GO) build -o $(BIN)/ ./cmd/...

demo: build ## run the simulator on the embedded Base trace with every policy
	$(BIN)/rubick sim --workload workload-base --policy rubick,fifo,synergy,sia,antman,rubick-e,rubick-r,rubick-n

check: ## every test: unit, race, real-Slurm integration and end-to-end (scripts/check.sh; SERIAL=1 one target at a time)
	MAKE="$(MAKE)" scripts/check.sh

vet: ## go vet
	$(GO) vet $(PKGS)

STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2

lint: ## staticcheck, fetched through the Go module proxy (not part of check: it needs the proxy)
	$(GO) run $(STATICCHECK) $(PKGS)

fmt-check: ## fail when gofmt would change a file
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '/gen/')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# A race-detector binary sleeps 1 s at exit (GORACE atexit_sleep_ms) to let
# late reports out; the tests that run their own binary as a fake srun or
# scontrol would pay it at every call (rubick-srun's: 103 s, 14 s without).
test: ## unit tests with the race detector
	GORACE="atexit_sleep_ms=0 $(GORACE)" $(GO) test -race -count=1 $(PKGS)

bench: ## benchmarks of the model and the policy
	$(GO) test -run '^$$' -bench . -benchmem ./model/ ./policy/

integration: ## tests against the local Slurm lab (installs and starts it when root)
	@if [ "$$(id -u)" = 0 ]; then scripts/lab/ensure.sh; fi
	@if command -v cc >/dev/null; then o=$$(mktemp -d) && $(MAKE) -s -C contrib/spank test O=$$o && rm -rf $$o; \
	else echo "SKIP: SPANK validator unit test (no C compiler)"; fi
	@if command -v lua5.1 >/dev/null; then lua5.1 contrib/slurm/test_job_submit.lua; \
	else echo "SKIP: job_submit.lua unit test (no lua5.1)"; fi
	@scripts/check-alerts.sh
	@if [ -r "$(LAB)/env.sh" ] && ( . "$(LAB)/env.sh" && scontrol ping 2>/dev/null | grep -q UP ); then \
	  . "$(LAB)/env.sh" && $(GO) test -tags integration -count=1 ./test/integration/; \
	else echo "SKIP: real-Slurm integration tests: no Slurm lab running at $(LAB) (as root: make lab-up)"; fi

TRIXIE_ROOT ?= /tmp/rubick-trixie
export TRIXIE_ROOT

integration-2411: ## the v0.0.41 and v0.0.42 clients, the Applier and rubickd against real Slurm 24.11 with slurmdbd (a trixie chroot; root)
	@if [ "$$(id -u)" = 0 ] && ! WITH_DBD=1 scripts/lab/trixie-up.sh; then \
	  echo "SKIP: Slurm 24.11 tests: the trixie chroot could not be built here (see the output above)"; \
	elif [ -r "$(TRIXIE_ROOT)/lab/env.sh" ]; then \
	  . "$(TRIXIE_ROOT)/lab/env.sh" && $(GO) test -tags integration -count=1 ./test/slurm2411/; \
	else echo "SKIP: Slurm 24.11 tests: no chroot lab at $(TRIXIE_ROOT) (as root: make lab-2411)"; fi

e2e: ## end-to-end run on the Slurm lab (about 13 minutes), ending with one JSON line of results
	@if [ -r "$(LAB)/env.sh" ] && ( . "$(LAB)/env.sh" && scontrol ping 2>/dev/null | grep -q UP ); then \
	  . "$(LAB)/env.sh" && E2E_RESULT="$(LAB)/e2e-result.json" $(GO) test -tags e2e -count=1 -timeout 20m ./test/e2e/ && \
	  cat "$(LAB)/e2e-result.json"; \
	else echo "SKIP: end-to-end run: no Slurm lab running at $(LAB) (as root: make lab-up)"; fi

.PHONY: lab-up lab-down lab-purge lab-fresh lab-smoke lab-2411 lab-2411-down spank

# The tests assume an empty cluster: a lab left over by an earlier run (its
# daemons killed, its state on disk) would recover that run's jobs and keep
# the nodes busy. So `make check` deletes both labs' state first; the trixie
# chroot's packages are kept.
lab-fresh: ## (root) stop both labs and delete their state, so the tests start on an empty cluster
	@if [ "$$(id -u)" = 0 ]; then scripts/lab/down.sh --purge && \
	  if [ -e "$(TRIXIE_ROOT)/.rubick-trixie" ]; then scripts/lab/trixie-down.sh --reset; fi; \
	else echo "SKIP: lab reset (not root)"; fi

lab-up: ## install (root, apt) and start the Slurm 22.05 lab in $(LAB); idempotent
	scripts/lab/ensure.sh

lab-down: ## stop the lab, keeping its state
	scripts/lab/down.sh

lab-purge: ## stop the lab and delete $(LAB)
	scripts/lab/down.sh --purge

lab-smoke: ## quick shell checks of the running lab
	scripts/lab/smoke.sh

lab-2411: ## opt-in: Slurm 24.11 in a Debian trixie chroot (slurmrestd v0.0.40-42)
	scripts/lab/trixie-up.sh

lab-2411-down: ## stop the 24.11 chroot lab (TRIXIE_ARGS=--purge deletes it)
	scripts/lab/trixie-down.sh $(TRIXIE_ARGS)

spank: ## build the SPANK plugin (contrib/spank) and run its unit test
	$(MAKE) -C contrib/spank all test check-exports

man: ## regenerate docs/man from every command's --help
	scripts/gen-man.sh

alerts-check: ## promtool check and unit tests of contrib/prometheus/rubick-alerts.yml (fetches promtool with apt when root)
	scripts/check-alerts.sh

man-check: ## fail when docs/man differs from the commands' --help
	scripts/gen-man.sh --check

generate: ## regenerate the slurmrestd clients
	$(GO) generate ./slurm/...

clean: ## remove build outputs
	rm -rf $(BIN)
