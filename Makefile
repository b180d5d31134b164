# Two commands on a fresh clone: `make demo` and `make test` (see README).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export PIP_DISABLE_PIP_VERSION_CHECK=1

.PHONY: setup browser demo test lint types contracts pytest test-real bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip uv

# Re-install when the project metadata changes. rfc3987-syntax (pulled in by
# jupyter-events) slows `import ray` by ~7 s and makes ray.init() time out on a
# loaded 2-core box (ray-project/ray#65983); removing it is the last setup step,
# and tests/test_environment.py guards it. --compile-bytecode: this machine sets
# PYTHONDONTWRITEBYTECODE=1, so without it every process re-compiles its imports (Ray's
# dashboard agent then misses the raylet's hard-coded 15 s start-up window).
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/uv pip install -q --compile-bytecode --python $(BIN)/python -e '.[dev]'
	$(BIN)/uv pip uninstall -q --python $(BIN)/python rfc3987-syntax || true
	touch $(STAMP)

# The git clean filter named in .gitattributes: notebooks are stored without outputs, so
# running one in place leaves the tree clean. Relative path: git runs filters from the
# worktree root, so every worktree uses its own .venv.
setup: $(STAMP)
	@if git rev-parse --git-dir >/dev/null 2>&1; then \
	  git config filter.agentlab-nbstrip.clean '.venv/bin/python -m agentlab.sweep.nbclean --filter' && \
	  git config filter.agentlab-nbstrip.smudge cat; fi

# Debian's Chromium for the real-browser widget tests (never `playwright install`).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "chromium missing: run 'sudo apt-get install -y chromium' (browser tests will be skipped)"; fi; }

demo: setup
	$(BIN)/agentlab demo

lint: setup
	$(BIN)/ruff check agentlab tests benchmarks notebooks
	$(BIN)/ruff format --check agentlab tests benchmarks

types: setup
	$(BIN)/mypy agentlab

contracts: setup
	$(BIN)/lint-imports

pytest: setup browser
	$(BIN)/python -m pytest -q tests notebooks --nbmake $(PYTEST_ARGS)

test: lint types contracts pytest test-real

# Real model end to end (society + topology through litellm, streaming TTFT, structured
# output) against SmolLM2-135M: scripts/real_server.sh installs the prebuilt llama-cpp-cffi
# wheel into its own .venv-real once (~1 min), serves the model and runs these tests. An
# install or server failure fails the target: it never skips.
test-real: setup
	bash scripts/real_server.sh $(BIN)/python -m pytest tests/real -m real -q -p no:cacheprovider -p no:randomly $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) .venv-real .real-model runs .pytest_cache .mypy_cache .ruff_cache
