"""Fingerprints made by hand for the verdict tests: answers as token ids by prompt name."""

from __future__ import annotations

from bench.answers import Answer, Fingerprint, answer_sha256

BASE = tuple(range(100, 164))


def ids_at(departs: int | None = None, by: int = 1) -> tuple[int, ...]:
    """BASE, or BASE departing at index `departs` (tokens from there shifted by `by`)."""
    if departs is None:
        return BASE
    return BASE[:departs] + tuple(t + by for t in BASE[departs:])


def fp_of(version: str = "v1", /, **ids: tuple[int, ...] | str | None) -> Fingerprint:
    """A fingerprint whose answers are IDS by prompt name (a str: text only; None: failed)."""
    out = []
    for name, got in ids.items():
        if got is None:
            out.append(Answer(name=name, status="failed", reason="HTTP 500: boom"))
        elif isinstance(got, str):
            out.append(Answer(name=name, status="answered", text=got, sha256=answer_sha256(got)))
        else:
            out.append(
                Answer(name=name, status="answered", token_ids=got, ids_from="logprobs",
                       text="t", sha256=answer_sha256(got))
            )  # fmt: skip
    return Fingerprint(version=version, max_tokens=64, seed=1, answers=tuple(out))
