"""Make: every variable a user passes reaches the command as data (one argument, or one per
word for the list variables), never evaluated by the shell or by make (issue 15).

Real make on the real Makefile; `bench` and `python` in BIN are stand-ins that write down
their arguments, so nothing else runs. No sockets.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]

STUB = """#!{python}
import json, sys
with open({log!r}, "a") as f:
    f.write(json.dumps([sys.argv[0].rsplit("/", 1)[-1], *sys.argv[1:]]) + "\\n")
"""

CASES: dict[str, tuple[list[str], list[str]]] = {
    # target: (variables set to a hostile value, variables set to a hostile word list)
    "bench-local": (["SPEED"], ["RUN_ARGS"]),
    "bench": (["HOST", "PROFILE", "CARD", "IMAGE", "IMAGE_SOURCE"], ["RUN_ARGS", "BUILD_ARGS"]),
    "bench-slurm": (
        [
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
    "verify": (["BUNDLE", "ALLOWED"], []),
    # A and B are lists too: several bundles a side (make compare A='a1 a2' B='b1 b2').
    "compare": (["HTML", "ALLOWED_SIGNERS", "ACCEPT"], ["A", "B", "MORE"]),
    "reproduce": (["BUNDLE", "CARD", "HTML", "ALLOWED_SIGNERS", "ACCEPT"], []),
    "smoke": (["HOST", "IMAGE", "IMAGE_SOURCE"], ["BUILD_ARGS"]),
    "compare-images": (["HOST", "A", "B", "PROFILE", "TRIALS", "ORDER"], ["RUN_ARGS"]),
    "compare-commits": (
        ["HOST", "A", "B", "PROFILE", "TRIALS", "ORDER"],
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


@pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")
@pytest.mark.parametrize("target", list(CASES))
def test_hostile_make_variables_run_nothing_and_arrive_as_given(
    target: str, tmp_path: Path
) -> None:
    log = tmp_path / "argv.jsonl"
    stubs = tmp_path / "bin"
    stubs.mkdir()
    for name in ("bench", "python"):
        path = stubs / name
        path.write_text(STUB.format(python=sys.executable, log=str(log)))
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
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


@pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")
def test_defaults_and_plain_values_still_reach_the_commands() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", *ALL)}
    got = subprocess.run(
        ["make", "--no-print-directory", "-n", "-C", str(ROOT), "bench", "STAMP=Makefile"],
        capture_output=True, text=True, timeout=60, check=True, env=env,
    )  # fmt: skip
    assert "bench local --speed '5' --" in got.stdout
    got = subprocess.run(
        ["make", "--no-print-directory", "-n", "-C", str(ROOT), "bench", "STAMP=Makefile",
         "HOST=gpu01,gpu02", "RUN_ARGS=--contexts 8K 16K", "KEEP=1"],
        capture_output=True, text=True, timeout=60, check=True, env=env,
    )  # fmt: skip
    line = " ".join(got.stdout.replace("\\\n", " ").split())
    assert "provisioning bench 'gpu01,gpu02' --keep -- '--contexts' '8K' '16K'" in line
    got = subprocess.run(
        ["make", "--no-print-directory", "-n", "-C", str(ROOT), "bench", "STAMP=Makefile",
         "SLURM=debug", "NODES=2", "PROFILE=twin", "RUN_ARGS=--contexts 8K"],
        capture_output=True, text=True, timeout=60, check=True, env=env,
    )  # fmt: skip
    line = " ".join(got.stdout.replace("\\\n", " ").split())
    assert (
        "provisioning bench --slurm 'debug' --nodes '2' --profile 'twin' -- '--contexts' '8K'"
        in line
    ), line
    got = subprocess.run(
        ["make", "--no-print-directory", "-n", "-C", str(ROOT), "bench", "STAMP=Makefile",
         "SLURM=debug"],
        capture_output=True, text=True, timeout=60, check=True, env=env,
    )  # fmt: skip
    line = " ".join(got.stdout.replace("\\\n", " ").split())
    assert "--slurm 'debug' --nodes '1'" in line  # one node unless NODES says more
