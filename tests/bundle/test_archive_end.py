"""Issue 49: what follows a bundle's last member. One gzip member, one tar, its end-of-archive
marker and zero padding, nothing else: any other byte is refused in one line naming what it
found and its offset (in the file or in the tar), and nothing stays extracted. No process:
the bundles here are packed from a directory that looks signed (the signed ones, and the
readers that go through bench.verdict, bench.history and the pull-back, are in
test_archive_end_signed.py)."""

from __future__ import annotations

import gzip
import io
import tarfile
import tracemalloc
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.bundle.pack import open_bundle, pack
from bench.errors import VerifyFailed
from tests.bundle import forgeries as f
from tests.support.budget import fixed_budget

NAME = "run-1.tar.gz"
BLOCK = f.BLOCK_BYTES


def _signed_like(tmp_path: Path) -> Path:
    return f.signed_like(tmp_path, '{"ttft_s": 0.25}\n' * 300)


@pytest.fixture
def genuine(tmp_path: Path) -> bytes:
    return pack(_signed_like(tmp_path), tmp_path / NAME).read_bytes()


def _refused(tmp_path: Path, data: bytes) -> str:
    """open_bundle's one line for `data` (as NAME), after checking it left nothing."""
    where = tmp_path / "altered"
    where.mkdir(exist_ok=True)
    archive = where / NAME
    archive.write_bytes(data)
    target = tmp_path / "target"
    with pytest.raises(VerifyFailed) as info:
        open_bundle(archive, target)
    assert list(target.iterdir()) == []
    line = info.value.one_line()
    assert "\n" not in line
    return line


def test_pack_writes_one_gzip_member_of_one_tar_each_member_once_then_the_end_marker(
    genuine: bytes,
) -> None:
    inflate = zlib.decompressobj(wbits=31)
    tar = inflate.decompress(genuine)
    assert inflate.eof and inflate.unused_data == b"" and inflate.unconsumed_tail == b""
    # The tar's headers read by hand (ustar: name at 0, size in octal at 124, type at 156),
    # not by tarfile, which stops quietly where this must see everything.
    names: list[str] = []
    at = 0
    while tar[at : at + BLOCK] != bytes(BLOCK):
        header = tar[at : at + BLOCK]
        size = int(header[124:136].strip(b"\x00 ") or b"0", 8)
        assert header[156:157] in (b"0", b"\x00")  # plain files only: no PAX or GNU headers
        names.append(header[:100].rstrip(b"\x00").decode())
        at += BLOCK + -(-size // BLOCK) * BLOCK
    assert sorted(names) == [
        "run-1/manifest.json", "run-1/manifest.json.sig", "run-1/results.json",
        "run-1/samples/requests.jsonl",
    ]  # fmt: skip
    assert len(set(names)) == len(names)
    assert len(tar) - at >= 2 * BLOCK and tar[at:] == bytes(len(tar) - at)
    assert len(tar) % (20 * BLOCK) == 0  # padded to whole 10240-byte records, as GNU tar does


Case = Callable[[bytes], tuple[bytes, str]]


def _second_gzip_member(g: bytes) -> tuple[bytes, str]:
    data = f.second_gzip_member(g, "run-1")
    return data, (
        f"{NAME}: refused, a second gzip member at byte {len(g)} of the file "
        f"({len(data) - len(g)} bytes after the first one's trailer)"
    )


def _lone_zero_block(g: bytes) -> tuple[bytes, str]:
    end = f.end_of_members(f.unpacked(g))
    return f.lone_zero_block(g, "run-1"), (
        f"{NAME}: refused, a lone zero block at byte {end} of the tar, followed by data at "
        f"byte {end + BLOCK} (readers that skip zero blocks would read more members than were "
        "checked)"
    )


def _duplicate_member(g: bytes) -> tuple[bytes, str]:
    end = f.end_of_members(f.unpacked(g))
    return f.duplicate_member(g, "run-1"), (
        f"run-1/results.json: refused, the archive holds it twice (the second copy at byte "
        f"{end} of the tar)"
    )


def _bytes_after_gzip(g: bytes) -> tuple[bytes, str]:
    extra = b"appended, not gzip\n"
    return f.bytes_after_gzip(g, extra), (
        f"{NAME}: refused, {len(extra)} bytes after the gzip stream's end at byte {len(g)} "
        "of the file"
    )


def _zero_bytes_after_gzip(g: bytes) -> tuple[bytes, str]:
    return f.bytes_after_gzip(g, bytes(BLOCK)), (
        f"{NAME}: refused, {BLOCK} bytes after the gzip stream's end at byte {len(g)} of the file"
    )


def _garbage_after_members(g: bytes) -> tuple[bytes, str]:
    end = f.end_of_members(f.unpacked(g))
    return f.garbage_after_members(g), (
        f"{NAME}: refused, data after the last member at byte {end} of the tar where the "
        "end-of-archive marker belongs"
    )


def _data_after_the_marker(g: bytes) -> tuple[bytes, str]:
    tar = f.unpacked(g)
    return f.inside_after_marker(g, b"more" + bytes(96)), (
        f"{NAME}: refused, 100 bytes of data after the end-of-archive marker, at byte "
        f"{len(tar)} of the tar"
    )


def _no_marker(g: bytes) -> tuple[bytes, str]:
    end = f.end_of_members(f.unpacked(g))
    return f.without_marker(g, BLOCK), (
        f"{NAME}: refused, the tar has no end-of-archive marker (two zero blocks) after its "
        f"last member at byte {end}: truncated?"
    )


def _truncated_half(g: bytes) -> tuple[bytes, str]:
    keep = len(g) // 2
    return f.truncated(g, keep), (
        f"{NAME}: refused, the compressed data ends before the gzip trailer, at byte {keep} "
        "of the file: truncated?"
    )


def _truncated_in_the_trailer(g: bytes) -> tuple[bytes, str]:
    keep = len(g) - 3  # the last bytes of ISIZE
    return f.truncated(g, keep), (
        f"{NAME}: refused, the compressed data ends before the gzip trailer, at byte {keep} "
        "of the file: truncated?"
    )


@pytest.mark.parametrize(
    "case",
    [
        _second_gzip_member,
        _lone_zero_block,
        _duplicate_member,
        _bytes_after_gzip,
        _zero_bytes_after_gzip,
        _garbage_after_members,
        _data_after_the_marker,
        _no_marker,
        _truncated_half,
        _truncated_in_the_trailer,
    ],
    ids=lambda c: c.__name__.strip("_"),
)
def test_an_archive_altered_after_its_end_is_refused_in_one_line_naming_where(
    tmp_path: Path, genuine: bytes, case: Case
) -> None:
    data, expected = case(genuine)
    assert _refused(tmp_path, data) == expected


def test_the_forged_results_are_what_a_reader_that_goes_on_would_extract(genuine: bytes) -> None:
    """The altered bundles above carry a forgery, not just noise: read the way gzip -d and
    `tar -i` read, the second results.json replaces the signed one."""
    for data in (f.second_gzip_member(genuine, "run-1"), f.lone_zero_block(genuine, "run-1")):
        with tarfile.open(fileobj=io.BytesIO(gzip.decompress(data)), ignore_zeros=True) as t:
            got = t.extractfile("run-1/results.json")
            assert got is not None and got.read() == f.FORGED_RESULTS


def test_a_flipped_crc_is_not_a_readable_gzip(tmp_path: Path, genuine: bytes) -> None:
    data = bytearray(genuine)
    data[-8] ^= 0xFF  # the first byte of the CRC32
    line = _refused(tmp_path, bytes(data))
    assert line.startswith(f"{NAME}: not a readable .tar.gz (")
    assert "incorrect data check" in line


@pytest.mark.parametrize("zero_bytes", [2 * BLOCK, 2 * BLOCK + 1, 20 * BLOCK, 64 << 20])
def test_zero_padding_of_any_length_after_the_marker_opens_in_bounded_memory(
    tmp_path: Path, genuine: bytes, zero_bytes: int
) -> None:
    """Two zero blocks at least after the last member: GNU tar pads to 10240-byte records,
    a tape or a block device may pad more. 64 MiB of zeros are read through, not held."""
    archive = tmp_path / "padded" / NAME
    archive.parent.mkdir()
    archive.write_bytes(f.without_marker(genuine, zero_bytes))
    tracemalloc.start()
    try:
        root = open_bundle(archive, tmp_path / "target")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (root / "results.json").read_text() == '{"a": 1}\n'
    assert peak < 8 << 20


def test_data_after_64_mib_of_zero_padding_is_found(tmp_path: Path, genuine: bytes) -> None:
    tar_bytes = len(f.unpacked(genuine))
    data = f.inside_after_marker(genuine, bytes(64 << 20) + b"x")
    assert _refused(tmp_path, data) == (
        f"{NAME}: refused, 1 bytes of data after the end-of-archive marker, at byte "
        f"{tar_bytes + (64 << 20)} of the tar"
    )


def test_a_directory_that_carries_data_is_refused(tmp_path: Path) -> None:
    # tarfile reads the next header right after a directory's; a reader that skips its
    # declared size would read other members.
    archive = tmp_path / "dir.tar.gz"
    with tarfile.open(archive, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("run/samples")
        info.type, info.size = tarfile.DIRTYPE, BLOCK
        tar.addfile(info, io.BytesIO(bytes(BLOCK)))
    with pytest.raises(
        VerifyFailed, match=r"^run/samples: refused, the member is a directory that"
    ):
        open_bundle(archive, tmp_path / "target")
    assert list((tmp_path / "target").iterdir()) == []


# -- any bytes after the end -------------------------------------------------------------

BUDGET = fixed_budget(100)


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return pack(
        _signed_like(tmp_path_factory.mktemp("genuine")),
        tmp_path_factory.mktemp("archive") / NAME,
    ).read_bytes()


def _opens(tmp_path_factory: pytest.TempPathFactory, data: bytes) -> bool:
    """True when open_bundle takes `data`, False when it refuses it (VerifyFailed, one
    line, nothing left); any other exception fails the test."""
    base = tmp_path_factory.mktemp("any")
    archive = base / NAME
    archive.write_bytes(data)
    target = base / "target"
    try:
        open_bundle(archive, target)
    except VerifyFailed as exc:
        assert "\n" not in exc.one_line()  # noqa: PT017
        assert list(target.iterdir()) == []
        return False
    return True


@BUDGET
@given(extra=st.binary(min_size=1, max_size=3000))
def test_any_bytes_after_the_gzip_member_are_refused(
    tmp_path_factory: pytest.TempPathFactory, packed: bytes, extra: bytes
) -> None:
    assert not _opens(tmp_path_factory, packed + extra)


@BUDGET
@given(extra=st.one_of(st.binary(min_size=1, max_size=3000), st.integers(1, 30_000).map(bytes)))
def test_bytes_after_the_tar_inside_the_gzip_member_are_refused_unless_all_zero(
    tmp_path_factory: pytest.TempPathFactory, packed: bytes, extra: bytes
) -> None:
    assert _opens(tmp_path_factory, f.inside_after_marker(packed, extra)) == (not any(extra))
