"""The twin's run-to-run noise: a seeded log-normal factor on every step cost of a cell.

factor(run seed, trial, cell) = exp(N(0, noise_run)) x exp(N(0, noise_trial)), the first
drawn per (run, cell) and shared by the run's trials, the second per (run, trial, cell).
A factor f makes every step f times as long: throughput / f, latencies x f. Seeds are
strings, so the draws do not depend on Python's hash seed or on the order cells run in.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

from bench.errors import UsageError
from bench.twin.profile import Profile


def _gauss(sd: float, *key: object) -> float:
    if sd <= 0:
        return 0.0
    return random.Random("/".join(str(k) for k in key)).gauss(0.0, sd)


def shared_log(profile: Profile, run_seed: int) -> float:
    """The log of the run's shared factor: noise_shared x N(0, 1), or x a Student t with
    noise_shared_df degrees of freedom (N(0, 1) / sqrt(chi2_df / df))."""
    if profile.noise_shared <= 0:
        return 0.0
    rng = random.Random(f"shared/{run_seed}")
    z = rng.gauss(0.0, 1.0)
    df = profile.noise_shared_df
    if df > 0:
        z /= math.sqrt(rng.gammavariate(df / 2.0, 2.0) / df)
    return profile.noise_shared * z


def cell_factor(
    profile: Profile, run_seed: int, trial: int, context: int, concurrency: int
) -> float:
    """The noise factor of one cell in one trial of one run."""
    run = _gauss(profile.noise_run, "run", run_seed, context, concurrency)
    per_trial = _gauss(profile.noise_trial, "trial", run_seed, trial, context, concurrency)
    return math.exp(shared_log(profile, run_seed) + run + per_trial)


def scaled(profile: Profile, factor: float) -> Profile:
    """The profile with every time cost multiplied by `factor` (1.0: the profile itself)."""
    if factor == 1.0:
        return profile
    return profile.model_copy(
        update={
            "decode_step_s": [[v * factor for v in row] for row in profile.decode_step_s],
            "prefill_s_per_token": [v * factor for v in profile.prefill_s_per_token],
            "request_overhead_s": [v * factor for v in profile.request_overhead_s],
            "frontend_s": [[v * factor for v in row] for row in profile.frontend_s],
        }
    )


def without_noise(profile: Profile) -> Profile:
    return profile.model_copy(update={"noise_run": 0.0, "noise_trial": 0.0, "noise_shared": 0.0})


FITS = Path(__file__).parent / "noise_fits"
_FIT_KEYS = ("noise_shared", "noise_shared_df", "noise_run", "noise_trial")


def fit_names() -> list[str]:
    return sorted(p.stem for p in FITS.glob("*.json"))


def fit_source(name: str) -> str:
    """Where the fit NAME's figures come from (its "source" line)."""
    doc = json.loads((FITS / f"{name}.json").read_text())
    return str(doc.get("source", "no source recorded"))


def with_fit(profile: Profile, name: str) -> Profile:
    """The profile with the run-to-run noise fitted to a corpus (bench/twin/noise_fits/NAME.json,
    written by `make verdict-power`'s corpus part): only the noise changes."""
    path = FITS / f"{name}.json"
    if not path.is_file():
        raise UsageError(f"no noise fit {name!r}", hint=f"one of: {', '.join(fit_names())}")
    doc = json.loads(path.read_text())
    return profile.model_validate({**profile.model_dump(), **{k: doc[k] for k in _FIT_KEYS}})


class RunNoisyProfile(Profile):
    """The live twin's run-to-run noise (`bench twin serve --run-noise`): every step cost
    carries the factor of the cell it most likely belongs to, (nearest context anchor,
    batch size), seeded by the server's --seed (one server start = one run). Trials of one
    `bench run` share it, as trials inside one server start do; a trial part is drawn
    once per run as well (the live server cannot tell trials apart)."""

    noise_seed: int = 0

    def _factor(self, batch: int, context: float) -> float:
        i, j, w = self._ctx_weights(context)
        anchor = self.contexts[j if w >= 0.5 else i]
        return cell_factor(self, self.noise_seed, 0, anchor, batch)

    def decode_step_seconds(self, batch: int, mean_context: float) -> float:
        return super().decode_step_seconds(batch, mean_context) * self._factor(batch, mean_context)

    def prefill_seconds_per_token(self, prompt_tokens: int) -> float:
        return super().prefill_seconds_per_token(prompt_tokens) * self._factor(0, prompt_tokens)


def for_live_run(profile: Profile, seed: int) -> Profile:
    """The profile a live twin started with --seed `seed` and --run-noise serves."""
    return RunNoisyProfile(**profile.model_dump(), noise_seed=seed)
