"""Packing a bundle directory as one .tar.gz, and opening one without trusting it.

Opening never calls tarfile's extract: each member is checked first (a plain relative
path, a regular file or directory, bounded size and count, no duplicate) and written by
us with O_EXCL|O_NOFOLLOW under a fresh target, so an archive cannot write outside it,
plant a link, or fill the disk. What follows the last member, in the tar and in the file,
must be the end-of-archive marker and nothing else (bench.bundle.archive_stream). On any
refusal everything written so far is removed.
"""

from __future__ import annotations

import errno
import gzip
import os
import shutil
import tarfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any, cast

from bench import writes
from bench.bundle import archive_stream
from bench.bundle.manifest import MANIFEST_NAME, NOT_LISTED, bundle_files
from bench.errors import DiskError, UsageError, VerifyFailed

_CHUNK_BYTES = 1 << 20
_GIB = 1 << 30


@dataclass(frozen=True)
class OpenLimits:
    """What an archive may hold before it is refused, each checked before it is read."""

    max_members: int = 10_000
    max_member_bytes: int = 2 * _GIB  # one file's contents
    max_total_bytes: int = 8 * _GIB  # all of them
    # One PAX extended header or GNU long name/link: tarfile reads it whole into memory
    # before the member it describes can be checked (a 1 GiB one took 3.2 GB of RAM).
    max_header_bytes: int = 1 << 20


_HEADER_TYPES = (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK, tarfile.XHDTYPE,
                 tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE)  # fmt: skip


def _bounded_tarinfo(limit: int, archive: Path) -> type[tarfile.TarInfo]:
    """A TarInfo whose extended headers are refused by their declared size, before tarfile
    reads them."""

    class BoundedTarInfo(tarfile.TarInfo):
        def _proc_member(self, tar: tarfile.TarFile) -> tarfile.TarInfo:
            if self.type in _HEADER_TYPES and self.size > limit:
                raise VerifyFailed(
                    f"{archive.name}: refused, an extended tar header of {self.size} bytes is "
                    f"over the {limit}-byte limit (max_header_bytes)"
                )
            parent: Any = super()  # _proc_member is not in typeshed's stub
            member: tarfile.TarInfo = parent._proc_member(tar)
            return member

    return BoundedTarInfo


def pack(root: Path, out: Path) -> Path:
    """Write root as out (.tar.gz) under one top-level directory named like root.

    Owners, modes and the gzip timestamp are normalised so that the archive says nothing
    about the machine beyond what the bundle's files say.
    """
    root = root.resolve()
    out = out.resolve()
    if not (root / MANIFEST_NAME).is_file():
        raise UsageError(f"{root}: has no {MANIFEST_NAME}", hint=f"run `bench sign {root}` first")
    if out.is_relative_to(root):
        raise UsageError(f"{out}: the archive cannot be written inside the bundle it packs")
    names = [n for n in sorted(NOT_LISTED) if (root / n).is_file()] + bundle_files(root)
    with (
        writes.atomic_path(out) as partial,  # unique, gone on failure (issue 29, H9/L6)
        partial.open("wb") as raw,
        gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for rel in names:
            path = root / PurePosixPath(rel)
            info = tarfile.TarInfo(f"{root.name}/{rel}")
            info.size = path.stat().st_size
            info.mtime = int(path.stat().st_mtime)
            info.mode = 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            with path.open("rb") as fh:
                tar.addfile(info, fh)
    return out


def _refuse_reason(member: tarfile.TarInfo) -> str | None:
    name = member.name
    if not name or "\x00" in name or "\\" in name:
        return "has an unusable name"
    if name.startswith("/") or PurePosixPath(name).is_absolute():
        return "has an absolute path"
    if ".." in PurePosixPath(name).parts:
        return "has '..' in its path"
    return next((why for refused, why in _REFUSED_KINDS if refused(member)), None)


# What a member may not be, in the order it is checked: only regular files and directories.
_REFUSED_KINDS: tuple[tuple[Callable[[tarfile.TarInfo], bool], str], ...] = (
    (tarfile.TarInfo.issym, "is a symbolic link"),
    (tarfile.TarInfo.islnk, "is a hard link"),
    (lambda m: m.ischr() or m.isblk(), "is a device file"),
    (tarfile.TarInfo.isfifo, "is a FIFO"),
    (tarfile.TarInfo.issparse, "is a sparse file"),
    # tarfile steps over no data after a directory's header, other readers may: refused.
    (lambda m: m.isdir() and m.size > 0, "is a directory that carries data"),
    (lambda m: not (m.isreg() or m.isdir()), "is not a regular file or directory"),
)


def _write_member(tar: tarfile.TarFile, member: tarfile.TarInfo, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    source = tar.extractfile(member)
    if source is None:
        raise VerifyFailed(f"{member.name}: has no content")
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    remaining = member.size
    with os.fdopen(fd, "wb") as fh:
        while remaining > 0:
            chunk = source.read(min(_CHUNK_BYTES, remaining))
            if not chunk:
                raise VerifyFailed(f"{member.name}: archive ends inside this member")
            fh.write(chunk)
            remaining -= len(chunk)


def _extract(archive: Path, target: Path, limits: OpenLimits) -> None:
    # Room for the members' own headers on top of their contents.
    stream_limit = limits.max_total_bytes + (limits.max_members + 2) * (
        8 * 1024 + limits.max_header_bytes
    )
    seen: set[str] = set()
    total_bytes = 0
    end_of_members = 0  # in the tar: where its end-of-archive marker must start
    headers = _bounded_tarinfo(limits.max_header_bytes, archive)
    with archive.open("rb") as raw:
        stream = archive_stream.OneGzipMember(raw, archive.name, stream_limit)
        with tarfile.open(None, "r|", fileobj=cast(IO[bytes], stream), tarinfo=headers) as tar:
            # tarfile stops at a zero block or an unreadable header without a word, so
            # whatever follows the last member it gave is checked after the loop.
            for count, member in enumerate(tar, start=1):
                if count > limits.max_members:
                    raise VerifyFailed(f"{archive.name}: more than {limits.max_members} members")
                total_bytes = _take(tar, member, target, seen, limits, total_bytes=total_bytes)
                end_of_members = archive_stream.member_end(member)
            archive_stream.check_end(stream, end_of_members)


def _take(
    tar: tarfile.TarFile,
    member: tarfile.TarInfo,
    target: Path,
    seen: set[str],
    limits: OpenLimits,
    *,
    total_bytes: int,
) -> int:
    """Check one member and write it under target: the total of contents written so far."""
    name = member.name.rstrip("/")
    reason = _refuse_reason(member)
    if reason is not None:
        raise VerifyFailed(f"{name or '(empty name)'}: refused, the member {reason}")
    if name in seen:
        raise VerifyFailed(
            f"{name}: refused, the archive holds it twice (the second copy at byte "
            f"{member.offset} of the tar)"
        )
    seen.add(name)
    dest = target.joinpath(*PurePosixPath(name).parts)
    if not dest.resolve().is_relative_to(target):
        raise VerifyFailed(f"{name}: refused, it would land outside the target")
    if member.isdir():
        _make_dir(dest, name)
        return total_bytes
    if member.size > limits.max_member_bytes:
        raise VerifyFailed(
            f"{name}: refused, {member.size} bytes is over the "
            f"{limits.max_member_bytes}-byte limit per file"
        )
    total_bytes += member.size
    if total_bytes > limits.max_total_bytes:
        raise VerifyFailed(
            f"{name}: refused, the archive unpacks to over {limits.max_total_bytes} bytes"
        )
    try:
        _write_member(tar, member, dest)
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise DiskError(f"{name}: no space left to unpack it") from None
        raise VerifyFailed(f"{name}: refused, cannot be written ({exc.strerror})") from None
    return total_bytes


def _make_dir(dest: Path, name: str) -> None:
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise VerifyFailed(f"{name}: refused, cannot be made ({exc.strerror})") from None


def open_bundle(archive: Path, target: Path, limits: OpenLimits | None = None) -> Path:
    """Unpack archive into target (new or empty) and return the bundle root inside it."""
    limits = limits or OpenLimits()
    if not archive.is_file():
        raise UsageError(f"{archive}: no such bundle")
    if target.exists() and any(target.iterdir()):
        raise UsageError(f"{target}: not empty; bundles open into a new directory")
    target.mkdir(parents=True, exist_ok=True)
    target = target.resolve()
    try:
        _extract(archive, target, limits)
    except (tarfile.TarError, EOFError, zlib.error) as exc:
        _clear(target)
        raise VerifyFailed(f"{archive.name}: not a readable .tar.gz ({exc})") from None
    except (VerifyFailed, DiskError):
        _clear(target)
        raise
    try:
        return _bundle_root(archive, target)
    except VerifyFailed:  # no manifest: refused, and like every refusal it leaves nothing
        _clear(target)
        raise


def _clear(target: Path) -> None:
    for child in target.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


def _bundle_root(archive: Path, target: Path) -> Path:
    if (target / MANIFEST_NAME).is_file():
        return target
    tops = list(target.iterdir())
    if len(tops) == 1 and (tops[0] / MANIFEST_NAME).is_file():
        return tops[0]
    raise VerifyFailed(
        f"{MANIFEST_NAME}: missing from {archive.name}",
        hint="a bundle holds manifest.json at its top or under one directory",
    )
