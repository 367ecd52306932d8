"""`bench provenance BUNDLE [--recipe]`: from a bundle's figures back to their sources.

The bundle is read the way the verdicts read one (`bench.verdict.run_source`): an archive is
opened with the bounded, link- and escape-refusing reader into a scratch directory, then
verified (signature by an allowed signer, hashes, schema; exit 5 when it does not verify,
unless --unverified, which the output then says). Nothing in it is trusted before that, and
a bad bundle is one line and a named exit code.

Without --recipe: the chain, one link a line: signature, results.json, bench (version,
commit, dirty), server, image (id, labels), the server's package freeze, the weights (model,
revision, pinned, every file's sha256), the launch, the `bench run` arguments, the host's
GPUs as recorded, and the recipe. With --recipe: the recipe's commands, as a shell script.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from bench import run_files
from bench.bundle import manifest as manifest_mod
from bench.bundle import provenance as prov
from bench.bundle import recipe as recipe_mod
from bench.bundle.verify import ENVIRONMENT_NAME, read_environment
from bench.errors import UsageError, VerifyFailed
from bench.results import Results
from bench.settings import Settings
from bench.verdict.run_source import Verification, add_verification_args, check
from bench.verdict.run_source import opened as opened_run


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("provenance", help="where a bundle's figures come from, or its recipe")
    p.add_argument("bundle", type=Path, metavar="BUNDLE", help="a bundle .tar.gz or directory")
    p.add_argument(
        "--recipe", action="store_true", help="print the commands that re-create the run"
    )
    add_verification_args(p, "the bundle")
    p.set_defaults(func=handle)


def _hashes(root: Path) -> dict[str, str]:
    if not (root / manifest_mod.MANIFEST_NAME).is_file():
        return {}
    return {f.path: f.sha256 for f in manifest_mod.read(root).files}


def _labels(env: Any) -> str:
    labels = prov.image_labels(env)
    return ", ".join(f"{k}={v}" for k, v in sorted(labels.items())) or "none"


def _server(results: Results) -> str:
    s = results.server
    twin = s.version_payload.get("twin")
    if isinstance(twin, dict):
        return (
            f"the twin, profile {twin.get('profile')}, speed {twin.get('speed')}, "
            f"seed {twin.get('seed')} (model {s.model})"
        )
    return f"{s.model} at {s.url}, version {s.version or 'not reported'}"


def _packages(env: Any, twin: bool) -> str:
    found = prov.server_packages(env, twin=twin)
    if found is None:
        return "not recorded"
    image_freeze = prov.server_packages(env, twin=False) is not None
    where = "the image's self-test" if image_freeze else "bench's own Python, which ran the twin"
    return f"{len(found)} packages (from {where}; environment.json)"


def _host(env: Any) -> list[str]:
    host = env.get("host") if isinstance(env, dict) else None
    gpu = env.get("gpu") if isinstance(env, dict) else None
    out = []
    if isinstance(host, dict):
        out.append(
            f"host         {host.get('hostname', '?')}: {host.get('os') or '?'}, kernel "
            f"{host.get('kernel', '?')}, {host.get('cpu_count', '?')} CPUs"
        )
    if isinstance(gpu, dict):
        gpus = [g.get("name", "?") for g in gpu.get("gpus", []) if isinstance(g, dict)]
        if gpus:
            out.append(
                f"gpus         {len(gpus)} x {', '.join(sorted(set(gpus)))}; driver "
                f"{gpu.get('driver_version') or '?'}, CUDA {gpu.get('cuda_version') or '?'}"
            )
        else:
            out.append(f"gpus         none ({gpu.get('reason') or 'not recorded'})")
    return out or ["host         not recorded"]


def chain(root: Path, shown: Path, results: Results, env: Any, trust: str) -> list[str]:
    hashes = _hashes(root)
    twin = "twin" in results.server.version_payload
    out = [f"Provenance of run {results.run_id} ({shown})", ""]
    out.append(f"signature    {trust}")
    sha = hashes.get(run_files.RESULTS)
    cells = len(results.cells) + len(results.prefill)
    out.append(
        f"figures      results.json (schema v{results.schema_version}, {cells} cell and prefill "
        f"results, state {results.state})" + (f", sha256 {sha}" if sha else "")
    )
    out.append(f"made by      {prov.bench_identity(results.bench_version)}")
    out.append(f"server       {_server(results)}")
    if env is None:
        out.append(
            f"environment  {ENVIRONMENT_NAME} missing or unreadable: no image, packages or weights"
        )
    else:
        image = prov.image_id(env) or "none recorded (not run in a container)"
        out.append(f"image        {image}; labels: {_labels(env)}")
        out.append(f"packages     {_packages(env, twin)}")
        out.append(prov.weights_line(env, twin=twin).replace("weights: ", "weights      ", 1))
        files = prov.weights_of(env).get("files")
        if isinstance(files, dict):
            out += [f"               {digest}  {name}" for name, digest in sorted(files.items())]
        launch = env.get("launch") if isinstance(env, dict) else None
        argv = launch.get("argv") if isinstance(launch, dict) else None
        if argv:
            out.append(f"launch       {' '.join(str(w) for w in argv)}")
    try:
        recipe: recipe_mod.Recipe | None = recipe_mod.read(root)
    except VerifyFailed as exc:
        recipe = None
        out.append(f"recipe       {exc.message}")
    args = recipe.run_args if recipe else tuple(recipe_mod.run_args(results.settings))
    out.append(f"run          bench run {' '.join(args)}")
    if recipe is not None and recipe.server.kind == "image":
        profile = recipe.server.launch_profile
        revision = recipe.server.model_revision or "no revision"
        out.append(f"profile      {profile} (model revision {revision})")
    out += _host(env)
    if recipe is not None:
        sha = hashes.get(recipe_mod.RECIPE_NAME)
        out.append(
            f"recipe       {recipe_mod.RECIPE_NAME} ({recipe.server.kind} server)"
            + (f", sha256 {sha}" if sha else "")
            + f": bench provenance {shown} --recipe"
        )
    return out


def recipe_text(recipe: recipe_mod.Recipe, shown: Path, trust: str) -> str:
    lines = [
        f"# Re-create run {recipe.run_id}: {recipe_mod.RECIPE_NAME} of {shown}",
        f"# {trust}",
        "# host: " + ", ".join(f"{k} {v}" for k, v in recipe.host_requirements.items()),
        *recipe.commands,
    ]
    return "\n".join(lines) + "\n"


def handle(args: argparse.Namespace, settings: Settings) -> int:
    path: Path = args.bundle
    if not path.exists():
        raise UsageError(f"{path}: no such bundle (a .tar.gz or a directory)")
    how = Verification(tuple(args.allowed_signers), bool(args.unverified))
    with opened_run(path) as root:
        _, trust = check(root, path, how)
        results = run_files.load_results(root)
        env = read_environment(root)
        if args.recipe:
            recipe = recipe_mod.read(root)
            sys.stdout.write(recipe_text(recipe, path, trust))
            return 0
        lines = chain(root, path, results, env, trust)
    sys.stdout.write("\n".join(lines) + "\n")
    return 0
