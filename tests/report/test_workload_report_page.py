"""report.html of a workload run, from a hand-built Results (no server, no sockets): the
points' table and statuses, the two plots at server time, the SLO lines, every outside
text escaped, and no crash where a run has no points (the empty heatmap's crash)."""

from __future__ import annotations

import base64
import json
import math
import re
from pathlib import Path

import pytest

from bench import run_files
from bench.report import workload_page
from bench.report.command import write_report
from bench.report.workload_data import STATUS_MARKERS, load_positions, workload_plot_data
from bench.results import KvCapacity, Plan, Results
from bench.workload_points import PointResult, Quantiles, SloCheck, WorkloadRun
from bench.workload_spec import Arrivals, Lengths, Slo, Workload
from tests.support.runs import small_results

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
HOSTILE = '</td><script>alert("x")</script><img src=x onerror=alert(1)> & =cmd|calc'


def quantiles(base: float, *, n: int = 400, with_ci: bool = True) -> Quantiles:
    """A figure over n requests, in client seconds; the p99's interval with n >= 368."""
    return Quantiles(
        n=n, mean=base, p50=base, p90=1.5 * base, p99=2 * base,
        p50_ci=(0.9 * base, 1.1 * base), p90_ci=(1.4 * base, 1.6 * base),
        p99_ci=(1.8 * base, 2.4 * base) if with_ci else None, min=0.5 * base, max=3 * base,
    )  # fmt: skip


def point(index: int, status: str = "valid", *, trial: int = 0, rate: float | None = None,
          concurrency: int | None = None,
          reasons: tuple[str, ...] = ()) -> PointResult:  # fmt: skip
    base = 0.01 * (index + 1)
    return PointResult.model_validate(
        {
            "index": index, "trial": trial, "offered_rate": rate, "concurrency": concurrency,
            "status": status, "reasons": reasons, "notes": ("prompts: drawn mean 256",),
            "requests": 400, "completed": 398, "failures_by_kind": {"http_status": 2},
            "duration_s": 2.0 + index, "arrival_span_s": 1.9 + index, "sent_rate": 20.0,
            "scheduled_rate": 20.5, "achieved_rate": 19.0 + index, "input_tokens": 100_000,
            "output_tokens": 12_800, "output_tok_s": 6400.0 / (index + 1), "total_tok_s": 5e4,
            "ttft": quantiles(base), "tpot": quantiles(base / 10, with_ci=index != 1),
            "itl": quantiles(base / 20), "e2el": quantiles(base * 5), "lateness": None,
            "backlog_mid": 1, "backlog_end": 3, "goodput_rate": 18.0, "started_at_s": 1.5,
            "slo": [SloCheck(figure="ttft", bound_s=0.05, n=400, over=0, verdict="undecided",
                             more_needed=59)],
        }
    )  # fmt: skip


def workload_results(
    *, closed: bool = False, speed: float = 10.0, points: tuple[PointResult, ...] | None = None,
    description: str = "a test workload", reasons: tuple[str, ...] = (), last: float = 8.0,
) -> Results:  # fmt: skip
    """A workload run measured `speed` times fast: rates 2, 4, `last` per server second
    (x speed per client second), or closed-count C = 1, 2, 4; an SLO of TTFT p99 <= 0.5 s
    and TPOT p99 <= 0.08 s (server time). A `last` of inf stays in memory: results.json
    cannot hold it yet (pydantic writes inf as null, which does not read back)."""
    rates = (2.0, 4.0, last)
    arrivals = (
        Arrivals(kind="closed-count", concurrencies=(1, 2, 4))
        if closed
        else Arrivals(rates=rates, requests=400)
    )
    workload = Workload(
        name="unit-workload", description=description, arrivals=arrivals,
        lengths=Lengths(input_tokens=256, output_tokens=32),
        slo=Slo(ttft_p99_s=0.5, tpot_p99_s=0.08),
    )  # fmt: skip
    if points is None:
        statuses = ("valid", "overloaded", "late_client")
        points = tuple(
            point(i, s, concurrency=(1, 2, 4)[i] if closed else None,
                  rate=None if closed else rates[i] * speed,
                  reasons=reasons if s != "valid" else ())
            for i, s in enumerate(statuses)
        )  # fmt: skip
    run = WorkloadRun(workload=workload, source="unit.toml", sha256="ab" * 32, points=points)
    base = small_results()
    return base.model_copy(
        update={
            "plan": Plan(contexts=(), cells=(), kv=KvCapacity(tokens=None, source="unknown",
                         detail="none"), estimated_duration_s=0.0),
            "prefill": (), "cells": (), "workload": run,
            "server": base.server.model_copy(update={"speed_factor": speed}),
        }
    )  # fmt: skip


def _run_dir(tmp_path: Path, results: Results) -> Path:
    root = tmp_path / "run"
    root.mkdir()
    (root / "results.json").write_text(results.model_dump_json())
    return root


def _status_rows(page: str) -> list[list[str]]:
    table = page.split('<table id="workload-status">')[1].split("</table>", maxsplit=1)[0]
    body = table.split("<tbody>")[1].split("</tbody>", maxsplit=1)[0]
    return [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in body.split("</tr>") if row]


def test_a_workload_reports_its_points_plots_and_statuses(tmp_path: Path) -> None:
    root = _run_dir(tmp_path, workload_results(reasons=("overloaded: grew from 0 to 9",)))
    page = write_report(root).read_text()
    assert page.count('src="data:image/png;base64,') == 2
    for name in (workload_page.LOAD_PLOT, workload_page.THROUGHPUT_PLOT):
        png = (root / "plots" / name).read_bytes()
        assert png.startswith(PNG_MAGIC)
        ident = name.removesuffix(".png")
        inline = re.search(rf'<img id="{ident}" [^>]*base64,([^"]+)"', page)
        assert inline is not None and base64.b64decode(inline.group(1)) == png
    # No card: no heatmap, no matrix.
    assert not (root / "plots" / "decode_heatmap.png").exists()
    assert "Sustained decode" not in page and "<h1>Workload run</h1>" in page
    # The points' table (tables.md's), at server time: 20 req/s at speed 10 is 2.00/s.
    assert "<h2>Workload unit-workload</h2>" in page
    assert "<td>2.00/s</td><td>1</td><td>valid</td><td>398/400</td>" in page
    assert "<td>8.00/s</td><td>1</td><td>late_client</td>" in page
    # Each point's status, its marker and its reasons.
    rows = _status_rows(page)
    assert [r[:4] for r in rows] == [
        ["2.00/s", "1", "valid", "circle"],
        ["4.00/s", "1", "overloaded", "triangle"],
        ["8.00/s", "1", "late_client", "square"],
    ]
    assert rows[1][4] == "overloaded: grew from 0 to 9<br>prompts: drawn mean 256"
    # The SLO bounds, in server time, in the facts and under the plots.
    assert "<dd>TTFT p99 \u2264 500 ms, TPOT p99 \u2264 80 ms</dd>" in page
    assert page.count("Dashed red: the panel&#x27;s SLO bound (TTFT p99 \u2264 500 ms") == 2


def test_plot_data_is_at_server_time_with_the_slo_bounds() -> None:
    data = workload_plot_data(workload_results(speed=10.0, last=math.inf))
    assert not data.closed and (data.slo_ttft_s, data.slo_tpot_s) == (0.5, 0.08)
    first = data.points[0]
    assert first.load == pytest.approx(2.0) and first.output_tok_s == pytest.approx(640.0)
    assert first.ttft is not None and first.ttft.p99 == pytest.approx(0.2)  # 0.02 s x 10
    assert first.ttft.p99_ci == pytest.approx((0.18, 0.24))
    assert [p.status for p in data.points] == ["valid", "overloaded", "late_client"]
    # inf (every request at once) sits at twice the highest finite rate, its tick "inf".
    xs, ticks = load_positions(data.points)
    assert xs == pytest.approx([2.0, 4.0, 8.0])
    assert ticks == [(2.0, "2"), (4.0, "4"), (8.0, "inf")]


def test_closed_count_points_plot_against_concurrency(tmp_path: Path) -> None:
    results = workload_results(closed=True)
    data = workload_plot_data(results)
    assert data.closed and [p.load for p in data.points] == [1.0, 2.0, 4.0]
    page = write_report(_run_dir(tmp_path, results)).read_text()
    assert "TTFT and TPOT (p50, p99) against concurrency" in page
    assert [r[0] for r in _status_rows(page)] == ["C = 1", "C = 2", "C = 4"]


def test_every_status_has_its_own_marker() -> None:
    markers = [m for m, _ in STATUS_MARKERS.values()]
    assert len(set(markers)) == len(markers) == 5


def test_outside_text_is_escaped(tmp_path: Path) -> None:
    """The description, the reasons and (written by hand, past validation) the name."""
    results = workload_results(description=HOSTILE.replace("|", "/"), reasons=(HOSTILE,))
    page = write_report(_run_dir(tmp_path, results)).read_text()
    assert "<script" not in page and "<img src=x" not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page
    assert _status_rows(page)[1][4].startswith(
        "&lt;/td&gt;&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&lt;img src=x"
    )
    run = results.workload
    assert run is not None
    named = run.model_copy(
        update={"workload": Workload.model_construct(**{**dict(run.workload), "name": HOSTILE})}
    )
    text = workload_page.workload_report_page(
        results.model_copy(update={"workload": named}), plots=()
    )
    assert "<script" not in text and "<img src=x" not in text
    assert "&lt;script&gt;" in text.split("<dt>Workload</dt>")[1].split("</dd>")[0]


def test_a_run_without_points_still_has_its_report(tmp_path: Path) -> None:
    """Interrupted before its first point: the plots say so, nothing crashes."""
    root = _run_dir(tmp_path, workload_results(points=()))
    page = write_report(root).read_text()
    assert page.count('src="data:image/png;base64,') == 2
    assert (root / "plots" / workload_page.LOAD_PLOT).read_bytes().startswith(PNG_MAGIC)


def test_several_trials_and_a_failed_point_are_drawn(tmp_path: Path) -> None:
    points = tuple(
        point(i, "failed" if (i, t) == (2, 1) else "valid", trial=t, rate=(20.0, 40.0, 80.0)[i])
        for t in (0, 1)
        for i in range(3)
    )
    page = write_report(_run_dir(tmp_path, workload_results(points=points))).read_text()
    rows = _status_rows(page)
    assert len(rows) == 6 and rows[5][:4] == ["8.00/s", "2", "failed", "cross"]


def test_a_figure_that_is_not_finite_is_not_drawn(tmp_path: Path) -> None:
    """A results.json bench would never write (NaN, 1e308 that overflows at server time):
    the page is made, the figure left out of the plots."""
    data = workload_results().model_dump(mode="json")
    data["workload"]["points"][0]["ttft"]["p99"] = math.nan
    data["workload"]["points"][1]["tpot"]["max"] = 1e308
    data["workload"]["points"][2]["output_tok_s"] = math.inf
    root = tmp_path / "run"
    root.mkdir()
    (root / "results.json").write_text(json.dumps(data))
    page = write_report(root).read_text()
    assert page.count('src="data:image/png;base64,') == 2
    plotted = workload_plot_data(run_files.load_results(root)).points
    assert plotted[0].ttft is None and plotted[1].tpot is None
    assert plotted[2].output_tok_s is None and plotted[2].ttft is not None
