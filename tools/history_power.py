"""`make history-power`: false alarms, detection and delay of `bench history changes`.

Simulated nightly histories of RUNS runs of CELLS cells, in virtual time (no server, no
clock: each run's figure is drawn, not measured). A run's total_tok_s of a cell is a base
figure divided by the twin's noise factor for that run and cell (bench.twin.noise.
cell_factor: every step f times as long, throughput / f, as a twin run with that seed
gives), one trial a run, each run its own server start (its own seed). The test is on
logs, so the base figure does not matter; the noise does: the twin's `published` profile
as it is ("default") and with each fit of bench/twin/noise_fits.

- No shift: the fraction of series in which `changes` reports anything after RUNS runs
  (its false-alarm rate per series).
- A slowdown planted in one cell (every step SHIFT % longer from run FIRST_BAD on): the
  fraction of histories in which that cell's change is found after RUNS runs (first bad
  within 2 runs of FIRST_BAD), the fraction named exactly (last good FIRST_BAD - 1, first
  bad FIRST_BAD), and the delay: the fewest runs after FIRST_BAD that the history must
  have for the search over it to find the change.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence

from bench.history import changes
from bench.twin import noise
from bench.twin import profile as profiles
from bench.twin.profile import Profile
from tools.corpus_power import share

RUNS, FIRST_BAD = 60, 40
CELLS = [(ctx, conc) for ctx in (8192, 32768) for conc in (1, 16, 64, 256)]
PLANTED = (8192, 64)
NEAR = 2  # a change within this many runs of FIRST_BAD is the planted one


def noise_settings() -> list[tuple[str, Profile]]:
    published = profiles.load("published")
    fitted = [(name, noise.with_fit(published, name)) for name in noise.fit_names()]
    return [("default", published), *fitted]


def series(profile: Profile, history: int, cell: tuple[int, int], shift: float) -> list[float]:
    """total_tok_s of `cell`, runs 1..RUNS of history `history`; steps (1 + shift) times as
    long from FIRST_BAD on."""
    ctx, conc = cell
    out = []
    for run in range(1, RUNS + 1):
        f = noise.cell_factor(profile, history * 1000 + run, 0, ctx, conc)
        slow = 1.0 + shift if run >= FIRST_BAD else 1.0
        out.append(1000.0 / (f * slow))
    return out


def _near(found: changes.Search) -> bool:
    return any(abs(c.index + 1 - FIRST_BAD) <= NEAR for c in found.changes)


def _named(found: changes.Search) -> bool:
    return any(c.index + 1 == FIRST_BAD for c in found.changes)


def delay(values: Sequence[float]) -> int | None:
    """The fewest runs from FIRST_BAD on at which the search names the planted change."""
    for bad_runs in range(changes.MIN_SEGMENT, RUNS - FIRST_BAD + 2):
        if _named(changes.search(values[: FIRST_BAD - 1 + bad_runs])):
            return bad_runs
    return None


def sd_text(p: Profile) -> str:
    return f"shared {p.noise_shared:.1%}, per cell {p.noise_run:.1%}, per trial {p.noise_trial:.1%}"


def false_alarms(profile: Profile, histories: int) -> str:
    alarms = flat = 0
    for h in range(histories):
        for cell in CELLS:
            flat += 1
            alarms += bool(changes.search(series(profile, h, cell, 0.0)).changes)
    return share(alarms, flat)


def row(name: str, profile: Profile, histories: int, shift: float, alarms: str) -> str:
    found = exact = 0
    delays: list[int] = []
    missed = 0
    for h in range(histories):
        values = series(profile, 10_000 + h, PLANTED, shift)
        full = changes.search(values)
        found += _near(full)
        exact += _named(full)
        d = delay(values)
        if d is None:
            missed += 1
        else:
            delays.append(d)
    if delays:
        cuts = statistics.quantiles(delays, n=10, method="inclusive") if len(delays) > 1 else []
        p90 = cuts[-1] if cuts else delays[0]
        delay_text = f"{statistics.median(delays):g} / {p90:g}"
    else:
        delay_text = "—"
    return (
        f"| {name} ({sd_text(profile)}) | {alarms} | {shift:.0%} | "
        f"{share(found, histories)} | {share(exact, histories)} | {delay_text} | "
        f"{missed}/{histories} |"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--histories", type=int, default=200, help="simulated histories per row")
    p.add_argument("--shifts", default="5,6,20", help="planted slowdowns in %%, comma-separated")
    args = p.parse_args(argv)
    shifts = [float(s) / 100 for s in args.shifts.split(",")]
    started = time.perf_counter()
    print(
        f"{args.histories} nightly histories of {RUNS} runs per row, {len(CELLS)} cells each "
        f"(false alarms: every cell's series, no shift); a slowdown planted in cell "
        f"{PLANTED[1]}x{PLANTED[0] // 1024}K from run {FIRST_BAD} on; `bench history changes`: "
        f"p <= {changes.ALPHA}, {changes.PERMUTATIONS} permutations, "
        f">= {changes.MIN_SEGMENT} runs a side"
    )
    print()
    print(
        "| twin noise (sd of log, per run) | false alarms per series | slowdown | found by "
        f"run {RUNS} (±{NEAR}) | named {FIRST_BAD - 1}/{FIRST_BAD} | delay, slow runs until named: "
        f"median / 90th pct | not named by run {RUNS} |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, profile in noise_settings():
        alarms = false_alarms(profile, args.histories)
        for shift in shifts:
            print(row(name, profile, args.histories, shift, alarms), flush=True)
    print(f"\n{time.perf_counter() - started:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
