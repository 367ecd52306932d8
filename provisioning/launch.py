"""The launch profile as the orchestrator needs it (bench/launch_profiles/<name>.toml).

Until bench.launch_profile is on this branch, only the GPU count is read here, straight
from the data file; the profile's own loader validates the rest where it is used.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from bench.errors import ProfileError

LAUNCH_PROFILE_DIR = Path(__file__).resolve().parents[1] / "bench" / "launch_profiles"


def launch_gpus(profile: str, directory: Path = LAUNCH_PROFILE_DIR) -> int:
    path = directory / f"{profile}.toml"
    if not path.is_file():
        known = sorted(p.stem for p in directory.glob("*.toml"))
        raise ProfileError(
            f"no launch profile {profile!r}",
            hint=f"known: {', '.join(known) or 'none'}",
        )
    try:
        gpus = tomllib.loads(path.read_text())["gpus"]
    except (tomllib.TOMLDecodeError, KeyError) as exc:
        raise ProfileError(f"{path}: cannot read gpus: {exc}") from None
    if not isinstance(gpus, int) or gpus < 0:
        raise ProfileError(f"{path}: gpus must be a whole number >= 0")
    return gpus
