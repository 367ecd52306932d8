"""One host from nothing to a verified bundle: the steps of docs/provisioning.md ("The
flow"), in order.

    preflight → image (present by id, else streamed or built on the host) → weights
    → server container
    → readiness (log followed, exit = error with log tail) → `bench run` inside it
    → the image's id and labels into environment.json, recipe.json (provisioning.run_recipe)
    → manifest in the container,
    signature on the host → pack → pull back → verify
    → clean-up (always: success, error, Ctrl-C; --keep leaves the server up)

Secrets (the API key, HF_TOKEN) go to containers as environment through the Docker API
and to the server's /v1/models inside the SSH channel; never on a command line.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

import structlog
from pydantic import ValidationError

from bench.bundle import recipe as recipe_mod
from bench.bundle.pack import open_bundle
from bench.bundle.seal import find_secret
from bench.bundle.verify import verify_bundle
from bench.errors import BenchError, Interrupted, RunFailed, ServerError, validation_message
from bench.host import environment
from bench.results import Results
from bench.run import rundir
from provisioning import image, run_recipe, signing, transfer, weights
from provisioning.containers import (
    ContainerFailed,
    ContainerSpec,
    Engine,
    EngineUnreachable,
    Mount,
)
from provisioning.hosts import Host
from provisioning.image import CONTAINER_HOME, HF_IN_CONTAINER
from provisioning.remote import TRANSIENT, Remote, Shell, SshUnreachable, is_transient
from provisioning.run_options import Options, Outcome

log = structlog.get_logger("provisioning.flow")

RUN_IN_CONTAINER = "/results/run"
JIT_IN_CONTAINER = "/var/cache/jit"  # the vllm image's CUDA_CACHE_PATH etc. live under it
_LOG_WRITE_ERRORS: tuple[type[BaseException], ...] = (*TRANSIENT, SshUnreachable)
BUNDLES_IN_CONTAINER = "/bundles"  # the host's folder of runs, for packing
INTERRUPT_GRACE_S = 120.0
POLL_AFTER_DROP_S = 2.0  # how often a sweep that lost its output stream is checked on
_MANIFEST_SCRIPT = (
    "import datetime, sys\n"
    "from pathlib import Path\n"
    "from bench.bundle import manifest, schema\n"
    "root = Path(sys.argv[1])\n"
    "if (root / schema.RESULTS_NAME).is_file():\n"
    "    schema.write_json_schema(root)\n"
    "(root / manifest.SIGNATURE_NAME).unlink(missing_ok=True)\n"
    "made = manifest.build(root, run_id=manifest.run_id_of(root),"
    " created_at=datetime.datetime.now(datetime.UTC))\n"
    "manifest.write(root, made)\n"
)


# A name Docker takes as a container's hostname (RFC 1123); an ssh alias may be anything.
_HOSTNAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,61}[A-Za-z0-9])?")


class HostLost(RunFailed):
    """The SSH connection dropped and could not be reopened within the retries."""


class _Steps:
    """Timing of each step, for the summary and the note on where the time goes."""

    def __init__(self, outcome: Outcome, out: TextIO, clock: Callable[[], float]) -> None:
        self._outcome, self._out, self._clock = outcome, out, clock

    def __call__(self, name: str) -> _Step:
        return _Step(self, name)


class _Step:
    def __init__(self, steps: _Steps, name: str) -> None:
        self._steps, self._name = steps, name

    def __enter__(self) -> None:
        self._t0 = self._steps._clock()
        print(f"[{self._steps._outcome.host}] {self._name} ...", file=self._steps._out, flush=True)

    def __exit__(self, *exc: object) -> None:
        took = self._steps._clock() - self._t0
        self._steps._outcome.timings_s[self._name] = round(took, 2)


class HostRun:
    """The flow on one host. Call run(); clean-up happens inside it whatever happens."""

    def __init__(
        self,
        host: Host,
        opts: Options,
        *,
        remote: Shell,
        out: TextIO = sys.stderr,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.host, self.opts, self.remote = host, opts, remote
        self.out, self.clock, self.sleep = out, clock, sleep
        self.outcome = Outcome(host=host.name, run_id=opts.run_id)
        self.step = _Steps(self.outcome, out, clock)
        self.engine: Engine | None = None
        self.server_id: str | None = None
        self.server_log: list[str] = []
        self.home = ""
        self.jit_cache_was_empty: bool | None = None
        self.weights_doc: dict[str, object] | None = None
        self.uid_gid = ""
        self.stop = threading.Event()
        self._exec_id: str | None = None
        self._dropped = False  # the connection dropped (and was reopened) during the sweep
        # Set by a Ctrl-C that arrives while the bundle is being pulled back (only then).
        self._pull_stop: threading.Event | None = None
        self._pull_stopped: transfer.TransferStopped | None = None
        # The orchestrator's command up to its options, for recipe.json (None: this host's).
        self.recipe_head: tuple[str, ...] | None = None

    def interrupt(self, *, hard: bool = False) -> None:
        """Ctrl-C (from the main thread): stop what runs, keep what finished, clean up.

        `bench run` gets SIGINT (it saves every finished cell and exits); if it is still
        running INTERRUPT_GRACE_S later, or on a second Ctrl-C (hard), it gets SIGKILL.
        """
        first = not self.stop.is_set()
        self.stop.set()
        pulling = self._pull_stop
        if pulling is not None:  # Ctrl-C during the pull-back stops the copy itself
            pulling.set()
        if first:
            print(f"\n[{self.host.name}] interrupted: stopping ...", file=self.out, flush=True)
        exec_id = self._exec_id
        if exec_id is None or self.engine is None:
            return
        try:
            running, _, pid = self.engine.exec_result(exec_id)
            if running and pid:
                self.remote.run(f"kill -{'KILL' if hard else 'INT'} {pid}", idempotent=False)
        except BenchError as exc:
            log.warning("interrupt_failed", host=self.host.name, error=exc.one_line())
        if first and not hard:
            timer = threading.Timer(INTERRUPT_GRACE_S, self.interrupt, kwargs={"hard": True})
            timer.daemon = True
            timer.start()

    def _open_engine(self) -> Engine:
        """The host's Docker engine, through the SDK's own SSH connection."""
        return Engine(self.host)

    def _check_stop(self) -> None:
        if self.stop.is_set():
            raise KeyboardInterrupt

    # -- the whole flow -----------------------------------------------------------------------

    def run(self) -> Outcome:
        interrupted = False
        try:
            with self.step("docker"):
                self.engine = self._open_engine()
            for step in (
                self._prepare_host,
                self._ensure_image,
                self._gpu_selftest,
                self._fetch_weights,
                self._start_server,
                self._wait_ready,
            ):
                self._check_stop()
                step()
            self._check_stop()
            self._sweep()
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
        stopped = self._pull_stopped
        if stopped is not None:
            return Interrupted(
                f"interrupted on {name} while pulling back the bundle: {stopped.part} holds "
                f"{stopped.done} of {stopped.size} bytes (an incomplete copy); the signed bundle "
                f"stays on the host",
                hint=f"copy it with: scp {name}:{stopped.remote_path} {stopped.local_path}; "
                f"then: bench verify {stopped.local_path} "
                f"--allowed-signers {self.opts.allowed_signers}",
            )
        return Interrupted(f"interrupted on {name}; no bundle (nothing had run yet)")

    # -- steps --------------------------------------------------------------------------------

    @property
    def scope(self) -> str:
        """Run id + host: labels and folders stay apart when two names reach one engine."""
        return scope_of(self.opts.run_id, self.host.name)

    @property
    def _host_run_dir(self) -> str:
        return f"{self.home}/.cache/vllm-bench/runs/{self.scope}"

    def _whoami(self) -> None:
        """The account's home and uid:gid on the host (containers run as that user)."""
        ids = self.remote.run('printf "%s %s:%s" "$HOME" "$(id -u)" "$(id -g)"', check=True)
        self.home, self.uid_gid = ids.stdout.rsplit(" ", 1)

    def _prepare_host(self) -> None:
        with self.step("host directories"):
            self._whoami()
            self.remote.run(f"mkdir -p {shlex.quote(self._host_run_dir)}", check=True)
            self.signing_key, public = signing.ensure_host_key(self.remote, self.home)
            signing.trust_locally(public, self.host.name, self.opts.allowed_signers)

    def _ensure_image(self) -> None:
        assert self.engine is not None
        with self.step("image"):
            self.outcome.image_id = image.ensure_image(
                self.engine,
                self.opts.image_ref,
                self.host.name,
                self.out,
                source=self.opts.image_source,
                build=self.opts.build,
            )

    @property
    def _image(self) -> str:
        """What containers run: the image's id once known (a tag can move meanwhile)."""
        return self.outcome.image_id or self.opts.image_ref

    def _gpu_selftest(self) -> None:
        gpus = self.opts.profile.gpus
        if not gpus:
            return
        assert self.engine is not None
        with self.step("self-test"):
            image.gpu_selftest(
                self.engine,
                image=self._image,
                scope=self.scope,
                user=self.uid_gid,
                gpus=gpus,
                host=self.host.name,
                out=self.out,
            )

    def _fetch_weights(self) -> None:
        req = self.opts.requirements
        if not (req.weights_bytes and req.hf_model):
            self.weights_doc = {"note": "not applicable: the launch profile loads no weights"}
            return
        assert self.engine is not None
        self.remote.run(f"mkdir -p {shlex.quote(self._model_cache())}", check=True)
        with self.step("weights"):
            if req.download_weights:
                image.fetch_weights(
                    self.engine,
                    image=self._image,
                    model=req.hf_model,
                    revision=req.model_revision,
                    scope=self.scope,
                    cache_dir=self._model_cache(),
                    user=self.uid_gid,
                    hf_token=self.opts.secrets.hf_token,
                    host=self.host.name,
                    out=self.out,
                )
            if req.model_revision is not None:
                weights.pin_main(self.remote, self._model_cache(), req.hf_model, req.model_revision)
            found = weights.record(
                self.remote, self._model_cache(), req.hf_model, req.model_revision
            )
            if found is None:
                raise RunFailed(
                    f"{req.hf_model} is not in {self._model_cache()} on {self.host.name} "
                    "after the weights step",
                    hint="run with the download on, or fetch it on the host (hf download)",
                )
            print(f"[{self.host.name}] {found.banner()}", file=self.out, flush=True)
            self.weights_doc = found.as_json()

    def _jit_cache(self) -> str:
        return f"{self.home}/.cache/bench-jit"

    def _model_cache(self) -> str:
        cache = self.host.model_cache
        return self.home + cache[1:] if cache.startswith("~") else cache

    def _start_server(self) -> None:
        assert self.engine is not None
        p = self.opts.profile
        env = {"HOME": CONTAINER_HOME, "HF_HOME": HF_IN_CONTAINER}
        mounts = [
            Mount(self._host_run_dir, RUN_IN_CONTAINER),
            Mount(self._model_cache(), HF_IN_CONTAINER),
        ]
        if self.opts.requirements.weights_bytes:
            # The weights step fetched them: a start that would download is a failure.
            env["HF_HUB_OFFLINE"] = "1"
        if p.gpus:
            # The JIT caches (PTX, Triton, FlashInfer, torch.compile) outlive the container,
            # so only the first start on a host pays for compiling them.
            self.remote.run(f"mkdir -p {shlex.quote(self._jit_cache())}", check=True)
            found = self.remote.run(f"find {shlex.quote(self._jit_cache())} -type f -print -quit")
            self.jit_cache_was_empty = found.ok and not found.stdout.strip()
            mounts.append(Mount(self._jit_cache(), JIT_IN_CONTAINER))
        if self.opts.secrets.api_key is not None and "VLLM_API_KEY" in p.secret_env:
            env["VLLM_API_KEY"] = self.opts.secrets.api_key.get_secret_value()
        if self.opts.secrets.hf_token is not None:
            env["HF_TOKEN"] = self.opts.secrets.hf_token.get_secret_value()
        self.remote.run(f"mkdir -p {shlex.quote(self._model_cache())}", check=True)
        with self.step("server start"):
            self.server_id = self.engine.start(
                ContainerSpec(
                    image=self._image,
                    command=p.argv,
                    run_id=self.scope,
                    role="server",
                    gpus=p.gpus,
                    environment=env,
                    mounts=tuple(mounts),
                    publish={p.port: None},
                    user=self.uid_gid,
                    ipc_host=p.gpus > 1,  # NCCL between tensor-parallel ranks needs shared memory
                    hostname=self.host.name if _HOSTNAME.fullmatch(self.host.name) else None,
                )
            )
            self.server_port = self.engine.host_port(self.server_id, p.port)
            self.engine.follow_logs(self.server_id, self.server_log.append)

    def _wait_ready(self) -> None:
        assert self.engine is not None and self.server_id is not None
        p = self.opts.profile
        headers = {}
        if self.opts.secrets.api_key is not None:
            headers["Authorization"] = f"Bearer {self.opts.secrets.api_key.get_secret_value()}"
        with self.step("readiness"):
            deadline = self.clock() + p.startup_timeout_s
            while True:
                status, code = self.engine.state(self.server_id)
                if status in ("exited", "dead", "removed"):
                    tail = self.engine.log_tail(self.server_id)
                    raise ContainerFailed(
                        f"the server container on {self.host.name} exited with {code} while "
                        f"starting; last lines of its log:\n{_indent(tail)}",
                        log_tail=tail,
                        hint="fix the launch (see the log above) and run again",
                    )
                health = self.remote.http_get(self.server_port, "/health")
                if health is not None and health[0] == 200:
                    models = self.remote.http_get(self.server_port, "/v1/models", headers=headers)
                    if models is not None and p.served_model_name.encode() in models[1]:
                        print(f"[{self.host.name}] server ready", file=self.out)
                        return
                self._check_stop()
                if self.clock() > deadline:
                    raise ServerError(
                        f"the server on {self.host.name} was not ready after "
                        f"{p.startup_timeout_s:.0f} s; last lines of its log:\n"
                        f"{_indent(self.engine.log_tail(self.server_id))}"
                    )
                self.sleep(1.0)

    def _sweep(self) -> None:
        """`bench run` inside the server container, its output on the local terminal."""
        assert self.engine is not None and self.server_id is not None
        p = self.opts.profile
        env = {"HOME": CONTAINER_HOME}
        if self.opts.secrets.api_key is not None:
            env["BENCH_API_KEY"] = self.opts.secrets.api_key.get_secret_value()
        command: tuple[str, ...] = (
            "bench", "run", "--url", f"http://127.0.0.1:{p.port}",
            "--out", RUN_IN_CONTAINER, *self.opts.bench_args,
        )  # fmt: skip
        if self.server_log:
            # The start-up log so far, for its "KV cache size: N tokens" line (a capacity
            # source after /metrics' label); _seal rewrites the file with the whole log.
            # Not worth failing the run over: without it the capacity has other sources.
            try:
                self.remote.write_text(
                    f"{self._host_run_dir}/server.log", "\n".join(self.server_log) + "\n"
                )
                command += ("--server-log", f"{RUN_IN_CONTAINER}/server.log")
            except _LOG_WRITE_ERRORS as exc:
                log.warning("server_log_not_passed", host=self.host.name, error=str(exc))
        with self.step("sweep"):
            exec_id, stream = self.engine.exec_stream(
                self.server_id, command, environment=env, user=self.uid_gid
            )
            self._exec_id = exec_id
            try:
                for chunk in stream:
                    self.out.write(chunk.decode(errors="replace"))
                    self.out.flush()
            except EngineUnreachable as exc:
                self._reconnect(exc)
            code = self._await_exec(exec_id)
            self._exec_id = None
        if self.stop.is_set():
            return
        if self._dropped:
            # The engine marks an exec whose output stream broke as failed (exit 126) whatever
            # `bench run` returned; the run directory on the host says whether it finished.
            if not self._run_finished_on_host():
                self.outcome.error = RunFailed(
                    f"`bench run` on {self.host.name} stopped before finishing after the ssh "
                    f"connection dropped (its run directory is marked {rundir.INCOMPLETE})"
                )
            return
        if code not in (0, 1):  # 1 = a verdict of "no"; the bundle is still good
            self.outcome.error = RunFailed(f"`bench run` on {self.host.name} exited with {code}")

    def _run_finished_on_host(self) -> bool:
        run_dir = shlex.quote(self._host_run_dir)
        done = f"test -f {run_dir}/{rundir.RESULTS} && test ! -e {run_dir}/{rundir.INCOMPLETE}"
        return self.remote.run(done).ok

    def _await_exec(self, exec_id: str) -> int | None:
        """The exit code of `bench run` once it has finished.

        After its output stream ended it should end too (within INTERRUPT_GRACE_S). After a
        dropped connection it goes on inside the container without us: wait for it however
        long the sweep takes (unless stopped: then the grace applies again).
        """
        deadline = self.clock() + INTERRUPT_GRACE_S
        while True:
            running, code, _ = self._exec_state(exec_id)
            if not running:
                return code
            if self._dropped and not self.stop.is_set():
                deadline = self.clock() + INTERRUPT_GRACE_S
            elif self.clock() > deadline:
                return code
            self.sleep(POLL_AFTER_DROP_S if self._dropped else 0.2)

    def _exec_state(self, exec_id: str) -> tuple[bool, int | None, int]:
        assert self.engine is not None
        try:
            return self.engine.exec_result(exec_id)
        except EngineUnreachable as exc:
            self._reconnect(exc)
            return self.engine.exec_result(exec_id)

    def _reconnect(
        self, lost: BenchError, *, sweeping: bool = True, then: str = "cleaning up"
    ) -> None:
        """Reopen both connections (commands and Docker) after a drop, with backoff.

        What runs on the host does not depend on them: containers and execs keep their ids.
        Raises HostLost when the host stays unreachable.
        """
        assert self.engine is not None
        name, policy = self.host.name, self.remote.retry
        print(f"[{name}] lost the connection ({lost.message}); reconnecting ...", file=self.out)
        log.warning("ssh_reconnecting", host=name, error=lost.one_line())
        last: BenchError = lost
        try:
            self.remote.reconnect()  # retries with backoff itself
            for attempt in range(policy.attempts):
                self.sleep(policy.backoff_s(attempt))
                try:
                    self.engine.reconnect()
                except EngineUnreachable as exc:
                    last = exc
                    log.info("engine_reconnect_retry", host=name, attempt=attempt + 1)
                    continue
                if sweeping:
                    self._dropped = True
                    if self.server_id is not None:  # its log follower went with the connection
                        self.server_log.clear()  # followed again from the start: none lost
                        self.engine.follow_logs(self.server_id, self.server_log.append)
                going_on = "the sweep goes on inside the container" if sweeping else then
                print(f"[{name}] reconnected; {going_on}", file=self.out)
                log.info("ssh_reconnected", host=name, attempt=attempt + 1)
                return
        except SshUnreachable as exc:
            last = exc
        raise HostLost(
            f"lost ssh to {name} and could not reconnect ({last.message}); "
            "the run's containers may still be there",
            hint=f"once `ssh {name} true` works, remove them: python -m provisioning clean {name}",
        )

    # -- always -------------------------------------------------------------------------------

    def _bring_back_and_clean_up(self) -> None:
        try:
            if self.home and self.engine is not None and self._has_results():
                self._seal_and_pull()
        except BenchError as exc:
            self.outcome.error = self.outcome.error or exc
        finally:
            self._clean_up()

    def _has_results(self) -> bool:
        q = shlex.quote(f"{self._host_run_dir}/results.json")
        return self.remote.run(f"test -f {q}").ok

    def _seal_and_pull(self) -> None:
        with self.step("sign"):
            self._seal()
        local_archive = self.opts.results_dir / self.host.name / f"{self.opts.run_id}.tar.gz"
        self._pull_stop = threading.Event()  # before the step is announced: no Ctrl-C missed
        remote = self.remote
        assert isinstance(remote, Remote)  # a local shell (provisioning.node) pulls nothing
        with self.step("pull back"):
            try:
                transfer.get(
                    remote, f"{self._host_run_dir}.tar.gz", local_archive,
                    stop=self._pull_stop,
                )  # fmt: skip
            except transfer.TransferStopped as stopped:
                self._pull_stopped = stopped
                raise
            finally:
                self._pull_stop = None
            self.outcome.archive = local_archive
        with self.step("verify"):
            self._open_and_verify(local_archive)

    def _seal(self) -> None:
        """server.log, the image into environment.json, manifest, signature and archive on
        the host, retried after a drop.

        Every step rewrites what it makes from the run directory (the manifest is rebuilt,
        the signature and archive replaced), so a whole rerun is the same as one run: a
        dropped connection (once, or again right after the reconnect) just reruns them.
        """
        assert self.engine is not None
        attempts = self.remote.retry.attempts
        for attempt in range(attempts):
            try:
                if attempt:  # a helper the drop left behind (running or not) goes first
                    self.engine.remove_run(self.scope, keep_roles=("server",))
                self._seal_once()
                return
            except (EngineUnreachable, SshUnreachable) as exc:
                if attempt + 1 == attempts:
                    raise RunFailed(
                        f"signing the bundle on {self.host.name} failed {attempts} times, the "
                        f"ssh connection dropping each time (last: {exc.message})",
                        hint=f"the run directory is kept on the host ({self._host_run_dir}); "
                        f"sign it there with `bench sign`, or run again",
                    ) from None
                self._reconnect(exc, sweeping=False, then="signing again")

    def _seal_once(self) -> None:
        run_dir = self._host_run_dir
        try:  # files written over SFTP: a drop there is a drop like any other
            if self.server_log:
                self.remote.write_text(f"{run_dir}/server.log", "\n".join(self.server_log) + "\n")
            self._record_image()
            self._record_recipe()
        except TRANSIENT as exc:  # an SFTP status error (no such file...) is not a drop
            if isinstance(exc, FileNotFoundError | PermissionError) or not is_transient(exc):
                raise
            raise SshUnreachable(
                f"ssh to {self.host.name} dropped while writing to the run directory: {exc}"
            ) from None
        code = self._helper("manifest", ("python", "-c", _MANIFEST_SCRIPT, RUN_IN_CONTAINER))
        if code != 0:
            raise RunFailed(f"writing the manifest on {self.host.name} failed (exit {code})")
        signing.sign_on_host(self.remote, self.signing_key, f"{run_dir}/manifest.json")
        inside = f"{BUNDLES_IN_CONTAINER}/{self.scope}"
        code = self._helper(
            "pack", ("bench", "pack", inside, "--out", f"{inside}.tar.gz"), parent=True
        )
        if code != 0:
            raise RunFailed(f"packing the bundle on {self.host.name} failed (exit {code})")

    def _open_and_verify(self, local_archive: Path) -> None:
        secrets = [s.get_secret_value() for s in (self.opts.secrets.api_key,) if s]
        root = local_archive.with_name(self.opts.run_id)
        try:
            self.outcome.complete = open_and_verify(
                local_archive, self.opts.run_id, self.opts.allowed_signers, secrets
            )
        finally:  # opened (even if it then fails to verify): the folder is there to look at
            self.outcome.local_dir = root if root.is_dir() else None

    def _record_image(self) -> None:
        """The image's id and labels into environment.json, before the manifest hashes it.

        `bench run` inside the container cannot see which image it runs in; the engine can.
        Edited as JSON, not through bench's model: the image's bench may be another version.
        """
        assert self.engine is not None
        path = f"{self._host_run_dir}/{environment.ENVIRONMENT_NAME}"
        if self.outcome.image_id is None or not self.remote.run(f"test -f {shlex.quote(path)}").ok:
            return
        try:
            doc = json.loads(self.remote.read_text(path))
        except ValueError as exc:
            log.warning("environment_unreadable", host=self.host.name, error=str(exc))
            return
        if not isinstance(doc, dict):
            return
        found = doc.get("image")
        image_doc: dict[str, object] = found if isinstance(found, dict) else {}
        image_doc["digest"] = self.outcome.image_id
        image_doc["labels"] = self.engine.image_labels(self.outcome.image_id)
        doc["image"] = image_doc
        if self.weights_doc is not None:
            doc["weights"] = self.weights_doc
        timings = self.outcome.timings_s
        if "readiness" in timings:
            doc["server_start"] = {
                "ready_after_s": round(timings.get("server start", 0.0) + timings["readiness"], 2),
                "jit_cache_was_empty": self.jit_cache_was_empty,
            }
        self.remote.write_text(path, json.dumps(doc, indent=2) + "\n")

    def _record_recipe(self) -> None:
        """recipe.json: the commands that re-create this run (provisioning.run_recipe),
        before the manifest hashes it. Made from results.json as this checkout's bench
        reads it; one it cannot read (another bench's schema) gets no recipe, and `bench
        verify` then says the bundle lacks one."""
        path = f"{self._host_run_dir}/{rundir.RESULTS}"
        try:
            results = Results.model_validate_json(self.remote.read_text(path))
        except ValidationError as exc:
            log.warning("recipe_not_written", host=self.host.name, error=validation_message(exc))
            return
        except FileNotFoundError as exc:
            log.warning("recipe_not_written", host=self.host.name, error=str(exc).splitlines()[0])
            return
        made = run_recipe.recipe_for(
            results,
            self.opts,
            host=self.host.name,
            image_id=self.outcome.image_id,
            weights=self.weights_doc,
            command_head=self.recipe_head,
        )
        target = f"{self._host_run_dir}/{recipe_mod.RECIPE_NAME}"
        self.remote.write_text(target, recipe_mod.dumps(made))

    def _helper(self, role: str, command: tuple[str, ...], *, parent: bool = False) -> int:
        """A short-lived container of the run's image over the run directory."""
        assert self.engine is not None
        source = self._host_run_dir.rsplit("/", 1)[0] if parent else self._host_run_dir
        target = BUNDLES_IN_CONTAINER if parent else RUN_IN_CONTAINER
        cid = self.engine.start(
            ContainerSpec(
                image=self._image,
                command=command,
                run_id=self.scope,
                role=role,
                environment={"HOME": CONTAINER_HOME},
                mounts=(Mount(source, target),),
                user=self.uid_gid,
            )
        )
        code = self.engine.wait(cid, timeout_s=600)
        if code != 0:
            print(_indent(self.engine.log_tail(cid)), file=self.out)
        return code

    def _clean_up(self) -> None:
        if self.engine is None:
            return
        try:
            keep = ("server",) if self.opts.keep and self.outcome.error is None else ()
            try:
                removed = self.engine.remove_run(self.scope, keep_roles=keep)
            except EngineUnreachable as exc:  # clean-up still happens, over a fresh connection
                self._reconnect(exc, sweeping=False)
                removed = self.engine.remove_run(self.scope, keep_roles=keep)
            if keep and self.server_id is not None:
                print(
                    f"[{self.host.name}] --keep: server left running on the host's "
                    f"127.0.0.1:{self.server_port}",
                    file=self.out,
                )
            log.info("cleaned_up", host=self.host.name, removed=len(removed))
        except BenchError as exc:  # the first error is the one to report; this one is logged
            log.warning("clean_up_failed", host=self.host.name, error=exc.one_line())
            self.outcome.error = self.outcome.error or exc
        finally:
            self.engine.close()


def open_and_verify(
    local_archive: Path, run_id: str, allowed_signers: Path, secrets: list[str]
) -> bool:
    """Open the bundle beside its archive (as RUN_ID/), refuse one holding a secret, verify
    its signature and hashes; True when the run is complete (no INCOMPLETE marker)."""
    local_root = local_archive.with_name(run_id)
    # open_bundle wants an empty folder and puts the bundle's own top folder in it
    staging = local_root.with_name(f".opening-{run_id}")
    shutil.rmtree(staging, ignore_errors=True)
    inner = open_bundle(local_archive, staging)
    shutil.rmtree(local_root, ignore_errors=True)
    inner.replace(local_root)
    shutil.rmtree(staging, ignore_errors=True)
    leaked = find_secret(local_root, secrets)
    if leaked:
        raise RunFailed(f"{leaked} in the bundle contains the API key; not accepted")
    verify_bundle(local_archive, allowed_signers)
    return not (local_root / "INCOMPLETE").exists()


def scope_of(run_id: str, host_name: str) -> str:
    return f"{run_id}-{re.sub(r'[^A-Za-z0-9_.-]', '_', host_name)}"


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.rstrip().splitlines())
