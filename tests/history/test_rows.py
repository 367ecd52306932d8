"""What a bundle becomes in the history (bench.history.rows), without a database."""

from __future__ import annotations

import hashlib
import json

from bench.card.model import Card
from bench.history import rows
from bench.results import CellFigures
from tests.history.conftest import environment, unsigned_record
from tests.support.synth import make_results


def test_the_run_row_carries_its_provenance_and_settings(card: Card) -> None:
    results = make_results(card, speed=10.0)
    record = unsigned_record(results, environment(host="gpu07", flags="--tp 4 --max-num-seqs 64"))
    run = record.run
    assert tuple(run) == rows.RUN_COLUMNS
    assert run["run_id"] == results.run_id
    assert run["bench_commit"] is None  # synth's bench version names no commit
    assert run["image_id"] == "sha256:" + "ab" * 32
    assert run["engine_version"] == "0.30.1rc1.dev452+g73a583112"
    assert run["engine_commit"] == "73a5831127a9" + "0" * 28
    assert run["weights_revision"] == "f00dfeed"
    assert run["host"] == "gpu07"
    assert (run["gpu_model"], run["gpu_count"], run["driver_version"]) == (
        "rtx pro 6000",
        4,
        "580.82.07",
    )
    assert run["launch_flags"] == "--max-num-seqs 64 --tp 4"
    assert run["launch_flags_sha256"] == hashlib.sha256(b"--max-num-seqs 64 --tp 4").hexdigest()
    assert run["speed_factor"] == 10.0 and run["twin"] == 0
    settings = json.loads(run["settings_json"])
    assert settings == {
        "window_s": "30", "max_tokens": "4096", "api": "chat", "model": results.server.model,
        "launch_flags": "--max-num-seqs 64 --tp 4", "gpu_count": "4",
        "gpu_model": "rtx pro 6000", "server": "engine",
    }  # fmt: skip
    assert run["settings_sha256"] == hashlib.sha256(run["settings_json"].encode()).hexdigest()


def test_settings_key_changes_with_the_window_not_with_the_engine(card: Card) -> None:
    base = make_results(card, speed=10.0)
    other_engine = make_results(card, speed=10.0, version="0.31.0")
    longer = base.model_copy(
        update={"settings": base.settings.model_copy(update={"duration_s": 60.0})}
    )
    keys = [unsigned_record(r).run["settings_sha256"] for r in (base, other_engine, longer)]
    assert keys[0] == keys[1] != keys[2]


def test_every_cell_and_trial_with_its_status_and_figures_at_server_speed(card: Card) -> None:
    results = make_results(card, speed=10.0, trials=3)
    record = unsigned_record(results)
    decode = [c for c in record.cells if c[1] == "decode"]
    planned = [p for p in results.plan.cells]
    assert len(decode) == 3 * len(planned)
    statuses = {c[6] for c in decode}
    assert statuses == {"valid", "over_capacity"}
    assert any(c[6] == "over_capacity" for c in decode)
    cell = results.cell("8K", 64, 2)
    assert cell is not None and cell.figures is not None
    (value,) = [f[6] for f in record.figures if f[1:6] == ("decode", "8K", 64, 2, "total_tok_s")]
    assert value == cell.figures.total_tok_s / 10.0  # server speed, as tables.md shows it
    # An over-capacity cell has its row and no figure.
    oc = next(c for c in decode if c[6] == "over_capacity")
    assert not [f for f in record.figures if f[1:5] == oc[1:3] + oc[4:6]]


def test_a_figure_out_of_range_makes_its_cell_invalid_and_keeps_no_figure(card: Card) -> None:
    results = make_results(card, speed=1.0)
    cells = list(results.cells)
    i = next(i for i, c in enumerate(cells) if c.status == "valid")
    figures = cells[i].figures
    assert figures is not None
    bad = figures.model_copy(update={"total_tok_s": 1e30})
    assert isinstance(bad, CellFigures)
    cells[i] = cells[i].model_copy(update={"figures": bad})
    record = unsigned_record(results.model_copy(update={"cells": tuple(cells)}))
    key = ("decode", cells[i].context_label, cells[i].concurrency, cells[i].trial)
    (row,) = [c for c in record.cells if (c[1], c[2], c[4], c[5]) == key]
    assert row[6] == "invalid" and "total_tok_s" in str(row[7])
    assert not [f for f in record.figures if f[1:5] == key]


def test_a_flagged_cell_keeps_its_flag(card: Card) -> None:
    results = make_results(card)
    cells = list(results.cells)
    i = next(i for i, c in enumerate(cells) if c.status == "valid")
    cells[i] = cells[i].model_copy(update={"flags": {"gpu_throttled": "SM clock 20 % low"}})
    record = unsigned_record(results.model_copy(update={"cells": tuple(cells)}))
    flagged = [c for c in record.cells if c[8]]
    assert [(c[2], c[4], c[8]) for c in flagged] == [
        (cells[i].context_label, cells[i].concurrency, "gpu_throttled")
    ]
