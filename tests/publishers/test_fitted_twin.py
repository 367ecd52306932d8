"""A twin fitted to a publisher's card, served over HTTP, as a user rehearses a
reproduction: `bench card import --from`, `bench twin fit` (and `--slower 10`),
`bench twin serve --profile`, `bench card workload`, `bench run --workload`, then
`bench reproduce RUN --card CARD.json`.

Per publisher, the fixture's own point, unshortened. On this machine idle, or with one core
taken, each fitted twin is REPRODUCED whole (docs/measured/fitted-twin-first-output-2026-12-06.md:
vLLM's median TTFT +3.2 .. +4.1 %, MLPerf's p99 TTFT within 0.5 %). Beside the rest of the suite
on the same two cores a TTFT of 40-50 ms moves by milliseconds: runs
beside a starting `make test` came +6.1 .. +6.6 % (InferenceX's and vLLM's medians), beside
the suite's real vLLM +6.00 % and the client 20 ms late at p99. Run alone, after the suite,
InferenceX's came +6.51 % three times while a niced CPU-bound job ran (its TTFT is 25 ms of
wall time at speed 2), and passed with the machine idle. So these tests hold TTFT figures to
-5 .. +12 %, every other judged figure to REPRODUCED and MLPerf's constraints to met; a twin
10 % slower is NOT REPRODUCED on its TPOT figures (+7 % or more: at a fixed arrival rate a
slower server also holds more requests at once). A fitted run our client sent late is not
judged (the product's guard) and is run again, at most three runs in all. The tests are
`alone`: `make test` and `make integration` run them last, one at a time, with nothing of the
suite beside them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench.errors import Exit
from bench.publishers.command import load_card
from tests.publishers.paths import DATA
from tests.support import procs
from tests.support.priority import prioritize
from tests.support.twinproc import start_twin

TTFT_GAP_PCT = 12.0  # what a loaded make test adds to a TTFT of 40-50 ms (docstring), with slack
# alone: after the parallel tiers (module docstring); timed: should it run side by side anyway
# (pytest -n 2 without -m), never beside a vLLM server.
pytestmark = [
    pytest.mark.integration,
    pytest.mark.alone,
    pytest.mark.timed,
    pytest.mark.timeout(540),
]

POINTS = {
    # publisher: (fixture, import options, speed of the fitted run, speed of the slower run)
    "inferencex": (DATA / "inferencex", ("--select", "id=101"), 2.0, 4.0),
    "vllm-dashboard": (
        DATA
        / "vllm-dashboard"
        / "serving_qwen3_8b_tp1_random_in1k_out2k_qps_10_concurrency_200.json",
        (),
        1.0,
        2.0,
    ),
    # 780 requests over MLPerf's minimum 600 s (server time): 60 s at speed 10. Its dataset
    # cannot ship: stand-in lengths, 656 out being the summary's tokens / samples.
    "mlperf": (
        DATA / "mlperf" / "llama3_1-405b_server_mlperf_log_summary.txt",
        ("--select", "benchmark=llama3_1-405b", "--lengths", "1024,656"),
        10.0,
        10.0,
    ),
}
# figure, unit, published, ours, interval, band, outcome
_ROW = re.compile(
    r"^(.+?)\s+\S+\s+\S+\s+(\S+)\s+\S+\s+\S+\s+"
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
    for attempt in (1, 2, 3):
        run = base / f"run-{slower:g}-{attempt}"
        with start_twin(str(profile), speed=speed) as twin:
            prioritize(twin.proc.pid)
            rc, _, err = _bench("run", "--url", twin.url, "--workload", str(spec),
                                "--out", str(run))  # fmt: skip
            assert rc == 0, err[-3000:]
        rc, out, err = _bench("reproduce", str(run), "--card", str(card))
        # A trial our client sent late is left out, not judged (the product's own guard): on
        # a CI machine whose two cores a real vLLM shares, MLPerf's 780 requests at speed 10
        # once ran 228 ms late at p99. One more run then (module docstring).
        if "late_client" not in out + err:
            break
        print(f"run {attempt} of at most 3: our client sent late, not judged")
    return rc, out + err


@pytest.mark.parametrize("publisher", sorted(POINTS))
def test_a_twin_fitted_to_the_card_reproduces_it_and_one_10pct_slower_does_not(
    publisher: str, tmp_path: Path
) -> None:
    fixture, options, speed, slow_speed = POINTS[publisher]
    card = tmp_path / "card.json"
    args = ("card", "import", "--from", publisher, str(fixture), *options, "-o", str(card))
    rc, _, err = _bench(*args)
    assert rc == 0, err[-2000:]
    how = {f.name: f.computed_as or "" for f in load_card(card).figures}

    rc, out = _reproduce(tmp_path, card, 0.0, speed)
    rows = {n: o for n, o in _rows(out).items() if o != "NOT CHECKED"}
    ttft = [n for n in rows if "ttft" in how[n]]
    assert ttft, out[-3000:]  # judged, not only shown
    others = {n: o for n, o in rows.items() if n not in ttft}
    assert len(others) >= 3 and set(others.values()) == {"REPRODUCED"}, out[-4000:]
    for name in ttft:
        assert -5.0 <= _off(out, name) <= TTFT_GAP_PCT, out[-4000:]
    if publisher == "mlperf":  # its limits met by LoadGen's early stopping, its duration run
        assert out.count(": REPRODUCED: ") == 3, out[-4000:]

    rc, out = _reproduce(tmp_path, card, 10.0, slow_speed)
    assert rc == int(Exit.NOT_REPRODUCED), out[-4000:]
    rows = _rows(out)
    tpot = [n for n, o in rows.items() if "tpot" in how[n] and o != "NOT CHECKED"]
    assert tpot and all(rows[n] == "NOT REPRODUCED" for n in tpot), out[-4000:]
    for name in tpot:
        assert 7.0 <= _off(out, name) <= 40.0, out[-4000:]  # open loop: more in flight too
