"""The orchestrator's --run-id names folders and containers: anything but a plain name is
refused in one line before a host is touched (`..` once removed the whole local results
folder; `exp/1` and `/abs` crashed after the sweep). No sockets, no hosts."""

from __future__ import annotations

from pathlib import Path

import pytest

from provisioning import cli
from provisioning.runs.workers import check_run_id

BAD = ["..", ".", "", "exp/1", "/abs", "-x", "a..b", "a b", "a;rm", "`id`", "$(id)", "x" * 65]
COMMANDS = [
    ["bench", "nosuchhost.invalid"],
    ["compare", "nosuchhost.invalid", "--image-a", "a", "--image-b", "b"],
    ["compare-commits", "nosuchhost.invalid", "--commit-a", "abcdef1", "--commit-b", "abcdef2"],
    ["clean", "nosuchhost.invalid"],
]


@pytest.mark.parametrize("run_id", BAD)
@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_a_run_id_that_is_not_a_plain_name_is_refused_in_one_line(
    run_id: str, command: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    given = f"--run-id={run_id}"  # one word, so that "-x" is a value, not an option
    code = cli.main([*command, given, "--results", str(tmp_path)]
                    if command[0] in ("bench", "compare", "compare-commits")
                    else [*command, given])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(f"provision: error: --run-id {run_id[:80]!r} is not a run id (")
    assert err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_plain_run_ids_pass() -> None:
    for ok in ("20260101-120000-abcdef", "exp1", "A.b_c-d", "x" * 64):
        assert check_run_id(ok) == ok
    assert check_run_id(None) is None
