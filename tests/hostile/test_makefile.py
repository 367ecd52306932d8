"""Make: every variable a user passes reaches the command as data (one argument, or one per
word for the list variables), never evaluated by the shell or by make (issue 15).

Real make on the real Makefile; `bench` and `python` in BIN are stand-ins that write down
their arguments (tests/support/make_stand_ins.py), so nothing else runs. No sockets.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.support.make_stand_ins import stand_ins
from tests.support.require import require

pytestmark = pytest.mark.subprocess

ROOT = Path(__file__).parents[2]


@pytest.fixture(autouse=True)
def _make_and_venv() -> None:
    require("make", paths=(ROOT / ".venv/bin/bench", ROOT / ".venv/bin/python"))


CASES: dict[str, tuple[list[str], list[str]]] = {
    # target: (variables set to a hostile value, variables set to a hostile word list)
    "bench-local": (["SPEED", "HISTORY"], ["RUN_ARGS"]),
    "bench": (
        ["HOST", "PROFILE", "CARD", "IMAGE", "IMAGE_SOURCE", "HISTORY"],
        ["RUN_ARGS", "BUILD_ARGS"],
    ),
    "bench-slurm": (
        [
            "HISTORY",
            "SLURM",
            "NODES",
            "PROFILE",
            "CARD",
            "IMAGE",
            "ACCOUNT",
            "SHARED_DIR",
            "IMAGE_TAR",
            "SLURM_LOGIN",
            "CLUSTER_CHECKOUT",
            "CLUSTER",
        ],
        ["RUN_ARGS"],
    ),
    "preflight": (["HOST", "PROFILE", "IMAGE"], []),
    "gpu-check": (["GPU_CHECK_OUT", "URL"], []),
    "verify": (["BUNDLE", "ALLOWED"], []),
    # A and B are lists too: several bundles a side (make compare A='a1 a2' B='b1 b2').
    "compare": (["HTML", "ALLOWED_SIGNERS", "ACCEPT", "NOISE_FROM"], ["A", "B", "MORE"]),
    "reproduce": (["BUNDLE", "CARD", "HTML", "ALLOWED_SIGNERS", "ACCEPT"], []),
    # One bundle per node: a list (make fleet BUNDLES='gpu01.tar.gz gpu02.tar.gz ...').
    "fleet": (["HTML", "ALLOWED_SIGNERS", "ACCEPT"], ["BUNDLES"]),
    "smoke": (["HOST", "IMAGE", "IMAGE_SOURCE"], ["BUILD_ARGS"]),
    "compare-images": (
        ["HOST", "A", "B", "PROFILE", "TRIALS", "ORDER", "HISTORY", "NOISE_FROM"],
        ["RUN_ARGS"],
    ),
    "compare-commits": (
        ["HOST", "A", "B", "PROFILE", "TRIALS", "ORDER", "HISTORY", "NOISE_FROM"],
        ["RUN_ARGS", "BUILD_ARGS"],
    ),
    "bisect": (
        ["HOST", "GOOD", "BAD", "CELL", "VLLM_REPO", "FIGURE", "TRIALS", "PROFILE", "HISTORY"],
        ["RUN_ARGS", "BUILD_ARGS"],
    ),
}

ALL = {v for single, lists in CASES.values() for v in (*single, *lists)}


def _hostile(canary: Path, name: str) -> str:
    # a backtick, $(...) for the shell and for make, a quote that closes, a ; and a $VAR
    return (
        f"{name}`touch {canary}-bt`$(touch {canary}-dollar)';touch {canary}-semi;'"
        f"$(shell touch {canary}-make)${{HOME}}"
    )


@pytest.mark.parametrize("target", list(CASES))
def test_hostile_make_variables_run_nothing_and_arrive_as_given(
    target: str, tmp_path: Path
) -> None:
    log = tmp_path / "argv.jsonl"
    stubs = stand_ins(tmp_path, log)
    stamp = tmp_path / "stamp"
    stamp.touch()  # newer than pyproject.toml: `setup` has nothing to do
    canary = tmp_path / "ran"
    single, lists = CASES[target]
    values = {v: _hostile(canary, v) for v in single}
    values |= {v: f"--{v.lower()} " + _hostile(canary, v) + " two" for v in lists}
    make_target = "bench" if target in ("bench-local", "bench-slurm") else target
    got = subprocess.run(
        ["make", "--no-print-directory", "-C", str(ROOT), make_target,
         f"BIN={stubs}", f"STAMP={stamp}", *(f"{k}={v}" for k, v in values.items())],
        capture_output=True, text=True, timeout=60, check=False,
        env={k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", *ALL)},
    )  # fmt: skip
    assert got.returncode == 0, got.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["argv.jsonl", "bin", "stamp"]
    argv = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(argv) == 1
    words = argv[0]
    for name in single:
        assert values[name] in words, (name, words)
    for name in lists:
        if name == "BUILD_ARGS":
            flag = "--build-arg"
            parts = values[name].split()
            for part in parts:
                assert [flag, part] in [words[i : i + 2] for i in range(len(words) - 1)]
        else:
            parts = values[name].split()
            start = words.index(parts[0])
            assert words[start : start + len(parts)] == parts, (name, words)


def _dry_run(target: str, *words: str) -> str:
    """`make -n TARGET WORDS...` in this checkout (no set-up), its recipe lines joined.

    The stamp is a fresh file of its own. It was `STAMP=Makefile` once: GNU make remakes a
    makefile that is out of date even under -n, and a fresh clone's Makefile is older than its
    pyproject.toml by nanoseconds, so every dry run re-ran the set-up for real, pip-sync
    taking bench out of .venv/bin while the other xdist worker's tests needed it (seen in a
    fresh-clone `make test`, 5 December)."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", *ALL)}
    with tempfile.TemporaryDirectory() as tmp:
        stamp = Path(tmp) / "stamp"
        stamp.touch()  # newer than pyproject.toml: `setup` has nothing to do
        got = subprocess.run(
            ["make", "--no-print-directory", "-n", "-C", str(ROOT), target, f"STAMP={stamp}",
             *words],
            capture_output=True, text=True, timeout=60, check=True, env=env,
        )  # fmt: skip
    return " ".join(got.stdout.replace("\\\n", " ").split())


def test_defaults_and_plain_values_still_reach_the_commands() -> None:
    line = _dry_run("bench")
    assert "bench local --speed '5' --" in line and "history" not in line
    # A history named on the command line (the setting, BENCH_HISTORY__URL, needs no flag):
    for target, words in (("bench", []), ("bench", ["HOST=gpu01"]), ("bench", ["SLURM=debug"]),
                          ("compare-images", ["HOST=gpu01", "A=a", "B=b"]),
                          ("bisect", ["HOST=gpu01", "GOOD=1", "BAD=2", "CELL=1x8K",
                                      "VLLM_REPO=v"])):  # fmt: skip
        line = _dry_run(target, *words, "HISTORY=postgresql://bench@db/history", "NO_HISTORY=1")
        assert "--history 'postgresql://bench@db/history' --no-history" in line, (target, line)
    # The history a compare's noise prior comes from (NOISE_FROM): only the compares take it.
    compares = {
        "compare": ["A=a", "B=b"],
        "compare-images": ["HOST=gpu01", "A=a", "B=b"],
        "compare-commits": ["HOST=gpu01", "A=abc1234", "B=def5678"],
    }
    for target, words in compares.items():
        line = _dry_run(target, *words, "NOISE_FROM=h.sqlite3")
        assert "--noise-from 'h.sqlite3'" in line, (target, line)
        assert "--noise-from" not in _dry_run(target, *words), target
    assert "--noise-from" not in _dry_run("bench", "HOST=gpu01", "NOISE_FROM=h.sqlite3")
    smoke = _dry_run("smoke", "HOST=gpu01", "HISTORY=h.sqlite3")
    assert "--no-history" in smoke and "h.sqlite3" not in smoke
    line = _dry_run("bench", "HOST=gpu01,gpu02", "RUN_ARGS=--contexts 8K 16K", "KEEP=1")
    assert "provisioning bench 'gpu01,gpu02' --keep -- '--contexts' '8K' '16K'" in line
    line = _dry_run("bench", "HOST=gpu01", "PROFILE=cpu-vllm", "NO_WEIGHTS_DOWNLOAD=1")
    assert "provisioning bench 'gpu01' --profile 'cpu-vllm' --no-weights-download" in line, line
    line = _dry_run("bench", "SLURM=debug", "NODES=2", "PROFILE=twin", "RUN_ARGS=--contexts 8K")
    assert (
        "provisioning bench --slurm 'debug' --nodes '2' --profile 'twin' -- '--contexts' '8K'"
        in line
    ), line
    line = _dry_run("bench", "SLURM=debug")
    assert "--slurm 'debug' --nodes '1'" in line  # one node unless NODES says more


def _make(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    stamp = tmp_path / "stamp"
    stamp.touch()  # `setup` has nothing to do: the real .venv/bin runs
    return subprocess.run(
        ["make", "--no-print-directory", "-C", str(ROOT), *args, f"STAMP={stamp}"],
        capture_output=True, text=True, timeout=120, check=False,
        env={k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", *ALL)},
    )  # fmt: skip


def test_a_failing_recipe_names_the_programs_own_code_and_the_command_that_returns_it(
    tmp_path: Path,
) -> None:
    """make exits 2 whatever the program's code; the recipe's last line says the code (5 for
    a bundle that does not verify) and the direct command, which then exits with it."""
    bundle = tmp_path / "run 1.tar.gz"  # a space: the printed command quotes it
    bundle.write_bytes(b"not a gzip file")
    allowed = tmp_path / "allowed_signers"
    allowed.write_text("")
    got = _make(["verify", f"BUNDLE={bundle}", f"ALLOWED={allowed}"], tmp_path)
    assert got.returncode == 2, got.stderr
    lines = [x for x in got.stderr.splitlines() if x.startswith("make verify: ")]
    command = f".venv/bin/bench verify '{bundle}' --allowed-signers {allowed}"
    assert lines == [
        "make verify: bench exited 5 (VERIFY_FAILED: a bundle failed its hash, signature or "
        f"schema check); make itself exits 2, scripts should call {command} to get the code"
    ]
    direct = subprocess.run(["bash", "-c", command], capture_output=True, text=True,
                            timeout=60, check=False, cwd=ROOT)  # fmt: skip
    assert direct.returncode == 5, direct.stderr
    assert "make verify:" not in direct.stderr  # only under make


def test_a_failing_orchestrator_recipe_names_its_code_and_the_python_m_command(
    tmp_path: Path,
) -> None:
    got = _make(["preflight", "HOST=a..b"], tmp_path)  # refused before any connection
    assert got.returncode == 2, got.stderr
    assert (
        "make preflight: provision exited 2 (USAGE: bad input: arguments, settings, profile, "
        "card); make itself exits 2, scripts should call .venv/bin/python -m provisioning "
        "preflight a..b to get the code"
    ) in got.stderr.splitlines()


def test_the_docs_exit_code_table_is_the_one_the_make_line_names() -> None:
    from bench.errors import MEANING, Exit

    readme = (ROOT / "docs" / "faults.md").read_text(encoding="utf-8")
    table = readme.split("## Exit codes", 1)[1].split("\n\n", 2)[1]
    rows = [r.strip("|").split("|") for r in table.splitlines()[2:]]
    assert [(int(c), n.strip(), m.strip()) for c, n, m in rows] == [
        (int(e), e.name, MEANING[e]) for e in sorted(Exit)
    ]


def test_a_code_with_no_name_is_said_so() -> None:
    from bench.errors import make_line

    assert make_line("bench", "bench", 77, "x") == (
        "make bench: bench exited 77 (not a named code); make itself exits 2, scripts should "
        "call x to get the code"
    )


def test_an_argument_error_through_make_names_the_python_m_command_that_returns_it(
    tmp_path: Path,
) -> None:
    """argparse's own exit (before the program's main body) gets the line too, and a module
    run with `python -m` is named so, not by its file."""
    got = _make(["reproduce-twin", "REPRO_SPEED=abc", f"REPRO_OUT={tmp_path}/r"], tmp_path)
    assert got.returncode == 2, got.stderr
    (line,) = [x for x in got.stderr.splitlines() if x.startswith("make reproduce-twin: ")]
    assert line.startswith(
        "make reproduce-twin: tools.reproduce_twin exited 2 (USAGE: bad input: arguments, "
        "settings, profile, card); make itself exits 2, scripts should call "
        ".venv/bin/python -m tools.reproduce_twin --speed abc --card "
    )
    command = line.split("scripts should call ", 1)[1].removesuffix(" to get the code")
    direct = subprocess.run(["bash", "-c", command], capture_output=True, text=True,
                            timeout=60, check=False, cwd=ROOT)  # fmt: skip
    assert direct.returncode == 2 and "invalid float value: 'abc'" in direct.stderr
    assert not (tmp_path / "r").exists()
