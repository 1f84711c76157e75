# The two commands the README opens with: `make demo` and `make test`.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: demo test lint typecheck clean browser sandbox tools

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# the demo installs what `assay report` and `assay serve` need to show its journal
$(VENV)/.demo: $(BIN)/python pyproject.toml
	$(BIN)/pip install -q -e ".[faces]"
	touch $@

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install -q "torch==2.13.0"
	$(BIN)/pip install -q -e ".[llm,research,faces,ray,sky,gpt,gp,dev]"
	touch $@

demo: $(VENV)/.demo
	$(BIN)/python examples/quickstart/demo.py

browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "installing Debian's chromium for the browser tests"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

# the sandbox every benchmark, build and agent runs in (see the README)
sandbox:
	@command -v bwrap >/dev/null 2>&1 || { \
	  echo "installing Debian's bubblewrap for the sandbox"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null; }

# tmux for the terminal tests of `assay init`, cmake for its CMake target list
tools:
	@command -v tmux >/dev/null 2>&1 && command -v cmake >/dev/null 2>&1 || { \
	  echo "installing Debian's tmux and cmake for the init tests"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tmux cmake \
	  >/dev/null; }

test: $(STAMP) browser sandbox tools
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/mypy
	$(BIN)/python -m pytest -q -p no:cacheprovider

clean:
	rm -rf $(VENV) .assay examples/quickstart/.assay
