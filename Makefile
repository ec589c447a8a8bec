PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test lint bench clean docs docs-site compose-local

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet -e '.[dev,postgres,gateway,flower,metrics,otel]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/reactq demo

test: $(STAMP)
	$(BIN)/python -m pytest -q --durations=12 $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check reactq shared worker producer tests bench examples scripts
	$(BIN)/ruff format --check reactq shared worker producer tests bench examples scripts
	$(BIN)/mypy
	$(BIN)/pyright
	$(MAKE) docs-site

# The docs site (mkdocs.yml): the README as its home page, the guide, the API reference
# from the docstrings. --strict: a broken link or anchor, a page outside the nav or a
# name mkdocstrings cannot resolve fails (not with --quiet: it hides the warnings that
# strict counts). Offline: no fonts or plugins that fetch.
docs-site: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

# docs/configuration.md, docs/errors.md and docs/events.md (with the page's table,
# producer/static/events.js), generated from shared/settings.py, shared/events.py and
# shared/error_codes.py (a test fails when one is stale).
docs: $(STAMP)
	$(BIN)/python -m reactq.shared.config_doc --write
	$(BIN)/python -m reactq.shared.errors_doc --write
	$(BIN)/python -m reactq.shared.events_doc --write

# docker-compose.yml's services as local processes (Redis and PostgreSQL on 127.0.0.1), then a turn.
compose-local: $(STAMP)
	$(BIN)/python scripts/compose_local.py $(COMPOSE_LOCAL_ARGS)

bench: $(STAMP)
	$(BIN)/python bench/pool.py

clean:
	rm -rf $(VENV) .reactq .pytest_cache .mypy_cache .ruff_cache site
