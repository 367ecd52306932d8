"""A twin fitted to a publisher's card, served over HTTP, as a user rehearses a
reproduction: `bench card import --from`, `bench twin fit` (and `--slower 10`),
`bench twin serve --profile`, `bench card workload`, `bench run --workload`, then
`bench reproduce RUN --card CARD.json`.

Per publisher, the fixture's own point, unshortened. What holds (measured 6 December
2026): the fitted twin reproduces every judged figure but, at times, TTFT, which the live
twin serves up to 3-4 ms (server time) later than the virtual-time fit predicts
(InferenceX point 101 at speed 2: median +8.6 %, NOT REPRODUCED on it; vLLM's random
point at speed 1: median +4.5 %, REPRODUCED whole), so these tests hold TTFT to -5 .. +12 %
and every other judged figure to REPRODUCED; a twin 10 % slower is NOT REPRODUCED on its
TPOT and E2EL (its TPOT 7-14 % off)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench.errors import Exit
from tests.publishers.paths import DATA
from tests.support import procs
from tests.support.priority import prioritize
from tests.support.twinproc import start_twin

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]

TTFT_GAP_PCT = 12.0  # the live twin's TTFT over the fit's (module docstring), with slack
POINTS = {
    # publisher: (fixture, --select, speed of the fitted run, speed of the slower run)
    "inferencex": (DATA / "inferencex", ("--select", "id=101"), 2.0, 4.0),
    "vllm-dashboard": (
        DATA
        / "vllm-dashboard"
        / "serving_qwen3_8b_tp1_random_in1k_out2k_qps_10_concurrency_200.json",
        (),
        1.0,
        2.0,
    ),
}
# figure, unit, published, ours, interval, band, outcome
_ROW = re.compile(
    r"^(\S+)\s+\S+\s+\S+\s+(\S+)\s+\S+\s+\S+\s+"
    r"(REPRODUCED|NOT REPRODUCED|NOT RESOLVED|NOT CHECKED)$"
)


def _bench(*args: str, timeout_s: float = 300) -> tuple[int, str, str]:
    proc = procs.bench(*args, mark=procs.new_mark())
    prioritize(proc.pid)
    return procs.finish(proc, timeout_s=timeout_s)


def _rows(out: str) -> dict[str, str]:
    rows = {}
    for line in out.splitlines():
        m = _ROW.match(line.strip())
        if m:
            rows[m.group(1)] = m.group(3)
    return rows


def _off(out: str, name: str) -> float:
    m = re.search(rf"^  {re.escape(name)}: ours ([+-][0-9.]+) % off published", out, re.M)
    assert m, f"no line for {name}"
    return float(m.group(1))


def _reproduce(base: Path, card: Path, slower: float, speed: float) -> tuple[int, str]:
    profile = base / f"profile-{slower:g}.json"
    args = ["twin", "fit", str(card), "-o", str(profile)]
    if slower:
        args += ["--slower", f"{slower:g}"]
    rc, _, err = _bench(*args)
    assert rc == 0, err[-2000:]
    spec = base / "card.toml"
    rc, _, err = _bench("card", "workload", str(card), "-o", str(spec))
    assert rc == 0, err[-2000:]
    run = base / f"run-{slower:g}"
    with start_twin(str(profile), speed=speed) as twin:
        prioritize(twin.proc.pid)
        rc, _, err = _bench("run", "--url", twin.url, "--workload", str(spec), "--out", str(run))
        assert rc == 0, err[-3000:]
    rc, out, err = _bench("reproduce", str(run), "--card", str(card))
    return rc, out + err


@pytest.mark.parametrize("publisher", sorted(POINTS))
def test_a_twin_fitted_to_the_card_reproduces_it_and_one_10pct_slower_does_not(
    publisher: str, tmp_path: Path
) -> None:
    fixture, select, speed, slow_speed = POINTS[publisher]
    card = tmp_path / "card.json"
    args = ("card", "import", "--from", publisher, str(fixture), *select, "-o", str(card))
    rc, _, err = _bench(*args)
    assert rc == 0, err[-2000:]

    rc, out = _reproduce(tmp_path, card, 0.0, speed)
    rows = _rows(out)
    ttft = {n: o for n, o in rows.items() if "ttft" in n and o != "NOT CHECKED"}
    assert ttft, out[-3000:]
    others = {n: o for n, o in rows.items() if n not in ttft and o != "NOT CHECKED"}
    assert len(others) >= 8 and set(others.values()) == {"REPRODUCED"}, out[-4000:]
    for name in ttft:
        assert -5.0 <= _off(out, name) <= TTFT_GAP_PCT, out[-4000:]

    rc, out = _reproduce(tmp_path, card, 10.0, slow_speed)
    assert rc == int(Exit.NOT_REPRODUCED), out[-4000:]
    rows = _rows(out)
    slow = [n for n, o in rows.items() if o == "NOT REPRODUCED"]
    assert any("tpot" in n for n in slow) and any("e2el" in n for n in slow), out[-4000:]
    for name in (n for n in rows if "tpot" in n and rows[n] != "NOT CHECKED"):
        assert 7.0 <= _off(out, name) <= 14.0, out[-4000:]
