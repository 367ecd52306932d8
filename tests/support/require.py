"""What a test needs from the machine: missing, it is a failing test that names it (the
project's rule: a missing tool or service is never a silent skip)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest


def require(*tools: str, paths: tuple[Path, ...] = ()) -> None:
    missing = [t for t in tools if shutil.which(t) is None]
    missing += [f"{p} (run `make setup`)" for p in paths if not p.exists()]
    if missing:
        pytest.fail(f"this test needs {', '.join(missing)}, which this machine lacks",
                    pytrace=False)  # fmt: skip
