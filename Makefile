PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet -e '.[dev,postgres,gateway]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/reactq demo

test: $(STAMP)
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check shared worker producer tests bench examples
	$(BIN)/ruff format --check shared worker producer tests bench examples
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python bench/pool.py

clean:
	rm -rf $(VENV) .reactq .pytest_cache .mypy_cache .ruff_cache
