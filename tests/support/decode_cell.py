"""A valid decode cell of one trial whose figures are all `slowness` times slower than a
reference (100 tok/s a request, 50 ms to the first token, 10 ms between tokens)."""

from __future__ import annotations

from bench.verdict.cells import Cell, Key


def decode_cell(key: Key, slowness: float) -> Cell:
    trials: dict[str, tuple[float, ...]] = {
        "total_tok_s": (100.0 * key[2] / slowness,),
        "per_request_tok_s": (100.0 / slowness,),
        "ttft_s": (0.05 * slowness,),
        "tbt_s": (0.01 * slowness,),
    }
    return Cell("decode", key[1], key[2], "valid", None, trials)
