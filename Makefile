# Every target makes the local .venv first; it is rebuilt only when
# pyproject.toml changes, so the targets are cheap to repeat.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# make test runs the system scenarios (one platform, mostly waiting on it) in
# a second pytest beside the other tests; its report follows the first's.
SYSTEM_LOG := .build/system-tests.log

.PHONY: example test help lint typecheck docs tools images release sandbox bench clean

example: $(STAMP) ## Render the example composite through the real function.
	$(BIN)/function-controlplane render

test: $(STAMP) tools images ## Run every test: lint, types, unit, gRPC, end to end and the images.
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	@mkdir -p $(dir $(SYSTEM_LOG))
	$(BIN)/pytest -m system > $(SYSTEM_LOG) 2>&1 & system=$$!; \
	$(BIN)/pytest -m "not system"; others=$$?; \
	wait $$system; system=$$?; \
	echo "== the system scenarios ($(SYSTEM_LOG))"; cat $(SYSTEM_LOG); \
	[ $$others -eq 0 ] && [ $$system -eq 0 ]

help: ## List the targets and what each does.
	@grep -E '^[a-z][a-z.-]*:.*## ' $(MAKEFILE_LIST) | sed -e 's/:.*## /\t/' | expand -t 12

lint: $(STAMP) ## ruff check and ruff format --check.
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP) ## mypy --strict.
	$(BIN)/mypy

docs: $(STAMP) ## Write docs/reference and docs/configuration.md's tables from the schemas and flags.
	$(BIN)/python -m tools.docs
	$(BIN)/python -m tools.monitoring

tools: ## Build the Go tools the tests drive (cached in .tools/bin).
	tools/build.sh

images: ## OCI images of the function and the provider, without Docker (tools/images.sh; root).
	tools/images.sh

release: ## dist/: the three xpkgs (function and provider with their runtime image, the Configuration), image tarballs, SBOMs, SHA256SUMS.
	tools/images.sh release

sandbox: $(STAMP) tools ## The whole platform on this machine until Ctrl-C.
	$(BIN)/controlplane-sandbox up --no-build

bench: $(STAMP) ## RunFunction latency beside a no-op function (bench/RESULTS.md has the rest).
	$(BIN)/python -m bench.function_latency

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

clean: ## Remove the venv, the Go tools, the build caches and dist/.
	rm -rf $(VENV) .tools .build .cache dist .pytest_cache .mypy_cache .ruff_cache .hypothesis
