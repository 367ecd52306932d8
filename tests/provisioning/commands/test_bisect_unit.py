"""`provision bisect`: the commit list from a real git repository, and the rounds over
hosts with each commit's sweeps replaced by virtual twin runs (one commit 10 % slower at
8K x 64 from the culprit on, one commit whose image does not build)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import threading
from pathlib import Path

import pytest

from bench.errors import Exit, UsageError
from bench.twin import profile as profiles
from bench.verdict.cells import Key, RunFigures
from provisioning.commands import bisect
from provisioning.runs.targets import HostTarget
from tests.card.conftest import SHIPPED
from tests.support.fingerprints import fp_of, ids_at
from tools import verdict_power as power

pytestmark = pytest.mark.subprocess

CELL: Key = ("decode", "8K", 64)
PROFILE = profiles.load("published")
BASE = power.simulate_card(PROFILE, SHIPPED)


def _repo(tmp_path: Path, n: int, *, culprit: int = 11, broken: int | None = None) -> list[str]:
    """A git repository of n commits whose "vLLM" is the twin: each carries twin.json, the
    % by which its engine is slower at 8K x 64 (10 from `culprit` on, 0 before); commit
    `broken` carries a file that is not JSON (its "image" does not build). The hashes."""
    repo = tmp_path / "vllm"
    repo.mkdir()
    who = {"NAME": "t", "EMAIL": "t@example.org"}
    env = {f"GIT_{role}_{k}": v for role in ("AUTHOR", "COMMITTER") for k, v in who.items()}
    env["HOME"] = str(tmp_path)
    # Fixed dates: the hashes, and so the seeds of each commit's virtual runs, are the same
    # in every run of the test. With the clock's dates the noise was new each time and a
    # clean-clone run once bisected to the wrong commit (a statistical search can).
    env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = "2026-01-01T00:00:00+00:00"
    subprocess.run(["git", "init", "-q", str(repo)], check=True, env=env)
    out = []
    for i in range(n):
        text = json.dumps({"change": i, "slower_pct_at_8k_x64": 10.0 if i >= culprit else 0.0})
        (repo / "twin.json").write_text("{ not json" if i == broken else text)
        subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True, env=env)
        subprocess.run(["git", "-C", str(repo), "commit", "-qm", f"c{i}"], check=True, env=env)
        head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], check=True,
                              env=env, capture_output=True, text=True).stdout.strip()  # fmt: skip
        out.append(head)
    return out


def test_the_commits_between_good_and_bad_come_from_the_clone_in_order(tmp_path: Path) -> None:
    hashes = _repo(tmp_path, 6)
    got = bisect.commits_between(tmp_path / "vllm", hashes[1], hashes[5])
    assert got == hashes[1:]
    with pytest.raises(UsageError, match="cannot list"):
        bisect.commits_between(tmp_path / "vllm", hashes[1], "abcdef1")
    with pytest.raises(UsageError, match="does not descend"):
        bisect.commits_between(tmp_path / "vllm", hashes[5], hashes[1])


def test_cell_and_figure_as_make_reads_them() -> None:
    assert bisect.parse_cell("64x8K") == ("8K", 64)
    with pytest.raises(UsageError, match="CONCURRENCYxCONTEXT"):
        bisect.parse_cell("8K")


class VirtualJob(threading.Thread):
    """A commit's image and sweeps: its twin.json read from the clone at that commit (not
    JSON: the build fails), then 3 virtual runs of the twin slowed as it says."""

    def __init__(self, commit: str, repo: Path) -> None:
        super().__init__(daemon=True)
        self.commit, self.repo = commit, repo
        self.figures: RunFigures | None = None
        self.note = ""
        self.done = threading.Event()

    def run(self) -> None:
        try:
            self.measure()
        finally:
            self.done.set()  # last: the bisection reads `figures` as soon as it is set

    def measure(self) -> None:
        shown = subprocess.run(["git", "-C", str(self.repo), "show", f"{self.commit}:twin.json"],
                               capture_output=True, text=True, check=True).stdout  # fmt: skip
        try:
            slower = float(json.loads(shown)["slower_pct_at_8k_x64"])
        except ValueError:
            self.note = "building bench: the image did not build"
        else:
            seed = int(self.commit[:8], 16)
            change = (CELL, "total_tok_s", slower) if slower else None
            self.figures = power.side(PROFILE, BASE, [seed + t for t in range(3)],
                                      self.commit, change=change)  # fmt: skip

    def stop(self, *, hard: bool) -> None:
        pass


def _bisect(
    commits: list[str], repo: Path, hosts: int, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str, str, list[str]]:
    targets: list[HostTarget] = [object()] * hosts  # type: ignore[list-item]
    seen: list[str] = []

    def job(commit: str, target: HostTarget) -> VirtualJob:
        seen.append(commit)
        return VirtualJob(commit, repo)

    code = bisect.run_bisection(commits, targets, CELL, "total_tok_s", job)  # type: ignore[arg-type]
    out, err = capsys.readouterr()
    return code, out, err, seen


@pytest.mark.parametrize(("hosts", "rounds"), [(1, 4), (3, 2)])
def test_rounds_over_hosts_name_the_planted_commit(
    tmp_path: Path, hosts: int, rounds: int, capsys: pytest.CaptureFixture[str]
) -> None:
    commits = _repo(tmp_path, 17)  # 16 steps: log2 16 = 4 serial rounds, log4 16 = 2 with 3
    code, out, _, _ = _bisect(commits, tmp_path / "vllm", hosts, capsys)
    assert code == Exit.OK
    assert f"culprit: {commits[11]}" in out
    assert f"17 commits, {rounds} round(s) with {hosts} host(s)" in out


def test_a_commit_that_does_not_build_is_skipped_and_said_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    commits = _repo(tmp_path, 17, broken=8)  # the first pick of a serial search
    code, out, err, seen = _bisect(commits, tmp_path / "vllm", 1, capsys)
    assert commits[8] in seen and code == Exit.OK
    assert f"culprit: {commits[11]}" in out
    assert f"bisect: {commits[8]} skipped: building bench: the image did not build" in err
    assert f"{commits[8]} skipped (could not be measured)" in out


class AnsweringJob(VirtualJob):
    """VirtualJob whose bundles carry answer fingerprints: from commit `answers_at` of the
    clone on, they differ from GOOD's at token 4."""

    def __init__(self, commit: str, repo: Path, index: int, answers_at: int) -> None:
        super().__init__(commit, repo)
        self.index, self.answers_at = index, answers_at

    def measure(self) -> None:
        # Its fingerprints are set before `done` (a clean-clone CI run once read a commit's
        # figures between the two, without them, and bisected to another commit).
        super().measure()
        if self.figures is not None:
            fp = fp_of(s=ids_at(3) if self.index >= self.answers_at else ids_at())
            self.figures = dataclasses.replace(self.figures, fingerprints=(fp,))


@pytest.mark.parametrize("accept", [False, True])
def test_answers_that_differ_from_good_are_bisected_unless_accepted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], accept: bool
) -> None:
    commits = _repo(tmp_path, 17)  # the figure moves at commit 11; the answers at 5

    def job(commit: str, target: HostTarget) -> AnsweringJob:
        return AnsweringJob(commit, tmp_path / "vllm", commits.index(commit), 5)

    targets: list[HostTarget] = [object()]  # type: ignore[list-item]
    code = bisect.run_bisection(
        commits, targets, CELL, "total_tok_s", job,  # type: ignore[arg-type]
        accept_answers=accept,
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == Exit.OK
    if accept:
        assert f"culprit: {commits[11]}" in out
        assert "(its answers differ from GOOD's; accepted)" in out
    else:
        assert f"answers differ at commit {commits[5]} (the first to answer differently" in out
        assert "culprit:" not in out and "not judged on the figures" in out


def test_accept_takes_answers_only() -> None:
    parser = argparse.ArgumentParser()
    bisect.register(parser.add_subparsers())
    base = ["bisect", "h", "--good", "a", "--bad", "b", "--vllm-repo", "r", "--cell", "64x8K"]
    assert parser.parse_args([*base, "--accept", "answers"]).accept == ["answers"]
    assert parser.parse_args(base).accept == []
    with pytest.raises(SystemExit):
        parser.parse_args([*base, "--accept", "window_s"])
