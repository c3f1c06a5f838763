# Two commands do all the set-up: `make run` and `make test`.
# `make run ARGS="kv-pressure --num-prompts 100"` passes arguments to `servesim run`.
PYTHON ?= python3
ARGS ?=
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test clean

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[test,ray]"
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/servesim run $(ARGS)

test: $(STAMP)
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV) out .pytest_cache .hypothesis
