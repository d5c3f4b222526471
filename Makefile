# Kairos: the two commands are `make run` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip

.PHONY: run test test-all lint typecheck typecheck-sdk-pyright browser-deps unit bench install install-dev clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(PIP) install --quiet -e .
	touch $@

$(VENV)/.installed-dev: $(BIN)/python pyproject.toml clients/python/pyproject.toml
	$(PIP) install --quiet -e '.[dev]'
	$(PIP) install --quiet -e clients/python
	touch $(VENV)/.installed $@

install: $(VENV)/.installed
install-dev: $(VENV)/.installed-dev

## make run: serve on the embedded default (SQLite file, in-process batcher, shipped policy)
run: $(VENV)/.installed
	$(BIN)/kairos migrate
	$(BIN)/kairos serve

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

typecheck: $(VENV)/.installed-dev
	$(BIN)/mypy
	cd clients/python && ../../$(BIN)/mypy
	@if command -v node >/dev/null 2>&1; then $(MAKE) --no-print-directory typecheck-sdk-pyright; \
	else echo "typecheck: pyright skipped (no node on this machine)"; fi

## make typecheck-sdk-pyright: pyright --strict on the SDK, as Pylance users read it (needs node)
typecheck-sdk-pyright: $(VENV)/.installed-dev
	cd clients/python && ../../$(BIN)/pyright --pythonpath ../../$(BIN)/python

## make browser-deps: Debian's chromium for tests/browser (Playwright drives it; apt-get only when missing)
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
browser-deps:
	@if [ ! -x /usr/bin/chromium ]; then \
		$(SUDO) apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; \
	fi

## make test: lint, type-check and the suite without the tests marked slow (needs PostgreSQL and
## Redis on loopback; PYTEST_ARGS passes options to pytest, e.g. PYTEST_ARGS="-x tests/unit")
test: lint typecheck browser-deps
	$(BIN)/python -m pytest $(PYTEST_ARGS)

## make test-all: as make test, with the slow tests too (KAIROS_TEST_ALL=1 does the same for pytest)
test-all: lint typecheck browser-deps
	KAIROS_TEST_ALL=1 $(BIN)/python -m pytest $(PYTEST_ARGS)

## make bench: speed and memory benchmarks, ratios against a baseline measured in the same run
bench: $(VENV)/.installed-dev
	$(BIN)/python -m benchmarks

## make image: the service images. Where the Docker engine cannot pull the public ones,
## scripts/build-base-image.sh builds a base, PostgreSQL and Redis from Debian's archive and
## sets KAIROS_BASE_IMAGE, KAIROS_POSTGRES_IMAGE, KAIROS_REDIS_IMAGE in .env (made from .env.example)
COMPOSE ?= $(shell docker compose version >/dev/null 2>&1 && echo "docker compose" || echo docker-compose)
.PHONY: image test-compose
image:
	@[ -f .env ] || cp .env.example .env
	scripts/build-base-image.sh --auto --env-file .env
	$(COMPOSE) build

## make test-compose: the stack for real (tests/e2e/test_compose_stack.py; needs a Docker engine)
test-compose: $(VENV)/.installed-dev
	$(BIN)/python -m pytest -m docker tests/e2e/test_compose_stack.py $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache kairos.db
