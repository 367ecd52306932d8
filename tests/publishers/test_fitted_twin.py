"""A twin fitted to a publisher's card, served over HTTP, as a user rehearses a
reproduction: `bench card import --from`, `bench twin fit` (and `--slower 10`),
`bench twin serve --profile`, `bench card workload`, `bench run --workload`, then
`bench reproduce RUN --card CARD.json`: each fitted twin REPRODUCED whole, each twin 10 %
slower NOT REPRODUCED on its TPOT figures (+7 % or more: at a fixed arrival rate a slower
server also holds more requests at once).

Per publisher, the fixture's own point, unshortened, at a speed where the twin's real-time
loop keeps the publisher's time to first token on this machine. InferenceX's median TTFT is
53 ms of server time: served at speed 2 (27 ms of wall time) it came +5.4 .. +11.3 % off the
card beside a niced CPU-bound job (7 December, /tmp runs of these steps), +6.5 % in an
earlier alone run, while the fit says +1.1 %; at speed 1, +2.8 .. +3.6 % in five runs beside
the same job and +4.3 % with two more CPU hogs at the default niceness. vLLM's dashboard
point at speed 1 came +2.0 % beside that job and +6.0 .. +6.6 % beside a starting `make test`;
at speed 0.5, +1.0 %. So InferenceX runs at speed 1 and vLLM's at 0.5. The slower twins run at
four times those (MLPerf's at twice): they are judged on TPOT, which must come +7 % off or more,
and a twin that falls behind its timeline only adds to that. MLPerf's p99 TTFT of seconds is no
such figure: speed 10 keeps its 600 s of server time to a minute. A fitted run our client sent
late is not judged (the product's guard) and is run again, at most three runs in all; so is one
not REPRODUCED in which the
twin's own loop ended a step more than 5 ms late (its /metrics): the twin did not keep its
profile's timeline, and the run measured this machine's load, not the profile. The tests
are `alone`: `make test` and `make integration` run them last, one at a time, with nothing of
the suite beside them."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from bench.errors import Exit
from bench.publishers.command import load_card
from tests.publishers.paths import DATA
from tests.support import procs
from tests.support.priority import prioritize
from tests.support.twinproc import start_twin

# A fitted run the twin's loop ended a step of more than this late is not a run of its profile:
# idle, its latest step came 3.4 ms late; beside a niced CPU hog 7-11 ms
# (docs/measured/fitted-twin-speeds-2026-12-07.md).
TWIN_LAG_S = 0.005
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
    "inferencex": (DATA / "inferencex", ("--select", "id=101"), 1.0, 4.0),
    "vllm-dashboard": (
        DATA
        / "vllm-dashboard"
        / "serving_qwen3_8b_tp1_random_in1k_out2k_qps_10_concurrency_200.json",
        (),
        0.5,
        2.0,
    ),
    # 780 requests over MLPerf's minimum 600 s (server time): 60 s at speed 10. Its dataset
    # cannot ship: stand-in lengths, 656 out being the summary's tokens / samples.
    "mlperf": (
        DATA / "mlperf" / "llama3_1-405b_server_mlperf_log_summary.txt",
        ("--select", "benchmark=llama3_1-405b", "--lengths", "1024,656"),
        10.0,
        20.0,
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
            lag_s = _step_lag_max_s(twin.url)
        rc, out, err = _bench("reproduce", str(run), "--card", str(card))
        # A trial our client sent late is left out, not judged (the product's own guard): on
        # a CI machine whose two cores a real vLLM shares, MLPerf's 780 requests at speed 10
        # once ran 228 ms late at p99. One more run then (module docstring).
        if "late_client" in out + err:
            print(f"run {attempt} of at most 3: our client sent late, not judged")
        elif rc != 0 and not slower and lag_s > TWIN_LAG_S:
            # The twin itself fell behind its profile's timeline: not a run of its profile.
            print(f"run {attempt} of at most 3: {_summary(out)}; the twin's loop fell "
                  f"{lag_s * 1e3:.1f} ms behind its timeline, run again")  # fmt: skip
        else:
            break
    return rc, out + err


def _step_lag_max_s(url: str) -> float:
    """The twin's own report of how late its loop ended a step (its /metrics)."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    m = re.search(r"^twin:step_lag_max_seconds\{[^}]*\} (\S+)$", text, re.M)
    assert m, text[-2000:]
    return float(m.group(1))


def _summary(out: str) -> str:
    return "; ".join(
        f"{n} {_off(out, n):+.2f} %" for n, o in _rows(out).items() if o != "REPRODUCED"
    )


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
    assert rc == 0, out[-4000:]
    rows = {n: o for n, o in _rows(out).items() if o != "NOT CHECKED"}
    assert any("ttft" in how[n] for n in rows), out[-3000:]  # judged, not only shown
    assert len(rows) >= 4 and set(rows.values()) == {"REPRODUCED"}, out[-4000:]
    if publisher == "mlperf":  # its limits met by LoadGen's early stopping, its duration run
        assert out.count(": REPRODUCED: ") == 3, out[-4000:]

    rc, out = _reproduce(tmp_path, card, 10.0, slow_speed)
    assert rc == int(Exit.NOT_REPRODUCED), out[-4000:]
    rows = _rows(out)
    tpot = [n for n, o in rows.items() if "tpot" in how[n] and o != "NOT CHECKED"]
    assert tpot and all(rows[n] == "NOT REPRODUCED" for n in tpot), out[-4000:]
    for name in tpot:
        assert 7.0 <= _off(out, name) <= 40.0, out[-4000:]  # open loop: more in flight too
