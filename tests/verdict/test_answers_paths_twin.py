"""The launch's paths on real processes: the twin served with a reasoning parser and tool
calls, `bench run` reading its launch from /proc and fingerprinting both paths, and `bench
compare` refusing a launch whose parsers broke (the same tokens, no reasoning field, no tool
call) as answering differently."""

from __future__ import annotations

import pathlib

import pytest

from bench.results import Results
from tests.support import procs
from tests.support.twinproc import start_twin

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
SPEED = 4.0
PLAN = ("--contexts", "256", "--prefill-only-contexts", "", "--concurrencies", "1",
        "--max-tokens", "64", "--duration", "1")  # fmt: skip
PARSERS = ("--reasoning-parser", "qwen3", "--enable-auto-tool-choice",
           "--tool-call-parser", "qwen3_coder")  # fmt: skip


def _bench(*args: str) -> tuple[int, str, str]:
    return procs.finish(procs.bench(*args, mark=procs.new_mark()), timeout_s=300)


def _run(extra: tuple[str, ...], out: pathlib.Path) -> Results:
    with start_twin("tiny", speed=SPEED, extra_args=extra) as twin:
        rc, _, err = _bench("run", "--url", twin.url, *PLAN, "--out", str(out))
    assert rc == 0, err[-2000:]
    return Results.model_validate_json((out / "results.json").read_text())


def test_a_broken_parser_is_found_and_refused(tmp_path: pathlib.Path) -> None:
    good = _run(PARSERS, tmp_path / "a")
    fp = good.fingerprint
    assert fp is not None and (fp.reasoning_parser, fp.tool_call_parser) == ("qwen3", "qwen3_coder")
    held = {a.name: a.promise_held for a in fp.answers if a.promise is not None}
    assert held == {"reasoning": True, "tool call": True}
    call = fp.answer("tool call")
    assert call is not None and call.text.endswith(")") and "get_weather({" in call.text
    broken = _run((*PARSERS, "--fault-unparsed-paths"), tmp_path / "b")
    assert broken.fingerprint is not None
    held = {a.name: a.promise_held for a in broken.fingerprint.answers if a.promise is not None}
    assert held == {"reasoning": False, "tool call": False}
    flags = ("--accept", "launch_flags")
    rc, out, _ = _bench("compare", str(tmp_path / "a"), str(tmp_path / "b"), *flags)
    assert "- tool call prompt: B: the tool call no longer parses" in out, out[-3000:]
    assert "- reasoning prompt: B: the answer no longer comes back in the reasoning field" in out
    assert out.rstrip().endswith("B ANSWERS DIFFERENTLY: ITS SPEED IS NOT COMPARABLE")
    assert rc == 1
