"""Reproduce and compare on real bundles: the twin as a server, `bench run` measuring it."""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
import sys
from datetime import UTC, datetime

import pytest

from bench.bundle import seal
from bench.bundle.pack import pack
from bench.verdict.card_source import load_card
from bench.verdict.compare import Policy, compare
from bench.verdict.reproduce import Tolerances, reproduce
from bench.verdict.run_source import Verification, load_run
from tests.bundle.conftest import Keys
from tests.support.twinproc import start_twin

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
SPEED = 5.0


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bench", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=500,
    )


def _cut_tokens(src: pathlib.Path, dest: pathlib.Path, context: str, concurrency: int) -> None:
    """A copy of a run whose one cell received 10 % fewer output tokens."""
    shutil.copytree(src, dest)
    data = json.loads((src / "results.json").read_text())
    hit = 0
    for cell in data["cells"]:
        if (cell["context_label"], cell["concurrency"]) == (context, concurrency):
            fig = cell["figures"]
            fig["output_tokens"] = round(fig["output_tokens"] * 0.9)
            fig["total_tok_s"] = fig["output_tokens"] / fig["measured_for_s"]
            hit += 1
    assert hit == 1
    (dest / "results.json").write_text(json.dumps(data))


def test_twin_bundle_reproduce_and_a_cut_cell(
    tmp_path: pathlib.Path, card_path: pathlib.Path, signer: Keys
) -> None:
    run_dir = tmp_path / "run"
    with start_twin("published", speed=SPEED) as twin:
        done = _bench(
            "run",
            "--url",
            twin.url,
            "--contexts",
            "8K",
            "--prefill-only-contexts",
            "--concurrencies",
            "1",
            "2",
            "--duration",
            "10",
            "--out",
            str(run_dir),
        )
        assert done.returncode == 0, done.stderr[-2000:]
    signed = tmp_path / "signed"
    shutil.copytree(run_dir, signed)
    seal.seal(signed, signer.private, now=datetime.now(UTC))
    bundle = pack(signed, tmp_path / "run.tar.gz")

    trusted = ("--allowed-signers", str(signer.allowed))
    shown = _bench("reproduce", str(bundle), "--card", str(card_path), *trusted)
    # A 10 s window is not the card's 30 s: not comparable (exit 10) until accepted.
    assert shown.returncode == 10, shown.stderr
    assert "- window_s: 10 / 30" in shown.stdout
    shown = _bench(
        "reproduce", str(bundle), "--card", str(card_path), *trusted, "--accept", "window_s"
    )
    assert shown.returncode in (1, 9), shown.stderr  # 9: PARTIAL (3 of the card's 55 cells)
    assert f"Twin speed factor {SPEED:g}: our rates divided by {SPEED:g}" in shown.stdout
    assert "52 of the card's 55 cells not measured here" in shown.stdout

    card = load_card(card_path)
    how = Verification((signer.allowed,))
    base = reproduce(load_run(bundle, how), card, Tolerances())
    assert load_run(bundle, how).speed_factor == SPEED
    # Our side is at server speed: results.json's client-clock rates divided by the speed.
    raw = json.loads((run_dir / "results.json").read_text())
    client = {(c["context_label"], c["concurrency"]): c["figures"] for c in raw["cells"]}
    totals = {}
    for check in base.cells:
        for f in check.figures:
            if f.metric.name == "total_tok_s" and f.ours is not None:
                fig = client[(check.key[1], check.key[2])]
                assert f.ours == pytest.approx(fig["total_tok_s"] / SPEED, rel=1e-12)
                assert f.delta_pct is not None
                totals[check.key] = f.delta_pct
            if f.metric.name == "ttft_s" and f.ours is not None:
                fig = client[(check.key[1], check.key[2])]
                assert f.ours == pytest.approx(fig["ttft_s"] * SPEED, rel=1e-12)
    assert set(totals) == {("decode", "8K", 1), ("decode", "8K", 2)}

    _cut_tokens(run_dir, tmp_path / "cut", "8K", 2)
    cut = reproduce(load_run(tmp_path / "cut"), card, Tolerances())
    changed = {c.key for c, b in zip(cut.cells, base.cells, strict=True) if c.verdict != b.verdict}
    assert changed <= {("decode", "8K", 2)}
    cell = next(c for c in cut.cells if c.key == ("decode", "8K", 2))
    assert cell.verdict == "fail"
    total = next(f for f in cell.figures if f.metric.name == "total_tok_s")
    assert total.ok is False and total.delta_pct is not None
    assert abs(total.delta_pct - (totals[("decode", "8K", 2)] - 10.0)) < 1.0

    # compare with one trial per side: run-to-run noise is unknown, so the cut shows as
    # a raw −10 % on exactly that cell and nothing is flagged (issue 14).
    diff = compare(load_run(run_dir), load_run(tmp_path / "cut"), Policy())
    assert diff.raw_only and diff.flagged == []
    delta = next(c for c in diff.cells if c.key == ("decode", "8K", 2))
    tot = next(f for f in delta.figures if f.metric.name == "total_tok_s")
    assert tot.method == "raw" and tot.delta_pct == pytest.approx(-10.0, abs=0.5)
