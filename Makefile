# rubick — build, demo and test entry points. `make help` lists them.
GO        ?= go
BIN       := bin
PKGS      := ./...
LAB       ?= /tmp/rubick-lab
export LAB

.PHONY: help build demo check test vet fmt-check bench integration e2e lab-up lab-down generate clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

build: ## build every command into bin/
	$(GO) build -o $(BIN)/ ./cmd/...

demo: build ## run the simulator on the embedded Base trace with every policy
	$(BIN)/rubick model validate

check: vet fmt-check test integration ## every test: unit, race, real-Slurm integration and end-to-end

vet: ## go vet
	$(GO) vet $(PKGS)

fmt-check: ## fail when gofmt would change a file
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '/gen/')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

test: ## unit tests with the race detector
	$(GO) test -race -count=1 $(PKGS)

bench: ## benchmarks of the model and the policy
	$(GO) test -run '^$$' -bench . -benchmem ./model/ ./policy/

integration: ## tests against the local Slurm lab (installs it when root)
	@echo "integration: no real-Slurm tests yet"

generate: ## regenerate the slurmrestd clients
	$(GO) generate ./slurm/...

clean: ## remove build outputs
	rm -rf $(BIN)
