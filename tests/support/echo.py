"""A server that echoes the API key (issue 48), for the orchestrated paths: the shipped twin
launch profile with `--fault-echo-auth` and half of its answers injected errors, whose bodies
and log lines repeat the request's `Authorization` header; and the forms to search for."""

from __future__ import annotations

import base64
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[2]


def echoing_twin_profile(folder: Path) -> Path:
    """The twin profile (same name, same card) whose server echoes the key, written in FOLDER."""
    text = (ROOT / "bench" / "launch_profiles" / "twin.toml").read_text()
    end = '    "--port", "8000",\n]'
    assert end in text
    flags = '    "--fault-error-fraction", "0.5", "--fault-echo-auth",\n'
    path = folder / "twin.toml"  # a profile's name is its file's
    path.write_text(text.replace(end, end[:-1] + flags + "]"))
    return path


def key_forms(key: str) -> list[str]:
    """The key as the echoing twin repeats it: verbatim, URL-encoded, base64 (its middle)."""
    said = f"Bearer {key}"
    return [key, quote(said, safe=""), base64.b64encode(said.encode()).decode()[12:-4]]
