# Two commands do all the set-up: `make run` and `make test`.
# `make run ARGS="kv-pressure --num-prompts 100"` passes arguments to `servesim run`.
# `make run` installs what running needs (with the measured GPU kernel tables, servesim[gpu]);
# `make test` adds the test tools and Ray.
PYTHON ?= python3
ARGS ?=
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed-run: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[gpu]"
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[test,ray,gpu]"
	touch $@ $(VENV)/.installed-run

run: $(VENV)/.installed-run
	$(BIN)/servesim run $(ARGS)

test: $(VENV)/.installed-test
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV) out .pytest_cache .hypothesis
