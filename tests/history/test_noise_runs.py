"""A host's noise prior from the history (bench.history.noise_runs): its runs grouped into
builds, the runs compared left out, the latest LIMIT read, None with too few repeats, the
planted run-level noise found; and `bench compare --noise-from` on one run a side."""

from __future__ import annotations

import json
import math
import pathlib
from typing import Any

import pytest

from bench.bundle import recipe
from bench.card.model import Card
from bench.cli import main
from bench.errors import UsageError
from bench.history import noise_runs, runs, schema
from bench.history.database import Target
from bench.results import Results
from bench.verdict import noise_prior
from bench.verdict.cells import RunFigures
from tests.history.conftest import fill
from tests.history.noise_history import HOST, PROFILE, a_run, env_of, planted, record


def prior_of(target: Target, **kw: Any) -> noise_prior.NoisePrior | None:
    with schema.opened(target, create=False) as conn:
        return noise_runs.prior(conn, str(target), host=HOST, profile=PROFILE, **kw)


def test_the_planted_run_level_noise_is_found_from_the_repeated_builds(
    card: Card, tmp_path: pathlib.Path
) -> None:
    target = fill(tmp_path, planted(card, 6, 3, run_sd=0.03))
    found = prior_of(target)
    assert found is not None
    assert (found.runs, found.builds, found.run_df) == (18, 6, 12)
    assert 0.018 < found.run_sd_log < 0.045  # planted 0.03 (12 df: within about ±40 %)
    own = found.figures["total_tok_s"]
    assert 0.003 < own.sd_log < 0.008 and own.df > 100  # each cell's own 0.5 %
    assert found.source == (
        f"history {target}, host {HOST}, profile {PROFILE}, runs of 2026-11-01 to 2026-11-10"
    )
    assert f"Noise measured before this compare (history {target}" in found.line()


def test_runs_are_grouped_by_build_and_a_build_run_once_says_nothing(
    card: Card, tmp_path: pathlib.Path
) -> None:
    once = [record(a_run(card, 100 + b, level=1.0), 10 + b) for b in range(5)]
    target = fill(tmp_path, [*once, *planted(card, 2, 2, run_sd=0.02)])
    with schema.opened(target, create=False) as conn:
        latest = runs.all_runs(conn, host=HOST, profile=PROFILE)
    groups = noise_runs.repeated(latest)
    assert [len(g) for g in groups] == [2, 2]
    assert all(len({noise_runs.build_of(r) for r in g}) == 1 for g in groups)
    found = prior_of(target)
    assert found is not None and (found.runs, found.builds, found.run_df) == (4, 2, 2)


def test_other_hosts_and_profiles_are_not_read(card: Card, tmp_path: pathlib.Path) -> None:
    target = fill(
        tmp_path,
        [
            *planted(card, 3, 3, run_sd=0.02, host="gpu02"),
            *planted(card, 3, 3, run_sd=0.02, profile="fast"),
            *planted(card, 1, 2, run_sd=0.02),
        ],
    )
    assert prior_of(target) is None  # here: one build run twice, 1 df


def test_the_runs_compared_are_left_out_by_manifest_or_run_id(
    card: Card, tmp_path: pathlib.Path
) -> None:
    records = planted(card, 2, 2, run_sd=0.02)
    target = fill(tmp_path, records)
    first = records[0].run["manifest_sha256"]
    assert prior_of(target) is not None
    # One run of build 1 out: that build is run once, 1 df left.
    assert prior_of(target, exclude=frozenset({first})) is None
    assert prior_of(target, exclude=frozenset({first[:16]})) is None  # a verdict's identity
    assert prior_of(target, exclude=frozenset({first[:4]})) is not None  # too short to name one
    assert prior_of(target, exclude_run_ids=frozenset({records[3].run["run_id"]})) is None


def test_only_the_latest_limit_runs_are_read(card: Card, tmp_path: pathlib.Path) -> None:
    target = fill(tmp_path, planted(card, 3, 2, run_sd=0.02))
    with schema.opened(target, create=False) as conn:
        latest = runs.all_runs(conn, host=HOST, profile=PROFILE, limit=4)
        assert [r.run_id for r in latest] == ["run-003", "run-004", "run-005", "run-006"]
    found = prior_of(target, limit=4)
    assert found is not None and (found.runs, found.builds) == (4, 2)
    assert prior_of(target, limit=3) is None  # run-004 and the last build: 1 df
    with pytest.raises(ValueError, match="limit"):
        prior_of(target, limit=0)


def test_too_few_runs_give_none_and_from_history_says_what_is_needed(
    card: Card, tmp_path: pathlib.Path
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert prior_of(fill(empty, [])) is None
    target = fill(tmp_path, [record(a_run(card, 1, level=1.0), 1)])
    assert prior_of(target) is None
    with pytest.raises(UsageError) as caught:
        noise_runs.from_history(target, host=HOST, profile=PROFILE)
    line = caught.value.one_line()
    assert "too few repeated runs of host gpu01, profile twin:published" in line
    assert "2 runs or more of each of at least 2 builds, or 3 runs of one build" in line
    assert f"bench history ingest BUNDLE... --db {target}" in line
    with pytest.raises(UsageError, match="no history at"):
        noise_runs.from_history(Target("sqlite", str(tmp_path / "none.sqlite3")), host=HOST,
                                profile=PROFILE)  # fmt: skip


def test_unverified_runs_are_counted_in_what_the_prior_says(
    card: Card, tmp_path: pathlib.Path
) -> None:
    target = fill(
        tmp_path,
        [*planted(card, 1, 2, run_sd=0.02), *planted(card, 1, 2, run_sd=0.02, trust="unverified")],
    )
    found = prior_of(target)
    assert found is not None and found.source.endswith(", 2 of them unverified")


# NaN: SQLite keeps a float NaN as NULL, which the column refuses; the text "NaN" (which
# float() reads as NaN) is what a hand-edited file or PostgreSQL's NaN gives runs.figures.
@pytest.mark.parametrize("bad", ["NaN", float("inf"), 0.0, -1.0, 1e300])
def test_hostile_values_in_the_history_do_not_break_the_estimate(
    card: Card, tmp_path: pathlib.Path, bad: float | str
) -> None:
    records = planted(card, 3, 2, run_sd=0.02)
    target = fill(tmp_path, records)
    first = records[0].run["manifest_sha256"]
    with schema.opened(target) as conn, conn.transaction():
        # Every figure of one run, and one cell's figures in every run.
        conn.execute("UPDATE figures SET value = ? WHERE manifest_sha256 = ?", [bad, first])
        conn.execute("UPDATE figures SET value = ? WHERE context = '8K' AND concurrency = 1",
                     [bad])  # fmt: skip
    found = prior_of(target)
    assert found is not None
    assert math.isfinite(found.run_sd_log) and found.run_sd_log >= 0
    assert all(math.isfinite(f.sd_log) and f.sd_log > 0 for f in found.figures.values())


def test_copies_of_one_run_measure_no_noise_and_give_no_prior(
    card: Card, tmp_path: pathlib.Path
) -> None:
    same = a_run(card, 1, level=1.0, noise=0.0)
    records = [record(same, b, sha=f"{b * 10 + i:064x}") for b in (1, 2) for i in (1, 2)]
    target = fill(tmp_path, records)
    assert prior_of(target) is None  # a prior of zero would make every difference a change
    with schema.opened(target, create=False) as conn:
        latest = runs.all_runs(conn, host=HOST, profile=PROFILE)
        builds = [[runs.figures(conn, r) for r in g] for g in noise_runs.repeated(latest)]
    found = noise_prior.estimate(builds, "copies")  # what the estimate itself makes of them
    assert found is not None and found.run_sd_log == 0.0 and found.figures == {}


# `bench compare A B --noise-from HISTORY` on one run a side.


def run_dir(tmp: pathlib.Path, name: str, results: Results, build: int = 1, **kw: Any) -> str:
    """A run directory as `bench run` leaves it (unsigned), with the recipe its bundle has."""
    root = tmp / name
    root.mkdir()
    (root / "results.json").write_text(results.model_dump_json())
    (root / "environment.json").write_text(json.dumps(env_of(build, **kw)))
    recipe.write(root, recipe.for_twin(results, profile="published", speed=1.0))
    return str(root)


def test_compare_one_run_a_side_decides_on_the_history_noise_and_without_it_is_raw(
    card: Card, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a_results, b_results = a_run(card, 200, level=1.0), a_run(card, 201, level=1.003)
    # A itself was recorded too (as build 1's third run): it is left out of the prior.
    history = fill(tmp_path, [*planted(card, 4, 3, run_sd=0.01, seed=2), record(a_results, 1)])
    a, b = run_dir(tmp_path, "a", a_results), run_dir(tmp_path, "b", b_results)
    assert main(["compare", a, b]) == 9
    out = capsys.readouterr().out
    assert "CANNOT TELL NOISE FROM CHANGE" in out and "Noise measured before" not in out
    assert main(["compare", a, b, "--noise-from", str(history)]) == 0
    out = capsys.readouterr().out
    assert (
        f"- Noise measured before this compare (history {history}, host {HOST}, profile "
        f"{PROFILE}, runs of 2026-11-01 to 2026-11-07): 12 runs of 4 build(s)"
    ) in out
    assert "Pooled with this compare's own noise" in out
    assert "EQUIVALENT" in out and "CANNOT TELL NOISE FROM CHANGE" not in out
    # --noise-host and --noise-profile name another series: too few runs there.
    assert main(["compare", a, b, "--noise-from", str(history), "--noise-host", "gpu02"]) == 2
    err = capsys.readouterr().err
    assert "too few repeated runs of host gpu02, profile twin:published" in err


def test_compare_noise_from_usage_errors(
    card: Card, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    history = fill(tmp_path, planted(card, 1, 2, run_sd=0.01))
    a, b = (run_dir(tmp_path, n, a_run(card, s, level=1.0)) for n, s in (("a", 300), ("b", 301)))
    cases = {
        "--noise-host needs --noise-from": ["--noise-host", HOST],
        "a password in the URL is refused": ["--noise-from", "postgresql://u:hunter2@db/h"],
        "too few repeated runs of host gpu01": ["--noise-from", str(history)],
        "no history at": ["--noise-from", str(tmp_path / "absent.sqlite3")],
    }
    for said, extra in cases.items():
        assert main(["compare", a, b, *extra]) == 2, said
        err = capsys.readouterr().err
        assert said in err and "hunter2" not in err and "Traceback" not in err
    with pytest.raises(SystemExit) as stopped:  # argparse's: not the default history file
        main(["compare", a, b, "--noise-from", ""])
    assert stopped.value.code == 2 and "a history is needed" in capsys.readouterr().err
    # A run directory without its recipe says no launch profile: the flag to give is named.
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "results.json").write_text(a_run(card, 302, level=1.0).model_dump_json())
    assert main(["compare", str(bare), b, "--noise-from", str(history)]) == 2
    err = capsys.readouterr().err
    assert "does not say its host" in err and "give --noise-host" in err
    (bare / "environment.json").write_text(json.dumps(env_of(1)))
    assert main(["compare", str(bare), b, "--noise-from", str(history)]) == 2
    assert "give --noise-profile" in capsys.readouterr().err


def test_the_runs_compared_are_named_by_manifest_else_by_run_id() -> None:
    def run(*identities: str) -> RunFigures:
        return RunFigures("r", "run", 1.0, {}, {}, (), (), identities=frozenset(identities))

    sealed = run("manifest sha256 0123456789abcdef", "run id nightly-a1")
    bare = run("run id run-7")
    assert noise_runs.exclusions([sealed, bare]) == (
        frozenset({"0123456789abcdef"}),
        frozenset({"run-7"}),  # a run id reused across compares never hides a sealed run's
    )
