"""recipe.json: the exact commands that re-create a run, and the pins they name.

Every bundle carries one, listed in the manifest and so covered by the signature like its
other files. Who writes it knows how the server was started:

    bench local        the twin: its profile and speed factor   (`for_twin`)
    the orchestrator   the image (id, ref, build arguments), the launch profile with the
                       model revision it pins, the host's requirements   (`for_image`)
    bench sign         nothing more than results.json says: a server at a URL (`for_external`),
                       written only when the run directory has no recipe yet

The `bench run` arguments are derived from the settings results.json records (every one,
defaults included), so the recipe repeats what was run, not what was typed. bench's own
source is the commit in its version (setuptools-scm's `+g<commit>`); a run from a dirty
tree is marked, since no commit is exactly its code.
"""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bench import is_dirty, writes
from bench.bundle import provenance
from bench.errors import VerifyFailed, validation_message
from bench.results import Results, RunSettings
from bench.workload.slo import text as slo_text
from bench.workload_points import WorkloadRun

RECIPE_NAME = "recipe.json"
RECIPE_SCHEMA_VERSION = 1
_MAX_BYTES = 1 << 20


class _RecipeModel(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class BenchSource(_RecipeModel):
    version: str = Field(description="bench's version as results.json records it")
    commit: str | None = Field(description="this repository's commit (None: not from git)")
    dirty: bool = Field(description="made from a tree with uncommitted changes")


class TwinServer(_RecipeModel):
    kind: Literal["twin"] = "twin"
    profile: str
    speed: float


class ImageServer(_RecipeModel):
    kind: Literal["image"] = "image"
    image_id: str | None = Field(description="the id of the image the server ran in")
    image_ref: str = Field(description="the reference the run asked for")
    build_target: str | None = None
    build_args: dict[str, str] = {}
    launch_profile: str
    launch_argv: tuple[str, ...]
    model: str | None = None
    model_revision: str | None = None
    revision_pinned: bool = False


class ExternalServer(_RecipeModel):
    kind: Literal["external"] = "external"
    url: str
    version: str | None = None


Server = Annotated[TwinServer | ImageServer | ExternalServer, Field(discriminator="kind")]


class Recipe(_RecipeModel):
    schema_version: int = RECIPE_SCHEMA_VERSION
    run_id: str
    bench: BenchSource
    server: Server
    run_args: tuple[str, ...] = Field(description="`bench run` arguments, less --url and --out")
    host_requirements: dict[str, str]
    commands: tuple[str, ...] = Field(min_length=1, description="shell commands, in order")


def launch_profile(recipe: Recipe | None) -> str | None:
    """The launch profile RECIPE ran (`twin:NAME` on a twin), as the history records it;
    None for a server at a URL or without a recipe."""
    if recipe is None:
        return None
    if isinstance(recipe.server, TwinServer):
        return f"twin:{recipe.server.profile}"
    if isinstance(recipe.server, ImageServer):
        return recipe.server.launch_profile
    return None


def _tokens(n: int) -> str:
    return f"{n // 1024}K" if n % 1024 == 0 else str(n)


def _workload_args(w: WorkloadRun) -> list[str]:
    """--workload as given, with the workload as run's rates and SLO (what --rates and
    --slo made of it), and a capacity search's own options."""
    out = ["--workload", w.source]
    a = w.workload.arrivals
    if a.kind == "rate":
        out += ["--rates", ",".join("inf" if math.isinf(r) else f"{r:g}" for r in a.rates)]
    if w.workload.slo is not None and w.workload.slo.terms():
        out += ["--slo", slo_text(w.workload.slo)]
    c = w.capacity
    if c is not None:
        out += ["--by", c.by, "--start", f"{c.start:g}", "--lowest", f"{c.lowest:g}",
                "--highest", f"{c.highest:g}", "--tolerance", f"{c.tolerance:g}",
                "--repeats", str(c.repeats), "--max-points", str(c.max_points)]  # fmt: skip
    return out


def run_args(
    s: RunSettings, workload: WorkloadRun | None = None, *, names_workload: bool = True
) -> list[str]:
    """The `bench run` (or, for a capacity search, `bench capacity`) arguments that give
    these settings (less --url and --out). A workload run has no matrix; its --workload
    and what goes with it are left to the orchestrator's own flags when `names_workload`
    is False (`provision bench --workload` passes them on)."""
    out = ["--api", s.api]
    if s.model is not None:
        out += ["--model", s.model]
    if workload is not None:
        out += _workload_args(workload) if names_workload else []
    else:
        out += ["--contexts", *(_tokens(c) for c in s.contexts)]
        out += ["--prefill-only-contexts", *(_tokens(c) for c in s.prefill_only_contexts)]
        out += ["--concurrencies", *(str(c) for c in s.concurrencies)]
    if s.cells:
        out += ["--cells", *(f"{ctx}:{c}" for ctx, c in s.cells)]
    out += ["--duration", f"{s.duration_s:g}", "--max-tokens", str(s.max_tokens)]
    out += ["--trials", str(s.trials), "--seed", str(s.seed)]
    out += ["--request-timeout", f"{s.request_timeout_s:g}"]
    if s.kv_budget_tokens is not None:
        out += ["--kv-budget", str(s.kv_budget_tokens)]
    if s.speed_factor is not None:
        out += ["--speed-factor", f"{s.speed_factor:g}"]
    return out


def bench_source(version: str) -> BenchSource:
    return BenchSource(
        version=version, commit=provenance.bench_commit(version), dirty=is_dirty(version)
    )


def _checkout(src: BenchSource) -> list[str]:
    if src.commit is None:
        return [
            f"# bench {src.version} names no commit of this repository (built outside git):"
            " use that release"
        ]
    out = [f"git checkout {src.commit}  # in a clone of this repository"]
    if src.dirty:
        out.append(
            f"# the run was made from a dirty tree at {src.commit}: "
            "no commit is exactly the code that made it"
        )
    return [*out, "make setup"]


def _join(words: Sequence[str]) -> str:
    return " ".join(shlex.quote(w) for w in words)


def for_twin(results: Results, *, profile: str, speed: float) -> Recipe:
    src = bench_source(results.bench_version)
    args = run_args(results.settings, results.workload)
    local = [".venv/bin/bench", "local", "--profile", profile, "--speed", f"{speed:g}", "--"]
    return Recipe(
        run_id=results.run_id,
        bench=src,
        server=TwinServer(profile=profile, speed=speed),
        run_args=tuple(args),
        host_requirements={"gpus": "none (the twin runs on the CPU)", "python": "3.11"},
        commands=(*_checkout(src), _join([*local, *args])),
    )


def for_external(results: Results) -> Recipe:
    src = bench_source(results.bench_version)
    args = run_args(results.settings, results.workload)
    server = results.server
    note = f"# the server at {server.url} ({server.model}, version {server.version or '?'})"
    verb = "capacity" if results.workload is not None and results.workload.capacity else "run"
    run = [".venv/bin/bench", verb, "--url", results.settings.url, *args]
    return Recipe(
        run_id=results.run_id,
        bench=src,
        server=ExternalServer(url=server.url, version=server.version),
        run_args=tuple(args),
        host_requirements={"server": "started by hand: not recorded by bench"},
        commands=(
            *_checkout(src),
            note + " must be running; its API key in BENCH_API_KEY",
            _join(run),
        ),
    )


def for_image(
    results: Results,
    *,
    server: ImageServer,
    host_requirements: Mapping[str, str],
    build_command: Sequence[str] | None,
    orchestrate: Sequence[str],
) -> Recipe:
    """The orchestrator's run: `build_command` makes the image (None: it was given as a
    ref), `orchestrate` is the `python -m provisioning bench ...` command without its
    `-- <bench run args>` tail, which is added here."""
    src = bench_source(results.bench_version)
    args = run_args(results.settings, results.workload, names_workload=False)
    commands = _checkout(src)
    if build_command is not None:
        commands.append(_join(build_command))
    if server.image_id:
        commands.append(
            f"# the run's image was {server.image_id}: `docker image inspect "
            f"{shlex.quote(server.image_ref)}` on the host must show that id"
        )
    if server.model_revision:
        pin = "pinned by the profile" if server.revision_pinned else "NOT pinned by the profile"
        commands.append(f"# weights: {server.model} at {server.model_revision} ({pin})")
    commands.append(_join([*orchestrate, "--", *args]))
    return Recipe(
        run_id=results.run_id,
        bench=src,
        server=server,
        run_args=tuple(args),
        host_requirements=dict(host_requirements),
        commands=tuple(commands),
    )


def from_results(results: Results) -> Recipe:
    """What results.json alone says: the twin (its /version names profile and speed), else
    a server at a URL."""
    twin = results.server.version_payload.get("twin")
    if isinstance(twin, dict) and isinstance(twin.get("profile"), str):
        speed = twin.get("speed")
        factor = float(speed) if isinstance(speed, int | float) else results.server.speed_factor
        return for_twin(results, profile=twin["profile"], speed=factor)
    return for_external(results)


def dumps(recipe: Recipe) -> str:
    return recipe.model_dump_json(indent=2) + "\n"


def write(root: Path, recipe: Recipe) -> Path:
    path = root / RECIPE_NAME
    writes.write_atomic(path, dumps(recipe))
    return path


def read(root: Path) -> Recipe:
    """root/recipe.json, or VerifyFailed naming what is wrong with it."""
    path = root / RECIPE_NAME
    try:
        if path.stat().st_size > _MAX_BYTES:
            raise VerifyFailed(f"{RECIPE_NAME}: larger than {_MAX_BYTES} bytes")
        raw = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise VerifyFailed(
            f"{RECIPE_NAME}: missing", hint="bench sign writes one; older bundles have none"
        ) from None
    except (OSError, ValueError, UnicodeDecodeError):
        raise VerifyFailed(f"{RECIPE_NAME}: not valid JSON") from None
    try:
        return Recipe.model_validate(raw)
    except ValidationError as exc:
        raise VerifyFailed(
            f"{RECIPE_NAME}: malformed at {validation_message(exc, 'document')}"
        ) from None


def json_schema() -> dict[str, object]:
    return Recipe.model_json_schema()
