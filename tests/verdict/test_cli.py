"""`bench reproduce` and `bench compare` end to end on bundle directories and archives."""

from __future__ import annotations

import json
import pathlib
import re
from collections.abc import Mapping
from datetime import UTC, datetime

import pytest

from bench.bundle import seal
from bench.bundle.pack import pack
from bench.card.model import Card
from bench.cli import main
from bench.results import Results
from tests.bundle.conftest import Keys
from tests.support.synth import make_results

pytestmark = pytest.mark.subprocess


def _bundle(
    tmp: pathlib.Path,
    name: str,
    results: Results,
    *,
    archive: bool = False,
    env: Mapping[str, object] | None = None,
    keys: Keys | None = None,
) -> pathlib.Path:
    """A run directory (unsigned), or with `archive` a bundle signed with `keys`."""
    root = tmp / name
    root.mkdir()
    (root / "results.json").write_text(results.model_dump_json(indent=2))
    if env is not None:
        (root / "environment.json").write_text(json.dumps(env))
    if not archive:
        return root
    assert keys is not None
    seal.seal(root, keys.private, now=datetime.now(UTC))
    return pack(root, tmp / f"{name}.tar.gz")


def test_reproduce_archive_passes_and_writes_html(
    card: Card,
    card_path: pathlib.Path,
    tmp_path: pathlib.Path,
    capsys: pytest.CaptureFixture[str],
    signer: Keys,
) -> None:
    bundle = _bundle(tmp_path, "twin", make_results(card, speed=10.0), archive=True, keys=signer)
    html = tmp_path / "r.html"
    trusted = ["--allowed-signers", str(signer.allowed)]
    assert (
        main(["reproduce", str(bundle), "--card", str(card_path), "--html", str(html), *trusted])
        == 0
    )
    out = capsys.readouterr().out
    assert "| 8K | 128 | 1,259.4 / 1,259.4 | 0.0 % |" in out
    assert "REPRODUCED: 40 of 40 compared cells" in out
    assert "; not measured by either side: 15" in out
    page = html.read_text()
    assert page.count('<td class="ok">') >= 40 * 4 and 'class="bad"' not in page
    assert page.count("data:image/png;base64,") == 1


def test_reproduce_flags_the_cut_cell_exit_1(
    card: Card,
    card_path: pathlib.Path,
    tmp_path: pathlib.Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cut = make_results(card, speed=10.0, scale=lambda ctx, c: 0.9 if (ctx, c) == ("64K", 2) else 1)
    bundle = _bundle(tmp_path, "cut", cut)
    imported = tmp_path / "card.json"
    assert main(["card", "import", str(card_path), "-o", str(imported)]) == 0
    html = tmp_path / "r.html"
    code = main(["reproduce", str(bundle), "--card", str(imported), "--html", str(html)])
    assert code == 1
    out = capsys.readouterr().out
    failing = [line for line in out.splitlines() if line.endswith("| fail |")]
    assert len(failing) == 1 and failing[0].startswith("| 64K | 2 | 60.4 / 67.1 | −10.0 % ✗ |")
    assert 'class="bad">−10.0 % ✗<' in html.read_text()
    assert (
        main(
            [
                "reproduce",
                str(bundle),
                "--card",
                str(imported),
                "--tolerance-throughput",
                "11",
                "--tolerance-latency",
                "12",
            ]
        )
        == 0
    )


def test_reproduce_bad_inputs_exit_2(
    card: Card,
    card_path: pathlib.Path,
    tmp_path: pathlib.Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bundle = _bundle(tmp_path, "ok", make_results(card))
    assert main(["reproduce", str(tmp_path / "nope"), "--card", str(card_path)]) == 2
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "results.json").write_text('{"schema_version": 1}')
    assert main(["reproduce", str(broken), "--card", str(card_path)]) == 2
    bad_card = tmp_path / "card.txt"
    bad_card.write_text("Speed test matrix\n")
    assert main(["reproduce", str(bundle), "--card", str(bad_card)]) == 2
    err = capsys.readouterr().err
    assert "does not match the results schema" in err
    assert "card.txt line 1: expected" in err
    assert "Traceback" not in err


def test_compare_lists_metadata_flags_cells_and_writes_html(
    card: Card, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], signer: Keys
) -> None:
    env_a = {
        "image": {"digest": "sha256:aaa"},
        "vllm_version": "0.30.1",
        "gpu": {"driver_version": "580.1", "gpus": [{"name": "RTX PRO 6000"}] * 4},
    }
    env_b = {**env_a, "image": {"digest": "sha256:bbb"}}
    a = _bundle(tmp_path, "a", make_results(card, trials=3, noise=0.01, seed=1), env=env_a)
    b = _bundle(
        tmp_path,
        "b",
        make_results(card, trials=3, noise=0.01, seed=2),
        env=env_b,
        archive=True,
        keys=signer,
    )
    slow = make_results(
        card, trials=3, noise=0.01, seed=3, scale=lambda ctx, c: 1 / 1.08 if c >= 64 else 1.0
    )
    c = _bundle(tmp_path, "c", slow, env=env_a)
    html = tmp_path / "c.html"
    assert main(["compare", str(a), str(b), "--allowed-signers", str(signer.allowed)]) == 0
    out = capsys.readouterr().out
    assert "- image digest: sha256:aaa → sha256:bbb" in out
    assert "EVERY CELL EQUIVALENT WITHIN ±5 % (3 + 3 TRIALS, ONE SERVER START A SIDE)" in out
    assert main(["compare", str(a), str(c), "--html", str(html)]) == 1
    out = capsys.readouterr().out
    assert (
        "3 OF 40 CELLS CHANGED, 37 EQUIVALENT WITHIN ±5 %; NOT MEASURED BY EITHER SIDE: 15" in out
    )
    page = html.read_text()
    assert page.count("data:image/png;base64,") == 3  # heatmaps, curves, frontier
    assert 'class="worse"' in page
    assert main(["compare", str(a)]) == 2


def test_compare_several_bundles_a_side_and_a_blocked_order(
    card: Card, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = [_bundle(tmp_path, f"a{i}", make_results(card, noise=0.01, seed=i)) for i in (1, 2, 3)]
    slow = [
        _bundle(
            tmp_path,
            f"b{i}",
            make_results(card, noise=0.01, seed=i, scale=lambda ctx, c: 1 / 1.08 if c >= 64 else 1),
        )
        for i in (4, 5, 6)
    ]
    argv = ["compare", *map(str, a), "--vs", *map(str, slow), "--order", "blocked"]
    assert main(argv) == 1
    out = capsys.readouterr().out
    assert out.startswith("Order: blocked (all A, then all B): drift over hours is NOT controlled")
    assert "## Compare: B (3 runs) against A (3 runs)" in out
    # The three slower cells are flagged, each figure regressed; Benjamini-Hochberg
    # controls the false-discovery rate, so another cell may join them (here 251K x 4).
    for row in ("| 8K | 64 |", "| 8K | 128 |", "| 16K | 64 |"):
        line = next(x for x in out.splitlines() if x.startswith(row))
        assert line.endswith("| regressed |") and line.count("▼") == 4
    assert re.search(
        r"\d OF 40 CELLS CHANGED, \d+ EQUIVALENT WITHIN ±5 %[^;]*; NOT MEASURED BY EITHER SIDE: 15",
        out,
    )
    # One bundle a side: no noise estimate, raw Δ only, exit 9.
    assert main(["compare", str(a[0]), "--vs", str(slow[0])]) == 9
    assert "CANNOT TELL NOISE FROM CHANGE" in capsys.readouterr().out


def test_reproduce_with_a_reference_judges_the_answers(
    card: Card,
    card_path: pathlib.Path,
    tmp_path: pathlib.Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from tests.support.fingerprints import BASE, fp_of, ids_at

    def fingerprinted(name: str, ids: tuple[int, ...], seed: int) -> pathlib.Path:
        results = make_results(card, speed=10.0, seed=seed)
        results = results.model_copy(update={"fingerprint": fp_of(s=ids)})
        return _bundle(tmp_path, name, results)

    ref, same = fingerprinted("ref", BASE, 1), fingerprinted("same", BASE, 2)
    other = fingerprinted("other", ids_at(7), 3)
    assert main(["reproduce", str(same), "--card", str(card_path), "--reference", str(ref)]) == 0
    assert "outputs identical on 1 of 1 prompts." in capsys.readouterr().out
    code = main(["reproduce", str(other), "--card", str(card_path), "--reference", str(ref)])
    out = capsys.readouterr().out
    assert code == 1 and "NOT REPRODUCED" in out
    assert "this run answers differently from the reference" in out
    assert main(["reproduce", str(other), "--card", str(card_path)]) == 0
    assert "Answers: the card carries no answers; this run's fingerprint: 1 prompts" in (
        capsys.readouterr().out
    )
    assert main(["reproduce", str(ref), "--card", str(card_path), "--reference", str(ref)]) == 2
