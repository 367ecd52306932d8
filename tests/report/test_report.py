"""report.html and the plots, from results shaped like the published card."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bench import cli
from bench.report import data
from bench.report.command import write_report
from tests.support.runs import card_results

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _run_dir(tmp_path: Path, speed_factor: float = 1.0) -> Path:
    root = tmp_path / "run"
    root.mkdir()
    (root / "results.json").write_text(card_results(speed_factor).model_dump_json())
    return root


def test_report_is_self_contained_with_the_cards_tables_and_four_plots(tmp_path: Path) -> None:
    root = _run_dir(tmp_path)
    page = write_report(root).read_text()
    # No network: nothing fetched from anywhere, the images are inline.
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert "<script" not in page and "<link" not in page and "@import" not in page
    assert page.count('src="data:image/png;base64,') == 4
    # The card's numbers, in its format, from bench.run.card_tables.
    assert "<td>1,259.4<br>21,500 ms TTFT</td>" in page
    assert "<td>5,144</td><td>1,592 ms TTFT</td>" in page
    matrix = page.split("<h2>Sustained decode</h2>")[1].split("<h2>All measurements</h2>")[0]
    assert matrix.count('<td class="over">Over capacity</td>') == 15
    for name in (
        "decode_heatmap.png", "prefill_vs_context.png", "latency_vs_concurrency.png",
        "frontier.png",
    ):  # fmt: skip
        assert (root / "plots" / name).read_bytes().startswith(PNG_MAGIC)


def test_a_fast_twin_run_is_shown_at_server_speed(tmp_path: Path) -> None:
    page = write_report(_run_dir(tmp_path, speed_factor=10.0)).read_text()
    assert "10&times; faster than real time" in page
    assert "<td>73.0<br>471 ms TTFT</td>" in page  # measured 730 tok/s, 47.1 ms


def test_plot_data_matches_the_card_and_marks_cells_not_run() -> None:
    cells = {(c.context_label, c.concurrency): c for c in data.decode_cells(card_results(4.0))}
    assert cells[("8K", 128)].total_tok_s == pytest.approx(1259.4)
    assert cells[("8K", 128)].tbt_s == pytest.approx(0.1423)
    assert cells[("251K", 8)].status == "over_capacity" and cells[("251K", 8)].total_tok_s is None
    prefill = {p.context_label: p for p in data.prefill_points(card_results(4.0))}
    assert prefill["256K"].prefill_tok_s == pytest.approx(4467.0)
    assert prefill["256K"].ttft_s == pytest.approx(57.575)


def test_environment_is_shown_when_present(tmp_path: Path) -> None:
    root = _run_dir(tmp_path)
    env = {
        "gpu": {"available": True, "driver_version": "580.95.05", "cuda_version": "13.0",
                "gpus": [{"name": "NVIDIA RTX PRO 6000 Blackwell Server Edition"}] * 4},
        "host": {"hostname": "gpu01", "memory_total_bytes": 512 * 2**30},
        "image": {"in_container": True, "digest": "sha256:" + "cd" * 32},
        "launch": {"source": "proc", "argv": ["vllm", "serve", "--api-key", "********"]},
        "vllm_version": "0.30.1rc1.dev452+g73a583112",
    }  # fmt: skip
    (root / "environment.json").write_text(json.dumps(env))
    page = write_report(root).read_text()
    assert "4 \u00d7 NVIDIA RTX PRO 6000 Blackwell Server Edition" in page
    assert "580.95.05 / 13.0" in page and "sha256:" + "cd" * 32 in page
    assert "vllm serve --api-key ********" in page


def test_cli_report_without_results_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["report", str(tmp_path)]) == 2
    assert "results.json: missing" in capsys.readouterr().err


def test_gpu_telemetry_table_when_the_run_sampled_gpus(tmp_path: Path) -> None:
    from bench.host import telemetry

    root = _run_dir(tmp_path)
    csv = (Path(__file__).parents[1] / "host" / "data" / "nvidia_smi_telemetry.csv").read_text()
    telemetry.append_window(
        root / telemetry.GPU_TELEMETRY_NAME, context_label="8K", concurrency=1, trial=0,
        samples=telemetry.parse_telemetry(csv, with_throttle=True), output_tokens=100,
    )  # fmt: skip
    page = write_report(root).read_text()
    section = page.split("<h2>GPU telemetry</h2>")[1].split("</table>")[0]
    # Mean power GPU0 500 W + GPU1 400 W; 925 J / 100 tokens.
    assert "<td>900</td>" in section and "<td>9.250</td>" in section
    assert "sw_power_cap 67%" in section and "hw_thermal_slowdown 33%" in section
    assert "<td>2,100</td>" in section and "<td>88</td>" in section


def test_report_shows_spec_decode_acceptance_and_the_launch_hit_rate(tmp_path: Path) -> None:
    from bench.results import CellExtras

    results = card_results()
    extras = CellExtras(
        spec_decode_acceptance_rate=0.4,
        spec_decode_acceptance_length=1.8,
        launch_prefix_cache_hit_rate=0.9,
    )
    cells = tuple(
        c.model_copy(update={"extras": extras}) if c.status == "valid" else c for c in results.cells
    )
    root = tmp_path / "run"
    root.mkdir()
    (root / "results.json").write_text(
        results.model_copy(update={"cells": cells}).model_dump_json()
    )
    page = write_report(root).read_text()
    assert '<p class="note">Speculative decoding: acceptance rate 40.0 % ' in page
    assert "mean acceptance length 1.80 tokens per step" in page
    assert "launches together: 90.0 % over 33 cells" in page
