"""A Slurm job's run directory on the cluster's shared filesystem, as the submitter reaches
it: through a Shell (provisioning.hosts.remote), so the same code serves a submitter on the login
node itself (LocalShell) and one on a workstation reaching the login node over SSH (Remote,
files over its SFTP session, bundles copied with provisioning.hosts.transfer).

Paths here are the cluster's (POSIX strings), not this machine's.
"""

from __future__ import annotations

import posixpath
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

from provisioning.hosts import transfer
from provisioning.hosts.remote import TRANSIENT, Remote, TransferFailed
from provisioning.hosts.shell import Shell


@dataclass(frozen=True)
class SharedDir:
    shell: Shell
    path: str  # absolute, as the login node and every compute node see it

    def join(self, *parts: str) -> str:
        return posixpath.join(self.path, *parts)

    def exists(self) -> bool:
        return self.shell.run(f"test -e {shlex.quote(self.path)}").ok

    def make(self, *parts: str) -> None:
        self.shell.run(f"mkdir -p -- {shlex.quote(self.join(*parts))}", check=True)

    def write(self, name: str, text: str) -> str:
        target = self.join(name)
        self.shell.write_text(target, text)
        return target

    def read(self, *parts: str) -> str | None:
        """The file's text; None when it is not there (yet) or cannot be read now."""
        try:
            return self.shell.read_text(self.join(*parts))
        except TRANSIENT:
            return None

    def folders(self, *parts: str) -> list[str]:
        """The names of the folders in PARTS (sorted); none when it is not there."""
        where = shlex.quote(self.join(*parts))
        res = self.shell.run(f"find {where} -mindepth 1 -maxdepth 1 -type d -printf '%f\\n'")
        return sorted(res.stdout.split()) if res.ok else []

    def is_file(self, path: str) -> bool:
        return self.shell.run(f"test -f {shlex.quote(path)}").ok

    def fetch(self, path: str, local: Path) -> None:
        """Copy PATH (a file on the cluster) to LOCAL on this machine."""
        local.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(self.shell, Remote):
            transfer.get(self.shell, path, local)
            return
        try:
            shutil.copyfile(path, local)
        except OSError as exc:
            raise TransferFailed(f"copying {path} to {local} failed: {exc}") from None
