# The appliance's entry points. Every target does its own set-up and is idempotent.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: help setup lint test unit reproduce-twin

help:
	@echo "make bench [HOST=gpu01]   run the published sweep (on the twin without HOST)"
	@echo "make test                 every test (sets up what it needs)"
	@echo "make lint                 ruff format + lint, mypy --strict"

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

# The published sweep against the twin's `published` profile, compared with the card
# cell by cell. Windows are 30 s of server time, so at speed 10 each lasts 3 s.
REPRO_SPEED ?= 10
REPRO_CARD ?= tests/card/fixtures/published_qwen3.5-397b-a17b-int4_4x-rtxpro6000_vllm-73a5831127a9.txt
REPRO_OUT ?= results/reproduce-twin-$(shell date -u +%Y%m%d-%H%M%S)
reproduce-twin: setup
	$(BIN)/python -m bench.reproduce_twin --speed $(REPRO_SPEED) --card $(REPRO_CARD) --out $(REPRO_OUT)
