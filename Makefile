# The appliance's entry points. Every target does its own set-up and is idempotent.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: help setup lint test unit twin-calibration twin-fit

help:
	@echo "make bench [HOST=gpu01]   run the published sweep (on the twin without HOST)"
	@echo "make test                 every test (sets up what it needs)"
	@echo "make lint                 ruff format + lint, mypy --strict"
	@echo "make twin-calibration     the published methodology against the twin over HTTP, vs the card"

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	@touch $@

setup: $(STAMP)

lint: setup
	$(BIN)/ruff format --check bench provisioning tests
	$(BIN)/ruff check bench provisioning tests
	$(BIN)/mypy

unit: setup
	$(BIN)/pytest -q tests/unit

test: setup lint
	$(BIN)/pytest -q tests

# The twin's `published` profile against the card: real process, real HTTP, cell by cell.
twin-calibration: setup
	$(BIN)/python -m tests.twin.calibration

# Re-derive profiles/published.json from the card in virtual time (minutes).
twin-fit: setup
	$(BIN)/python -m bench.twin.calibrate --fit
