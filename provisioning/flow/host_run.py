"""One host from nothing to a verified bundle: the steps of docs/provisioning.md ("The
flow"), in order, the clean-up, and the interrupts.

    preflight → image (present by id, else streamed or built on the host) → weights
    → server container                                      (provisioning.flow.server_start)
    → readiness (log followed, exit = error with log tail)  (provisioning.flow.readiness)
    → `bench run` inside it                                 (provisioning.flow.sweep_exec)
    → the image's id and labels into environment.json, recipe.json, `bench report` in a
      container of the image (report.html, plots/*.png)      (provisioning.flow.sealing)
    → `bench manifest` in the container, signature on the host → pack   (the same)
    → pull back → verify                                    (the placement)
    → clean-up (always: success, error, Ctrl-C; --keep leaves the server up)

What differs between a host over SSH and a Slurm node running its own part is the
Placement the flow is given (provisioning.flow.seams): provisioning.flow.over_ssh.OverSsh by
default, provisioning.slurm.node.OnNode on a node. A dropped connection is reopened by
provisioning.flow.reconnect.

Secrets (the API key, HF_TOKEN) go to containers as environment through the Docker API
and to the server's /v1/models inside the SSH channel; never on a command line.
"""

from __future__ import annotations

import re
import shlex
import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

import structlog

from bench.errors import BenchError, Interrupted
from provisioning.containers.docker_sdk import EngineUnreachable
from provisioning.containers.engine_side import EngineSide
from provisioning.flow.options import HostOutcome, Options
from provisioning.flow.over_ssh import OverSsh
from provisioning.flow.readiness import wait_ready
from provisioning.flow.reconnect import Reconnector
from provisioning.flow.sealing import RunFacts, Sealer
from provisioning.flow.seams import Placement, ServerContainer, Steps, Workspace
from provisioning.flow.server_start import ServerStarter
from provisioning.flow.sweep_exec import INTERRUPT_GRACE_S, SweepExec
from provisioning.flow.workload import remove_inputs, stage
from provisioning.hosts.inventory import ResolvedHost
from provisioning.hosts.remote import Remote
from provisioning.hosts.shell import Shell

log = structlog.get_logger("provisioning.flow")


class HostRun:
    """The flow on one host. Call run(); clean-up happens inside it whatever happens.

    PLACEMENT: where the run lives and how its bundle leaves (default: the host over SSH,
    which needs REMOTE to be a provisioning.hosts.remote.Remote).
    """

    def __init__(
        self,
        host: ResolvedHost,
        opts: Options,
        *,
        remote: Shell,
        placement: Placement | None = None,
        out: TextIO = sys.stderr,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if placement is None:
            if not isinstance(remote, Remote):
                raise TypeError("a host over ssh needs a Remote; give another shell a placement")
            placement = OverSsh(remote, opts)
        self.host, self.opts, self.remote, self.placement = host, opts, remote, placement
        self.out, self.clock, self.sleep = out, clock, sleep
        self.outcome = HostOutcome(host=host.name, run_id=opts.run_id)
        self.step = Steps(self.outcome, out, clock)
        self.stop = threading.Event()
        self.facts = RunFacts()
        self.engine: EngineSide | None = None
        self.workspace: Workspace | None = None
        self.server: ServerContainer | None = None
        self._reconnect: Reconnector | None = None
        self._sweep: SweepExec | None = None

    @property
    def recipe_head(self) -> tuple[str, ...] | None:
        """The orchestrator's command up to its options, for recipe.json (None: this host's)."""
        return self.facts.recipe_head

    @recipe_head.setter
    def recipe_head(self, head: tuple[str, ...] | None) -> None:
        self.facts.recipe_head = head

    @property
    def scope(self) -> str:
        """Run id + host: labels and folders stay apart when two names reach one engine."""
        return scope_of(self.opts.run_id, self.host.name)

    def interrupt(self, *, hard: bool = False) -> None:
        """Ctrl-C (from the main thread): stop what runs, keep what finished, clean up.

        `bench run` gets SIGINT (it saves every finished cell and exits); if it is still
        running INTERRUPT_GRACE_S later, or on a second Ctrl-C (hard), it gets SIGKILL.
        """
        first = not self.stop.is_set()
        self.stop.set()
        self.placement.stop_delivery()
        if first:
            print(f"\n[{self.host.name}] interrupted: stopping ...", file=self.out, flush=True)
        sweep = self._sweep
        if sweep is None or not sweep.signal(hard=hard):
            return
        if first and not hard:
            timer = threading.Timer(INTERRUPT_GRACE_S, self.interrupt, kwargs={"hard": True})
            timer.daemon = True
            timer.start()

    def _check_stop(self) -> None:
        if self.stop.is_set():
            raise KeyboardInterrupt

    # -- the whole flow -----------------------------------------------------------------------

    def run(self) -> HostOutcome:
        interrupted = False
        try:
            with self.step("docker"):
                self.engine = self.placement.open_engine()
            self._reconnect = Reconnector(
                self.host.name, self.remote, self.engine, out=self.out, sleep=self.sleep
            )
            where = self._prepare_host()
            self._stage_workload(where)
            self._check_stop()
            with self.step("image"):
                self.facts.image_id = self.outcome.image_id = self.placement.ensure_image(self.out)
            self._until_ready(self.engine, where)
            self._check_stop()
            self._run_sweep(self.engine, where)
            interrupted = self.stop.is_set()
        except KeyboardInterrupt:
            interrupted = True
        except BenchError as exc:
            self.outcome.error = exc
        finally:
            self._bring_back_and_clean_up()
        if interrupted or self.stop.is_set():  # also a Ctrl-C while bringing the bundle back
            raise self._interrupted()
        if self.outcome.error is not None:
            raise self.outcome.error
        return self.outcome

    def _interrupted(self) -> Interrupted:
        name, where = self.host.name, self.outcome.local_dir
        if where is not None:
            kind = "complete" if self.outcome.complete else "partial"
            return Interrupted(f"interrupted on {name}; the {kind} bundle is in {where}")
        stopped = self.placement.delivery_stopped()
        if stopped is not None:
            return stopped
        return Interrupted(f"interrupted on {name}; no bundle (nothing had run yet)")

    # -- steps --------------------------------------------------------------------------------

    @property
    def image(self) -> str:
        """What containers run: the image's id once known (a tag can move meanwhile)."""
        return self.outcome.image_id or self.opts.image_ref

    def _prepare_host(self) -> Workspace:
        """The account's home and uid:gid on the host (containers run as that user), the run
        directory and the signing key."""
        self._check_stop()
        with self.step(self.placement.directories_step):
            ids = self.remote.run('printf "%s %s:%s" "$HOME" "$(id -u)" "$(id -g)"', check=True)
            home, uid_gid = ids.stdout.rsplit(" ", 1)
            run_dir, key = self.placement.prepare(home, self.scope)
        cache = self.host.model_cache
        model_cache = home + cache[1:] if cache.startswith("~") else cache
        self.workspace = Workspace(home, uid_gid, run_dir, model_cache, key)
        return self.workspace

    def _stage_workload(self, where: Workspace) -> None:
        """A workload file (and its data) into the run's inputs folder, which the server
        container mounts (provisioning.flow.workload); nothing for a preset or none."""
        workload = self.opts.workload
        if workload is None or not workload.staged:
            return
        self._check_stop()
        with self.step("workload"):
            stage(self.remote, workload, where.run_dir)

    def _until_ready(self, engine: EngineSide, where: Workspace) -> None:
        """Self-test, weights, server start, readiness."""
        steps = ServerStarter(
            engine, self.remote, self.opts,
            scope=self.scope, image=self.image, where=where, steps=self.step, out=self.out,
        )  # fmt: skip
        self._check_stop()
        steps.gpu_selftest()
        self._check_stop()
        self.facts.weights = steps.fetch_weights()
        self._check_stop()
        self.server = steps.start_server()
        self.facts.jit_cache_was_empty = steps.jit_cache_was_empty
        assert self._reconnect is not None
        self._reconnect.server = self.server
        self._check_stop()
        with self.step("readiness"):
            wait_ready(
                engine, self.remote, self.server, self.opts.profile,
                api_key=self.opts.secrets.api_key, out=self.out,
                clock=self.clock, sleep=self.sleep, stopped=self.stop.is_set,
            )  # fmt: skip

    def _run_sweep(self, engine: EngineSide, where: Workspace) -> None:
        """`bench run` inside the server container, its output on the local terminal."""
        assert self.server is not None and self._reconnect is not None
        self._sweep = sweep = SweepExec(
            engine, self.remote, self._reconnect,
            out=self.out, clock=self.clock, sleep=self.sleep, stop=self.stop,
        )  # fmt: skip
        command = sweep.command(self.opts, self.server, where)
        with self.step("sweep"):
            failed = sweep.run(command, self.server, where, self.opts)
        if failed is not None:
            self.outcome.error = failed

    # -- always -------------------------------------------------------------------------------

    def _bring_back_and_clean_up(self) -> None:
        try:
            where, engine, reconnect = self.workspace, self.engine, self._reconnect
            if where and engine and reconnect and self._has_results(where):
                sealer = Sealer(
                    engine, self.remote, reconnect, self.opts,
                    scope=self.scope, image=self.image, where=where, out=self.out,
                )  # fmt: skip
                self.facts.timings_s = self.outcome.timings_s
                self.facts.server_log = self.server.log if self.server else []
                # The report before the manifest: the signature covers it. One that cannot
                # be made is a line on the terminal; the bundle is signed without it.
                with self.step("report"):
                    sealer.report(self.facts)
                with self.step("sign"):
                    sealer.seal(self.facts)
                self.placement.deliver(sealer.archive, self.outcome, self.step)
        except BenchError as exc:
            self.outcome.error = self.outcome.error or exc
        finally:
            self._clean_up()

    def _has_results(self, where: Workspace) -> bool:
        q = shlex.quote(f"{where.run_dir}/results.json")
        return self.remote.run(f"test -f {q}").ok

    def _clean_up(self) -> None:
        engine, reconnect = self.engine, self._reconnect
        if engine is None or reconnect is None:
            return
        try:
            keep = ("server",) if self.opts.keep and self.outcome.error is None else ()
            try:
                removed = engine.remove_run(self.scope, keep_roles=keep)
            except EngineUnreachable as exc:  # clean-up still happens, over a fresh connection
                reconnect(exc, sweeping=False)
                removed = engine.remove_run(self.scope, keep_roles=keep)
            if keep and self.server is not None:
                print(
                    f"[{self.host.name}] --keep: server left running on the host's "
                    f"127.0.0.1:{self.server.port}",
                    file=self.out,
                )
            workload, where = self.opts.workload, self.workspace
            if workload is not None and workload.staged and where is not None and not keep:
                remove_inputs(self.remote, where.run_dir)  # kept with a kept server
            log.info("cleaned_up", host=self.host.name, removed=len(removed))
        except BenchError as exc:  # the first error is the one to report; this one is logged
            log.warning("clean_up_failed", host=self.host.name, error=exc.one_line())
            self.outcome.error = self.outcome.error or exc
        finally:
            engine.close()


def scope_of(run_id: str, host_name: str) -> str:
    return f"{run_id}-{re.sub(r'[^A-Za-z0-9_.-]', '_', host_name)}"
