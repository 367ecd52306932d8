"""`bench history report`'s page (bench.history.page) on SQLite histories filled with rows:
every cell's trend, a planted change marked and named, hostile strings escaped, a bounded
size for thousands of runs, the filters, and the latest run compared."""

from __future__ import annotations

import dataclasses
import pathlib
import re
from typing import Any

import pytest

from bench.card.model import Card
from bench.cli import main
from bench.errors import Exit, UsageError
from bench.history import matrix, page, rows, runs, schema, sparkline
from bench.history.database import Target
from bench.results import Results
from bench.verdict.run_figures import from_results
from tests.history.conftest import env_of, fill, night, nights, unsigned_record
from tests.support.synth import make_results


def report(target: Target, **kw: Any) -> str:
    with schema.opened(target, create=False) as conn:
        return page.report(conn, kw.pop("figure", "total_tok_s"), where=target.where, **kw)


def decode_cells(results: Results) -> set[tuple[str, int]]:
    return {(c.context_label, c.concurrency) for c in results.plan.cells}


def panel(text: str, title: str) -> str:
    found = re.search(r'<div class="panel" id="panel-\d+" hidden><h2>' + re.escape(title)
                      + r"</h2>(.*?)</div></div>", text, re.S)  # fmt: skip
    assert found, f"no panel {title}"
    return found.group(1)


def test_every_cell_of_the_matrix_has_its_trend_line_and_panel(
    tmp_path: pathlib.Path, card: Card
) -> None:
    target = fill(tmp_path, nights(card, 8))
    text = report(target)
    expected = decode_cells(night(card, 1))
    assert len(expected) == 16  # 8K and 16K, 8 concurrencies each
    assert text.count('<svg class="trend"') == len(expected)
    assert text.count('<td class="cell"') == len(expected)
    assert text.count('<div class="panel"') == len(expected)
    for ctx, conc in expected:
        body = panel(text, f"{ctx}:{conc}: total_tok_s")
        assert body.count("night-0") >= 8  # every run is a row of its series' table
    # Each trend line has a point per run and ends on the latest run's value.
    assert all(len(p.split()) == 8 for p in re.findall(r'<polyline[^>]*points="([^"]*)"', text))
    assert "host gpu01, profile —: 8 runs" in text


def test_a_planted_slowdown_is_marked_in_its_cell_and_named_in_its_panel(
    tmp_path: pathlib.Path, card: Card
) -> None:
    target = fill(tmp_path, nights(card, 12, slow_from=9))
    text = report(target)
    assert text.count('<line class="change"') == 1 and text.count('class="change-point"') == 1
    cell = re.search(r'<td class="cell"[^>]*>((?:(?!</td>).)*<line class="change".*?)</td>',
                     text, re.S)  # fmt: skip
    assert cell and "latest " in cell.group(1) and "1 change</span>" in cell.group(1)
    assert "8K:64, host gpu01" in cell.group(1)  # its tooltip names the cell
    body = panel(text, "8K:64: total_tok_s")
    assert re.search(r"<td>night-08</td>(?:(?!</tr>).)*>last good</td>", body)
    assert re.search(r"<td>night-09</td>(?:(?!</tr>).)*>first bad</td>", body)
    assert "last good night-08 (2026-11-08T02:00:00Z" in body
    assert f"make bisect HOST=gpu01 GOOD={8:040x} BAD={9:040x} CELL=64x8K FIGURE=total" in body
    flat = panel(text, "8K:1: total_tok_s")
    assert "first bad" not in flat and "0 changes found" in flat


def test_a_cell_without_a_value_says_why_and_a_trend_line_spans_its_range_or_a_tenth(
    tmp_path: pathlib.Path, card: Card
) -> None:
    text = report(fill(tmp_path, nights(card, 3, contexts={"251K"})))
    over = {(c.context_label, c.concurrency) for c in night(card, 1, contexts={"251K"}).plan.cells
            if not c.run}  # fmt: skip
    assert over and text.count('class="none">over capacity</text>') == len(over)
    flat = sparkline.svg([5.0, 5.0, 5.0], [], label="<x>")
    assert 'points="4.0,18.0 56.0,18.0 108.0,18.0"' in flat  # drawn across the middle
    assert "<title>&lt;x&gt;</title>" in flat and "change" not in flat
    step = sparkline.svg([10.0, 10.0, 9.0, 9.0], [2], label="")
    assert 'points="4.0,4.0 38.7,4.0 73.3,32.0 108.0,32.0"' in step  # high top, low bottom
    assert '<line class="change" x1="56.0"' in step and 'cx="73.3" cy="32.0" r="2.5"' in step
    # 1 % of noise is drawn as 1 % of a 10 % axis, around the middle, not at full height.
    wiggle = sparkline.svg([100.0, 101.0, 100.0, 99.0], [], label="")
    assert 'points="4.0,18.0 38.7,15.2 73.3,18.0 108.0,20.8"' in wiggle


def test_the_page_reads_sqlite_and_postgresql_alike(db: Target, card: Card) -> None:
    text = report(fill(db, nights(card, 12, slow_from=9, contexts={"8K"})))
    assert text.count('<svg class="trend"') == 8 and text.count('<line class="change"') == 1
    assert "<h2>night-12 against night-11</h2>" in text
    body = panel(text, "8K:64: total_tok_s")
    assert re.search(r"<td>night-09</td>(?:(?!</tr>).)*>first bad</td>", body)


def test_strings_from_the_database_are_escaped(tmp_path: pathlib.Path, card: Card) -> None:
    hostile = '<script>alert("host")</script>'
    records = []
    for n in (1, 2):
        r = night(card, n, contexts={"8K"})
        r = r.model_copy(update={"run_id": f'"><img src=x onerror=alert({n})>\x1b[31m'})
        env = env_of(n, host=hostile)
        env["image"]["digest"] = "sha256:<b>bold</b>"
        records.append(unsigned_record(r, env))
    text = report(fill(tmp_path, records))
    assert text.count("<script>") == 1  # the page's own
    assert "<img src=x" not in text and "<b>bold" not in text and "\x1b" not in text
    assert "&lt;script&gt;alert(&quot;host&quot;)&lt;/script&gt;" in text
    assert 'data-host="&lt;script&gt;alert(&quot;host&quot;)&lt;/script&gt;"' in text
    assert "&quot;&gt;&lt;img src=x onerror=alert(2)&gt;\\x1b[31m" in text
    assert '<option value="&lt;script&gt;alert(&quot;host&quot;)&lt;/script&gt;">' in text


def _clone(record: rows.Record, n: int, host: str) -> rows.Record:
    """RECORD as run N on HOST: its rows with a new key, run id and date (thousands of runs
    without making thousands of results)."""
    sha = f"{n:064x}"
    day = f"2026-{1 + n // 600:02d}-{1 + n % 600 // 24:02d}"
    run = dict(record.run, manifest_sha256=sha, run_id=f"run-{n:05d}", host=host,
               created_at=f"{day}T{n % 24:02d}:00:00Z")  # fmt: skip
    return dataclasses.replace(
        record, run=run, cells=tuple((sha, *c[1:]) for c in record.cells),
        figures=tuple((sha, *f[1:]) for f in record.figures),
    )  # fmt: skip


def test_thousands_of_runs_give_a_page_of_bounded_size_that_says_what_it_left_out(
    tmp_path: pathlib.Path, card: Card
) -> None:
    hosts = [f"gpu{h:02d}" for h in range(6)]
    template = unsigned_record(night(card, 1, contexts={"8K"}), env_of(1))
    total = 3000
    target = fill(tmp_path, [_clone(template, n, hosts[n % 6]) for n in range(total)])
    text = report(target, baseline="run-00000")
    # 8 cells x MAX_SERIES lines of MAX_POINTS points, the rest counted and said.
    lines = re.findall(r'<polyline[^>]*points="([^"]*)"', text)
    assert len(lines) == 8 * matrix.MAX_SERIES
    assert {len(p.split()) for p in lines} == {matrix.MAX_POINTS}
    assert text.count("2 more series not shown") == 8
    assert f"the newest {matrix.MAX_POINTS} of {total // 6} runs" in text
    assert f"({8 * matrix.MAX_SERIES} series here have more;" in text
    assert text.count('<section class="compare"') == 1
    assert "<h2>run-02999 against run-00000</h2>" in text
    assert len(text.encode()) < 3_000_000
    assert text.count("<tr><td>2026-") == 8 * matrix.MAX_SERIES * matrix.MAX_POINTS


def test_the_latest_run_of_each_host_is_compared_the_newest_hosts_first(
    tmp_path: pathlib.Path, card: Card
) -> None:
    template = unsigned_record(night(card, 1, contexts={"8K"}), env_of(1))
    target = fill(tmp_path, [_clone(template, n, f"gpu{n % 6:02d}") for n in range(30)])
    with schema.opened(target, create=False) as conn:
        found = runs.all_runs(conn, host=None, profile=None)
    compared = page.pairs(found, None)
    assert len(compared) == page.MAX_COMPARES
    assert [(p.latest.run_id, p.baseline.run_id if p.baseline else None) for p in compared] == [
        ("run-00029", "run-00023"), ("run-00028", "run-00022"),
        ("run-00027", "run-00021"), ("run-00026", "run-00020"),
    ]  # fmt: skip
    (only,) = page.pairs(found[:3], None)[2:]
    assert only.baseline is None  # gpu02's first run: no run before it in its series
    # --baseline: a run id, or a manifest's sha256; an id two runs share is refused.
    assert runs.chosen(found, "run-00004") is found[4]
    assert runs.chosen(found, found[7].manifest_sha256) is found[7]
    twice = [*found, dataclasses.replace(found[4], manifest_sha256="f" * 64)]
    with pytest.raises(UsageError, match="2 runs have that id"):
        runs.chosen(twice, "run-00004")
    assert runs.chosen(twice, "ffffffff") is twice[-1]
    with pytest.raises(UsageError, match="no such run"):
        page.pairs([], "run-00004")  # an empty history has no baseline either


def test_the_filters_offer_every_host_and_profile_and_every_series_carries_them(
    tmp_path: pathlib.Path, card: Card
) -> None:
    twin = [unsigned_record(night(card, n, contexts={"8K"}), env_of(n, host="gpu02"))
            for n in range(7, 13)]  # fmt: skip
    records = nights(card, 6) + [
        dataclasses.replace(r, run=dict(r.run, launch_profile="twin:quick")) for r in twin
    ]
    text = report(fill(tmp_path, records))
    for ident, names in (("host-filter", ["gpu01", "gpu02"]),
                         ("profile-filter", ["twin:quick", "—"])):  # fmt: skip
        select = re.search(f'<select id="{ident}">(.*?)</select>', text, re.S)
        assert select is not None
        assert re.findall(r'<option value="([^"]*)">', select.group(1)) == ["", *names]
    lines = re.findall(r'<div class="line" data-host="([^"]*)" data-profile="([^"]*)">', text)
    assert sorted(set(lines)) == [("gpu01", "—"), ("gpu02", "twin:quick")]
    assert lines.count(("gpu02", "twin:quick")) == 8 and lines.count(("gpu01", "—")) == 16
    panels = re.findall(r'<div class="series" data-host="([^"]*)" data-profile="([^"]*)">', text)
    assert sorted(set(panels)) == sorted(set(lines)) and len(panels) == len(lines)
    sections = re.findall(r'<section class="compare" data-host="([^"]*)" data-profile="([^"]*)">',
                          text)  # fmt: skip
    assert sections == [("gpu02", "twin:quick"), ("gpu01", "—")]  # the newest first
    assert 'addEventListener("change", apply)' in text
    # Self-contained: nothing is fetched.
    assert not re.search(r'(src|href)="(https?:)?//', text) and "<link" not in text


def test_the_latest_run_is_compared_with_the_run_before_it_or_the_baseline_given(
    tmp_path: pathlib.Path, card: Card
) -> None:
    target = fill(tmp_path, nights(card, 12, slow_from=12))
    text = report(target)
    assert text.count('<section class="compare"') == 1
    assert "<h2>night-12 against night-11</h2>" in text
    assert "CANNOT TELL NOISE FROM CHANGE" in text  # one trial a side, as compare says
    assert "<h3>Sustained decode</h3>" in text
    chosen = report(target, baseline="night-03")
    assert "<h2>night-12 against night-03</h2>" in chosen
    with pytest.raises(UsageError, match="no such run"):
        report(target, baseline="night-99")


def test_a_recorded_run_reads_as_its_bundle_reads_for_compare(
    tmp_path: pathlib.Path, card: Card
) -> None:
    results = make_results(card, contexts={"8K", "251K"}, trials=2, noise=0.01, seed=3)
    target = fill(tmp_path, [unsigned_record(results, env_of(1))])
    with schema.opened(target, create=False) as conn:
        (run,) = runs.all_runs(conn, host=None, profile=None)
        recorded = runs.figures(conn, run)
    bundle = from_results(results, env_of(1))
    assert set(recorded.cells) == set(bundle.cells)
    assert {c.status for c in recorded.cells.values()} >= {"valid", "over_capacity"}
    for key, cell in bundle.cells.items():
        mine = recorded.cells[key]
        assert mine.status == cell.status, key
        assert set(mine.trials) == set(cell.trials), key
        for metric, values in cell.trials.items():
            assert mine.trials[metric] == pytest.approx(values), (key, metric)
    shared = set(recorded.settings) - {"server"}  # the history's own: twin or engine
    assert shared and all(recorded.settings[k] == bundle.settings[k] for k in shared)


def test_the_command_writes_the_page(
    tmp_path: pathlib.Path, card: Card, capsys: pytest.CaptureFixture[str]
) -> None:
    target = fill(tmp_path, nights(card, 6))
    out = tmp_path / "history.html"
    assert main(["history", "report", "--html", str(out), "--db", target.where]) == 0
    assert out.read_text(encoding="utf-8").count('<svg class="trend"') == 16
    assert capsys.readouterr().out.startswith(f"{out}: ")
    assert main(["history", "report", "--html", str(out), "--db", target.where,
                 "--figure", "prefill_tok_s"]) == 0  # fmt: skip
    assert "<th>prefill</th>" in out.read_text(encoding="utf-8")
    assert main(["history", "report", "--html", str(out), "--figure", "nope"]) == Exit.USAGE
    assert "--figure nope: not a figure" in capsys.readouterr().err
    missing = str(tmp_path / "none.sqlite3")
    assert main(["history", "report", "--html", str(out), "--db", missing]) == Exit.USAGE
    assert "no history at" in capsys.readouterr().err
