"""The image's Python scripts under docker/ (not a package) loaded as modules for tests."""

from __future__ import annotations

import importlib.util
import types
from pathlib import Path

DOCKER = Path(__file__).resolve().parents[2] / "docker"


def load_script(name: str) -> types.ModuleType:
    """docker/NAME.py as a module."""
    spec = importlib.util.spec_from_file_location(name, DOCKER / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
