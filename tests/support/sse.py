"""Test-side helpers: stream one completion and keep what the tests check."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx


@dataclass
class Streamed:
    status: int
    chunks: list[dict[str, Any]] = field(default_factory=list)
    arrivals: list[float] = field(default_factory=list)  # time.time() of each data line
    raw_lines: list[str] = field(default_factory=list)
    done: bool = False
    ttft_s: float | None = None
    error: str | None = None

    def content_chunks(self) -> list[dict[str, Any]]:
        return [c for c in self.chunks if c.get("choices") and _text(c["choices"][0])]


def _text(choice: dict[str, Any]) -> str:
    return str(choice.get("delta", {}).get("content") or choice.get("text") or "")


def chat_body(content: str, max_tokens: int, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        "stream": True,
        "ignore_eos": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    body.update(extra)
    return body


def stream_chat(
    client: httpx.Client, body: dict[str, Any], path: str = "/v1/chat/completions"
) -> Streamed:
    t0 = time.perf_counter()
    with client.stream("POST", path, json=body) as resp:
        out = Streamed(resp.status_code)
        if resp.status_code != 200:
            resp.read()
            out.error = resp.text
            return out
        try:
            for line in resp.iter_lines():
                if not line.startswith("data: "):
                    continue
                out.raw_lines.append(line)
                out.arrivals.append(time.time())
                data = line[len("data: ") :]
                if data == "[DONE]":
                    out.done = True
                    continue
                try:
                    chunk = json.loads(data)
                except ValueError:
                    out.error = f"malformed chunk: {data[:60]}"
                    continue
                out.chunks.append(chunk)
                if out.ttft_s is None and chunk.get("choices") and _text(chunk["choices"][0]):
                    out.ttft_s = time.perf_counter() - t0
        except httpx.HTTPError as exc:
            out.error = f"{type(exc).__name__}: {exc}"
    return out


def metric(client: httpx.Client, name: str) -> float:
    text = client.get("/metrics").text
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in /metrics")
