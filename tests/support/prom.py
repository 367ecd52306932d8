"""Read the Prometheus text exposition of a real server's /metrics (vLLM, llama.cpp), for the
tests' own checks.

Deliberately independent of the engine's metrics code: the tests compare what `bench run`
recorded with what this reads straight off the server.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import httpx

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\d+)?$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


def parse(text: str) -> list[Sample]:
    samples = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match is None:
            raise ValueError(f"not a Prometheus sample line: {line!r}")
        name, labels, value = match.groups()
        samples.append(Sample(name, dict(_LABEL.findall(labels or "")), float(value)))
    return samples


def scrape(url: str) -> list[Sample]:
    response = httpx.get(f"{url}/metrics", timeout=30.0)
    response.raise_for_status()
    return parse(response.text)


def one(samples: list[Sample], name: str) -> Sample:
    found = [s for s in samples if s.name == name]
    if len(found) != 1:
        raise AssertionError(f"expected one {name} sample, found {len(found)}")
    return found[0]


def total(samples: list[Sample], name: str) -> float:
    """Sum over every label set (engines, finish reasons) of one family."""
    return sum(s.value for s in samples if s.name == name)
