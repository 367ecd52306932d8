"""No `asyncio.wait_for` in the shipped code: on Python 3.11 it swallows a cancellation that
arrives as the awaited future completes (CPython gh-86296), and a looping worker that lost
its cancellation that way ran on for 24 minutes (docs/faults.md, "Bounds"). `asyncio.timeout`
and `asyncio.wait` have no such case."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).parents[2]


def _wait_for_calls(source: str) -> list[int]:
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if name == "wait_for":
                lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "asyncio":
            lines += [node.lineno for a in node.names if a.name == "wait_for"]
    return lines


def test_the_check_sees_both_spellings() -> None:
    assert _wait_for_calls("import asyncio\nasyncio.wait_for(f, 1)\n") == [2]
    assert _wait_for_calls("from asyncio import wait_for\n") == [1]
    assert _wait_for_calls("async def f():\n    async with asyncio.timeout(1): pass\n") == []


def test_no_shipped_module_calls_asyncio_wait_for() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for package in ("bench", "provisioning", "tools")
        for path in sorted((ROOT / package).rglob("*.py"))
        for line in _wait_for_calls(path.read_text())
    ]
    assert found == []
