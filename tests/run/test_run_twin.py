"""`bench run` as a real subprocess against the twin as a real server over HTTP."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.results import Results
from tests.support import procs
from tests.support.twinproc import TwinProcess, start_twin

pytestmark = pytest.mark.integration

# tiny profile: max_model_len 4,096 and 2,048 KV tokens. With 256 output tokens, 256 x 4
# needs 2,048 (runs) and 1K x 2 needs 2,560 (over capacity).
SMALL = [
    "--contexts", "256", "1K",
    "--prefill-only-contexts", "1536",
    "--concurrencies", "1", "2", "4",
    "--max-tokens", "256",
]  # fmt: skip


def bench(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """`bench run ARGS` in a process group of its own (tests.support.procs)."""
    mark = procs.new_mark()
    return procs.bench("run", *args, mark=mark, env={**procs.bench_env(mark), **(env or {})})


def finish(proc: subprocess.Popen[str], timeout_s: float = 240) -> tuple[int, str, str]:
    """tests.support.procs.finish: the group killed and the test failed on a time-out."""
    return procs.finish(proc, timeout_s)


@pytest.fixture(scope="module")
def twin() -> Iterator[TwinProcess]:
    with start_twin("tiny", speed=2.0) as t:
        yield t


@pytest.fixture(scope="module")
def small_run(twin: TwinProcess, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("run") / "r"
    rc, stdout, stderr = finish(
        bench("--url", twin.url, *SMALL, "--duration", "4", "--out", str(out))
    )
    assert rc == 0, stderr[-2000:]
    assert "KV capacity: 2,048 tokens (kv_cache_size_tokens" in stdout
    assert "1K x 2: over capacity (needs 2,560 KV tokens, the server has 2,048)" in stdout
    return out


def test_every_valid_cell_obeys_the_cards_two_identities(small_run: Path) -> None:
    results = Results.model_validate_json((small_run / "results.json").read_text())
    assert results.state == "complete" and not (small_run / "INCOMPLETE").exists()
    assert results.server.speed_factor == 2.0 and results.server.speed_source == "version"
    valid = [c for c in results.cells if c.status == "valid"]
    assert {(c.context_label, c.concurrency) for c in valid} == {
        ("256", 1),
        ("256", 2),
        ("256", 4),
        ("1K", 1),
    }
    for cell in valid:
        f = cell.figures
        assert f is not None
        assert f.total_tok_s == pytest.approx(f.output_tokens / f.measured_for_s, rel=1e-12)
        assert f.per_request_tok_s == pytest.approx(1000 / (f.tbt_s * 1000), rel=1e-12)
        # 4 server seconds at speed 2: a 2 s window on our clock.
        assert 1.8 <= f.measured_for_s <= 2.0
        assert f.active_source == "server_metrics"
        # Short requests turn over often (a new one waits for KV blocks): at most C run.
        assert cell.concurrency / 2 <= f.average_active <= cell.concurrency
        # The C requests launched together reuse the prefix the row's scout cached: the
        # twin recomputes only 16 tokens of each (tiny's warm_recompute_tokens).
        assert cell.extras is not None and cell.extras.launch_prefix_cache_hit_rate is not None
        hit = cell.extras.launch_prefix_cache_hit_rate
        assert hit == pytest.approx((cell.prompt_tokens - 16) / cell.prompt_tokens)
    over = {(c.context_label, c.concurrency) for c in results.cells if c.status == "over_capacity"}
    assert over == {("1K", 2), ("1K", 4)}
    assert [p.status for p in results.prefill] == ["valid", "valid", "valid"]
    assert [p.prompt_tokens for p in results.prefill] == [256, 1024, 1536]


def test_raw_samples_add_up_to_the_cells_output_tokens(small_run: Path) -> None:
    results = Results.model_validate_json((small_run / "results.json").read_text())
    rows = [json.loads(x) for x in (small_run / "samples.jsonl").read_text().splitlines()]
    for cell in (c for c in results.cells if c.status == "valid"):
        assert cell.extras is not None and cell.figures is not None
        w0, w1 = cell.extras.window_start_s, cell.extras.window_end_s
        assert w0 is not None and w1 is not None
        mine = [
            r
            for r in rows
            if (r["phase"], r["context"], r["concurrency"])
            == ("decode", cell.context_label, cell.concurrency)
        ]
        assert len(mine) == cell.extras.requests_started
        tokens = 0
        for r in mine:
            prev = 0
            for t, cum in zip(r["chunk_s"], r["chunk_tokens"], strict=True):
                if w0 <= t <= w1:
                    tokens += cum - prev
                prev = cum
        assert tokens == cell.figures.output_tokens
    metrics_rows = (small_run / "metrics.jsonl").read_text().splitlines()
    assert any("vllm:num_requests_running" in x for x in metrics_rows)
    tables_md = (small_run / "tables.md").read_text()
    assert "| Sustained decode | 1K | 2 | Over capacity |" in tables_md


def _wait_for_cells(path: Path, n: int, timeout_s: float = 120) -> Results:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            results = Results.model_validate_json((path / "results.json").read_text())
        except (OSError, ValueError):
            results = None
        if results is not None and sum(c.status == "valid" for c in results.cells) >= n:
            return results
        time.sleep(0.1)
    raise AssertionError(f"no {n} finished cells in {path} after {timeout_s} s")


def test_resume_after_kill_9_finishes_without_redoing_cells(
    twin: TwinProcess, tmp_path: Path
) -> None:
    out = tmp_path / "r"
    args = ["--url", twin.url, *SMALL, "--duration", "2", "--out", str(out)]
    proc = bench(*args)
    before = _wait_for_cells(out, 1)
    proc.kill()  # SIGKILL: nothing gets to clean up
    proc.communicate(timeout=30)
    assert (out / "INCOMPLETE").exists()
    killed = Results.model_validate_json((out / "results.json").read_text())
    assert killed.state == "running"
    done = {(c.context_label, c.concurrency): c for c in killed.cells}
    assert len(done) < 6

    rc, _, stderr = finish(bench("--resume", str(out)))
    assert rc == 0, stderr[-2000:]
    after = Results.model_validate_json((out / "results.json").read_text())
    assert after.state == "complete" and not (out / "INCOMPLETE").exists()
    assert after.run_id == before.run_id
    keys = [(c.context_label, c.concurrency, c.trial) for c in after.cells]
    assert len(keys) == len(set(keys)) == 6
    for key, cell in done.items():
        assert after.cell(*key) == cell  # finished cells were kept, not redone
    rows = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    decode_keys = {(r["context"], r["concurrency"]) for r in rows if r["phase"] == "decode"}
    assert decode_keys == {("256", 1), ("256", 2), ("256", 4), ("1K", 1)}
    for cell in after.cells:
        if cell.status == "valid":
            assert cell.extras is not None
            n = sum(
                (r["phase"], r["context"], r["concurrency"])
                == ("decode", cell.context_label, cell.concurrency)
                for r in rows
            )
            assert n == cell.extras.requests_started  # no duplicate raw lines


def test_sigterm_stops_cleanly_and_marks_the_directory_incomplete(
    twin: TwinProcess, tmp_path: Path
) -> None:
    out = tmp_path / "r"
    proc = bench("--url", twin.url, *SMALL, "--duration", "20", "--out", str(out))
    _wait_for_cells(out, 1)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    rc, _, stderr = finish(proc, timeout_s=30)
    assert rc == 130
    assert time.monotonic() - t0 < 10
    assert f"--resume {out}" in stderr
    assert "Traceback" not in stderr
    results = Results.model_validate_json((out / "results.json").read_text())
    assert results.state == "interrupted" and (out / "INCOMPLETE").exists()


def test_a_failing_server_invalidates_cells_with_the_reason(tmp_path: Path) -> None:
    with start_twin(
        "tiny", speed=2.0, extra_args=["--fault-error-fraction", "0.3", "--seed", "3"]
    ) as t:
        rc, _, stderr = finish(
            bench(
                "--url",
                t.url,
                "--contexts",
                "256",
                "--prefill-only-contexts",
                "--concurrencies",
                "4",
                "--max-tokens",
                "256",
                "--duration",
                "4",
                "--out",
                str(tmp_path / "r"),
            )
        )
    assert rc == 0, stderr[-2000:]
    results = Results.model_validate_json((tmp_path / "r" / "results.json").read_text())
    cell = results.cell("256", 4)
    assert cell is not None and cell.status == "invalid" and cell.figures is None
    assert cell.reason is not None and "HTTP 500" in cell.reason
    assert "| Sustained decode | 256 | 4 | Invalid: " in (tmp_path / "r" / "tables.md").read_text()


def test_without_metrics_active_requests_are_counted_client_side_and_recorded(
    tmp_path: Path,
) -> None:
    with start_twin("tiny", speed=2.0, extra_args=["--fault-no-metrics"]) as t:
        rc, stdout, stderr = finish(
            bench(
                "--url",
                t.url,
                "--contexts",
                "256",
                "--prefill-only-contexts",
                "--concurrencies",
                "2",
                "--max-tokens",
                "256",
                "--duration",
                "4",
                "--kv-budget",
                "100000",
                "--out",
                str(tmp_path / "r"),
            )
        )
    assert rc == 0, stderr[-2000:]
    assert "KV capacity: 100,000 tokens (kv_budget" in stdout
    results = Results.model_validate_json((tmp_path / "r" / "results.json").read_text())
    assert results.measurement.active_source == "client_in_flight"
    assert results.measurement.metrics_available is False
    cell = results.cell("256", 2)
    assert cell is not None and cell.figures is not None
    assert cell.figures.active_source == "client_in_flight"
    assert cell.figures.average_active == pytest.approx(2.0, abs=0.3)


LATE_STAMP_S = 0.010  # origin_unix_s maps our monotonic clock onto the twin's wall clock


def test_client_times_match_the_twins_ground_truth(tmp_path: Path) -> None:
    """Our first-token and per-chunk times against the times the twin logged sending them."""
    log = tmp_path / "truth.jsonl"
    with start_twin("tiny", speed=2.0, extra_args=["--ground-truth-log", str(log)]) as t:
        rc, _, stderr = finish(
            bench(
                "--url",
                t.url,
                "--contexts",
                "256",
                "--prefill-only-contexts",
                "--concurrencies",
                "2",
                "--max-tokens",
                "256",
                "--duration",
                "4",
                "--out",
                str(tmp_path / "r"),
            )
        )
    assert rc == 0, stderr[-2000:]
    truth = [json.loads(x) for x in log.read_text().splitlines()]
    rows = [json.loads(x) for x in (tmp_path / "r" / "samples.jsonl").read_text().splitlines()]
    checked = 0
    used: set[str] = set()
    for row in rows:
        if not row["finished"]:
            continue
        origin = row["origin_unix_s"]
        steps = list(row["chunk_tokens"])
        # The twin logs (wall time, tokens) as it hands each chunk to the kernel, and the kernel
        # stamps our read after that. With two streams at once several requests of the twin
        # chunked alike: ours is the one whose first chunk left nearest our first token.
        first = origin + row["first_token_s"]
        alike = [
            g
            for g in truth
            if [sum(n for _, n in g["chunks"][: i + 1]) for i in range(len(g["chunks"]))] == steps
            and g["request_id"] not in used
        ]
        assert alike, f"no request of the twin sent the chunks we received at {first}"
        g = min(alike, key=lambda g: abs(first - g["chunks"][0][0]))
        lag_first = first - g["chunks"][0][0]
        # Within a second, or it is another request (ours at 2 streams last about 0.5 s).
        assert -LATE_STAMP_S <= lag_first < 1.0, (first, lag_first)
        used.add(g["request_id"])
        assert row["prompt_tokens"] == g["prompt_tokens"]
        assert row["tokens"] == g["output_tokens"]
        lags = [
            origin + ours - theirs
            for ours, (theirs, _) in zip(row["chunk_s"], g["chunks"], strict=True)
        ]
        # Never before it was sent (but for the clocks' mapping), and a typical chunk read
        # within 20 ms of its write; one late chunk (a twin descheduled between its stamp and
        # its write on a loaded machine) moves the median of 256 no more than it should.
        assert min(lags) >= -LATE_STAMP_S, (first, min(lags))
        assert sorted(lags)[len(lags) // 2] < 0.02, (first, sorted(lags)[len(lags) // 2])
        checked += 1
    assert checked >= 3


def test_trials_are_aggregated_with_a_confidence_interval(
    twin: TwinProcess, tmp_path: Path
) -> None:
    rc, _, stderr = finish(
        bench(
            "--url",
            twin.url,
            "--contexts",
            "256",
            "--prefill-only-contexts",
            "--concurrencies",
            "1",
            "--max-tokens",
            "256",
            "--duration",
            "2",
            "--trials",
            "2",
            "--out",
            str(tmp_path / "r"),
        )
    )
    assert rc == 0, stderr[-2000:]
    results = Results.model_validate_json((tmp_path / "r" / "results.json").read_text())
    assert [(c.trial, c.status) for c in results.cells] == [(0, "valid"), (1, "valid")]
    assert len(results.prefill) == 2  # each trial has its own cold scout (its own prefix)
    (agg,) = results.aggregates
    assert agg.trials == 2 and agg.total_tok_s.n == 2 and agg.total_tok_s.ci95 is not None
    figs = [c.figures for c in results.cells if c.figures is not None]
    assert agg.total_tok_s.mean == pytest.approx(sum(f.total_tok_s for f in figs) / 2)
    assert "## Repeated trials" in (tmp_path / "r" / "tables.md").read_text()


def test_each_scout_waits_for_the_previous_rows_lingering_streams(tmp_path: Path) -> None:
    """On a twin whose cancelled requests stay in its engine for 1 s of server time, every
    prefill scout reaches the twin only after the engine dropped every request cancelled
    before it (the drain barrier), and one warm-up request comes before the first scout."""
    from bench.twin import profile

    prof = tmp_path / "linger.json"
    tiny = profile.load("tiny").model_dump()
    # Decode 4x slower than tiny's: a request cut at the window's end has seconds of tokens
    # left, so the abort (1 s of server time later) ends it, not its own last token.
    slow = [[4 * s for s in row] for row in tiny["decode_step_s"]]
    data = tiny | {"name": "linger", "abort_delay_s": 1.0, "decode_step_s": slow}
    prof.write_text(json.dumps(data))
    log = tmp_path / "truth.jsonl"
    with start_twin(str(prof), speed=2.0, extra_args=["--ground-truth-log", str(log)]) as t:
        rc, _, stderr = finish(
            bench(
                "--url", t.url, "--contexts", "256", "512", "--prefill-only-contexts",
                "--concurrencies", "2", "--max-tokens", "256", "--duration", "2",
                "--out", str(tmp_path / "r"),
            )
        )  # fmt: skip
    assert rc == 0, stderr[-2000:]
    truth = [json.loads(x) for x in log.read_text().splitlines()]
    scouts = sorted((g for g in truth if g["output_tokens"] == 1), key=lambda g: g["arrival"])
    cancelled = [g for g in truth if g["outcome"] == "cancelled"]
    assert len(scouts) == 2 and cancelled
    for scout in scouts:
        before = [g for g in cancelled if g["arrival"] < scout["arrival"]]
        assert all(g["released"] <= scout["arrival"] for g in before)
    # The second scout follows the first row's cells: their streams really lingered (1 s of
    # server time is 0.5 s here; no chunk is written after the twin saw the client go, so
    # the last chunk bounds that moment from below) and the scout waited for that.
    first_row = [g for g in cancelled if g["arrival"] < scouts[1]["arrival"]]
    assert first_row
    assert all(g["released"] - g["chunks"][-1][0] >= 0.45 for g in first_row)
    assert scouts[1]["arrival"] >= max(g["released"] for g in first_row)
    warmups = [g for g in truth if g["output_tokens"] == 16]
    assert len(warmups) == 1 and warmups[0]["arrival"] < scouts[0]["arrival"]


def test_kv_budget_wins_and_the_start_up_log_is_a_source(tmp_path: Path) -> None:
    """`bench run` names the capacity source it used: --kv-budget over /metrics' label, and
    the server log's "KV cache size" line when /metrics is not there."""
    log = tmp_path / "server.log"
    log.write_text("INFO [kv_cache_utils.py:1087] GPU KV cache size: 5,000 tokens\n")
    quick = [
        "--contexts", "256", "--prefill-only-contexts", "--concurrencies", "1",
        "--max-tokens", "16", "--duration", "1", "--server-log", str(log),
    ]  # fmt: skip
    with start_twin("tiny", speed=2.0) as t:
        rc, out, err = finish(
            bench("--url", t.url, *quick, "--kv-budget", "260", "--out", str(tmp_path / "a"))
        )
    assert rc == 0, err[-2000:]
    assert "KV capacity: 260 tokens (kv_budget: --kv-budget)" in out
    # The twin's label says 2,048: the cell would run; the budget makes it over capacity.
    assert "256 x 1: over capacity (needs 272 KV tokens, the server has 260)" in out
    results = Results.model_validate_json((tmp_path / "a" / "results.json").read_text())
    assert results.plan.kv.source == "kv_budget" and results.measurement.kv_source == "kv_budget"
    with start_twin("tiny", speed=2.0, extra_args=["--fault-no-metrics"]) as t:
        rc, out, err = finish(bench("--url", t.url, *quick, "--out", str(tmp_path / "b")))
    assert rc == 0, err[-2000:]
    assert (
        f'KV capacity: 5,000 tokens (startup_log: {log}: "GPU KV cache size: 5,000 tokens")' in out
    )


def test_results_and_environment_name_the_checkouts_git_version(small_run: Path) -> None:
    """bench's version is git's, computed from this checkout when the run starts (issue 16)."""
    import json

    import bench

    head = subprocess.run(
        ["git", "rev-parse", "--short=7", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert f"+g{head}" in bench.__version__
    results = Results.model_validate_json((small_run / "results.json").read_text())
    assert results.bench_version == bench.__version__
    environment = json.loads((small_run / "environment.json").read_text())
    assert environment["bench"]["version"] == bench.__version__


def test_a_sequential_stage_measures_only_its_open_cells(
    twin: TwinProcess, small_run: Path, tmp_path: Path
) -> None:
    """`bench run` with the arguments a sequential compare adds after the sweep's own: the
    open decode cell and an open prefill row only; merged with a full run, nothing that
    the later run did not plan counts as missing."""
    from bench.verdict.run_source import Verification, load_run, merge_runs
    from bench.verdict.sequential import run_args

    open_cells = frozenset({("decode", "256", 2), ("prefill", "1K", 1)})
    extra = run_args(open_cells)
    assert extra == ("--prefill-only-contexts", "1K", "--cells", "256:2")
    out = tmp_path / "stage2"
    rc, _, stderr = finish(
        bench("--url", twin.url, *SMALL, "--duration", "2", "--out", str(out), *extra)
    )
    assert rc == 0, stderr[-2000:]
    results = Results.model_validate_json((out / "results.json").read_text())
    assert [(c.context_label, c.concurrency) for c in results.cells] == [("256", 2)]
    assert sorted(p.context_label for p in results.prefill) == ["1K", "256"]
    trusted = Verification(unverified=True)
    full, part = load_run(small_run, trusted), load_run(out, trusted)
    assert part.planned == frozenset(
        {("decode", "256", 2), ("prefill", "256", 1), ("prefill", "1K", 1)}
    )
    side = merge_runs([full, part], "A")
    assert len(side.cells[("decode", "256", 2)].trials["tbt_s"]) == 2
    assert len(side.cells[("decode", "256", 1)].trials["tbt_s"]) == 1
    assert side.cells[("decode", "256", 1)].status == "valid"
