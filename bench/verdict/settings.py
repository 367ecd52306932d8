"""The settings a verdict's two sides must share, and which of them differ.

Both a card and a run become a `dict[name, text]` of the same names; a name that one side
does not record is not checked (and listed as such). Any recorded difference makes the
verdict "not comparable" unless the user accepts that name (`--accept window,max_tokens`).
`--accept` also takes the cell flags of `cells.CELL_FLAGS` (`gpu_throttled`): cells so
flagged are judged as valid; and `answers` (compare the figures even where B answers
differently, bench.verdict.answers). `all` is every setting, never a flag nor `answers`:
those are accepted by their name only.

Names: window_s, max_tokens, api, model, engine_version, engine_commit, launch_flags,
gpu_count, gpu_model, workload (a workload run's name and hash; none for the matrix). A twin
simulates the GPUs and the launch of the card it models, so on a twin those two are not
checked. A run's launch flags leave out `--otlp-traces-endpoint URL` when URL is where the
run itself received the server's spans (results.json's `server_spans.endpoint`): that is the
run's tracing (`provision bench --server-traces`), announced, not a change to the launch. Any
other value of the flag, or the flag in a run that recorded no receiver, is a difference.
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bench.errors import UsageError
from bench.launch_profile import TRACES_ENDPOINT_FLAG
from bench.verdict.cells import CELL_FLAGS

NAMES: tuple[str, ...] = (
    "window_s",
    "max_tokens",
    "api",
    "model",
    "engine_version",
    "engine_commit",
    "launch_flags",
    "gpu_count",
    "gpu_model",
    "workload",
)
# What compare checks between its two sides: not the engine (that is what is compared).
COMPARE_NAMES: tuple[str, ...] = (
    "window_s",
    "max_tokens",
    "api",
    "model",
    "launch_flags",
    "gpu_count",
    "gpu_model",
    "workload",
)
# Accepted by name only, like a cell flag (`all` leaves it out): B's answers differ from A's
# beyond each side's own differences, and its figures are compared anyway (bench.verdict.answers).
ANSWERS = "answers"
# Words of a launch command that say nothing about speed.
_IGNORED_FLAGS = frozenset({"--api-key", "--host", "--port"})
TWIN_SIMULATED = frozenset({"launch_flags", "gpu_count", "gpu_model"})


def add_accept_arg(
    p: argparse.ArgumentParser, known: Sequence[str] = NAMES, between: str = ""
) -> None:
    """--accept NAMES (repeatable, comma-separated): settings allowed to differ."""
    p.add_argument(
        "--accept",
        action="append",
        default=[],
        metavar="NAMES",
        help=f"settings allowed to differ{between}, comma-separated: {','.join(known)} (or "
        f"all); and cells flagged {','.join(CELL_FLAGS)} judged as valid (by name only); "
        f"{ANSWERS}: compare the figures even where the answers differ (by name only)",
    )


def parse_accept(texts: Iterable[str], known: Sequence[str] = NAMES) -> frozenset[str]:
    """`--accept window_s,max_tokens` (repeatable): the differences the user accepts, and
    the cell flags (`gpu_throttled`), which `all` does not include."""
    names = {n.strip() for t in texts for n in t.split(",") if n.strip()}
    aliases = {"window": "window_s", "max_output": "max_tokens", "gpus": "gpu_count"}
    names = {aliases.get(n, n) for n in names}
    by_name = {*CELL_FLAGS, ANSWERS}
    unknown = sorted(names - set(known) - by_name - {"all"})
    if unknown:
        raise UsageError(
            f"--accept: unknown setting {', '.join(unknown)}",
            hint=f"one of {', '.join((*known, *CELL_FLAGS, ANSWERS))}",
        )
    flags = names & by_name
    return frozenset(known) | flags if "all" in names else frozenset(names)


def launch_flags(words: Sequence[str]) -> str | None:
    """The flags of a launch command, sorted, without the ones that do not change speed:
    'vllm serve M --b 2 --a' and 'python -m vllm... M --a --b 2' give the same text."""
    start = next((i for i, w in enumerate(words) if w.startswith("--")), None)
    if start is None:
        return None
    pairs: list[str] = []
    i = start
    while i < len(words):
        word = words[i]
        if not word.startswith("--"):
            i += 1
            continue
        flag, eq, value = word.partition("=")
        if not eq and i + 1 < len(words) and not words[i + 1].startswith("--"):
            value = words[i + 1]
            i += 1
        i += 1
        if flag not in _IGNORED_FLAGS:
            pairs.append(f"{flag} {value}".strip())
    return " ".join(sorted(pairs))


def launch_flags_of_text(command: str) -> str | None:
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    return launch_flags(words)


def without_own_traces(argv: Sequence[str], results: Any) -> list[str]:
    """ARGV less `--otlp-traces-endpoint URL` (or `=URL`) where URL is the endpoint the run
    recorded receiving the server's spans on (module docstring); as it is otherwise."""
    spans = getattr(results, "server_spans", None)
    own = getattr(spans, "endpoint", None)
    if not own:
        return list(argv)
    out: list[str] = []
    i = 0
    while i < len(argv):
        word = argv[i]
        if word == f"{TRACES_ENDPOINT_FLAG}={own}":
            i += 1
            continue
        if word == TRACES_ENDPOINT_FLAG and i + 1 < len(argv) and argv[i + 1] == own:
            i += 2
            continue
        out.append(word)
        i += 1
    return out


def gpu_name(name: str) -> str:
    low = name.lower().strip()
    return low.removeprefix("nvidia ").strip()


def from_run(results: Any, env: Any) -> dict[str, str]:
    """The settings of a run (`Results`, environment.json as a dict or None)."""
    s = results.settings
    out = {
        "window_s": f"{s.duration_s:g}",
        "max_tokens": str(s.max_tokens),
        "api": s.api,
        "model": results.server.model,
    }
    if results.server.version:
        out["engine_version"] = results.server.version
    # A workload run's traffic: its name and the hash of the workload as run (the same name
    # with other rates or lengths differs). A run of the card's matrix records none, so the
    # settings (and the history's settings hash) of such runs are what they were.
    w = getattr(results, "workload", None)
    if w is not None:
        out["workload"] = f"{w.workload.name} ({w.sha256[:12]})"
    if isinstance(env, dict):
        labels = (env.get("image") or {}).get("labels") or {}
        commit = labels.get("bench.vllm.commit")
        if commit:
            out["engine_commit"] = str(commit)
        argv = [str(w) for w in (env.get("launch") or {}).get("argv") or []]
        flags = launch_flags(without_own_traces(argv, results))
        if flags is not None:
            out["launch_flags"] = flags
        gpus = [str(g.get("name", "?")) for g in (env.get("gpu") or {}).get("gpus", [])]
        if gpus:
            out["gpu_count"] = str(len(gpus))
            out["gpu_model"] = ", ".join(sorted({gpu_name(g) for g in gpus}))
    return out


def is_twin(results: Any) -> bool:
    return "twin" in results.server.version_payload


def from_card(card: Any) -> dict[str, str]:
    """The settings a card states (`bench.card.model.Card`)."""
    out: dict[str, str] = {}
    if card.window_s is not None:
        out["window_s"] = f"{card.window_s:g}"
    if card.max_output_tokens is not None:
        out["max_tokens"] = str(card.max_output_tokens)
    served = card.metadata.get("Run", {}).get("Served model")
    out["model"] = served or card.model
    out["engine_version"] = card.plan.engine_version
    commit = card.metadata.get("Engine", {}).get("Commit")
    if commit:
        out["engine_commit"] = commit
    if card.launch_command:
        flags = launch_flags_of_text(card.launch_command)
        if flags is not None:
            out["launch_flags"] = flags
    if card.gpu_count is not None:
        out["gpu_count"] = str(card.gpu_count)
    gpu = card.metadata.get("Hardware", {}).get("GPU")
    if gpu:
        out["gpu_model"] = gpu_name(gpu)
    return out


def _same(name: str, a: str, b: str) -> bool:
    if name == "engine_commit":  # a short commit on the card, a full one in the image label
        short = min(len(a), len(b))
        return short >= 7 and a.lower()[:short] == b.lower()[:short]
    if name == "gpu_model":
        return a in b or b in a
    if name == "window_s":
        return abs(float(a) - float(b)) < 1e-9
    return a == b


@dataclass(frozen=True)
class Difference:
    name: str
    ours: str
    theirs: str
    accepted: bool


@dataclass(frozen=True)
class SettingsCheck:
    differences: tuple[Difference, ...]
    unchecked: tuple[str, ...]  # names one side does not record (or a twin simulates)

    @property
    def blocking(self) -> tuple[Difference, ...]:
        return tuple(d for d in self.differences if not d.accepted)

    @property
    def comparable(self) -> bool:
        return not self.blocking

    def lines(self, ours: str, theirs: str) -> list[str]:
        out: list[str] = []
        if self.differences:
            out.append(f"Settings that differ ({ours} / {theirs}):")
            for d in self.differences:
                mark = " (accepted)" if d.accepted else ""
                out.append(f"- {d.name}: {d.ours} / {d.theirs}{mark}")
        if self.unchecked:
            out.append(
                f"Settings not checked (not recorded on both sides): {', '.join(self.unchecked)}"
            )
        if self.blocking:
            names = ",".join(d.name for d in self.blocking)
            out.append(f"NOT COMPARABLE: {names} differ; pass --accept {names} to judge anyway")
        return out


def check(
    ours: Mapping[str, str],
    theirs: Mapping[str, str],
    accept: frozenset[str],
    *,
    names: Sequence[str] = NAMES,
    skip: frozenset[str] = frozenset(),
) -> SettingsCheck:
    diffs: list[Difference] = []
    unchecked: list[str] = []
    for name in names:
        a, b = ours.get(name), theirs.get(name)
        if name in skip or a is None or b is None:
            unchecked.append(name)
            continue
        if not _same(name, a, b):
            diffs.append(Difference(name, a, b, name in accept))
    return SettingsCheck(tuple(diffs), tuple(unchecked))
