# The appliance's entry points. Every target does its own set-up and is idempotent.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: help setup lint test unit

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

# The orchestrator (provisioning/): a GPU host over SSH. HOST=gpu01 or HOST=gpu01,gpu02;
# PROFILE=<launch profile> (default: the inventory's, else published); TRUST_NEW_HOST=1
# accepts and records the key of a host seen for the first time.
PROVISION_FLAGS = $(if $(PROFILE),--profile $(PROFILE)) $(if $(TRUST_NEW_HOST),--trust-new-host)

.PHONY: preflight
preflight: setup
	@test -n "$(HOST)" || { echo "make preflight needs HOST=<ssh alias or hostname>" >&2; exit 2; }
	$(BIN)/python -m provisioning preflight $(HOST) $(PROVISION_FLAGS)
