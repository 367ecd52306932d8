"""Fit the `published` profile to the card by running the methodology in virtual time.

    python -m tools.twin_calibrate            # compare the stored profile with the card
    python -m tools.twin_calibrate --fit      # re-derive it and write profiles/published.json

What is fitted, and from what (all figures come out of the engine's mechanics):
- prefill cost per token per context: the cold scout's TTFT (frontend + L x cost) must be
  L / (card prefill tok/s);
- per context row, the overlapping overhead and the warm-hit recompute: the row's warm
  TTFTs and how much the ramp-up (steps carrying recompute while requests trickle in)
  stretches the per-request time between tokens beyond the steady window (TBT x total / C);
- per (context, load) the frontend's serialized time per request: the C requests of a
  burst pass the FIFO worker one after another, so the median warm TTFT at C moves by
  (C - 1) / 2 times the worker's time at load C (and every cell by its time at load 1,
  the first request's); corrected cell by cell until each warm TTFT is the card's;
- per (context, batch) the decode step time: scaled until the window's total tok/s and
  the median TBT are off the card by equal and opposite amounts (they are measured over
  different spans, so the card itself is not exactly self-consistent).
Over-capacity cells have no target: their step times extend the neighbours' ratios.
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import statistics
import sys
from collections.abc import Callable
from typing import Any

from bench.results import CellFigures
from bench.twin import profile as profiles
from bench.twin import virtual
from bench.twin.engine import TwinScheduler
from bench.twin.profile import Profile

TARGETS = pathlib.Path(__file__).with_name("card_targets.json")
Row = dict[int, CellFigures]  # by concurrency, from bench.run.figures
# tok/s and TBT must land within 5 % (TTFT within 10 %): errors of the TBT stretch count more.
RATIO_WEIGHT = 8.0


def load_targets() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(TARGETS.read_text())
    return data


def _rows(t: dict[str, Any]) -> list[tuple[str, int, dict[int, dict[str, float]]]]:
    out = []
    for name, cells in t["decode"].items():
        out.append((name, int(t["contexts"][name]), {int(c): v for c, v in cells.items()}))
    return out


def simulate_row(prof: Profile, ctx: int, cs: list[int], seed: int = 0) -> tuple[float, Row]:
    ttft, cells = virtual.run_row(prof, ctx, cs, seed=seed)
    return ttft, {c.concurrency: c.figures for c in cells}


def _with(prof: Profile, **update: Any) -> Profile:
    data = prof.model_dump()
    data.update(update)
    return Profile.model_validate(data)


def _prefill_costs(prof: Profile, t: dict[str, Any]) -> list[float]:
    """Cost per prefill token at each anchor so that the cold scout hits the card's tok/s."""
    out = []
    for ctx in prof.contexts:
        name = next(n for n, c in t["contexts"].items() if c == ctx)
        rate = t["prefill"][name][0]
        fixed = prof.frontend_seconds(ctx) + prof.request_overhead_seconds(ctx)
        out.append(max(1e-9, (ctx / rate - fixed) / ctx))
    return out


def _row_loss(cells: Row, targets: dict[int, dict[str, float]]) -> float:
    loss = 0.0
    for c, tgt in targets.items():
        f = cells[c]
        ttft_err = math.log(f.ttft_s * 1000 / tgt["ttft_ms"])
        ratio_sim = f.tbt_s * f.total_tok_s / c
        ratio_card = tgt["tbt_ms"] / 1000 * tgt["total_tok_s"] / c
        ratio_err = math.log(ratio_sim / ratio_card)
        loss += ttft_err**2 + RATIO_WEIGHT * ratio_err**2
    return loss


def _set(values: list[float], i: int, v: float) -> list[float]:
    out = list(values)
    out[i] = v
    return out


def fit_row_latency(
    prof: Profile, t: dict[str, Any], i: int, log: Callable[[str], None]
) -> Profile:
    """Coordinate search over the row's frontend time, overhead and recompute tokens."""
    name, ctx, targets = next(r for r in _rows(t) if r[1] == prof.contexts[i])
    cs = sorted(targets)

    def loss_of(p: Profile) -> float:
        p = _with(p, prefill_s_per_token=_prefill_costs(p, t))
        return _row_loss(simulate_row(p, ctx, cs)[1], targets)

    best, best_loss = prof, loss_of(prof)
    fields = ("warm_recompute_tokens", "request_overhead_s", "slow_request_drop")
    step = 0.4
    while step > 0.02:
        improved = False
        for field in fields:
            for sign in (1, -1):
                cur = getattr(best, field)[i]
                new = cur * math.exp(sign * step) if cur > 0 else 0.01 * (sign > 0)
                if field == "slow_request_drop":
                    new = min(new, 0.9)
                cand = _with(best, **{field: _set(getattr(best, field), i, new)})
                loss = loss_of(cand)
                if loss < best_loss:
                    best, best_loss, improved = cand, loss, True
        if not improved:
            step /= 2
    log(
        f"{name}: overhead {best.request_overhead_s[i]:.3f} s, "
        f"recompute {best.warm_recompute_tokens[i]:.0f} tokens, "
        f"slow drop {(best.slow_request_drop or [0.0] * (i + 1))[i]:.3f}, loss {best_loss:.4f}"
    )
    return _with(best, prefill_s_per_token=_prefill_costs(best, t))


def fit_frontend_table(
    prof: Profile, t: dict[str, Any], rounds: int, log: Callable[[str], None]
) -> Profile:
    """Per row, move each load's frontend time until the warm TTFTs land on the card's.

    A burst of C requests leaves the FIFO worker at f(1) + k f(C) for k = 0..C-1, so the
    median TTFT at C moves by (C - 1) / 2 for each second of f(C), and by one for f(1)
    (which is all the C = 1 cell has). Loads with no card cell take the nearest lower one."""
    table = [list(r) for r in prof.frontend_s]
    for name, ctx, targets in _rows(t):
        i = prof.contexts.index(ctx)
        worst = 0.0
        for _ in range(rounds):
            p = _with(prof, frontend_s=table)
            p = _with(p, prefill_s_per_token=_prefill_costs(p, t))
            _, cells = simulate_row(p, ctx, sorted(targets))
            worst = 0.0
            for c, tgt in targets.items():
                miss_s = tgt["ttft_ms"] / 1000 - cells[c].ttft_s
                worst = max(worst, abs(miss_s * 1000 / tgt["ttft_ms"]))
                j = prof.batches.index(c)
                table[i][j] = max(0.0, table[i][j] + miss_s / max(1.0, (c - 1) / 2))
            last = 0.0
            for j, b in enumerate(prof.batches):
                if b in targets:
                    last = table[i][j]
                else:
                    table[i][j] = last
        log(f"{name}: frontend {', '.join(f'{v:.3f}' for v in table[i])} s; worst {worst:.1%}")
    prof = _with(prof, frontend_s=table)
    return _with(prof, prefill_s_per_token=_prefill_costs(prof, t))


def fit_step_table(
    prof: Profile, t: dict[str, Any], rounds: int, log: Callable[[str], None]
) -> Profile:
    table = [list(r) for r in prof.decode_step_s]
    for _ in range(rounds):
        worst = 0.0
        for _name, ctx, targets in _rows(t):
            i = prof.contexts.index(ctx)
            _, cells = simulate_row(prof, ctx, sorted(targets))
            for c, tgt in targets.items():
                f = cells[c]
                e_total = f.total_tok_s / tgt["total_tok_s"]
                e_tbt = f.tbt_s * 1000 / tgt["tbt_ms"]
                worst = max(worst, abs(math.log(e_total)), abs(math.log(e_tbt)))
                table[i][prof.batches.index(c)] *= math.sqrt(e_total / e_tbt)
        _extend_over_capacity(table, prof, t)
        prof = _with(prof, decode_step_s=table)
        log(f"step table round: worst error before it {math.expm1(worst):+.1%}")
    return prof


def _extend_over_capacity(table: list[list[float]], prof: Profile, t: dict[str, Any]) -> None:
    rows = {ctx: targets for _, ctx, targets in _rows(t)}
    for i, ctx in enumerate(prof.contexts):
        measured = rows.get(ctx, {})
        for j, b in enumerate(prof.batches):
            if b in measured or j == 0 or i == 0:
                continue
            table[i][j] = table[i][j - 1] * table[i - 1][j] / table[i - 1][j - 1]


def fit(prof: Profile, rounds: int = 3, log: Callable[[str], None] = print) -> Profile:
    t = load_targets()
    prof = _with(prof, prefill_s_per_token=_prefill_costs(prof, t))
    if prof.slow_request_drop is None:
        prof = _with(
            prof, slow_request_fraction=0.25, slow_request_drop=[0.15] * len(prof.contexts)
        )
    prof = fit_step_table(prof, t, 2, log)
    for _ in range(rounds):
        for i in range(len(prof.contexts)):
            prof = fit_row_latency(prof, t, i, log)
            save(prof)
        prof = fit_frontend_table(prof, t, 6, log)
        prof = fit_step_table(prof, t, 3, log)
        save(prof)
    return prof


def save(prof: Profile) -> None:
    path = profiles.PROFILE_DIR / f"{prof.name}.json"
    path.write_text(json.dumps(_rounded(prof.model_dump()), indent=1) + "\n")


def compare(prof: Profile) -> list[dict[str, Any]]:
    """Every card figure next to the virtual-time twin's."""
    t = load_targets()
    out: list[dict[str, Any]] = []
    for name, ctx in t["contexts"].items():
        rate, ttft_ms = t["prefill"][name]
        scout = virtual.prefill_ttft_s(TwinScheduler(prof, 0), virtual.prompt_ids(ctx, 1))
        out.append(
            {
                "phase": "prefill",
                "context": name,
                "card_tok_s": rate,
                "twin_tok_s": ctx / scout,
                "card_ttft_ms": ttft_ms,
                "twin_ttft_ms": scout * 1000,
            }
        )
    for name, ctx, targets in _rows(t):
        _, cells = simulate_row(prof, ctx, sorted(targets))
        for c, tgt in sorted(targets.items()):
            f = cells[c]
            out.append(
                {
                    "phase": "decode",
                    "context": name,
                    "concurrency": c,
                    "card_tok_s": tgt["total_tok_s"],
                    "twin_tok_s": f.total_tok_s,
                    "card_tbt_ms": tgt["tbt_ms"],
                    "twin_tbt_ms": f.tbt_s * 1000,
                    "card_ttft_ms": tgt["ttft_ms"],
                    "twin_ttft_ms": f.ttft_s * 1000,
                }
            )
    return out


def _pct(a: float, b: float) -> str:
    return f"{(a / b - 1) * 100:+5.1f}%"


def _vs(r: dict[str, Any], key: str, fmt: str, unit: str = "") -> str:
    twin, card = r[f"twin_{key}"], r[f"card_{key}"]
    return f"{twin:{fmt}} vs {card:{fmt}}{unit} {_pct(twin, card)}"


def render(rows: list[dict[str, Any]]) -> str:
    lines = []
    for r in rows:
        if r["phase"] == "prefill":
            cell = f"prefill {r['context']:>5}      "
            lines.append(
                f"{cell}tok/s {_vs(r, 'tok_s', '8.1f')}   TTFT {_vs(r, 'ttft_ms', '7.0f', ' ms')}"
            )
        else:
            cell = f"decode  {r['context']:>5} x{r['concurrency']:<4} "
            lines.append(
                f"{cell}tok/s {_vs(r, 'tok_s', '8.1f')}   TBT {_vs(r, 'tbt_ms', '6.1f', ' ms')}"
                f"   TTFT {_vs(r, 'ttft_ms', '7.0f', ' ms')}"
            )
    dec = [r for r in rows if r["phase"] == "decode"]
    worst = max(abs(r["twin_tok_s"] / r["card_tok_s"] - 1) for r in dec)
    worst_tbt = max(abs(r["twin_tbt_ms"] / r["card_tbt_ms"] - 1) for r in dec)
    ttft = [abs(r["twin_ttft_ms"] / r["card_ttft_ms"] - 1) for r in dec]
    lines.append(
        f"worst |delta|: tok/s {worst:.1%}, TBT {worst_tbt:.1%}, TTFT {max(ttft):.1%} "
        f"(median TTFT {statistics.median(ttft):.1%})"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m tools.twin_calibrate", description=__doc__.splitlines()[0]
    )
    ap.add_argument("--fit", action="store_true", help="re-fit and write profiles/published.json")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(
        "--fit-frontend",
        action="store_true",
        help="re-fit only the frontend table (warm TTFTs) and the step table after it",
    )
    args = ap.parse_args(argv)
    prof = profiles.load("published")
    if args.fit_frontend:
        log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
        prof = fit_frontend_table(prof, load_targets(), 8, log)
        prof = fit_step_table(prof, load_targets(), 2, log)
        save(prof)
    elif args.fit:
        prof = fit(prof, args.rounds, log=lambda m: print(m, file=sys.stderr, flush=True))
        save(prof)
    print(render(compare(prof)))
    return 0


def _rounded(obj: Any) -> Any:
    if isinstance(obj, float):
        return float(f"{obj:.6g}")
    if isinstance(obj, list):
        return [_rounded(v) for v in obj]
    if isinstance(obj, dict):
        return {k: _rounded(v) for k, v in obj.items()}
    return obj


if __name__ == "__main__":
    sys.exit(main())
