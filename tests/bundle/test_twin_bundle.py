"""End to end on a real twin: run, record, report, sign, pack, verify; the API key nowhere.

The twin gets its API key on the command line on purpose (the worst case a launch can
have), so `bench environment` reading the server's argv from /proc must redact it. A
stand-in nvidia-smi on PATH (one H200 drawing a steady 300 W) lets the run record GPU
telemetry for every window as it would on a GPU host.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import pytest

from bench.host import procs
from bench.results import SCHEMA_VERSION
from tests.support.procs import bench_cli

pytestmark = pytest.mark.integration

_NVIDIA_SMI = r"""#!/bin/bash
case "$*" in
  *--query-gpu=index,*)
    echo "0, NVIDIA H200, GPU-0a1b2c3d, 00000000:18:00.0, 143771, 700.00, 1980, 570.86.15";;
  -q) echo "CUDA Version                              : 12.8";;
  *-lms*)
    while :; do
      now=$(date +'%Y/%m/%d %H:%M:%S.%3N')
      printf '%s, 0, 300.00, 1980, 55, 90, 40, 0x0000000000000024\n' "$now"
      sleep 0.05
    done;;
  *) echo 0x0000000000000000;;
esac
"""


@pytest.fixture(scope="module")
def twin_bundle(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """(packed bundle, allowed-signers file, the API key) from one real twin run."""
    tmp = tmp_path_factory.mktemp("twin-bundle")
    key = "sk-twin-" + secrets.token_hex(16)
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(_NVIDIA_SMI)
    (bin_dir / "nvidia-smi").chmod(0o755)
    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "HOME": str(tmp / "home"),
        "BENCH_API_KEY": key,
        "BENCH_LOG_FORMAT": "json",
    }
    server_log = tmp / "server.log"
    with server_log.open("w") as log:
        twin = subprocess.Popen(
            [sys.executable, "-m", "bench", "twin", "serve", "--profile", "tiny",
             "--speed", "10", "--port", "0", "--api-key", key],
            stdout=subprocess.PIPE, stderr=log, text=True, env=env,
        )  # fmt: skip
    try:
        assert twin.stdout is not None
        banner = twin.stdout.readline()
        found = re.search(r"http://127\.0\.0\.1:(\d+)", banner)
        assert found, f"the twin did not report its port: {banner!r}"
        port = found.group(1)
        run = tmp / "run-twin"
        bench_cli(
            "run", "--url", f"http://127.0.0.1:{port}", "--contexts", "512", "1K",
            "--prefill-only-contexts", "--concurrencies", "1", "2", "4",
            "--duration", "5", "--max-tokens", "128", "--out", str(run),
            env=env,
        )  # fmt: skip
    finally:
        procs.stop(twin, grace_s=30)
        if twin.stdout is not None:
            twin.stdout.close()
    shutil.copyfile(server_log, run / "server.log")
    bench_cli("report", str(run), env=env)
    keyfile = tmp / "keys" / "bench_ed25519"
    line = bench_cli("keygen", "--out", str(keyfile), "--principal", "ci@twin", env=env)
    allowed = tmp / "allowed_signers"
    allowed.write_text(line.strip().splitlines()[-1] + "\n")
    bench_cli("sign", str(run), "--key", str(keyfile), env=env)
    archive = tmp / "run-twin.tar.gz"
    bench_cli("pack", str(run), "--out", str(archive), env=env)
    return archive, allowed, key


def test_the_api_key_appears_in_no_file_of_the_bundle(twin_bundle: tuple[Path, Path, str]) -> None:
    archive, _, key = twin_bundle
    with tempfile.TemporaryDirectory() as scratch, tarfile.open(archive) as tar:
        tar.extractall(scratch, filter="data")
        files = [p for p in Path(scratch).rglob("*") if p.is_file()]
        names = {p.relative_to(scratch).as_posix().split("/", 1)[1] for p in files}
        hits = [p.name for p in files if key.encode() in p.read_bytes()]
    # The bundle has what it should, so "no hits" is not "no files".
    for expected in (
        "results.json", "tables.md", "environment.json", "server.log", "report.html",
        "plots/decode_heatmap.png", "manifest.json", "manifest.json.sig",
    ):  # fmt: skip
        assert expected in names, sorted(names)
    assert hits == []


def test_the_launch_was_read_from_proc_and_redacted(twin_bundle: tuple[Path, Path, str]) -> None:
    import json

    archive, _, _ = twin_bundle
    with tarfile.open(archive) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("/environment.json"))
        handle = tar.extractfile(member)
        assert handle is not None
        env = json.loads(handle.read())
    launch = env["launch"]
    assert launch["source"] == "proc"
    argv = launch["argv"]
    assert argv[argv.index("--api-key") + 1] == "********"
    assert "twin" in argv and "serve" in argv
    assert launch["env"]["BENCH_API_KEY"] == "********"
    assert env["bench"]["settings"]["api_key"] == "********"
    assert env["gpu"]["available"] is True
    assert env["gpu"]["gpus"][0]["name"] == "NVIDIA H200"
    assert (env["gpu"]["driver_version"], env["gpu"]["cuda_version"]) == ("570.86.15", "12.8")


def test_every_measured_window_has_gpu_telemetry_and_energy_per_token(
    twin_bundle: tuple[Path, Path, str],
) -> None:
    import json

    archive, _, _ = twin_bundle
    with tarfile.open(archive) as tar:

        def read(suffix: str) -> bytes:
            member = next(m for m in tar.getmembers() if m.name.endswith(suffix))
            handle = tar.extractfile(member)
            assert handle is not None
            return handle.read()

        results = json.loads(read("/results.json"))
        windows = [json.loads(line) for line in read("/gpu_telemetry.jsonl").splitlines()]
        report = read("/report.html").decode()
        tables = read("/tables.md").decode()
    measured = {
        (c["context_label"], c["concurrency"]) for c in results["cells"] if c["figures"] is not None
    }
    assert measured, "the run measured no cell"
    by_cell = {(w["context_label"], w["concurrency"]): w for w in windows}
    assert set(by_cell) == measured
    for key in measured:
        w = by_cell[key]
        assert len(w["samples"]) >= 2, key
        assert w["telemetry"]["gpus"][0]["throttle_reasons"] == {
            "sw_power_cap": 1.0,
            "sw_thermal_slowdown": 1.0,
        }
        # 300 W over the sampled span, divided by the window's output tokens.
        span_s = w["samples"][-1]["at_s"] - w["samples"][0]["at_s"]
        expected = 300.0 * span_s / w["output_tokens"]
        assert w["telemetry"]["energy_per_output_token_j"] == pytest.approx(expected, rel=1e-6)
    assert "<h2>GPU telemetry</h2>" in report
    # The stand-in's GPU has its power cap active in every sample: every measured cell is
    # flagged, with why, and the tables say so. It refuses the energy counter's field
    # (answers no number), so energy came from the power samples, and the bundle says so.
    assert results["schema_version"] == SCHEMA_VERSION
    for cell in results["cells"]:
        if cell["figures"] is not None:
            assert cell["flags"] == {
                "gpu_throttled": "sw_thermal_slowdown active in 100% of samples"
            }
            assert cell["gpu"]["energy_source"] == "power_integral"
    assert results["measurement"]["energy_from"] == "power_integral"
    assert "TTFT<br>GPU throttled" in tables
    assert f"GPUs: {len(measured)} of {len(measured)} decode cells are marked GPU" in tables


def test_bench_verify_accepts_it_and_names_the_signer(twin_bundle: tuple[Path, Path, str]) -> None:
    archive, allowed, _ = twin_bundle
    env = {"PATH": os.environ["PATH"], "HOME": str(archive.parent / "home")}
    out = bench_cli("verify", str(archive), "--allowed-signers", str(allowed), env=env)
    assert out.startswith(f"OK {archive}: run ")
    assert "signed by ci@twin (ssh-ed25519 SHA256:" in out


def test_headless_chromium_renders_the_report_offline(
    twin_bundle: tuple[Path, Path, str], tmp_path: Path
) -> None:
    chromium = shutil.which("chromium")
    assert chromium, "chromium is not installed: run `make report-tools` (Debian's chromium)"
    archive, _, _ = twin_bundle
    with tarfile.open(archive) as tar:
        tar.extractall(tmp_path / "open", filter="data")
    report = next((tmp_path / "open").rglob("report.html"))
    shot = tmp_path / "report.png"
    done = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}",
         f"--screenshot={shot}", "--window-size=1280,2400", report.as_uri()],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert shot.stat().st_size > 50_000  # a blank page is a few KB
