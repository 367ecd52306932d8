"""Verdict headers say where the figures' software and weights came from (issue 16):
whether the weights were pinned, a model revision that differs between the sides, and the
server packages whose versions differ between the two images."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

from bench.card.model import Card
from bench.cli import main
from bench.results import Results
from tests.support.synth import make_results

pytestmark = pytest.mark.subprocess

REV_A = "a" * 40
REV_B = "b" * 40


def _run_dir(tmp: pathlib.Path, name: str, results: Results, env: dict[str, Any]) -> pathlib.Path:
    root = tmp / name
    root.mkdir()
    (root / "results.json").write_text(results.model_dump_json(indent=2))
    (root / "environment.json").write_text(json.dumps(env))
    return root


def _env(digest: str, packages: dict[str, str], revision: str, *, pinned: bool) -> dict[str, Any]:
    return {
        "image": {"digest": digest, "selftest": {"packages": packages}},
        "weights": {
            "model": "Qwen/Qwen3.5-397B-A17B-GPTQ-Int4",
            "revision": revision,
            "pinned": pinned,
            "files": {"model-00001.safetensors": "c" * 64},
        },
    }


def _twin(results: Results) -> Results:
    server = results.server.model_copy(update={"version_payload": {"twin": {"profile": "x"}}})
    return results.model_copy(update={"server": server})


def test_reproduce_header_says_whether_the_weights_were_pinned(
    card: Card, card_path: pathlib.Path, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pinned = _run_dir(tmp_path, "p", make_results(card), _env("sha256:1", {}, REV_A, pinned=True))
    main(["reproduce", str(pinned), "--card", str(card_path)])
    out = capsys.readouterr().out
    head = out.split("### ")[0]
    assert f"weights: Qwen/Qwen3.5-397B-A17B-GPTQ-Int4 at {REV_A}, pinned." in head

    loose = _run_dir(tmp_path, "u", make_results(card), _env("sha256:1", {}, REV_B, pinned=False))
    main(["reproduce", str(loose), "--card", str(card_path)])
    head = capsys.readouterr().out.split("### ")[0]
    assert f"at {REV_B}, not pinned." in head

    twin = _run_dir(tmp_path, "t", _twin(make_results(card, speed=5.0)), {})
    main(["reproduce", str(twin), "--card", str(card_path)])
    assert "weights: not applicable (twin)" in capsys.readouterr().out.split("### ")[0]

    bare = _run_dir(tmp_path, "n", make_results(card), {})
    main(["reproduce", str(bare), "--card", str(card_path)])
    assert "weights: not recorded" in capsys.readouterr().out.split("### ")[0]


def test_compare_lists_revision_and_package_changes_above_the_tables(
    card: Card, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    same = {"triton": "3.5.0", "numpy": "2.2.1"}
    env_a = _env("sha256:aaa", {**same, "torch": "2.9.0", "gone": "1.0"}, REV_A, pinned=True)
    env_b = _env("sha256:bbb", {**same, "torch": "2.9.1", "new": "0.3"}, REV_B, pinned=False)
    a = _run_dir(tmp_path, "a", make_results(card, trials=3, noise=0.01, seed=1), env_a)
    b = _run_dir(tmp_path, "b", make_results(card, trials=3, noise=0.01, seed=2), env_b)
    main(["compare", str(a), str(b)])
    out = capsys.readouterr().out
    head = out.split("### ")[0]  # everything above the first table
    assert f"- A (a): weights: Qwen/Qwen3.5-397B-A17B-GPTQ-Int4 at {REV_A}, pinned" in head
    assert f"- B (b): weights: Qwen/Qwen3.5-397B-A17B-GPTQ-Int4 at {REV_B}, not pinned" in head
    assert f"- model revision differs: {REV_A} (A) → {REV_B} (B)" in head
    assert "- server packages that differ, image sha256:aaa (A) → image sha256:bbb (B): 3" in head
    changes = [line.strip() for line in head.splitlines() if line.startswith("  - ")]
    assert changes == ["- gone: 1.0 → —", "- new: — → 0.3", "- torch: 2.9.0 → 2.9.1"]
    assert "triton" not in head and "numpy" not in head


def test_compare_same_packages_and_missing_freeze_are_said(
    card: Card, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = _env("sha256:aaa", {"torch": "2.9.0", "triton": "3.5.0"}, REV_A, pinned=True)
    a = _run_dir(tmp_path, "a", make_results(card, seed=1), env)
    b = _run_dir(tmp_path, "b", make_results(card, seed=2), {**env, "image": {"digest": "x"}})
    c = _run_dir(tmp_path, "c", make_results(card, seed=3), env)
    main(["compare", str(a), str(b)])
    head = capsys.readouterr().out.split("### ")[0]
    assert "- server packages: not recorded for B (no package freeze)" in head
    assert "model revision differs" not in head
    main(["compare", str(a), str(c)])
    head = capsys.readouterr().out.split("### ")[0]
    assert "- server packages: the same 2 on both sides" in head


def test_compare_of_twins_says_weights_not_applicable_and_uses_benchs_freeze(
    card: Card, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The twin runs in bench's own Python: its freeze (bench.packages) is the server's."""
    env_a = {"bench": {"packages": {"httpx": "0.28.1"}}}
    env_b = {"bench": {"packages": {"httpx": "0.28.2"}}}
    a = _run_dir(tmp_path, "a", _twin(make_results(card, speed=5.0, seed=1)), env_a)
    b = _run_dir(tmp_path, "b", _twin(make_results(card, speed=5.0, seed=2)), env_b)
    main(["compare", str(a), str(b)])
    head = capsys.readouterr().out.split("### ")[0]
    assert "- A (a): weights: not applicable (twin); image not recorded" in head
    assert "  - httpx: 0.28.1 → 0.28.2" in head


def test_a_side_whose_runs_loaded_other_weights_says_so(
    card: Card, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pk = {"torch": "2.9.0"}
    a1 = _run_dir(tmp_path, "a1", make_results(card, seed=1), _env("i", pk, REV_A, pinned=False))
    a2 = _run_dir(tmp_path, "a2", make_results(card, seed=2), _env("i", pk, REV_B, pinned=False))
    b = _run_dir(tmp_path, "b", make_results(card, seed=3), _env("i", pk, REV_A, pinned=True))
    main(["compare", str(a1), str(a2), "--vs", str(b)])
    head = capsys.readouterr().out.split("### ")[0]
    assert f"(its 2 runs used 2 revisions: {REV_A}, {REV_B})" in head
