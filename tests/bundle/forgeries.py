"""Bundles altered after their end (issue 49), made from a genuine archive's bytes: each
keeps every signed byte a stopping reader sees, and adds what another reader would read.
`Signed` is a genuinely signed bundle to alter (it runs ssh-keygen: subprocess tests only)."""

from __future__ import annotations

import gzip
import io
import tarfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from bench.bundle import seal
from bench.bundle.pack import pack
from tests.bundle.conftest import Keys
from tests.support.runs import write_run_dir

FORGED_RESULTS = b'{"forged": true}\n'
BLOCK_BYTES = 512


def signed_like(tmp_path: Path, samples: str = "{}\n" * 100) -> Path:
    """A run folder shaped like a signed one (manifest, signature, results, samples), its
    contents placeholders: what pack and open_bundle see, no signature checked."""
    root = tmp_path / "run-1"
    (root / "samples").mkdir(parents=True)
    (root / "manifest.json").write_text("{}\n")
    (root / "manifest.json.sig").write_text("sig\n")
    (root / "results.json").write_text('{"a": 1}\n')
    (root / "samples" / "requests.jsonl").write_text(samples)
    return root


def tar_of(*members: tuple[str, bytes]) -> bytes:
    """A whole tar (end-of-archive marker and record padding included) of these files."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def unpacked(archive: bytes) -> bytes:
    """The tar inside a genuine one-member .tar.gz."""
    return gzip.decompress(archive)


def end_of_members(tar: bytes) -> int:
    """The offset in the tar just past its last member's data blocks."""
    with tarfile.open(fileobj=io.BytesIO(tar), mode="r:") as t:
        last = t.getmembers()[-1]
    return last.offset_data + -(-last.size // BLOCK_BYTES) * BLOCK_BYTES


def _forged_results(top: str) -> bytes:
    return tar_of((f"{top}/results.json", FORGED_RESULTS))


def _regzip(tar: bytes) -> bytes:
    return gzip.compress(tar, mtime=0)


def second_gzip_member(archive: bytes, top: str) -> bytes:
    """(a) the archive, then a second gzip member holding a tar with another results.json:
    `tar -xzf` extracts the signed file, `tar -xzif` the forged one over it."""
    return archive + _regzip(_forged_results(top))


def lone_zero_block(archive: bytes, top: str) -> bytes:
    """(b) the signed members, one zero block, then a forged results.json: GNU tar warns
    "A lone zero block" and stops; readers that skip zero blocks go on."""
    tar = unpacked(archive)
    end = end_of_members(tar)
    return _regzip(tar[:end] + bytes(BLOCK_BYTES) + _forged_results(top))


def duplicate_member(archive: bytes, top: str) -> bytes:
    """(c) a second results.json right after the signed members, in the same tar."""
    tar = unpacked(archive)
    return _regzip(tar[: end_of_members(tar)] + _forged_results(top))


def bytes_after_gzip(archive: bytes, extra: bytes = b"appended, not gzip\n") -> bytes:
    """(d) anything but a gzip member after the archive's gzip trailer."""
    return archive + extra


def garbage_after_members(archive: bytes, garbage: bytes = b"x" * 100) -> bytes:
    """(e) bytes where the end-of-archive marker belongs (tarfile stops there silently)."""
    tar = unpacked(archive)
    end = end_of_members(tar)
    return _regzip(tar[:end] + garbage + bytes(2 * BLOCK_BYTES))


def inside_after_marker(archive: bytes, extra: bytes) -> bytes:
    """The whole tar (marker and padding) with `extra` after it, in one gzip member."""
    return _regzip(unpacked(archive) + extra)


def without_marker(archive: bytes, zero_bytes: int = 0) -> bytes:
    """The members and only `zero_bytes` of zeros after them: no whole end-of-archive marker."""
    tar = unpacked(archive)
    return _regzip(tar[: end_of_members(tar)] + bytes(zero_bytes))


def truncated(archive: bytes, keep_bytes: int) -> bytes:
    """(f) the archive's first keep_bytes bytes."""
    return archive[:keep_bytes]


Forge = Callable[[bytes, str], bytes]
# Each forgery of a signed bundle, and the words of its refusal.
FORGERIES: dict[str, tuple[Forge, str]] = {
    "second-gzip-member": (second_gzip_member, "a second gzip member at byte "),
    "lone-zero-block": (lone_zero_block, "a lone zero block at byte "),
    "duplicate-member": (duplicate_member, "the archive holds it twice"),
}
RUN_ID = "run-20261202T1130Z-abc"


class Signed:
    """One run directory signed with a throwaway key and packed as RUN_ID.tar.gz."""

    def __init__(self, base: Path) -> None:
        self.keys = Keys(base, "alice@example.org")
        self.run_dir = write_run_dir(base / "src" / RUN_ID)
        seal.seal(self.run_dir, self.keys.private, now=datetime(2026, 12, 2, 11, 45, tzinfo=UTC))
        (base / "packed").mkdir()
        self.archive = pack(self.run_dir, base / "packed" / f"{RUN_ID}.tar.gz")

    def forged(self, kind: str, where: Path) -> Path:
        """The bundle altered as FORGERIES[kind] says, under its own name in `where`."""
        forge, _ = FORGERIES[kind]
        where.mkdir(parents=True, exist_ok=True)
        out = where / self.archive.name
        out.write_bytes(forge(self.archive.read_bytes(), RUN_ID))
        return out
