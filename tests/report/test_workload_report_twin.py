"""A real workload run against the twin (`bench run --workload FILE`, profile tiny, 10x fast,
two trials of Poisson arrivals at 2, 4 and 8 requests/s, 40 requests a point, an SLO),
then `bench report` and `bench export` on it, all as the product's own commands: the page
has the workload's plots, its SLO bounds, every point's status, outside text escaped;
the export has every point at server time."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import struct
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from bench import cli, run_files
from bench.export import points
from bench.report import workload_page
from bench.report.workload_data import workload_plot_data
from tests.support.procs import bench_cli
from tests.support.twinproc import start_twin
from tests.support.workloads import rate_toml

pytestmark = pytest.mark.integration  # a real twin and `bench` processes

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
DESCRIPTION = '<script>alert("description")</script> & <b>bold</b>'
WORKLOAD = rate_toml("report-twin", (2, 4, 8), 40, (256, 32), seed=7, description=DESCRIPTION,
                     slo={"ttft_p99_s": 0.5, "tpot_p99_s": 0.05})  # fmt: skip


@pytest.fixture(scope="module")
def workload_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The run directory of a finished workload run, with its report.html, and the CSV
    its export wrote (its points beside it)."""
    base = tmp_path_factory.mktemp("twin-workload-report")
    spec = base / "report-twin.toml"
    spec.write_text(WORKLOAD, encoding="utf-8")
    run = base / "run"
    env = {**os.environ, "BENCH_API_KEY": "k-workload", "BENCH_LOG_FORMAT": "json"}
    with start_twin("tiny", speed=10.0, api_key="k-workload") as twin:
        bench_cli("run", "--url", twin.url, "--workload", str(spec), "--trials", "2",
                  "--out", str(run), env=env)  # fmt: skip
    bench_cli("report", str(run), env=env)
    out = base / "export" / "run.csv"
    out.parent.mkdir()
    printed = bench_cli("export", str(run), "--out", str(out), env=env).split()
    assert printed == [str(out), str(out.with_name("run.points.csv"))]
    return run, out.with_name("run.points.csv")


def _results(run: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((run / "results.json").read_text(encoding="utf-8"))
    return data


def _png_size(png: bytes) -> tuple[int, int]:
    width, height = struct.unpack(">II", png[16:24])
    return width, height


def test_the_page_has_the_two_plots_inline(workload_run: tuple[Path, Path]) -> None:
    run, _ = workload_run
    page = (run / "report.html").read_text(encoding="utf-8")
    assert page.count('src="data:image/png;base64,') == 2 and "<script" not in page
    for name in (workload_page.LOAD_PLOT, workload_page.THROUGHPUT_PLOT):
        png = (run / "plots" / name).read_bytes()
        assert png.startswith(PNG_MAGIC)
        width, height = _png_size(png)
        assert width > 800 and height > 300  # two panels side by side
        inline = re.search(rf'<img id="{name.removesuffix(".png")}" [^>]*base64,([^"]+)"', page)
        assert inline is not None and base64.b64decode(inline.group(1)) == png
    assert sorted(p.name for p in (run / "plots").iterdir()) == sorted(
        (workload_page.LOAD_PLOT, workload_page.THROUGHPUT_PLOT)
    )


def test_the_slo_bounds_are_drawn_at_server_time(workload_run: tuple[Path, Path]) -> None:
    run, _ = workload_run
    results = run_files.load_results(run)
    data = workload_plot_data(results)
    assert (data.slo_ttft_s, data.slo_tpot_s) == (0.5, 0.05)
    # The points' checks hold the bound in client seconds: x 10 is the drawn line.
    assert results.workload is not None and results.speed_factor == 10.0
    checks = {c.figure: c.bound_s for p in results.workload.points for c in p.slo}
    assert checks == {"ttft": pytest.approx(0.05), "tpot": pytest.approx(0.005)}
    page = (run / "report.html").read_text(encoding="utf-8")
    assert "<dd>TTFT p99 \u2264 500 ms, TPOT p99 \u2264 50 ms</dd>" in page
    assert page.count("Dashed red: the panel&#x27;s SLO bound") == 2


def test_every_points_status_is_on_the_page(workload_run: tuple[Path, Path]) -> None:
    run, _ = workload_run
    results = _results(run)
    page = (run / "report.html").read_text(encoding="utf-8")
    table = page.split('<table id="workload-status">')[1].split("</table>")[0]
    shown = re.findall(r"<tr><td>([^<]*)</td><td>(\d+)</td><td>([a-z_]+)</td>", table)
    expected = [
        (f"{p['offered_rate'] / 10:,.2f}/s", str(p["trial"] + 1), p["status"])
        for p in results["workload"]["points"]
    ]
    assert shown == expected and len(shown) == 6
    assert {s for _, _, s in shown} <= {"valid", "overloaded", "late_client", "failed"}


def test_the_description_is_escaped(workload_run: tuple[Path, Path]) -> None:
    page = (workload_run[0] / "report.html").read_text(encoding="utf-8")
    assert "<dd>&lt;script&gt;alert(&quot;description&quot;)&lt;/script&gt; &amp; " in page
    assert "<b>bold</b>" not in page


def test_a_hostile_reason_is_escaped_on_the_page_and_in_the_export(
    workload_run: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hostile = '=HYPERLINK("http://x")</td><script>alert(1)</script>'
    copy = tmp_path / "run"
    shutil.copytree(workload_run[0], copy)
    results = _results(copy)
    results["workload"]["points"][1]["reasons"] = [hostile]
    (copy / "results.json").write_text(json.dumps(results), encoding="utf-8")
    assert cli.main(["report", str(copy)]) == 0
    page = (copy / "report.html").read_text(encoding="utf-8")
    assert "<script>" not in page
    assert "=HYPERLINK(&quot;http://x&quot;)&lt;/td&gt;&lt;script&gt;alert(1)" in page
    out = tmp_path / "x.csv"
    assert cli.main(["export", str(copy), "--out", str(out)]) == 0
    capsys.readouterr()
    df = pd.read_csv(out.with_name("x.points.csv"))
    assert df.reasons[1] == "'" + hostile  # never a formula


def test_the_export_has_every_point_at_server_time(workload_run: tuple[Path, Path]) -> None:
    run, csv = workload_run
    results = _results(run)
    speed = results["server"]["speed_factor"]
    assert speed == 10.0
    df = pd.read_csv(csv, dtype={"bench_commit": str})
    assert list(df.columns) == list(points.POINT_COLUMNS)
    recorded = results["workload"]["points"]
    assert len(df) == len(recorded) == 6  # 3 points x 2 trials
    assert set(df.run_id) == {results["run_id"]} and set(df.workload) == {"report-twin"}
    for (_, row), p in zip(df.iterrows(), recorded, strict=True):
        assert (row.point, row.trial, row.status) == (p["index"], p["trial"], p["status"])
        assert row.offered_rate == pytest.approx(p["offered_rate"] / speed)
        for name in ("achieved_rate", "output_tok_s", "total_tok_s", "sent_rate"):
            assert row[name] == pytest.approx(p[name] / speed), name
        for name in ("duration_s", "arrival_span_s"):
            assert row[name] == pytest.approx(p[name] * speed), name
        assert (row.requests, row.completed) == (p["requests"], p["completed"])
        for figure in ("ttft", "tpot", "itl", "e2el"):
            q = p[figure]
            for part in ("mean", "p50", "p90", "p99"):
                assert row[f"{figure}_{part}"] == pytest.approx(q[part] * speed)
            if q["p99_ci"] is None:  # 40 requests: no p99 interval (ITL's many gaps have one)
                assert pd.isna(row[f"{figure}_p99_lo"]) and pd.isna(row[f"{figure}_p99_hi"])
            else:
                assert row[f"{figure}_p99_lo"] == pytest.approx(q["p99_ci"][0] * speed)
        assert row.slo_ttft_bound_s == pytest.approx(0.5)
        assert row.slo_ttft_verdict == p["slo"][0]["verdict"]


def test_the_export_gives_back_the_tables_numbers(workload_run: tuple[Path, Path]) -> None:
    """tables.md's TTFT and TPOT p99 (ms, server time) are the export's, rounded."""
    run, csv = workload_run
    df = pd.read_csv(csv)
    lines = [
        [c.strip() for c in line.strip()[1:-1].split("|")]
        for line in (run / "tables.md").read_text(encoding="utf-8").splitlines()
        if re.match(r"\| [\d.,]+/s \|", line)
    ]
    assert len(lines) == len(df) == 6
    for cells, (_, row) in zip(lines, df.iterrows(), strict=True):
        assert cells[2] == row.status
        assert (
            cells[8] == f"{row.ttft_p99 * 1e3:,.1f}" and cells[10] == f"{row.tpot_p99 * 1e3:,.1f}"
        )
