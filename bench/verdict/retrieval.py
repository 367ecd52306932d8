"""The long-context retrieval check of A's runs against B's (bench.run.retrieval).

Per long context that every run of both sides answered: A *found* it when every A run's
answer gave the planted code, B *lost* it when A found it and no B run's answer gave it. A B
that loses retrieval at a context answers differently (`different`), as a fingerprint
difference beyond the within-side rule does: same verdict, same exit code, same
`--accept answers`.

No verdict is drawn when a side ran against the twin (it answers words from its seed and
cannot retrieve), or when A found the code at no context (the model cannot do the task, so
B finding none says nothing); the line says which. A B that finds the code nowhere while A
found it is the case the check is for: it counts. Runs without the check (fingerprints made
before results schema 4) are left out; with none on a side there is no line at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bench import escape
from bench.answers import Fingerprint, Retrieval


@dataclass(frozen=True)
class RetrievalCheck:
    runs: tuple[int, int]  # runs with the check, A and B
    contexts: tuple[str, ...] = ()  # long contexts every run of both sides answered
    found_a: tuple[str, ...] = ()  # found in every A run
    found_b: tuple[str, ...] = ()  # found in every B run
    lost: tuple[str, ...] = ()  # found in every A run, in no B run
    no_verdict: str | None = None  # set: nothing is judged from it (why)

    @property
    def different(self) -> bool:
        return self.no_verdict is None and bool(self.lost)

    def lines(self) -> list[str]:
        n = len(self.contexts)
        head = f"Retrieval found A {len(self.found_a)}/{n}, B {len(self.found_b)}/{n}"
        head += f" (long contexts, A {self.runs[0]} run(s), B {self.runs[1]} run(s))"
        if self.no_verdict is not None:
            return [f"{head}: no verdict from it ({self.no_verdict})."]
        if not self.lost:
            return [f"{head}: B retrieves wherever A does."]
        names = ", ".join(escape.terminal(c) for c in self.lost)
        return [f"{head}: B lost retrieval at {names} (found in every A run, in no B run)."]


def check(a: Sequence[Fingerprint], b: Sequence[Fingerprint]) -> RetrievalCheck | None:
    """The check of A's fingerprints against B's; None when no run of a side has it."""
    ra = [f.retrieval for f in a if f.retrieval is not None]
    rb = [f.retrieval for f in b if f.retrieval is not None]
    if not ra or not rb:
        return None
    runs = (len(ra), len(rb))
    answered = [{c.name for c in r.contexts if c.found is not None} for r in (*ra, *rb)]
    order = [c.name for c in ra[0].contexts]
    contexts = tuple(n for n in order if all(n in names for names in answered))
    found_a = tuple(n for n in contexts if all(_found(r, n) for r in ra))
    found_b = tuple(n for n in contexts if all(_found(r, n) for r in rb))
    out = RetrievalCheck(runs, contexts, found_a, found_b)
    twin = [s for s, side in (("A", ra), ("B", rb)) if any(r.twin for r in side)]
    why = None
    if twin:
        why = f"{' and '.join(twin)} ran against the twin, which cannot retrieve"
    elif not contexts:
        why = "no long context answered on every run of both sides"
    elif not any(_found(r, n) for r in ra for n in contexts):
        why = "A found the code at no context: the model cannot do the task here"
    if why is not None:
        return RetrievalCheck(runs, contexts, found_a, found_b, no_verdict=why)
    lost = tuple(n for n in found_a if not any(_found(r, n) for r in rb))
    return RetrievalCheck(runs, contexts, found_a, found_b, lost=lost) if lost else out


def _found(r: Retrieval, name: str) -> bool:
    return any(c.name == name and c.found is True for c in r.contexts)
