"""Copying files to and from a GPU host over SFTP, resumed after dropped connections.

A copy that loses its connection (sshd restarted, a killed session, a NAT timeout) reopens
it with backoff and continues from the bytes already written; at the end both ends are
compared by sha256, so a resumed copy is never accepted on size alone.

A copy in progress writes NAME.part and renames it to NAME only once the checksums
agree: a NAME on disk is always a whole copy. A copy stopped on purpose (Ctrl-C during
the pull-back) raises TransferStopped and leaves NAME.part, the incomplete copy, as is.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from pathlib import Path

from provisioning.hosts.remote import (
    TRANSIENT,
    Remote,
    TransferFailed,
    TransferProgress,
    is_transient,
)
from provisioning.retry import retry_call

CHUNK_BYTES = 1 << 20
# How long a stopped copy waits for paramiko to finish sending its read requests (a 384 MiB
# bundle is 12,288 of them; sent without waiting for replies) before the connection closes.
READ_AHEAD_WAIT_S = 10.0


class TransferStopped(TransferFailed):
    """The copy was stopped on purpose; `part` holds the bytes copied so far."""

    def __init__(self, remote_path: str, local_path: Path, done: int, size: int) -> None:
        self.remote_path, self.local_path, self.done, self.size = (
            remote_path, local_path, done, size,
        )  # fmt: skip
        self.part = _part(local_path)
        super().__init__(
            f"the copy of {remote_path} was stopped at {done} of {size} bytes; "
            f"{self.part} is incomplete"
        )


def _part(local_path: Path) -> Path:
    return local_path.with_name(local_path.name + ".part")


def get(
    remote: Remote,
    remote_path: str,
    local_path: Path,
    progress: TransferProgress | None = None,
    *,
    stop: threading.Event | None = None,
) -> int:
    """Copy a file from the host; returns its size. Setting `stop` ends it (TransferStopped)."""
    part = _part(local_path)
    local_path.parent.mkdir(parents=True, exist_ok=True)
    part.unlink(missing_ok=True)

    def give_up(exc: Exception, attempts: int) -> TransferFailed | None:
        if isinstance(exc, FileNotFoundError):
            return TransferFailed(f"{remote.host.name}:{remote_path} does not exist")
        if not isinstance(exc, TRANSIENT):
            return None
        return TransferFailed(
            f"copying {remote.host.name}:{remote_path} failed after "
            f"{attempts} attempts: {exc or type(exc).__name__}"
        )

    size = retry_call(
        lambda _: _get_once(remote, remote_path, local_path, progress, stop),
        remote.retry,
        transient=lambda exc: is_transient(exc) and not isinstance(exc, FileNotFoundError),
        event="transfer_resumed",
        give_up=give_up,
        between=lambda _: remote.reconnect(),
        log_fields=lambda: {
            "host": remote.host.name,
            "path": remote_path,
            "bytes_done": part.stat().st_size if part.exists() else 0,
        },
        level=logging.WARNING,
        sleep=remote.sleep,
    )
    _check_same(remote, part, remote_path)
    part.replace(local_path)
    return size


def _get_once(
    remote: Remote,
    remote_path: str,
    local_path: Path,
    progress: TransferProgress | None,
    stop: threading.Event | None,
) -> int:
    """One try of `get`: from the bytes already in LOCAL_PATH.part on; the file's size."""
    part = _part(local_path)
    sftp = remote.sftp()
    size = int(sftp.stat(remote_path).st_size or 0)
    done = part.stat().st_size if part.exists() else 0
    if done > size:
        part.unlink()
        done = 0
    src = sftp.open(remote_path, "rb")
    stopped = False
    ahead: list[threading.Thread] = []
    try:
        with part.open("ab") as dst:
            src.seek(done)
            before = set(_read_ahead_threads())
            src.prefetch(size)
            ahead = [t for t in _read_ahead_threads() if t not in before]
            while done < size:
                if stop is not None and stop.is_set():
                    stopped = True
                    raise TransferStopped(remote_path, local_path, done, size)
                chunk = src.read(min(CHUNK_BYTES, size - done))
                if not chunk:
                    raise EOFError(f"{remote_path} ended at {done} of {size} bytes")
                dst.write(chunk)
                done += len(chunk)
                if progress is not None:
                    progress(done, size)
    finally:
        # Closing a file waits for every read-ahead reply, i.e. the rest of the file:
        # a stopped copy leaves it open; closing the connection (the caller) ends it. But
        # not under paramiko's thread that is still sending the file's read requests: it
        # would end in a traceback on the terminal (a Ctrl-C during the pull-back under
        # stress-ng, 7 December). It sends them without waiting for replies; a bounded wait.
        if not stopped:
            src.close()
        for thread in ahead:
            thread.join(timeout=READ_AHEAD_WAIT_S)
    return size


def _read_ahead_threads() -> list[threading.Thread]:
    """paramiko's read-ahead threads (SFTPFile._prefetch_thread, named after it)."""
    return [t for t in threading.enumerate() if t.name.endswith("(_prefetch_thread)")]


def put(
    remote: Remote, local_path: Path, remote_path: str, progress: TransferProgress | None = None
) -> int:
    """Copy a file to the host; returns its size."""
    size = local_path.stat().st_size

    def give_up(exc: Exception, attempts: int) -> TransferFailed | None:
        if not isinstance(exc, TRANSIENT):
            return None
        return TransferFailed(
            f"copying {local_path} to {remote.host.name}:{remote_path} failed: {exc}"
        )

    retry_call(
        lambda attempt: _put_once(remote, local_path, remote_path, progress, fresh=attempt == 0),
        remote.retry,
        transient=lambda exc: isinstance(exc, TRANSIENT) and not isinstance(exc, PermissionError),
        event="transfer_resumed",
        give_up=give_up,
        between=lambda _: remote.reconnect(),
        log_fields=lambda: {"host": remote.host.name, "path": remote_path},
        level=logging.WARNING,
        sleep=remote.sleep,
    )
    _check_same(remote, local_path, remote_path)
    return size


def _put_once(
    remote: Remote,
    local_path: Path,
    remote_path: str,
    progress: TransferProgress | None,
    *,
    fresh: bool,
) -> None:
    """One try of `put`: from the bytes already on the host to the end (FRESH: from 0)."""
    size = local_path.stat().st_size
    sftp = remote.sftp()
    try:
        done = int(sftp.stat(remote_path).st_size or 0)
    except FileNotFoundError:
        done = 0
    if done > size or fresh:
        done = 0  # a first attempt never appends to an old file of that name
    with (
        local_path.open("rb") as src,
        sftp.open(remote_path, "ab" if done else "wb") as dst,
    ):
        src.seek(done)
        dst.set_pipelined(True)
        while chunk := src.read(CHUNK_BYTES):
            dst.write(chunk)
            done += len(chunk)
            if progress is not None:
                progress(done, size)


def _check_same(remote: Remote, local_path: Path, remote_path: str) -> None:
    digest = hashlib.sha256()
    with local_path.open("rb") as fh:
        while block := fh.read(CHUNK_BYTES):
            digest.update(block)
    if digest.hexdigest() != remote.remote_sha256(remote_path):
        local_path.unlink(missing_ok=True)
        raise TransferFailed(
            f"{remote.host.name}:{remote_path} differs after copying (sha256 mismatch)",
            hint="run again; the copy starts over",
        )
