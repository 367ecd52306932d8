"""`bench capacity` against the real twin (profile tiny, 10x fast), then `bench compare` of
two such runs, as the product's own commands.

The workload: 500 requests a point (MLPerf's rule needs 459 to show a p99 met), 160-token
prompts and one output token, so the twin saturates near 35 requests/s (server time) while
the client sends at most a few hundred a second. The SLO, TTFT p99 <= 1 s, is met with room
at 20/s and 28.3/s (TTFT under 0.5 s) and missed at 40/s (overloaded, TTFTs of seconds).
Searches start at 20 with a tolerance of 0.5: 20 met, 40 not, 28.3 met, done; the
capacity lands on a point far from the threshold, so two runs agree and their compare
shows no change.

The twin and `bench capacity` run ahead of the rest of the machine (tests/support/priority.py,
marker `timed`): beside other tests on these 2 cores the client's lateness p99 reached 30-37
ms at 200 requests/s, every met point became late_client (undecided), and no search found a
capacity."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.support import procs
from tests.support.priority import prioritize
from tests.support.twinproc import start_twin

pytestmark = [pytest.mark.integration, pytest.mark.timed, pytest.mark.timeout(300)]

SPEED = 10.0
WORKLOAD = """
name = "twin-capacity"
seed = 11

[arrivals]
kind = "rate"
rates = [20.0]
process = "poisson"
requests = 500

[lengths]
input_tokens = 160
output_tokens = 1

[slo]
ttft_p99_s = 1.0
"""
SEARCH = ("--start", "20", "--lowest", "10", "--highest", "200", "--tolerance", "0.5",
          "--repeats", "2", "--max-points", "6")  # fmt: skip


def _bench(*args: str, ahead: bool = False) -> tuple[int, str, str]:
    """`python -m bench ARGS`: (exit code, stdout, stderr); `ahead`: at niceness -15."""
    proc = procs.bench(*args, mark=procs.new_mark())
    if ahead:
        prioritize(proc.pid)
    return procs.finish(proc, timeout_s=180)


@pytest.fixture(scope="module")
def capacity_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two `bench capacity` runs of one workload (one seed) against one twin."""
    base = tmp_path_factory.mktemp("capacity-twin")
    spec = base / "twin-capacity.toml"
    spec.write_text(WORKLOAD, encoding="utf-8")
    out = []
    with start_twin("tiny", speed=SPEED) as twin:
        prioritize(twin.proc.pid)
        for name in ("a", "b"):
            run = base / name
            rc, _, err = _bench("capacity", "--url", twin.url, "--workload", str(spec),
                                *SEARCH, "--out", str(run), ahead=True)  # fmt: skip
            assert rc == 0, err[-3000:]
            out.append(run)
    return out[0], out[1]


def _capacity(run: Path) -> dict[str, Any]:
    results = json.loads((run / "results.json").read_text(encoding="utf-8"))
    assert results["server"]["speed_factor"] == SPEED
    return dict(results["workload"]["capacity"])


def test_both_searches_bracket_a_capacity(capacity_runs: tuple[Path, Path]) -> None:
    """Each run's two searches start at 20/s and end with a met point below one that is
    not, both among the points they tried, within 6 points and (unless the note says why)
    the tolerance: the twin meets the SLO at a low rate and misses it at a high one. No
    bracket means the search (or the verdicts that drive it) cannot find a capacity even on
    a simulated server. (A stall of this shared machine can make a met point late_client,
    undecided: the search then brackets lower, which is still a bracket.)"""
    for run in capacity_runs:
        cap = _capacity(run)
        assert cap["by"] == "rate" and cap["slo"] == "ttft_p99<=1s"
        assert len(cap["searches"]) == 2
        for s in cap["searches"]:
            tried = [(x, v) for x, v in s["tried"]]
            assert 2 <= len(tried) <= 6
            assert tried[0][0] == 20.0 * SPEED  # client units: 20/s at speed 10
            assert s["met"] is not None and s["missed"] is not None, s
            assert (s["met"], "met") in tried
            assert s["missed"] in [x for x, v in tried if v != "met"]
            assert s["met"] < s["missed"]
            assert all(x < s["missed"] for x, v in tried if v == "met"), s  # monotone here
            if s["note"] is None:
                assert s["missed"] <= s["met"] * 1.5 * (1 + 1e-9)
            else:
                assert s["note"].startswith("stopped after 6 points"), s["note"]
        assert (20.0 * SPEED, "met") in [(x, v) for s in cap["searches"] for x, v in s["tried"]]


def test_the_estimate_lies_between_the_searches(capacity_runs: tuple[Path, Path]) -> None:
    """The estimate is the geometric mean of the searches' met points, so it lies between
    them, and with two searches it has an interval around it; tables.md's "SLO capacity"
    section says both at server time. An estimate outside the searches is not theirs."""
    for run in capacity_runs:
        cap = _capacity(run)
        mets = [s["met"] for s in cap["searches"]]
        est = cap["estimate"]
        assert min(mets) * (1 - 1e-9) <= est <= max(mets) * (1 + 1e-9)
        low, high = cap["interval"]
        assert low <= est * (1 + 1e-9) and est <= high * (1 + 1e-9)
        assert cap["server_s"] > 0
        tables = (run / "tables.md").read_text(encoding="utf-8")
        assert "### SLO capacity (ttft_p99<=1s, by rate)" in tables
        shown = f"Capacity, the bound: **{est / SPEED:,.3g} requests/s**, 95 % interval "
        shown += f"[{low / SPEED:,.3g}, {high / SPEED:,.3g}] over 2 search(es)"
        assert shown in tables, tables
        paths = re.findall(r"^- search (\d): (.*)$", tables, flags=re.M)
        assert [n for n, _ in paths] == ["1", "2"]
        assert all(p.startswith("20 ") for _, p in paths), paths


def test_compare_refuses_a_capacity_run_against_itself(capacity_runs: tuple[Path, Path]) -> None:
    """The same run given twice is one input (run_source.refuse_repeats): a compare of it
    against itself would show zero noise. One line, exit 2."""
    a = str(capacity_runs[0])
    rc, out, err = _bench("compare", a, a)
    assert rc == 2, (out[-2000:], err[-2000:])
    line = procs.assert_one_line_error(err, "are the same run")
    assert a in line


def test_two_capacity_runs_compare_without_a_change(capacity_runs: tuple[Path, Path]) -> None:
    """Two capacity runs of one twin, one seed: compare prints the SLO capacity section
    (both sides' searches at server time) and does not call the capacity CHANGED; its exit
    is 0 or 9 (compare_exit: 1 would be a change, 10 settings that differ)."""
    a, b = (str(p) for p in capacity_runs)
    rc, out, err = _bench("compare", a, b)
    section = out.split("### SLO capacity", 1)
    assert len(section) == 2, out[-3000:]
    body = section[1]
    # Each search's point estimate when every search of both runs has one, else the bounds
    searches = {side: _capacity(Path(run))["searches"] for side, run in (("A", a), ("B", b))}
    estimated = all(s["crossing"] for v in searches.values() for s in v)
    key, said = ("crossing", "point estimate") if estimated else ("met", "bound")
    assert f"Searched: rate at ttft_p99<=1s; compared: each search's {said} (" in body, body
    found = {}
    for side, mine in searches.items():
        values = [s[key] / SPEED for s in mine]
        each = ", ".join(f"{x:,.3g}" for x in values)
        assert f"- {side}: " in body and f"(geometric mean of 2: {each})" in body
        found[side] = values
    if rc == 1 and all(len(set(v)) == 1 for v in found.values()):
        # each side's two searches agreed, on different points: no spread on either side,
        # which capacity_delta reads as certainty (tests/unit/test_workload_search.py's xfail)
        pytest.xfail(f"searches without spread, {found}: capacity_delta's se = 0 rule")
    # Two searches a side: no change shown, and equivalence within ±5 % only if they agree
    # that closely; else not resolved (exit 11), never a clean bill.
    last = out.rstrip().splitlines()[-1]
    assert (rc, last) in (
        (0, "SLO CAPACITY EQUIVALENT WITHIN ±5 %"),
        (11, "SLO CAPACITY NOT RESOLVED"),
        (9, "SLO CAPACITY NOT RESOLVED"),
    ), (rc, out[-3000:], err[-2000:])
