"""The markdown tables: each tool against the truth for its own requests, ours against each
peer on identical traffic, and each run's requests as the twin counted them.
"""

from __future__ import annotations

from collections.abc import Mapping

from tools.peers.traffic import reference
from tools.peers.truth import Figures, TrafficSeen

FIGURES = ("req/s", "output tok/s", "p50 TTFT ms", "p50 TPOT ms")

Rows = Mapping[tuple[str, float], tuple[Figures, Figures]]


def delta_pct(value: float, reference: float) -> float:
    return (value - reference) / reference * 100.0 if reference else float("nan")


def _fmt(v: float) -> str:
    return f"{v:,.2f}" if abs(v) < 100 else f"{v:,.1f}"


def _pct(v: float) -> str:
    mark = " **>3 %**" if abs(v) > 3.0 else ""
    return f"{v:+.1f} %{mark}"


def _same_prompts(a: Figures, b: Figures) -> bool:
    """Mean prompt lengths (the twin's count) within 3 %: latencies comparable across tools."""
    if a.prompt is None or b.prompt is None:
        return False
    return abs(delta_pct(a.prompt, b.prompt)) <= 3.0


def table(rows: Rows) -> str:
    """tool x rate x figure: the tool's value, the truth's for its requests, Δ; and Δ of ours
    against the peer's value (both reading their own requests)."""
    out = ["| tool | rate | figure | tool | truth | tool vs truth | ours vs this tool |",
           "|---|---:|---|---:|---:|---:|---:|"]  # fmt: skip
    for (tool, rate), (got, truth) in rows.items():
        ours = rows.get(("ours", rate))
        for i, name in enumerate(FIGURES):
            vs_ours = ""
            if ours is not None and not tool.startswith("ours"):
                vs_ours = _pct(delta_pct(ours[0].values()[i], got.values()[i]))
                if i >= 2 and not _same_prompts(ours[1], truth):
                    vs_ours += " (prompts differ)"
            mine, true = got.values()[i], truth.values()[i]
            out.append(f"| {tool} | {rate:g} | {name} | {_fmt(mine)} | {_fmt(true)} | "
                       f"{_pct(delta_pct(mine, true))} | {vs_ours} |")  # fmt: skip
    return "\n".join(out)


def identical_table(rows: Rows) -> str:
    """peer x rate x figure on identical traffic: ours (on the peer's endpoint) and the peer,
    each by its own result file, Δ of ours against the peer; and the truth for each run's
    requests, Δ of ours' against the peer's (what the server did differently; near 0 when
    the traffic was the same). Peers whose run of ours is missing are left out."""
    out = ["| peer | rate | figure | ours | this tool | ours vs this tool | truth (ours' run) "
           "| truth (this tool's run) | truth vs truth |",
           "|---|---:|---|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for (tool, rate), (got, truth) in rows.items():
        ref = rows.get((reference(tool), rate))
        if tool.startswith("ours") or ref is None:
            continue
        for i, name in enumerate(FIGURES):
            mine, theirs = ref[0].values()[i], got.values()[i]
            t_mine, t_theirs = ref[1].values()[i], truth.values()[i]
            out.append(f"| {tool} (vs {reference(tool)}) | {rate:g} | {name} | {_fmt(mine)} | "
                       f"{_fmt(theirs)} | {_pct(delta_pct(mine, theirs))} | {_fmt(t_mine)} | "
                       f"{_fmt(t_theirs)} | {_pct(delta_pct(t_mine, t_theirs))} |")  # fmt: skip
    return "\n".join(out)


def truth_table(rows: Rows, seen: Mapping[tuple[str, float], TrafficSeen] | None = None) -> str:
    """Each run's requests as the truth log saw them: count, prompt tokens, and (where
    known) its arrivals against the shared schedule."""
    out = ["| tool | rate | requests (tool / truth) | mean prompt tokens (twin's count) "
           "| prompt tokens min-max | arrivals vs schedule, p50 / max ms |",
           "|---|---:|---:|---:|---:|---:|"]  # fmt: skip
    for (tool, rate), (got, truth) in rows.items():
        s = (seen or {}).get((tool, rate))
        spread = f"{s.prompt_min}-{s.prompt_max}" if s else ""
        off = f"{s.off_p50_ms:.2f} / {s.off_max_ms:.2f}" if s else ""
        out.append(f"| {tool} | {rate:g} | {got.n} / {truth.n} | {truth.prompt or 0:.1f} | "
                   f"{spread} | {off} |")  # fmt: skip
    return "\n".join(out)
