"""The bytes of a bundle archive around its tar members: exactly one gzip member, one tar
in it, the tar's end-of-archive marker, and nothing after it but zeros (issue 49).

A signature promises that the bytes people read are the bytes that were signed. Readers
disagree about what comes after the end: gzip -d (and so `tar -xz`) decompresses every
concatenated gzip member, zlib only the first; `tar -xzf` stops at the first zero block,
`tar -xzif` reads past zero blocks into whatever follows; Python's tarfile stops without a
word at a zero block or at a header it cannot read. An archive on which they disagree can
show one reader the signed files and another a forged one, so opening refuses it.

This module owns reading the archive's file: decompressing its one gzip member in bounded
chunks (zlib checks the gzip header, CRC32 and size), and, once tarfile has stopped, checking
what follows the last member, in the tar and in the file. Each refusal is one VerifyFailed
line naming what was found and its byte offset, saying whether it is in the file or the tar.
"""

from __future__ import annotations

import io
import tarfile
import zlib
from collections.abc import Iterator
from typing import BinaryIO

from bench.errors import VerifyFailed

_COMPRESSED_CHUNK_BYTES = 64 * 1024
# Decompressed bytes made at once: tarfile asks for 10 KiB at a time, and inflating a few
# bytes per call would copy zlib's unconsumed input again on every call.
_INFLATE_CHUNK_BYTES = 256 * 1024
# What is kept of the decompressed bytes already made, so that the bytes after the last member
# can be read again once tarfile has stopped: tarfile reads at most 10 KiB (its bufsize) past
# what it used, and up to one inflate chunk is made ahead of that, far under this.
_TAIL_KEEP_BYTES = 2 << 20
_BLOCK_BYTES = tarfile.BLOCKSIZE
_END_MARKER_BYTES = 2 * tarfile.BLOCKSIZE  # two zero blocks end a tar
_GZIP_MAGIC = b"\x1f\x8b"


class OneGzipMember:
    """The decompressed bytes of the one gzip member a file starts with, as tarfile reads
    them (`read(size)`), cut off past limit_bytes.

    A file that ends before the member's trailer is refused while it is read; what follows
    the trailer is looked at by `check_nothing_follows`, once the member has been read."""

    def __init__(self, raw: BinaryIO, name: str, limit_bytes: int) -> None:
        self._raw = raw
        self.archive_name = name
        self._limit_bytes = limit_bytes
        self._inflate = zlib.decompressobj(wbits=31)  # 31: gzip framing, one member
        self._pending = b""  # compressed bytes read from the file, not yet inflated
        self._file_read_bytes = 0
        self._out = b""  # made, not yet handed to read()
        self._out_at = 0
        self.made_bytes = 0  # decompressed so far: the tar's offset of the next byte made
        self._tail = bytearray()  # the last bytes made, from tar offset _tail_at
        self._tail_at = 0

    def read(self, size: int = -1) -> bytes:
        """Up to size bytes (size < 0: what is ready), b"" at the member's end."""
        if self._out_at == len(self._out):
            self._out, self._out_at = self._inflate_more(), 0
        end = len(self._out) if size < 0 else self._out_at + size
        chunk = self._out[self._out_at : end]
        self._out_at += len(chunk)
        return chunk

    def rest_from(self, offset: int) -> Iterator[bytes]:
        """The decompressed bytes from tar offset `offset` to the member's end, whether or
        not read() handed them out already; offset must be within the kept tail."""
        if not self._tail_at <= offset <= self.made_bytes:
            raise VerifyFailed(
                f"{self.archive_name}: refused, the bytes after its last member at byte {offset} "
                "of the tar are no longer at hand to check"
            )
        yield bytes(self._tail[offset - self._tail_at :])
        self._out_at = len(self._out)
        while chunk := self._inflate_more():
            yield chunk

    def check_nothing_follows(self) -> None:
        """Refuse a file with any byte after the gzip member's trailer (a second member
        or anything else); call when read() has returned b""."""
        if not self._inflate.eof:
            raise VerifyFailed(
                f"{self.archive_name}: refused, the gzip member was not read to its end"
            )
        unused = self._inflate.unused_data
        member_end = self._file_read_bytes - len(unused)
        head = unused[: len(_GZIP_MAGIC)]
        head += self._raw.read(len(_GZIP_MAGIC) - len(head))
        after_bytes = self._raw.seek(0, io.SEEK_END) - member_end
        if after_bytes == 0:
            return
        if head == _GZIP_MAGIC:
            raise VerifyFailed(
                f"{self.archive_name}: refused, a second gzip member at byte {member_end} of the "
                f"file ({after_bytes} bytes after the first one's trailer)"
            )
        raise VerifyFailed(
            f"{self.archive_name}: refused, {after_bytes} bytes after the gzip stream's end at "
            f"byte {member_end} of the file"
        )

    def _inflate_more(self) -> bytes:
        """The next decompressed bytes (b"" at the member's end), kept in the tail."""
        while not self._inflate.eof:
            if not self._pending:
                self._pending = self._raw.read(_COMPRESSED_CHUNK_BYTES)
                if not self._pending:
                    raise VerifyFailed(
                        f"{self.archive_name}: refused, the compressed data ends before the gzip "
                        f"trailer, at byte {self._file_read_bytes} of the file: truncated?"
                    )
                self._file_read_bytes += len(self._pending)
            # One byte over the limit is enough to know it is over.
            room = min(_INFLATE_CHUNK_BYTES, self._limit_bytes + 1 - self.made_bytes)
            made = self._inflate.decompress(self._pending, room)
            self._pending = self._inflate.unconsumed_tail
            self.made_bytes += len(made)
            if self.made_bytes > self._limit_bytes:
                raise VerifyFailed(
                    f"{self.archive_name}: refused, it unpacks to over {self._limit_bytes} bytes"
                )
            if made:
                self._keep(made)
                return made
        return b""

    def _keep(self, made: bytes) -> None:
        self._tail += made
        if len(self._tail) > 2 * _TAIL_KEEP_BYTES:  # trimmed now and then, not every chunk
            drop = len(self._tail) - _TAIL_KEEP_BYTES
            del self._tail[:drop]
            self._tail_at += drop


def member_end(member: tarfile.TarInfo) -> int:
    """The tar offset just past a member's data blocks, as tarfile itself steps over them
    (data only for regular files; a directory's size field is not skipped)."""
    if not member.isreg():
        return member.offset_data
    return member.offset_data + -(-member.size // _BLOCK_BYTES) * _BLOCK_BYTES


def check_end(stream: OneGzipMember, end_of_members: int) -> None:
    """After tarfile stopped iterating, its last member ending at `end_of_members` of the
    tar: refuse anything in the tar but the end-of-archive marker and zero padding, then
    anything in the file after the gzip member."""
    _check_tar_end(stream, end_of_members)
    stream.check_nothing_follows()


def _check_tar_end(stream: OneGzipMember, end_of_members: int) -> None:
    name = stream.archive_name
    zero_bytes = 0
    data_at: int | None = None
    for chunk in stream.rest_from(end_of_members):
        if data_at is not None:
            continue  # read to the end only to say how much there is
        leading_zero_bytes = len(chunk) - len(chunk.lstrip(b"\x00"))
        if leading_zero_bytes == len(chunk):
            zero_bytes += len(chunk)
            continue
        data_at = end_of_members + zero_bytes + leading_zero_bytes
        zero_bytes += leading_zero_bytes
        if zero_bytes < _BLOCK_BYTES:
            raise VerifyFailed(
                f"{name}: refused, data after the last member at byte {end_of_members} of "
                "the tar where the end-of-archive marker belongs"
            )
        if zero_bytes < _END_MARKER_BYTES:
            raise VerifyFailed(
                f"{name}: refused, a lone zero block at byte {end_of_members} of the tar, "
                f"followed by data at byte {data_at} (readers that skip zero blocks would "
                "read more members than were checked)"
            )
    if data_at is not None:
        raise VerifyFailed(
            f"{name}: refused, {stream.made_bytes - data_at} bytes of data after the "
            f"end-of-archive marker, at byte {data_at} of the tar"
        )
    if zero_bytes < _END_MARKER_BYTES:
        raise VerifyFailed(
            f"{name}: refused, the tar has no end-of-archive marker (two zero blocks) after "
            f"its last member at byte {end_of_members}: truncated?"
        )
