"""Pulling a signed bundle back from a host over SSH, and opening and verifying it here.

The archive is copied to RESULTS/HOST/RUN_ID.tar.gz (provisioning.hosts.transfer: resumable,
checked), then opened beside it as RESULTS/HOST/RUN_ID/, refused when it holds the API key,
and verified against the allowed-signers file, then recorded in the history when one is
configured (bench.history.recording: a database that is down is one line, never a failed
run). A Ctrl-C during the copy stops the copy itself; the user is told where the partial
copy is and how to finish it by hand.
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

from bench.bundle.pack import open_bundle
from bench.bundle.seal import find_secret
from bench.bundle.verify import verify_bundle
from bench.errors import Interrupted, RunFailed
from bench.history import recording
from provisioning.flow.options import HostOutcome, Options
from provisioning.flow.seams import Steps
from provisioning.hosts import transfer
from provisioning.hosts.remote import Remote


class PullBack:
    """The bundle of one host's run, from the host to this machine."""

    def __init__(self, remote: Remote, opts: Options) -> None:
        self.remote, self.opts = remote, opts
        # Set by a Ctrl-C that arrives while the bundle is being pulled back (only then).
        self._stop: threading.Event | None = None
        self._stopped: transfer.TransferStopped | None = None

    def deliver(self, archive: str, outcome: HostOutcome, steps: Steps) -> None:
        host, opts = self.remote.host.name, self.opts
        local_archive = opts.results_dir / host / f"{opts.run_id}.tar.gz"
        self._stop = threading.Event()  # before the step is announced: no Ctrl-C missed
        with steps("pull back"):
            try:
                transfer.get(self.remote, archive, local_archive, stop=self._stop)
            except transfer.TransferStopped as stopped:
                self._stopped = stopped
                raise
            finally:
                self._stop = None
            outcome.archive = local_archive
        with steps("verify"):
            secrets = list(opts.secrets.masks().values)
            root = local_archive.with_name(opts.run_id)
            try:
                outcome.complete = open_and_verify(
                    local_archive, opts.run_id, opts.allowed_signers, secrets
                )
            finally:  # opened (even if it then fails to verify): the folder is there to look at
                outcome.local_dir = root if root.is_dir() else None
        recording.record(opts.history, local_archive, opts.allowed_signers)

    def stop(self) -> None:
        pulling = self._stop
        if pulling is not None:  # Ctrl-C during the pull-back stops the copy itself
            pulling.set()

    def stopped(self) -> Interrupted | None:
        stopped, name = self._stopped, self.remote.host.name
        if stopped is None:
            return None
        return Interrupted(
            f"interrupted on {name} while pulling back the bundle: {stopped.part} holds "
            f"{stopped.done} of {stopped.size} bytes (an incomplete copy); the signed bundle "
            f"stays on the host",
            hint=f"copy it with: scp {name}:{stopped.remote_path} {stopped.local_path}; "
            f"then: bench verify {stopped.local_path} "
            f"--allowed-signers {self.opts.allowed_signers}",
        )


def open_and_verify(
    local_archive: Path, run_id: str, allowed_signers: Path, secrets: list[str]
) -> bool:
    """Open the bundle beside its archive (as RUN_ID/), refuse one holding a secret, verify
    its signature and hashes; True when the run is complete (no INCOMPLETE marker)."""
    local_root = local_archive.with_name(run_id)
    # open_bundle wants an empty folder and puts the bundle's own top folder in it
    staging = local_root.with_name(f".opening-{run_id}")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        inner = open_bundle(local_archive, staging)
        shutil.rmtree(local_root, ignore_errors=True)
        inner.replace(local_root)
    finally:  # a refused bundle leaves not even its empty folder
        shutil.rmtree(staging, ignore_errors=True)
    leaked = find_secret(local_root, secrets)
    if leaked:
        raise RunFailed(
            f"{leaked} in the bundle contains the API key or the HF token (in some form); "
            "not accepted"
        )
    verify_bundle(local_archive, allowed_signers)
    return not (local_root / "INCOMPLETE").is_file()
