"""`bench run --workload` against the real twin (profile tiny, 10x fast), as the product's own
command: the schedule is the seed's, byte for byte; samples.jsonl says when each request
was due; `max_in_flight` caps what is in flight; a closed-count point runs exactly C streams
through its N prompts after its warm-ups; failures are counted by kind.

One twin serves the clean runs (module-scoped); the failure test has a twin of its own
with the fault flags, fresh, so its seeded dice give the same failures every time. The twins
and `bench run` run ahead of the rest of the machine (tests/support/priority.py, marker
`timed`): the lateness they are held to is the client's, not this shared machine's."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Any

import pytest

from tests.support import procs
from tests.support.priority import prioritize
from tests.support.twinproc import start_twin

pytestmark = [pytest.mark.integration, pytest.mark.timed, pytest.mark.timeout(300)]

SPEED = 10.0


def _workload(name: str, seed: int, arrivals: str, output_tokens: int = 8) -> str:
    return (
        f'name = "{name}"\nseed = {seed}\n\n[arrivals]\n{arrivals}\n\n'
        f"[lengths]\ninput_tokens = 64\noutput_tokens = {output_tokens}\n"
    )


RATE = 'kind = "rate"\nrates = [5.0]\nprocess = "poisson"\nrequests = 50'
# 2 streams serve about 10 requests/s of 32 tokens (server time): 200/s is far above.
CAPPED = 'kind = "rate"\nrates = [200.0]\nprocess = "poisson"\nrequests = 40\nmax_in_flight = 2'
CLOSED = (
    'kind = "closed-count"\nconcurrencies = [3]\nrequests_per_stream = 4\nwarmups_per_stream = 2'
)
TWO_RATES = 'kind = "rate"\nrates = [5.0, 20.0]\nprocess = "poisson"\nrequests = 20'
FAULTY = 'kind = "rate"\nrates = [10.0]\nprocess = "poisson"\nrequests = 60'


def _bench_run(url: str, spec: Path, out: Path, *extra: str) -> Path:
    """`bench run --workload SPEC [EXTRA]` into OUT at niceness -15; the test fails with its
    stderr if it fails."""
    proc = procs.bench("run", "--url", url, "--workload", str(spec), "--out", str(out), *extra,
                       mark=procs.new_mark())  # fmt: skip
    prioritize(proc.pid)
    rc, _, err = procs.finish(proc, timeout_s=120)
    assert rc == 0, err[-3000:]
    return out


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def _point(run: Path) -> dict[str, Any]:
    results = json.loads((run / "results.json").read_text(encoding="utf-8"))
    assert results["server"]["speed_factor"] == SPEED
    (point,) = results["workload"]["points"]
    return dict(point)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Run directories against one twin: the rate workload twice with seed 3 (s3a, s3b) and
    once with seed 4 (s4), the capped one, the closed-count one, and the second point alone
    of a two-rate workload (--points, as a sequential compare's later trials run)."""
    base = tmp_path_factory.mktemp("workload-twin")
    specs = {
        "s3a": _workload("twin-rate", 3, RATE),
        "s3b": _workload("twin-rate", 3, RATE),
        "s4": _workload("twin-rate", 4, RATE),
        "capped": _workload("twin-capped", 2, CAPPED, output_tokens=32),
        "closed": _workload("twin-closed", 2, CLOSED),
    }
    out = {}
    with start_twin("tiny", speed=SPEED) as twin:
        prioritize(twin.proc.pid)
        for name, text in specs.items():
            spec = base / f"{name}.toml"
            spec.write_text(text, encoding="utf-8")
            out[name] = _bench_run(twin.url, spec, base / name)
        spec = base / "two.toml"
        spec.write_text(_workload("twin-two-rates", 5, TWO_RATES), encoding="utf-8")
        out["second"] = _bench_run(twin.url, spec, base / "second", "--points", "20/s")
    return out


# --- (a) the schedule and the samples of a rate run ---------------------------------------


def test_one_seed_gives_one_schedule_byte_for_byte(runs: dict[str, Path]) -> None:
    """Two runs of seed 3 write the same schedule.jsonl, byte for byte (due times, lengths,
    prompt hashes); seed 4 another. Were the run id, the clock or the server in it, A and B
    of a compare would not be sent the same traffic."""
    a, b, other = (runs[k].joinpath("schedule.jsonl").read_bytes() for k in ("s3a", "s3b", "s4"))
    assert a == b
    assert a != other
    lines = _lines(runs["s3a"] / "schedule.jsonl")
    assert [x["index"] for x in lines] == list(range(50))
    assert {x["point"] for x in lines} == {0} and {x["trial"] for x in lines} == {0}
    assert len({x["prompt_sha256"] for x in lines}) == 50  # every prompt its own
    other_lines = _lines(runs["s4"] / "schedule.jsonl")
    assert [x["at_s"] for x in lines] != [x["at_s"] for x in other_lines]


def test_samples_say_when_each_request_was_due(runs: dict[str, Path]) -> None:
    """Each measured request's line in samples.jsonl has its `index` and `due_s`: the
    schedule's `at_s` over the speed factor, from the point's start. Without them the
    lateness of a request cannot be checked from the raw data."""
    schedule = _lines(runs["s3a"] / "schedule.jsonl")
    samples = _lines(runs["s3a"] / "samples.jsonl")
    assert len(samples) == 50
    assert {x["phase"] for x in samples} == {"workload"} and {x["context"] for x in samples} == {
        "0"
    }
    by_index = {x["index"]: x for x in samples}
    assert sorted(by_index) == list(range(50))
    for planned in schedule:
        line = by_index[planned["index"]]
        assert line["due_s"] == pytest.approx(planned["at_s"] / SPEED, abs=2e-6)
        assert line["finished"] and line["error"] is None
        # started when due (within the lateness the figures judge), never long before
        assert line["start_s"] - line["due_s"] > -0.002
        assert line["start_s"] - line["due_s"] < 0.05


def test_an_idle_twins_client_keeps_its_schedule(runs: dict[str, Path]) -> None:
    """At 5 requests/s (50/s of client time) on an idle twin the client's lateness p99 is
    well under the 10 ms the late_client rule allows, and the point is valid: a client that
    cannot keep this schedule measures nothing at any rate. Of the three runs two must show
    it (a stall of this shared machine, 25-40 ms seen even at niceness -15, can take one
    run's few slowest sends past 10 ms); the median lateness of every run is small."""
    kept = []
    for name in ("s3a", "s3b", "s4"):
        p = _point(runs[name])
        assert p["offered_rate"] == 5.0 * SPEED
        assert p["lateness"]["n"] == 50
        assert p["lateness"]["p50"] < 0.005, (name, p["lateness"])
        assert p["status"] in ("valid", "late_client"), (name, p["reasons"])
        assert p["sent_rate"] == pytest.approx(p["scheduled_rate"], rel=0.05)
        if p["status"] == "valid" and p["lateness"]["p99"] < 0.010:
            kept.append(name)
    assert len(kept) >= 2, kept


# --- (b) max_in_flight ------------------------------------------------------------------


def _most_in_flight(lines: list[dict[str, Any]]) -> int:
    """The most requests in flight at once, from their start and end times (an end and a
    start at one instant: the end first)."""
    events = sorted([(x["start_s"], 1) for x in lines] + [(x["end_s"], -1) for x in lines])
    most = now = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


def test_max_in_flight_caps_what_is_in_flight_and_records_the_hold(
    runs: dict[str, Path],
) -> None:
    """max_in_flight = 2 at 200 requests/s, far above what two streams serve: never more
    than 2 requests in flight (from samples.jsonl's own start and end times), 2 reached,
    every request sent, and the wait for the cap recorded (`held`) apart from lateness. More
    than 2 means the cap is not vLLM's --max-concurrency; no `held` hides the queue."""
    samples = _lines(runs["capped"] / "samples.jsonl")
    assert len(samples) == 40 and all(x["end_s"] is not None for x in samples)
    assert _most_in_flight(samples) == 2
    p = _point(runs["capped"])
    assert (p["requests"], p["completed"]) == (40, 40)
    held = p["held"]
    assert held is not None and held["n"] >= 30
    assert held["max"] > 0.05  # the last requests waited for most of the point
    # the hold is not lateness: the dispatcher kept its schedule
    assert p["lateness"]["max"] < held["max"] / 2
    assert p["backlog_end"] is not None and p["backlog_end"] <= 2


# --- (c) closed count ---------------------------------------------------------------------


def test_a_closed_count_point_runs_c_streams_through_n_prompts(runs: dict[str, Path]) -> None:
    """C = 3, 4 prompts a stream, 2 warm-ups a stream: exactly 3 streams (worker ids 0..2),
    each one request at a time, 12 measured requests in samples.jsonl and schedule.jsonl
    with no due time, and the 6 warm-ups counted but not among the measured lines. A
    warm-up in the measured lines would put a cold server's first requests in the figures."""
    samples = _lines(runs["closed"] / "samples.jsonl")
    assert len(samples) == 12
    assert sorted(x["index"] for x in samples) == list(range(12))
    assert all(x["due_s"] is None for x in samples)
    workers = {x["worker"] for x in samples}
    assert workers == {0, 1, 2}
    for w in workers:  # a stream sends its next prompt only after its previous one ended
        mine = sorted((x["start_s"], x["end_s"]) for x in samples if x["worker"] == w)
        assert all(prev[1] <= nxt[0] for prev, nxt in itertools.pairwise(mine))
    assert _most_in_flight(samples) <= 3
    assert len(_lines(runs["closed"] / "schedule.jsonl")) == 12
    p = _point(runs["closed"])
    assert (p["concurrency"], p["requests"], p["completed"], p["warmups"]) == (3, 12, 12, 6)
    assert p["status"] == "valid", p["reasons"]
    assert p["offered_rate"] is None and p["lateness"] is None


# --- (d) failures by kind -----------------------------------------------------------------


@pytest.fixture(scope="module")
def failing_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A rate run against a fresh twin that answers 20 % of completions with HTTP 503."""
    base = tmp_path_factory.mktemp("workload-twin-faults")
    spec = base / "faulty.toml"
    spec.write_text(_workload("twin-faulty", 5, FAULTY), encoding="utf-8")
    faults = ("--fault-error-fraction", "0.2", "--fault-error-status", "503")
    with start_twin("tiny", speed=SPEED, extra_args=faults) as twin:
        prioritize(twin.proc.pid)
        return _bench_run(twin.url, spec, base / "run")


def test_failures_are_counted_by_kind_and_fail_the_point(failing_run: Path) -> None:
    """A fifth of the requests answered 503: each counted as http_status in
    failures_by_kind, matching samples.jsonl's failed lines, and the point `failed` with the
    count in its reason (over 1 % failed). A failure counted as completed, or of another
    kind, would hide what the server did."""
    samples = _lines(failing_run / "samples.jsonl")
    failed = [x for x in samples if x["error"] is not None]
    assert failed and {x["error_kind"] for x in failed} == {"http_status"}
    assert {x["http_status"] for x in failed} == {503}
    assert 0.05 * 60 <= len(failed) <= 0.4 * 60  # about a fifth
    p = _point(failing_run)
    assert p["failures_by_kind"] == {"http_status": len(failed)}
    assert (p["requests"], p["completed"]) == (60, 60 - len(failed))
    assert p["status"] == "failed"
    assert p["reasons"][0] == f"{len(failed)} of 60 requests failed (bound 1%)"
    assert not math.isnan(p["duration_s"]) and p["ttft"]["n"] == 60 - len(failed)
    tables = (failing_run / "tables.md").read_text(encoding="utf-8")
    assert f"| 10.00/s | 1 | failed | {60 - len(failed)}/60 |" in tables


def test_points_measures_only_the_points_named_keeping_their_index(
    runs: dict[str, Path],
) -> None:
    results = json.loads((runs["second"] / "results.json").read_text(encoding="utf-8"))
    assert results["settings"]["points"] == ["20/s"]
    (point,) = results["workload"]["points"]
    assert point["index"] == 1  # the offered rate in client requests/s: x the speed
    assert point["offered_rate"] == pytest.approx(20.0 * SPEED)
    contexts = {x["context"] for x in _lines(runs["second"] / "samples.jsonl")
                if x.get("phase") == "workload"}  # fmt: skip
    assert contexts == {"1"}
