"""Sealing the bundle on the host: what the flow learnt goes into the run directory, the
report, then the manifest, its signature and the archive, each retried after a dropped
connection.

    server.log          the server container's whole log
    environment.json    + the image's id and labels, the weights, the server's start time
    recipe.json         the commands that re-create the run (provisioning.flow.recipe)
    report.html, plots/ `bench report` in a helper container of the run's image (report())
    manifest.json       `bench manifest` in a helper container of the run's image
    manifest.json.sig   the host's key signs it (provisioning.flow.signing), on the host
    attestation.intoto.json  `bench attest` in a helper container of the run's image, the
                        same key file mounted read-only: an in-toto statement of the
                        manifest's files in a DSSE envelope (attest())
    RUN.tar.gz          `bench pack` in a helper container over the host's folder of runs

Getting the archive to the user is the placement's part (provisioning.flow.over_ssh: pulled
back over SSH and verified; provisioning.slurm.node: left on the shared filesystem).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TextIO

import structlog
from pydantic import ValidationError

from bench import run_files
from bench.bundle import recipe as recipe_mod
from bench.bundle.manifest import ATTESTATION_NAME
from bench.errors import RunFailed, validation_message
from bench.host import environment
from bench.results import Results
from provisioning.containers.docker_sdk import EngineUnreachable
from provisioning.containers.engine import ContainerSpec, Mount
from provisioning.containers.engine_side import EngineSide
from provisioning.flow import recipe, signing
from provisioning.flow.options import Options
from provisioning.flow.reconnect import HostLost, Reconnector
from provisioning.flow.seams import (
    BUNDLES_IN_CONTAINER,
    RUN_IN_CONTAINER,
    Workspace,
    indent,
)
from provisioning.hosts.remote import TRANSIENT, SshUnreachable, is_transient
from provisioning.hosts.shell import Shell
from provisioning.image.ensure import CONTAINER_HOME
from provisioning.retry import retry_call

log = structlog.get_logger("provisioning.flow")

HELPER_TIMEOUT_S = 600
_REASON_CHARS = 200  # of a failed helper's last log line, in the one line that reports it


@dataclass
class RunFacts:
    """What the flow learnt on the way that the bundle records."""

    image_id: str | None = None
    weights: dict[str, object] | None = None
    timings_s: dict[str, float] = field(default_factory=dict)
    jit_cache_was_empty: bool | None = None
    # The orchestrator's command up to its options, for recipe.json (None: this host's).
    recipe_head: tuple[str, ...] | None = None
    server_log: list[str] = field(default_factory=list)


class Sealer:
    """Seals one host's run directory into a signed archive beside it."""

    def __init__(
        self,
        engine: EngineSide,
        shell: Shell,
        reconnect: Reconnector,
        opts: Options,
        *,
        scope: str,
        image: str,
        where: Workspace,
        out: TextIO,
    ) -> None:
        self.engine, self.shell, self.reconnect, self.opts = engine, shell, reconnect, opts
        self.scope, self.image, self.where, self.out = scope, image, where, out

    @property
    def host(self) -> str:
        return self.shell.host.name

    @property
    def archive(self) -> str:
        """Where the signed archive is on the host once seal() returned."""
        return f"{self.where.run_dir}.tar.gz"

    def report(self, facts: RunFacts) -> RunFailed | None:
        """What the flow learnt into the run directory, then `bench report` in a helper
        container of the run's image: report.html and plots/*.png, made on the host before
        seal() hashes and signs them, so the signature covers them as it does the figures.

        A report that cannot be made costs the bundle its page, not its figures (as under
        `bench local`): the failure is one line on the terminal and returned, and sealing
        goes on; the bundle then lists no report.html and verifies as any other. A host
        that is gone (HostLost) is not the report's failure and goes up.
        """

        def once() -> None:
            self._record(facts)
            code, tail = self._helper("report", ("bench", "report", RUN_IN_CONTAINER), quiet=True)
            if code != 0:
                raise RunFailed(f"`bench report` on {self.host} exited with {code}: {tail}")

        try:
            self._retried(once, doing="writing the report", then="writing the report again")
        except HostLost:
            raise
        except RunFailed as exc:
            print(f"[{self.host}] no report.html: {exc.message}; signing the bundle without it",
                  file=self.out)  # fmt: skip
            log.warning("report_not_written", host=self.host, error=exc.one_line())
            return exc
        return None

    def seal(self, facts: RunFacts) -> None:
        """server.log, the image into environment.json, manifest, signature, attestation
        and archive on the host, retried after a drop.

        Every step rewrites what it makes from the run directory (the manifest is rebuilt,
        the old attestation removed with it, the signature, attestation and archive
        replaced), so a whole rerun is the same as one run: a dropped connection (once, or
        again right after the reconnect) just reruns them.
        """
        self._retried(
            lambda: self._seal_once(facts),
            doing="signing the bundle",
            then="signing again",
            hint=f"the run directory is kept on the host ({self.where.run_dir}); "
            f"sign it there with `bench sign`, or run again",
        )

    def _retried(
        self, once: Callable[[], None], *, doing: str, then: str, hint: str | None = None
    ) -> None:
        """ONCE, rerun whole after a dropped connection (reconnected in between); after the
        retries, RunFailed says so in one line. A helper a drop left behind goes first."""
        dropped = (EngineUnreachable, SshUnreachable)

        def attempt(n: int) -> None:
            if n:  # a helper the drop left behind (running or not) goes first
                self.engine.remove_run(self.scope, keep_roles=("server",))
            once()

        def give_up(exc: Exception, attempts: int) -> RunFailed | None:
            if not isinstance(exc, dropped):
                return None
            return RunFailed(
                f"{doing} on {self.host} failed {attempts} times, the "
                f"ssh connection dropping each time (last: {exc.message})",
                hint=hint,
            )

        def reconnect(exc: Exception) -> None:
            assert isinstance(exc, dropped)
            self.reconnect(exc, sweeping=False, then=then)

        retry_call(
            attempt,
            replace(self.shell.retry, first_backoff_s=0.0),  # the reconnect backs off itself
            transient=lambda exc: isinstance(exc, dropped),
            event="seal_retry",
            give_up=give_up,
            between=reconnect,
            log_fields=lambda: {"host": self.host, "doing": doing},
        )

    def _seal_once(self, facts: RunFacts) -> None:
        self._record(facts)
        code, _ = self._helper("manifest", ("bench", "manifest", RUN_IN_CONTAINER))
        if code != 0:
            raise RunFailed(f"writing the manifest on {self.host} failed (exit {code})")
        signing.sign_on_host(
            self.shell, self.where.signing_key, f"{self.where.run_dir}/manifest.json"
        )
        self.attest()
        inside = f"{BUNDLES_IN_CONTAINER}/{self.scope}"
        code, _ = self._helper(
            "pack", ("bench", "pack", inside, "--out", f"{inside}.tar.gz"), parent=True
        )
        if code != 0:
            raise RunFailed(f"packing the bundle on {self.host} failed (exit {code})")

    def attest(self) -> RunFailed | None:
        """attestation.intoto.json beside manifest.json.sig, made as `bench sign` makes it:
        after the signature, over the manifest's files, with the same key. `bench attest`
        runs in a helper container of the run's image, the host's key file mounted there
        read-only (it never leaves the host: provisioning.flow.signing).

        One that cannot be made (an image whose bench predates `bench attest`, a key the
        container cannot read) costs the bundle its attestation, not its signature: one line
        on the terminal, returned, and `bench verify` says "no attestation". A dropped
        connection goes up to seal()'s retry.
        """
        code, tail = self._helper(
            "attest",
            ("bench", "attest", RUN_IN_CONTAINER, "--key", signing.KEY_IN_CONTAINER),
            key=self.where.signing_key,
            quiet=True,
        )
        if code == 0:
            return None
        failed = RunFailed(f"`bench attest` on {self.host} exited with {code}: {tail}")
        print(f"[{self.host}] no {ATTESTATION_NAME}: {failed.message}; the bundle is signed "
              "without it", file=self.out)  # fmt: skip
        log.warning("attestation_not_written", host=self.host, error=failed.one_line())
        return failed

    def _record(self, facts: RunFacts) -> None:
        """server.log, the image's facts and recipe.json into the run directory (rewritten
        whole each time: the report and then the manifest see them)."""
        run_dir = self.where.run_dir
        try:  # files written over SFTP: a drop there is a drop like any other
            if facts.server_log:
                self.shell.write_text(f"{run_dir}/server.log", "\n".join(facts.server_log) + "\n")
            self._record_image(facts)
            self._record_recipe(facts)
        except TRANSIENT as exc:  # an SFTP status error (no such file...) is not a drop
            if isinstance(exc, FileNotFoundError | PermissionError) or not is_transient(exc):
                raise
            raise SshUnreachable(
                f"ssh to {self.host} dropped while writing to the run directory: {exc}"
            ) from None

    def _record_image(self, facts: RunFacts) -> None:
        """The image's id and labels into environment.json, before the manifest hashes it.

        `bench run` inside the container cannot see which image it runs in; the engine can.
        Edited as JSON, not through bench's model: the image's bench may be another version.
        """
        path = f"{self.where.run_dir}/{environment.ENVIRONMENT_NAME}"
        if facts.image_id is None or not self.shell.run(f"test -f {shlex.quote(path)}").ok:
            return
        try:
            doc = json.loads(self.shell.read_text(path))
        except ValueError as exc:
            log.warning("environment_unreadable", host=self.host, error=str(exc))
            return
        if not isinstance(doc, dict):
            return
        found = doc.get("image")
        image_doc: dict[str, object] = found if isinstance(found, dict) else {}
        image_doc["digest"] = facts.image_id
        image_doc["labels"] = self.engine.image_labels(facts.image_id)
        doc["image"] = image_doc
        if facts.weights is not None:
            doc["weights"] = facts.weights
        timings = facts.timings_s
        if "readiness" in timings:
            doc["server_start"] = {
                "ready_after_s": round(timings.get("server start", 0.0) + timings["readiness"], 2),
                "jit_cache_was_empty": facts.jit_cache_was_empty,
            }
        self.shell.write_text(path, json.dumps(doc, indent=2) + "\n")

    def _record_recipe(self, facts: RunFacts) -> None:
        """recipe.json: the commands that re-create this run (provisioning.flow.recipe),
        before the manifest hashes it. Made from results.json as this checkout's bench
        reads it; one it cannot read (another bench's schema) gets no recipe, and `bench
        verify` then says the bundle lacks one."""
        path = f"{self.where.run_dir}/{run_files.RESULTS}"
        try:
            results = Results.model_validate_json(self.shell.read_text(path))
        except ValidationError as exc:
            log.warning("recipe_not_written", host=self.host, error=validation_message(exc))
            return
        except FileNotFoundError as exc:
            log.warning("recipe_not_written", host=self.host, error=str(exc).splitlines()[0])
            return
        made = recipe.recipe_for(
            results,
            self.opts,
            host=self.host,
            image_id=facts.image_id,
            weights=facts.weights,
            command_head=facts.recipe_head,
        )
        target = f"{self.where.run_dir}/{recipe_mod.RECIPE_NAME}"
        self.shell.write_text(target, recipe_mod.dumps(made))

    def _helper(
        self,
        role: str,
        command: tuple[str, ...],
        *,
        parent: bool = False,
        quiet: bool = False,
        key: str | None = None,
    ) -> tuple[int, str]:
        """A short-lived container of the run's image over the run directory (over the
        host's folder of runs when PARENT), with the signing KEY (a file on the host) at
        signing.KEY_IN_CONTAINER, read-only, when given: its exit code and, on failure, its
        log's last line (bounded, printable), the whole tail printed unless QUIET.

        It runs as the SSH user (Workspace.uid_gid), who owns the run directory and the key.
        """
        run_dir = self.where.run_dir
        source = run_dir.rsplit("/", 1)[0] if parent else run_dir
        target = BUNDLES_IN_CONTAINER if parent else RUN_IN_CONTAINER
        mounts = [Mount(source, target)]
        if key is not None:
            mounts.append(Mount(key, signing.KEY_IN_CONTAINER, read_only=True))
        cid = self.engine.start(
            ContainerSpec(
                image=self.image,
                command=command,
                run_id=self.scope,
                role=role,
                environment={"HOME": CONTAINER_HOME},
                mounts=tuple(mounts),
                user=self.where.uid_gid,
            )
        )
        code = self.engine.wait(cid, timeout_s=HELPER_TIMEOUT_S)
        if code == 0:
            return code, ""
        tail = self.engine.log_tail(cid)
        if not quiet:
            print(indent(tail), file=self.out)
        return code, last_line(tail)


def last_line(text: str) -> str:
    """The last non-blank line of a container's log, as one bounded, printable line."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return "no output"
    line = "".join(c if c.isprintable() else "?" for c in lines[-1].strip())
    return line if len(line) <= _REASON_CHARS else line[: _REASON_CHARS - 3] + "..."
