"""`bench card import --from PUBLISHER FILE` and `bench card export`, as a user runs them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.cli import main
from bench.publishers import mlperf, vllm_dashboard
from bench.publishers.model import PublisherCard
from tests.publishers.paths import MLPERF_SERVER, MLPERF_SYSTEM

DATA = Path(__file__).resolve().parents[1] / "data" / "publishers"
VLLM_ONE = DATA / "vllm-dashboard" / "serving_llama8B_tp1_sharegpt_qps_4.json"
MLPERF = MLPERF_SERVER


def _one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_import_a_vllm_result_then_export_it_gives_the_published_figures_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    card_path = tmp_path / "card.json"
    assert (
        main(["card", "import", "--from", "vllm-dashboard", str(VLLM_ONE), "-o", str(card_path)])
        == 0
    )
    card = PublisherCard.model_validate_json(card_path.read_text())
    assert card.publisher == "vllm-dashboard" and card.figures
    out = tmp_path / "back.json"
    assert main(["card", "export", str(card_path), "-o", str(out)]) == 0
    back = json.loads(out.read_text())
    published = json.loads(VLLM_ONE.read_text())
    for f in card.figures:
        assert back[f.name] == published[f.name]
    assert back == vllm_dashboard.export(card)


def test_import_an_mlperf_summary_with_its_system(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    card_path = tmp_path / "card.json"
    args = ["card", "import", "--from", "mlperf", str(MLPERF), "--system", str(MLPERF_SYSTEM)]
    assert main([*args, "-o", str(card_path)]) == 0
    card = PublisherCard.model_validate_json(card_path.read_text())
    assert card.publisher == "mlperf" and card.gpu_count == 8
    assert {c.figure for c in card.constraints} == {"ttft", "tpot"}
    assert main(["card", "export", str(card_path)]) == 0
    assert json.loads(capsys.readouterr().out) == mlperf.export(card)


@pytest.mark.parametrize(
    ("publisher", "path", "looks"),
    [
        ("inferencex", VLLM_ONE, "a vLLM serving benchmark result"),
        ("vllm-dashboard", MLPERF, "an MLPerf Inference log summary"),
        ("mlperf", VLLM_ONE, "a vLLM serving benchmark result"),
    ],
)
def test_a_file_in_another_publishers_format_is_refused_naming_the_one_it_looks_like(
    publisher: str, path: Path, looks: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["card", "import", "--from", publisher, str(path)]) == 2
    line = _one_line_error(capsys)
    assert f"looks like {looks}" in line and "--from" in line


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--select", "conc"], "write KEY=VALUE"),
        (["--select", "=4"], "write KEY=VALUE"),
        (["--select", "a=1", "--select", "a=2"], "names 'a' twice"),
        (["--system", str(MLPERF_SYSTEM)], "--system is for --from mlperf only"),
    ],
)
def test_bad_selections_are_one_line_usage_errors(
    extra: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["card", "import", "--from", "vllm-dashboard", str(VLLM_ONE), *extra]) == 2
    assert said in _one_line_error(capsys)


def test_select_is_refused_for_the_speed_test_card(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["card", "import", str(VLLM_ONE), "--select", "id=1"]) == 2
    assert "--select and --system are for --from" in _one_line_error(capsys)


def test_export_refuses_a_file_that_is_not_a_publishers_card(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "x.json"
    bad.write_text('{"publisher": "someone", "figures": []}')
    assert main(["card", "export", str(bad)]) == 2
    assert "is not a publisher's card" in _one_line_error(capsys)
    bad.write_bytes(b"\xff\xfe")
    assert main(["card", "export", str(bad)]) == 2
    assert "not UTF-8" in _one_line_error(capsys)


def test_an_inferencex_dump_folder_is_read_and_another_publishers_folder_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = DATA / "inferencex"
    out = tmp_path / "card.json"
    assert (
        main(
            [
                "card",
                "import",
                "--from",
                "inferencex",
                str(folder),
                "--select",
                "id=101",
                "-o",
                str(out),
            ]
        )
        == 0
    )
    card = PublisherCard.model_validate_json(out.read_text())
    assert card.publisher == "inferencex" and card.point_id == "101"
    capsys.readouterr()
    assert main(["card", "import", "--from", "mlperf", str(folder)]) == 2
    assert "is a folder" in _one_line_error(capsys)


def test_stand_in_lengths_for_a_dataset_that_cannot_ship_are_kept_and_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "card.json"
    args = ["card", "import", "--from", "mlperf", str(MLPERF), "-o", str(out)]
    assert main([*args, "--lengths", "1024, 300"]) == 0
    card = PublisherCard.model_validate_json(out.read_text())
    assert (card.workload.input_tokens, card.workload.output_tokens) == (1024, 300)
    assert any("1,024 in and 300 out given at import" in n for n in card.not_reproducible)
    assert main(["card", "workload", str(out)]) == 0  # refused without them (the dataset)
    assert "input_tokens = 1024" in capsys.readouterr().out
    for bad in ("1024", "0,300", "a,b", "1024,300,5", "1024,99999999"):
        assert main([*args, "--lengths", bad]) == 2
        assert "--lengths" in _one_line_error(capsys)
    card_path = tmp_path / "vllm.json"
    assert (
        main(["card", "import", "--from", "vllm-dashboard", str(VLLM_ONE), "-o", str(card_path)])
        == 0
    )
    capsys.readouterr()
    random = (
        DATA
        / "vllm-dashboard"
        / "serving_qwen3_8b_tp1_random_in1k_out2k_qps_10_concurrency_200.json"
    )
    assert (
        main(["card", "import", "--from", "vllm-dashboard", str(random), "--lengths", "8,8"]) == 2
    )
    assert "gives its own lengths" in _one_line_error(capsys)
