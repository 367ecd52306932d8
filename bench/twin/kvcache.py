"""The KV block pool with prefix caching by block hash (vLLM's design, reduced to counts).

A request holds references to cached blocks (full prompt blocks, keyed by a hash chained
over the token ids of every block before it) and plain blocks (its own, not shareable).
Cached blocks nobody references stay in the cache, evictable in LRU order, until the
pool needs them.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence


class BlockHasher:
    """`block_hashes` with a memo of recent long prompts (benchmarks resend the same one)."""

    def __init__(self, block_size: int, entries: int = 16) -> None:
        self.block_size = block_size
        self._entries = entries
        self._recent: OrderedDict[tuple[int, ...], list[int]] = OrderedDict()

    def __call__(self, token_ids: Sequence[int]) -> list[int]:
        if len(token_ids) < 64 * self.block_size:
            return block_hashes(token_ids, self.block_size)
        key = tuple(token_ids)
        hashes = self._recent.get(key)
        if hashes is None:
            hashes = block_hashes(token_ids, self.block_size)
            self._recent[key] = hashes
            if len(self._recent) > self._entries:
                self._recent.popitem(last=False)
        else:
            self._recent.move_to_end(key)
        return hashes


def block_hashes(token_ids: Sequence[int], block_size: int) -> list[int]:
    """Chained hashes of the full blocks of a prompt (a block's identity includes its prefix)."""
    out: list[int] = []
    h = 0
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        h = hash((h, tuple(token_ids[start : start + block_size])))
        out.append(h)
    return out


class BlockPool:
    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks
        self.free_plain = num_blocks
        self.used = 0
        self._refs: dict[int, int] = {}
        self._evictable: OrderedDict[int, None] = OrderedDict()

    def cached_prefix(self, hashes: Sequence[int]) -> int:
        """How many leading blocks of `hashes` are in the cache."""
        n = 0
        for h in hashes:
            if h not in self._refs:
                break
            n += 1
        return n

    def available(self) -> int:
        return self.free_plain + len(self._evictable)

    def evictable_among(self, hashes: Sequence[int]) -> int:
        """How many of `hashes` are cached and unreferenced: counted in `available`, they
        stop being available once acquired."""
        return sum(1 for h in hashes if self._refs.get(h) == 0)

    def acquire(self, hashes: Sequence[int]) -> None:
        for h in hashes:
            refs = self._refs[h]
            if refs == 0:
                del self._evictable[h]
            self._refs[h] = refs + 1
            self.used += 1

    def allocate(self, n: int) -> bool:
        """Take `n` plain blocks, evicting cached ones if needed; False if they don't exist."""
        if n > self.available():
            return False
        while self.free_plain < n:
            h, _ = self._evictable.popitem(last=False)
            del self._refs[h]
            self.free_plain += 1
        self.free_plain -= n
        self.used += n
        return True

    def register(self, hashes: Sequence[int]) -> list[int]:
        """Turn plain blocks into cached ones; returns the hashes now owned (new ones only)."""
        owned = []
        for h in hashes:
            if h not in self._refs:
                self._refs[h] = 1
                owned.append(h)
        return owned

    def release(self, hashes: Sequence[int], plain: int) -> None:
        for h in hashes:
            refs = self._refs[h] - 1
            self._refs[h] = refs
            if refs == 0:
                self._evictable[h] = None
        self.free_plain += plain
        self.used -= len(hashes) + plain

    def reset(self) -> int:
        """Drop every unreferenced cached block; returns how many were dropped."""
        n = len(self._evictable)
        for h in self._evictable:
            del self._refs[h]
        self._evictable.clear()
        self.free_plain += n
        return n
