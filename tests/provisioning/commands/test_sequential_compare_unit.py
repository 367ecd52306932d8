"""`--order sequential` of compare / compare-commits: the orchestrator's glue around
`bench.verdict.sequential`, each sweep a virtual twin run instead of a host run."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from bench.answers import Answer, Fingerprint, answer_sha256
from bench.errors import Exit, UsageError
from bench.settings import Settings
from bench.twin import profile as profiles
from bench.verdict.cells import RunFigures
from provisioning import cli
from provisioning.commands import compare
from tests.card.conftest import SHIPPED
from tools import verdict_power as power

pytestmark = pytest.mark.timeout(300)
BASE = power.simulate_card(profiles.load("published"), SHIPPED)


def _fingerprint(token: int) -> Fingerprint:
    ids = (token,) * 8
    answer = Answer(name="short 1", status="answered", token_ids=ids, ids_from="logprobs",
                    text="t", sha256=answer_sha256(ids))  # fmt: skip
    return Fingerprint(version="v1", max_tokens=8, seed=1, answers=(answer,))


class VirtualSweeps(compare.Sweeps):
    """Sweeps that are virtual runs of the twin: B is 8 % slower at 32K x 32 if asked, and
    answers otherwise than A if asked."""

    slower_b = False
    b_answers_differently = False
    asked: list[tuple[str, int, tuple[str, ...]]]

    def sweep(self, label: str, trial: int, extra: tuple[str, ...] = ()) -> RunFigures | None:
        self.asked.append((label, trial, extra))
        seed = (100 if label == "a" else 200) + trial
        change = (("decode", "32K", 32), "total_tok_s", 8.0) if self.slower_b else None
        run = power.side(profiles.load("published"), BASE, [seed], label.upper(),
                         change=change if label == "b" else None)  # fmt: skip
        answers = 2 if label == "b" and self.b_answers_differently else 1
        run = dataclasses.replace(run, fingerprints=(_fingerprint(answers),))
        if "--cells" in extra or "--contexts" in extra:
            cells = {
                ("decode", *w.rsplit(":", 1)) for w in extra[extra.index("--cells") + 1 :]
            } if "--cells" in extra else set()  # fmt: skip
            keep = {k for k in run.cells if k[0] == "decode" and (k[1], str(k[2])) in
                    {(c[1], c[2]) for c in cells}}  # fmt: skip
            run = dataclasses.replace(run, cells={k: run.cells[k] for k in keep},
                                      planned=frozenset(keep))  # fmt: skip
        return run


def _sweeps(
    tmp_path: Path, *, slower_b: bool, accept: frozenset[str] = frozenset()
) -> VirtualSweeps:
    pair = compare.PairChoice(results=tmp_path, bench_args=("--duration", "30"), accept=accept)
    s = VirtualSweeps(pair, Settings(), None, ("img-a", "img-b"), "seq", tmp_path / "allowed",  # type: ignore[arg-type]
                      numbered=True)  # fmt: skip
    s.asked = []
    s.slower_b = slower_b
    return s


def test_sequential_order_runs_the_full_matrix_three_times_then_open_cells_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sweeps = _sweeps(tmp_path, slower_b=True)
    code = compare.sequential_compare(sweeps, "A vs B")
    out = capsys.readouterr().out
    asked = sweeps.asked
    assert [(side, trial, extra) for side, trial, extra in asked[:3]] == [
        ("a", 1, ()), ("b", 1, ()), ("a", 2, ()),
    ]  # fmt: skip
    assert all("--cells" in extra or "--contexts" in extra for _, _, extra in asked[3:])
    assert any("32K:32" in extra for _, _, extra in asked[-2:])  # the changed cell stays open
    assert code == Exit.NOT_REPRODUCED
    # planned for the stated costs (no run here records a start): a 600 s start, the card's
    # sweep; the changed cell keeps every stage running
    assert "Stages 2+1, 2+2, 3+3, 5+5, chosen for a server start of 600 s" in out
    assert (
        "Sequential design, stages 2+1, 2+2, 3+3, 5+5: 4 stage(s) run, 5 runs of A, 5 of B" in out
    )
    assert "## Compare: seq-b against seq-a" in out and "| 32K | 32 |" in out


@pytest.mark.parametrize("order", ["sequential", "decide"])
def test_the_cli_offers_sequential_orders(order: str) -> None:
    args = cli.build_parser().parse_args(
        ["compare-commits", "gpu01", "--commit-a", "abcdef1", "--commit-b", "abcdef2",
         "--order", order]
    )  # fmt: skip
    assert args.order == order


def test_decide_order_measures_until_each_cell_is_decided_and_says_how(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sweeps = _sweeps(tmp_path, slower_b=True)
    code = compare.sequential_compare(sweeps, "A vs B", "decide")
    out = capsys.readouterr().out
    asked = sweeps.asked
    assert [(side, trial, extra) for side, trial, extra in asked[:4]] == [
        ("a", 1, ()), ("b", 1, ()), ("a", 2, ()), ("b", 2, ()),
    ]  # fmt: skip
    assert all("--cells" in extra or "--contexts" in extra for _, _, extra in asked[4:])
    assert "Aimed at a decision: looks at 2+2, 3+3, 5+5 runs;" in out
    assert code == Exit.NOT_REPRODUCED  # B's 8 % slower 32K x 32 is a change


@pytest.mark.parametrize("accept", [False, True])
def test_a_b_that_answers_differently_is_refused_unless_accept_answers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], accept: bool
) -> None:
    """The orchestrated compare judges the answers before the figures, as bench compare does,
    and `--accept answers` (the same option, at the door) reaches its verdict."""
    args = cli.build_parser().parse_args(
        ["compare", "gpu01", "--image-a", "a", "--image-b", "b",
         *(["--accept", "answers"] if accept else [])]
    )  # fmt: skip
    args.bench_args = ()
    pair = compare._pair_choice(args, Settings())
    assert pair.accept == (frozenset({"answers"}) if accept else frozenset())
    sweeps = _sweeps(tmp_path, slower_b=False, accept=pair.accept)
    sweeps.b_answers_differently = True
    code = compare.sequential_compare(sweeps, "A vs B")
    out = capsys.readouterr().out
    assert (
        "outputs identical on 0 of 1 prompts; first difference at token 1 of the short 1 prompt"
        in out
    ), out[-2000:]
    if accept:
        assert "The figures are compared anyway (--accept answers)." in out
        assert "| 32K | 32 |" in out
    else:
        assert out.rstrip().endswith("B ANSWERS DIFFERENTLY: ITS SPEED IS NOT COMPARABLE")
        assert code == Exit.NOT_REPRODUCED


def test_an_unknown_accept_name_is_a_usage_error_at_the_door() -> None:
    args = cli.build_parser().parse_args(
        ["compare", "gpu01", "--image-a", "a", "--image-b", "b", "--accept", "anwsers"]
    )
    args.bench_args = ()
    with pytest.raises(UsageError, match="anwsers"):
        compare._pair_choice(args, Settings())
