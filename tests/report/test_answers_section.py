"""report.html's "Answers": each prompt's answer as recorded, escaped; a run without one says so."""

from __future__ import annotations

from bench.answers import Answer, Fingerprint, answer_sha256
from bench.report.answers import SHOWN_CHARS, answers_section


def test_each_answer_is_a_row_and_server_text_is_escaped() -> None:
    ids = tuple(range(64))
    fp = Fingerprint(
        version="v1", max_tokens=64, seed=5, requests=9, server_s=12.5,
        answers=(
            Answer(name="short 1", status="answered", token_ids=ids, ids_from="logprobs",
                   text="<script>x</script>" + "w" * 500, sha256=answer_sha256(ids)),
            Answer(name="64K", prompt_tokens=65536, status="failed", reason="HTTP 500: <b>"),
        ),
    )  # fmt: skip
    page = answers_section(fp)
    assert "Fingerprint v1: 2 prompts (1 answered), 64 tokens each" in page
    assert "9 requests, 12.5 s of server time" in page
    assert "<script>" not in page and "&lt;script&gt;x&lt;/script&gt;" in page
    assert "w" * (SHOWN_CHARS - 18) in page and "w" * (SHOWN_CHARS - 17) not in page
    assert f"<td>{answer_sha256(ids)[:16]}</td>" in page and "<td>64 ids (logprobs)</td>" in page
    assert "<td>65,536</td><td>failed</td><td>—</td><td>—</td><td>HTTP 500: &lt;b&gt;</td>" in page


def test_a_run_without_a_fingerprint_says_so() -> None:
    assert "No answer fingerprint in this run" in answers_section(None)


def test_a_broken_promise_is_shown_on_its_prompt() -> None:
    broken = Answer(name="tool call", status="answered", text="get_weather(Paris)",
                    promise="tool_call", promise_held=False,
                    promise_detail="no tool call in the answer <i>")  # fmt: skip
    kept = Answer(name="reasoning", status="answered", text="t", promise="reasoning",
                  promise_held=True, promise_detail="9 characters")  # fmt: skip
    fp = Fingerprint(version="v1", max_tokens=64, seed=5, answers=(broken, kept),
                     reasoning_parser="qwen3", tool_call_parser="qwen3_coder")  # fmt: skip
    page = answers_section(fp)
    assert "The launch's reasoning parser qwen3 and tool-call parser qwen3_coder: one" in page
    assert "[tool_call promise BROKEN: no tool call in the answer &lt;i&gt;] get_weather" in page
    assert "[reasoning promise kept: 9 characters] t" in page
