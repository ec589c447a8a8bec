PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test lint bench clean docs compose-local

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

# docs/configuration.md and docs/errors.md, generated from shared/settings.py and
# shared/error_codes.py (a test fails when either is stale).
docs: $(STAMP)
	$(BIN)/python -m reactq.shared.config_doc --write
	$(BIN)/python -m reactq.shared.errors_doc --write

# docker-compose.yml's services as local processes (Redis and PostgreSQL on 127.0.0.1), then a turn.
compose-local: $(STAMP)
	$(BIN)/python scripts/compose_local.py $(COMPOSE_LOCAL_ARGS)

bench: $(STAMP)
	$(BIN)/python bench/pool.py

clean:
	rm -rf $(VENV) .reactq .pytest_cache .mypy_cache .ruff_cache
