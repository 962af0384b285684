# The two commands of README.md are `make demo` and `make test`; everything here is a thin wrapper around
# scripts/ (standard-library Python, so it runs before .venv exists).
PYTHON ?= python3.11

.PHONY: help demo test test-fast lint venv lock

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

demo:  ## install, migrate, bootstrap, start Redis + Ray + Celery + Daphne; Ctrl-C stops them all
	$(PYTHON) -m scripts.devstack

test:  ## install dev tools, start Redis if needed, run ruff, mypy, lint-imports, pytest (ARGS=... for pytest)
	$(PYTHON) -m scripts.check $(ARGS)

test-fast:  ## the edit-test loop: lint, then pytest without browser, Ray, fault or slow tests, no GPU lock check
	$(PYTHON) -m scripts.check --fast -m "not browser and not ray and not faults and not slow" $(ARGS)

lint:  ## ruff (lint + format check), mypy and the import contracts only
	$(PYTHON) -m scripts.check --lint-only

venv:  ## create .venv and install both locks (no-op when they have not changed)
	$(PYTHON) -m scripts.envsetup --dev

lock:  ## re-resolve requirements*.in into requirements.lock, requirements-dev.lock and requirements-gpu.lock
	$(PYTHON) -m scripts.lock
