"""The workload a run measures instead of the card's matrix (`--workload NAME|FILE`, with
`--rates` and `--slo`): checked here, before any host is touched; staged on the host; and
passed to `bench run` inside the server container (docs/provisioning.md, "Workloads").

NAME (what bench.workload_spec.load_workload takes as a preset: no ".toml", no "/") is a
preset shipped in the image's bench: `bench run --workload NAME` as given. FILE is a TOML
file on this machine: it is loaded here as `bench run` would load it (its data file read
and hashed), then written into the run's inputs folder on the host (RUN_DIR.inputs,
mounted read-only in the server container at INPUTS_IN_CONTAINER) as the workload it
loaded to, with a data file it names by path copied beside it (`data/NAME`) and the path
pointing at that copy, its sha256 pinned: the container reads exactly the bytes checked
here, or refuses (exit 2). A data file named as a shipped one (no "/" or ".") is the
image's and is not copied. The inputs folder is removed with the run's containers.

`bench run` writes only into an empty run directory (bench.run.rundir), so the inputs have
their own folder beside it; none of it is a secret and none goes on a command line but
its in-container path.
"""

from __future__ import annotations

import math
import re
import shlex
import tomllib
from dataclasses import dataclass
from pathlib import Path

import structlog

from bench.errors import BenchError, UsageError, one_line
from bench.run.workload_run import load as load_with_overrides
from bench.workload import datafile
from bench.workload_spec import Workload, load_workload
from provisioning.hosts import transfer
from provisioning.hosts.remote import Remote
from provisioning.hosts.shell import Shell

log = structlog.get_logger("provisioning.flow")

INPUTS_IN_CONTAINER = "/results/inputs"  # the run's inputs folder, in the server container
_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


@dataclass(frozen=True)
class StagedFile:
    """A local file, and its path under the run's inputs folder."""

    local: Path
    name: str


@dataclass(frozen=True)
class WorkloadChoice:
    """The workload of every sweep of a command: REF as given (a preset's name, or a TOML
    file here), the --rates and --slo overrides, and for a file what is staged on the host
    (TOML_NAME: None for a preset)."""

    ref: str
    rates: str | None = None
    slo: str | None = None
    toml_name: str | None = None
    toml_text: str = ""
    data: tuple[StagedFile, ...] = ()

    @property
    def staged(self) -> bool:
        """Whether files go into the run's inputs folder (a file; not a preset)."""
        return self.toml_name is not None

    def run_args(self) -> tuple[str, ...]:
        """The `bench run` arguments inside the container."""
        ref = self.ref if self.toml_name is None else f"{INPUTS_IN_CONTAINER}/{self.toml_name}"
        return ("--workload", ref, *self._overrides())

    def command_args(self) -> tuple[str, ...]:
        """The orchestrator's own options that chose it, as given here (for recipe.json)."""
        return ("--workload", self.ref, *self._overrides())

    def _overrides(self) -> tuple[str, ...]:
        out: tuple[str, ...] = ()
        if self.rates is not None:
            out += ("--rates", self.rates)
        if self.slo is not None:
            out += ("--slo", self.slo)
        return out


def is_preset(ref: str) -> bool:
    """Whether `bench run --workload REF` takes REF as a shipped preset's name (the rule of
    bench.workload_spec.load_workload), else as a file's path."""
    return Path(ref).suffix != ".toml" and "/" not in ref


def choose(ref: str | None, rates: str | None, slo: str | None) -> WorkloadChoice | None:
    """The workload REF with its overrides, checked as `bench run` checks them (any
    problem one UsageError line, exit 2); None when none was given."""
    if ref is None:
        if rates is not None or slo is not None:
            raise UsageError(
                "--rates and --slo apply to a workload, and none was given",
                hint="give WORKLOAD=NAME|FILE (--workload) as well",
            )
        return None
    load_with_overrides(ref, rates, slo)  # everything `bench run` refuses, refused here
    if is_preset(ref):
        return WorkloadChoice(ref=ref, rates=rates, slo=slo)
    source = Path(ref)
    workload, data = _pointed_at_copies(load_workload(source), source)
    text = toml_text(workload)
    _check_round_trip(text, workload, ref)
    return WorkloadChoice(
        ref=ref, rates=rates, slo=slo, toml_name=_safe(source.name, "workload.toml"),
        toml_text=text, data=data,
    )  # fmt: skip


def _pointed_at_copies(workload: Workload, source: Path) -> tuple[Workload, tuple[StagedFile, ...]]:
    """WORKLOAD as loaded, its data file (a dataset's or a trace's: one at most) pointing at
    its copy in the container, its sha256 pinned; a shipped one stays the image's, pinned
    only when SOURCE pins it."""
    if workload.arrivals.kind == "trace":
        table, path, default = "arrivals", workload.arrivals.path, "trace.jsonl"
    elif workload.prompts.source != "random":
        table, path, default = "prompts", workload.prompts.path, "dataset.json"
    else:
        return workload, ()
    staged: tuple[StagedFile, ...] = ()
    if datafile.is_name(path):
        update: dict[str, object] = {"sha256": _given_sha256(source, table)}
    else:
        local = Path(path)
        name = f"data/{_safe(local.name, default)}"
        update = {"path": f"{INPUTS_IN_CONTAINER}/{name}"}
        staged = (StagedFile(local, name),)
    section = workload.arrivals if table == "arrivals" else workload.prompts
    return workload.model_copy(update={table: section.model_copy(update=update)}), staged


def _given_sha256(source: Path, table: str) -> str | None:
    """The sha256 SOURCE itself gives in [TABLE] (it loaded: a valid, bounded TOML file)."""
    raw = tomllib.loads(source.read_bytes().decode("utf-8"))
    section = raw.get(table)
    value = section.get("sha256") if isinstance(section, dict) else None
    return value if isinstance(value, str) else None


def _safe(name: str, default: str) -> str:
    """NAME when it is a plain file name (letters, digits, . _ -), else DEFAULT."""
    return name if _SAFE_NAME.fullmatch(name) and name not in (".", "..") else default


def _check_round_trip(text: str, workload: Workload, ref: str) -> None:
    """What is written must load back to WORKLOAD exactly: checked here, not found out in
    the container after the server started."""
    back: Workload | None = None
    try:
        back = Workload.model_validate(tomllib.loads(text))
        why = "it loads back otherwise"
    except ValueError as exc:  # TOMLDecodeError and ValidationError are ValueErrors
        why = one_line(str(exc))[:200]
    if back != workload:
        raise UsageError(
            f"workload {one_line(ref)} cannot be written out for the container: {why}",
            hint="a bug in the orchestrator: report it with the workload file",
        )


def toml_text(workload: Workload) -> str:
    """WORKLOAD as a TOML document (its fields in order, None left out)."""
    data = workload.model_dump(exclude_none=True)
    lines = ["# The workload as the orchestrator loaded it; a data file's path is its copy."]
    tables = {k: v for k, v in data.items() if isinstance(v, dict)}
    lines += [f"{k} = {_value(v)}" for k, v in data.items() if k not in tables]
    for name, table in tables.items():
        lines += ["", f"[{name}]", *(f"{k} = {_value(v)}" for k, v in table.items())]
    return "\n".join(lines) + "\n"


def _value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            raise ValueError("NaN is no workload value")
        return ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, str):
        return _string(v)
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    raise TypeError(f"no TOML value for {type(v).__name__}")


def _string(s: str) -> str:
    """A TOML basic string: quote and backslash escaped, control characters as \\uXXXX."""
    out = []
    for c in s:
        if c in '"\\':
            out.append("\\" + c)
        elif ord(c) < 0x20 or ord(c) == 0x7F:
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def inputs_dir(run_dir: str) -> str:
    """The run's inputs folder on the host, beside its run directory."""
    return f"{run_dir}.inputs"


def stage(shell: Shell, choice: WorkloadChoice, run_dir: str) -> None:
    """The workload file and its data into the run's inputs folder on the host (a data file
    over SFTP, resumed and sha256-checked, to a host over ssh)."""
    assert choice.toml_name is not None
    folder = inputs_dir(run_dir)
    shell.run(f"mkdir -p {shlex.quote(folder)}/data", check=True)
    shell.write_text(f"{folder}/{choice.toml_name}", choice.toml_text)
    for f in choice.data:
        target = f"{folder}/{f.name}"
        if isinstance(shell, Remote):
            transfer.put(shell, f.local, target)
        else:  # this machine's own shell, or a test's: UTF-8 text (bench's data files are)
            shell.write_text(target, f.local.read_bytes().decode("utf-8"))


def remove_inputs(shell: Shell, run_dir: str) -> None:
    """The run's inputs folder removed (a copy of a dataset may be large); a failure is
    logged, not raised: the run's outcome is decided already."""
    try:
        shell.run(f"rm -rf -- {shlex.quote(inputs_dir(run_dir))}")
    except BenchError as exc:
        log.warning("inputs_not_removed", host=shell.host.name, error=exc.one_line())
