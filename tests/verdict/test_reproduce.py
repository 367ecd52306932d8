"""Reproduce: verdicts per cell and overall against the shipped card."""

from __future__ import annotations

import dataclasses
import shlex

from bench.card.model import Card
from bench.errors import Exit
from bench.results import Results, ServerSpans
from bench.verdict.card_source import from_card
from bench.verdict.cells import BY_NAME
from bench.verdict.page import reproduce_heat_cell
from bench.verdict.reproduce import Tolerances, reproduce
from bench.verdict.run_figures import from_results
from bench.verdict.tables import reproduce_markdown
from tests.support.synth import make_results


def _judge(card: Card, tol: Tolerances | None = None, **kw: object) -> object:
    run = from_results(make_results(card, **kw), name="bundle")  # type: ignore[arg-type]
    return reproduce(run, from_card(card), tol or Tolerances())


def test_the_card_at_twin_speed_10_reproduces_every_cell(card: Card) -> None:
    r = reproduce(
        from_results(make_results(card, speed=10.0), name="b"), from_card(card), Tolerances()
    )
    assert r.reproduced
    # The card's 15 over-capacity cells are over capacity here too: measured by neither side,
    # shown, never counted among the compared cells (issue 15: they were, 55 of 55).
    assert len(r.judged) == 40 and r.failed == []
    verdicts = [c.verdict for c in r.cells]
    assert verdicts.count("both over capacity") == 15 == len(r.unmeasured)
    assert verdicts.count("pass") == 40
    # Our figures were divided back by the speed factor: equal to the card's.
    check = next(c for c in r.cells if c.key == ("decode", "8K", 128))
    total = next(f for f in check.figures if f.metric.name == "total_tok_s")
    assert total.ours is not None and abs(total.ours - 1259.4) < 1e-9
    assert r.summary().startswith("REPRODUCED: 40 of 40 compared cells")
    assert r.summary().endswith("; not measured by either side: 15")
    assert "REPRODUCED: 40 of 40" in reproduce_markdown(r)


def test_ignoring_the_speed_factor_would_fail(card: Card) -> None:
    run = from_results(make_results(card, speed=10.0), name="b")
    wrong = type(run)(**{**run.__dict__, "cells": {
        k: type(c)(**{**c.__dict__, "trials": {m: tuple(v * 10 for v in vs)
                                               for m, vs in c.trials.items()}})
        for k, c in run.cells.items()}})  # fmt: skip
    assert not reproduce(wrong, from_card(card), Tolerances()).reproduced


def test_one_cell_cut_by_10_percent_is_the_only_failure(card: Card) -> None:
    cut = make_results(card, speed=10.0, scale=lambda ctx, c: 0.9 if (ctx, c) == ("32K", 8) else 1)
    r = reproduce(from_results(cut, name="b"), from_card(card), Tolerances())
    assert not r.reproduced
    assert [c.key for c in r.failed] == [("decode", "32K", 8)]
    bad = {f.metric.name: round(f.delta_pct or 0, 1) for f in r.failed[0].figures}
    assert bad["total_tok_s"] == -10.0
    assert "NOT REPRODUCED: 39 of 40" in r.summary()


def test_tolerances_are_configurable(card: Card) -> None:
    slow = make_results(card, scale=lambda ctx, c: 0.93)
    run, ref = from_results(slow, name="b"), from_card(card)
    assert not reproduce(run, ref, Tolerances()).reproduced  # −7 % > 5 %
    assert reproduce(run, ref, Tolerances(throughput_pct=8.0, latency_pct=10.0)).reproduced
    # Latencies rise by 1/0.93 − 1 = 7.5 %: a 7 % latency tolerance fails them.
    assert not reproduce(run, ref, Tolerances(8.0, 7.0)).reproduced


def test_over_capacity_on_one_side_only_is_reported_as_such(card: Card) -> None:
    oc = {(m.context, m.concurrency) for m in card.measurements if m.over_capacity}
    moved = (oc - {("16K", 128)}) | {("8K", 128)}
    r = reproduce(
        from_results(make_results(card, over_capacity=moved), name="b"),
        from_card(card),
        Tolerances(),
    )
    failed = {c.key: c.verdict for c in r.failed}
    assert failed == {
        ("decode", "8K", 128): "over capacity here only",
        ("decode", "16K", 128): "over capacity on card only",
    }


def test_a_subset_run_is_judged_on_what_it_measured(card: Card) -> None:
    r = reproduce(
        from_results(make_results(card, contexts={"8K", "64K"}), name="b"),
        from_card(card),
        Tolerances(),
    )
    # Issue 14: part of the card is PARTIAL with the count and its own exit code, never 0.
    assert not r.reproduced and r.overall == "PARTIAL" and r.exit_code == Exit.PARTIAL
    # two decode rows and their prefill rows, less 64K's three over capacity on both sides
    assert len(r.judged) == 16 + 2 - 3
    assert sum(c.verdict == "not measured here" for c in r.cells) == 55 - 18
    assert "PARTIAL: 37 of the card's 55 cells not measured here" in r.summary()
    assert r.summary().startswith("PARTIAL: 15 of 15 compared cells")
    assert "; not measured by either side: 3;" in r.summary()


def test_a_failed_cell_fails(card: Card) -> None:
    res = make_results(card)
    cells = tuple(
        c.model_copy(update={"status": "invalid", "figures": None, "reason": "stream cut"})
        if (c.context_label, c.concurrency) == ("8K", 4)
        else c
        for c in res.cells
    )
    r = reproduce(
        from_results(res.model_copy(update={"cells": cells}), name="b"),
        from_card(card),
        Tolerances(),
    )
    assert [(c.key, c.verdict, c.note) for c in r.failed] == [
        (("decode", "8K", 4), "invalid here", "1 of 1 trials invalid: stream cut")
    ]
    assert r.exit_code == Exit.NOT_REPRODUCED


def _with_status(res: Results, key: tuple[str, int], status: str, reason: str) -> Results:
    cells = tuple(
        c.model_copy(update={"status": status, "reason": reason})
        if (c.context_label, c.concurrency) == key
        else c
        for c in res.cells
    )
    return res.model_copy(update={"cells": cells})


def test_a_not_ready_cell_fails_reproduce_and_is_marked_in_table_and_matrix(card: Card) -> None:
    # Issue 14: a not_ready cell (figures and all) was turned into a valid one and passed.
    res = _with_status(make_results(card), ("16K", 8), "not_ready", "readiness never held")
    r = reproduce(from_results(res, name="b"), from_card(card), Tolerances())
    assert r.overall == "NOT REPRODUCED" and r.exit_code == Exit.NOT_REPRODUCED
    check = next(c for c in r.cells if c.key == ("decode", "16K", 8))
    assert check.verdict == "not ready here"
    assert check in r.not_valid and check in r.failed
    text = reproduce_markdown(r)
    assert (
        "- decode 16K x 8: not ready here (1 of 1 trials not ready: readiness never held)" in text
    )
    row = next(x for x in text.splitlines() if x.startswith("| 16K | 8 |"))
    assert "⚠ not ready" in row and row.count("⚠") == 8
    assert "1 not valid here" in r.summary()
    total = BY_NAME["total_tok_s"]
    square = reproduce_heat_cell(check, total)
    assert square.text == "⚠ not ready" and square.flagged and square.delta_pct is None
    for status in ("invalid", "interrupted"):
        bad = _with_status(make_results(card), ("8K", 1), status, "why")
        assert reproduce(from_results(bad), from_card(card), Tolerances()).overall == (
            "NOT REPRODUCED"
        )


def test_a_not_ready_trial_among_valid_ones_spoils_the_cell(card: Card) -> None:
    res = make_results(card, trials=3)
    cells = tuple(
        c.model_copy(update={"status": "not_ready", "reason": "gate"})
        if (c.context_label, c.concurrency, c.trial) == ("8K", 2, 1)
        else c
        for c in res.cells
    )
    run = from_results(res.model_copy(update={"cells": cells}))
    assert run.cells[("decode", "8K", 2)].status == "not_ready"
    assert run.cells[("decode", "8K", 2)].detail == "1 of 3 trials not ready: gate"


def test_settings_that_differ_from_the_card_make_it_not_comparable(card: Card) -> None:
    res = make_results(card)
    other = res.model_copy(
        update={"settings": res.settings.model_copy(update={"duration_s": 10.0, "max_tokens": 512})}
    )
    r = reproduce(from_results(other), from_card(card), Tolerances())
    assert r.overall == "NOT COMPARABLE" and r.exit_code == Exit.NOT_COMPARABLE
    lines = r.settings.lines("ours", "card")
    assert "- window_s: 10 / 30" in lines and "- max_tokens: 512 / 4096" in lines
    assert lines[-1].startswith("NOT COMPARABLE: window_s,max_tokens differ")
    assert reproduce_markdown(r).startswith("Settings that differ")
    accepted = reproduce(
        from_results(other), from_card(card), Tolerances(), frozenset({"window_s", "max_tokens"})
    )
    assert accepted.overall == "REPRODUCED"
    assert "- window_s: 10 / 30 (accepted)" in accepted.settings.lines("ours", "card")
    # The engine version, the model and (off a twin) GPUs and launch flags count too.
    env = {
        "gpu": {"gpus": [{"name": "NVIDIA H100 80GB HBM3"}] * 8},
        "launch": {"argv": ["vllm", "serve", "m", "--tensor-parallel-size", "8"]},
    }
    newer = make_results(card, version="0.31.0")
    r = reproduce(from_results(newer, env), from_card(card), Tolerances())
    assert {d.name for d in r.settings.blocking} == {
        "engine_version",
        "gpu_count",
        "gpu_model",
        "launch_flags",
    }


def _launched_as_the_card(card: Card, *more: str) -> dict[str, object]:
    """environment.json of a run on the card's GPUs and image, launched with the card's
    command and then MORE."""
    assert card.launch_command is not None
    argv = shlex.split(card.launch_command.replace("<redacted>", "k"))
    return {
        "gpu": {"gpus": [{"name": "NVIDIA RTX PRO 6000 Blackwell Server Edition"}] * 4},
        "launch": {
            "argv": ["python3", "-m", "vllm.entrypoints.openai.api_server", *argv[2:], *more]
        },
        "image": {"labels": {"bench.vllm.commit": "73a5831127a9d1c5a3e0f0000000000000000000"}},
    }


def test_same_gpus_and_flags_as_the_card_are_comparable(card: Card) -> None:
    env = _launched_as_the_card(card)
    r = reproduce(from_results(make_results(card), env), from_card(card), Tolerances())
    assert r.settings.differences == () and r.overall == "REPRODUCED"


def test_the_runs_own_tracing_is_no_launch_difference_and_any_other_tracing_is(
    card: Card,
) -> None:
    own = "http://127.0.0.1:4318/v1/traces"  # `provision bench --server-traces` adds it
    received = make_results(card).model_copy(update={"server_spans": ServerSpans(endpoint=own)})
    for added in (("--otlp-traces-endpoint", own), (f"--otlp-traces-endpoint={own}",)):
        env = _launched_as_the_card(card, *added)
        r = reproduce(from_results(received, env), from_card(card), Tolerances())
        assert r.settings.differences == () and r.overall == "REPRODUCED", added
    # Not recorded (the run received no spans), or sent anywhere but the run's receiver.
    elsewhere = ("--otlp-traces-endpoint", "http://collector.lan:4318/v1/traces")
    for results, added in ((make_results(card), ("--otlp-traces-endpoint", own)),
                           (received, elsewhere)):  # fmt: skip
        env = _launched_as_the_card(card, *added)
        r = reproduce(from_results(results, env), from_card(card), Tolerances())
        assert [d.name for d in r.settings.blocking] == ["launch_flags"], added
        assert "--otlp-traces-endpoint" in r.settings.blocking[0].ours
    # Recorded, with another flag added: that one is still a difference.
    env = _launched_as_the_card(card, "--otlp-traces-endpoint", own, "--enforce-eager")
    (diff,) = reproduce(
        from_results(received, env), from_card(card), Tolerances()
    ).settings.blocking
    assert diff.name == "launch_flags" and "--enforce-eager" in diff.ours
    assert "--otlp-traces-endpoint" not in diff.ours


def test_trials_decide_by_their_interval_against_the_band(card: Card) -> None:
    # 3 trials with 1 % noise around the card: every interval inside ±5 % / ±10 %.
    ok = reproduce(
        from_results(make_results(card, trials=3, noise=0.01, seed=4)),
        from_card(card),
        Tolerances(),
    )
    assert ok.overall == "REPRODUCED"
    # 4.5 % slower: the intervals of some cells straddle the −5 % edge.
    edge = make_results(card, trials=3, noise=0.01, seed=4, scale=lambda ctx, c: 0.955)
    r = reproduce(from_results(edge), from_card(card), Tolerances())
    assert r.inconclusive and r.overall == "INCONCLUSIVE" and r.exit_code == Exit.INCONCLUSIVE
    f = next(f for c in r.inconclusive for f in c.figures if f.outcome == "inconclusive")
    assert f.ci_pct is not None and f.ci_pct[0] < -5.0 < f.ci_pct[1]
    # 15 % slower: entirely outside.
    far = make_results(card, trials=3, noise=0.01, seed=4, scale=lambda ctx, c: 0.85)
    assert reproduce(from_results(far), from_card(card), Tolerances()).overall == "NOT REPRODUCED"


def test_a_run_from_a_dirty_tree_says_so_in_the_header(card: Card) -> None:
    clean = make_results(card, speed=10.0)
    text = reproduce_markdown(
        reproduce(from_results(clean, name="b"), from_card(card), Tolerances())
    )
    assert "dirty tree" not in text
    dirty = clean.model_copy(update={"bench_version": "0.2.0.dev5+gabc1234.d20261203"})
    text = reproduce_markdown(
        reproduce(from_results(dirty, name="b"), from_card(card), Tolerances())
    )
    head = text.split("Tolerances:")[0]
    assert (
        "The run was made by bench 0.2.0.dev5+gabc1234.d20261203, from a dirty tree: tracked "
        "files had uncommitted changes" in head
    )


def test_cells_not_run_on_the_card_and_over_capacity_here_are_measured_by_neither(
    card: Card,
) -> None:
    """A card whose over-capacity cells read "not run" instead: no figures on either side,
    neither a pass nor a failure; listed as not measured by either side."""
    published = from_card(card)
    cells = {
        k: dataclasses.replace(c, status="not_run") if c.status == "over_capacity" else c
        for k, c in published.cells.items()
    }
    published = dataclasses.replace(published, cells=cells)
    r = reproduce(from_results(make_results(card), name="b"), published, Tolerances())
    assert [c.verdict for c in r.cells].count("not run on either side") == 15
    assert len(r.judged) == 40 and r.failed == [] and r.overall == "REPRODUCED"
    assert r.summary().startswith("REPRODUCED: 40 of 40 compared cells")
    assert r.summary().endswith("; not measured by either side: 15")
    assert "| Not run |" in reproduce_markdown(r)
