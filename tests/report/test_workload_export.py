"""`bench export` of a workload run, from a hand-built Results (no server): the points'
rows at server time, their columns as docs/report.md lists them, Parquet's types, text
escaped for spreadsheets, and no points file for a run of the card's matrix."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd
import pytest

from bench import cli
from bench.export import points
from bench.results import Results
from tests.report.test_workload_report_page import HOSTILE, point, workload_results
from tests.support.runs import write_run_dir

DOCS = Path(__file__).resolve().parents[2] / "docs" / "report.md"


def _run_dir(tmp_path: Path, results: Results) -> Path:
    root = tmp_path / "run"
    root.mkdir()
    (root / "results.json").write_text(results.model_dump_json())
    return root


def test_a_row_per_point_and_trial_at_server_time() -> None:
    results = workload_results(speed=10.0, last=math.inf)
    rows = points.point_rows(results)
    assert len(rows) == 3 and all(list(r) == list(points.POINT_COLUMNS) for r in rows)
    first, _, last = rows
    p = results.workload.points[0] if results.workload else None
    assert p is not None and p.ttft is not None and p.ttft.p99_ci is not None
    assert first["workload"] == "unit-workload" and first["kind"] == "rate"
    assert (first["point"], first["trial"], first["status"]) == (0, 0, "valid")
    # Rates / 10, durations x 10, counts as they are.
    assert first["offered_rate"] == pytest.approx(2.0) and first["all_at_once"] is False
    assert first["achieved_rate"] == pytest.approx(p.achieved_rate / 10)
    assert first["output_tok_s"] == pytest.approx(p.output_tok_s / 10)
    assert first["duration_s"] == pytest.approx(p.duration_s * 10)
    assert first["started_at_s"] == pytest.approx(15.0)
    assert (first["requests"], first["completed"], first["backlog_end"]) == (400, 398, 3)
    assert first["ttft_p99"] == pytest.approx(p.ttft.p99 * 10)
    assert first["ttft_mean"] == pytest.approx(p.ttft.mean * 10)
    assert (first["ttft_p99_lo"], first["ttft_p99_hi"]) == pytest.approx(
        (p.ttft.p99_ci[0] * 10, p.ttft.p99_ci[1] * 10)
    )
    assert first["lateness_p50"] is None and first["held_mean"] is None  # none measured
    assert first["failures"] == "http_status=2" and first["notes"] == "prompts: drawn mean 256"
    assert first["slo_ttft_verdict"] == "undecided"
    assert first["slo_ttft_bound_s"] == pytest.approx(0.5)  # 0.05 client s x 10
    assert (first["slo_ttft_n"], first["slo_ttft_more_needed"]) == (400, 59)
    assert first["slo_tpot_verdict"] is None
    # The second point has no p99 interval for TPOT; inf is all at once.
    assert rows[1]["tpot_p99_lo"] is None and rows[1]["tpot_p99"] is not None
    assert last["offered_rate"] is None and last["all_at_once"] is True


def test_closed_count_rows_carry_the_concurrency() -> None:
    rows = points.point_rows(workload_results(closed=True))
    assert [r["concurrency"] for r in rows] == [1, 2, 4]
    assert {r["kind"] for r in rows} == {"closed-count"}
    assert {r["offered_rate"] for r in rows} == {None} == {r["all_at_once"] for r in rows}


def test_a_figure_that_is_not_finite_is_left_empty() -> None:
    nan = point(0, rate=20.0).model_copy(update={"output_tok_s": math.nan})
    rows = points.point_rows(workload_results(points=(nan,)))
    assert rows[0]["output_tok_s"] is None and rows[0]["total_tok_s"] is not None


def test_every_column_is_documented() -> None:
    text = DOCS.read_text(encoding="utf-8").split("**Points**")[1].split("**Requests**")[0]
    named = set(re.findall(r"`([a-z0-9_<>]+)`", text))
    expanded = set()
    for name in named:
        if name.startswith("<d>_"):
            expanded |= {name.replace("<d>", d) for d in points.DISTRIBUTIONS}
        elif name.startswith("slo_<f>_"):
            expanded |= {name.replace("<f>", f) for f in points.SLO_FIGURES}
        else:
            expanded.add(name)
    assert set(points.POINT_COLUMNS) <= expanded


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_every_format_writes_the_points_beside_the_figures(
    tmp_path: Path, fmt: str, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _run_dir(tmp_path, workload_results(reasons=('=HYPERLINK("http://x")', HOSTILE)))
    out = tmp_path / "out" / f"run.{fmt}"
    out.parent.mkdir()
    assert cli.main(["export", str(root), "--format", fmt, "--out", str(out)]) == 0
    got = out.with_name(f"run.points.{fmt}")
    assert capsys.readouterr().out.split() == [str(out), str(got)]
    df = {"csv": pd.read_csv, "jsonl": lambda p: pd.read_json(p, lines=True),
          "parquet": pd.read_parquet}[fmt](got)  # fmt: skip
    assert list(df.columns) == list(points.POINT_COLUMNS) and len(df) == 3
    assert list(df.status) == ["valid", "overloaded", "late_client"]
    assert df.ttft_p99[0] == pytest.approx(0.2)  # 0.02 client s x 10
    if fmt == "parquet":  # each column its type, even all empty
        kinds = {str(df[c].dtype) for c in ("held_mean", "slo_e2el_bound_s")}
        assert kinds == {"float64"} and str(df.requests.dtype) == "int64"
    if fmt == "csv":  # a reason that starts like a formula is never one
        assert df.reasons[1].startswith("'=HYPERLINK(") and HOSTILE in df.reasons[1]


def test_a_card_run_has_no_points_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = write_run_dir(tmp_path / "run")
    out = tmp_path / "run.csv"
    assert cli.main(["export", str(root), "--out", str(out)]) == 0
    assert capsys.readouterr().out.split() == [str(out)]
    assert not (tmp_path / "run.points.csv").exists()
