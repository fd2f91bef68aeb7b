# The two commands of the README. Each installs what it needs itself: uv (from PyPI, into
# .tools/ if it is not on PATH), then the locked environment (.venv, `uv sync --locked`).
SHELL := /bin/bash
# The README's commands name .tools/bin/uv: the uv on PATH, linked there, or one from PyPI.
UV := .tools/bin/uv
VENV := .venv
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
# Let Python cache compiled modules: every test starts fresh interpreters that import torch.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: smoke test test-long lint install clean

$(UV):
	if command -v uv > /dev/null; then mkdir -p $(@D) && ln -s "$$(command -v uv)" $@; \
	else python3 -m venv .tools && .tools/bin/python -m pip install --quiet uv; fi

# --compile-bytecode: every module compiled once here, not by the first processes that import it
# (a test session, a DAG's parallel jobs), each compiling torch's thousands of files at once.
$(VENV)/.synced: uv.lock pyproject.toml | $(UV)
	$(UV) sync --locked --compile-bytecode
	touch $@

install: $(VENV)/.synced

smoke: install  ## the whole evaluation at toy scale: figures/smoke/
	snakemake --profile profiles/smoke

test: install  ## unit, CLI subprocess, the snakemake DAG end to end, lint (the long tests: test-long)
	pytest -q

test-long: install  ## the long tests (minutes): the tiny DAG on SLURM and by hand, runs stopped for real and resumed (past a time limit too), every figure rendered twice, the compiled model against the eager one
	pytest -q -m long

lint: install
	ruff check .
	snakemake --profile profiles/smoke --lint

clean:
	rm -rf results/smoke logs/smoke .snakemake
