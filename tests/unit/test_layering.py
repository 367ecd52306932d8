"""The import structure docs/ARCHITECTURE.md describes, checked on the source.

Every `bench` unit (a package, or a top-level module) has a layer; a module may import its
own unit and units of lower layers, never one above or beside it. `provisioning`'s folders
stand in one column the same way (PROVISIONING_LAYERS), with at most four modules beside
them. No module-level import cycle anywhere in bench, provisioning or tools (imports
inside functions are deferred on purpose and not counted). `bench` never imports
`provisioning` or `tools`; `provisioning` never imports `tools`.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Lower layers first. A unit may import only units of strictly lower layers.
LAYERS: tuple[tuple[str, ...], ...] = (
    (
        "bench",
        "bench.errors",
        "bench.logs",
        "bench.distributions",
        "bench.failures",
        "bench.escape",
        "bench.bounds",
        "bench.answers",
        "bench.secrets",
        "bench.rehearsal_model",
    ),
    ("bench.workload_spec",),  # a workload as data (its errors are bench.errors')
    ("bench.workload_points",),  # results.json's workload records, beneath results
    ("bench.settings", "bench.results", "bench.launch_profile", "bench.writes"),
    ("bench.stats", "bench.run_files", "bench.command_line"),
    ("bench.stream", "bench.host", "bench.card", "bench.cards"),
    ("bench.engines", "bench.workload", "bench.live"),
    ("bench.run", "bench.bundle", "bench.publishers"),
    ("bench.twin", "bench.report"),
    ("bench.verdict",),
    ("bench.fleet", "bench.provenance", "bench.export"),
    ("bench.history",),
    ("bench.local",),  # records its bundle in the history
    ("bench.cli",),
    ("bench.__main__",),
)
LEVEL = {unit: level for level, units in enumerate(LAYERS) for unit in units}

# provisioning's folders and root modules, lowest first, one to a layer: a column, so no
# folder may import one beside it either.
PROVISIONING_LAYERS: tuple[str, ...] = (
    "provisioning",  # its __init__: a docstring only
    "provisioning.retry",
    "provisioning.hosts",
    "provisioning.containers",
    "provisioning.image",
    "provisioning.preflight",
    "provisioning.flow",
    "provisioning.runs",
    "provisioning.slurm",
    "provisioning.commands",
    "provisioning.cli",
    "provisioning.__main__",
)
PROVISIONING_LEVEL = {unit: level for level, unit in enumerate(PROVISIONING_LAYERS)}
MAX_PROVISIONING_ROOT_MODULES = 4  # besides __init__ and the folders


def _module_name(path: Path) -> str:
    name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    return name.removesuffix(".__init__")


def _unit(module: str) -> str:
    parts = module.split(".")
    if parts[0] != "bench" or len(parts) == 1:
        return parts[0]
    return ".".join(parts[:2])


def _provisioning_unit(module: str) -> str:
    """provisioning.flow.sealing -> provisioning.flow; provisioning.cli -> itself."""
    return ".".join(module.split(".")[:2])


def _top_level_imports(path: Path) -> set[str]:
    """Modules imported at module level (not inside functions), resolved to full names."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in tree.body:
        stmts = [node]
        if isinstance(node, ast.If):  # `if TYPE_CHECKING:` blocks count too
            stmts = [*node.body, *node.orelse]
        for stmt in stmts:
            if isinstance(stmt, ast.Import):
                found.update(alias.name for alias in stmt.names)
            elif isinstance(stmt, ast.ImportFrom) and stmt.module and stmt.level == 0:
                found.add(stmt.module)
                found.update(f"{stmt.module}.{alias.name}" for alias in stmt.names)
    return found


def _graph(packages: tuple[str, ...]) -> dict[str, set[str]]:
    files = {_module_name(p): p for pkg in packages for p in (ROOT / pkg).rglob("*.py")}
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in files.items():
        for imported in _top_level_imports(path):
            # `from a.b import c` names module a.b.c when that is a file, else a name in a.b
            target = imported if imported in files else imported.rpartition(".")[0]
            if target in files and target != name:
                graph[name].add(target)
        graph.setdefault(name, set())
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_module_level_import_cycles() -> None:
    assert _cycles(_graph(("bench", "provisioning", "tools"))) == []


def test_every_bench_unit_has_a_layer() -> None:
    units = {_unit(m) for m in _graph(("bench",))}
    assert sorted(units - set(LEVEL)) == []


def test_bench_imports_only_downwards() -> None:
    wrong = []
    for module, targets in _graph(("bench",)).items():
        src = _unit(module)
        for target in targets:
            dst = _unit(target)
            if dst != src and LEVEL[dst] >= LEVEL[src]:
                wrong.append(f"{module} -> {target} ({src} is not above {dst})")
    assert sorted(wrong) == []


def test_every_provisioning_folder_and_root_module_has_a_layer() -> None:
    units = {_provisioning_unit(m) for m in _graph(("provisioning",))}
    assert sorted(units - set(PROVISIONING_LEVEL)) == []
    assert sorted(set(PROVISIONING_LEVEL) - units) == []


def _provisioning_upward(graph: dict[str, set[str]]) -> list[str]:
    wrong = []
    for module, targets in graph.items():
        src = _provisioning_unit(module)
        for target in targets:
            dst = _provisioning_unit(target)
            if dst != src and PROVISIONING_LEVEL[dst] >= PROVISIONING_LEVEL[src]:
                wrong.append(f"{module} -> {target} ({src} is not above {dst})")
    return sorted(wrong)


def test_provisioning_imports_only_downwards() -> None:
    """No provisioning module imports from a folder above its own, or beside it."""
    assert _provisioning_upward(_graph(("provisioning",))) == []


def _reads_argparse(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import) and any(a.name == "argparse" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.module == "argparse":
            return True
    return False


def test_the_command_line_stops_at_the_door() -> None:
    """Only provisioning.cli and provisioning/commands see argparse: below them, what the
    command line chose arrives as frozen choices (TargetChoice, SlurmChoice, ...)."""
    door = {"provisioning.cli", "provisioning.commands"}
    readers = [
        _module_name(path)
        for path in (ROOT / "provisioning").rglob("*.py")
        if _reads_argparse(path)
    ]
    assert sorted(m for m in readers if _provisioning_unit(m) not in door) == []
    assert "provisioning.commands.options" in readers  # the check sees an importer


def test_provisioning_keeps_its_modules_in_folders() -> None:
    root = ROOT / "provisioning"
    modules = sorted(p.stem for p in root.glob("*.py") if p.stem != "__init__")
    assert len(modules) <= MAX_PROVISIONING_ROOT_MODULES, modules
    loose = sorted(p.name for p in root.iterdir() if p.is_file() and p.suffix != ".py")
    assert loose == []


def test_nothing_imports_upwards_across_the_top_level_packages() -> None:
    """bench never imports provisioning or tools (deferred imports included);
    provisioning never imports tools."""
    wrong = []
    for pkg, banned in (("bench", ("provisioning", "tools")), ("provisioning", ("tools",))):
        for path in (ROOT / pkg).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module:
                    names = [node.module]
                wrong += [f"{path.relative_to(ROOT)}: {n}" for n in names if _unit(n) in banned]
    assert wrong == []


def test_the_checker_sees_a_cycle_and_an_upward_import() -> None:
    """The checks above would catch what they are for."""
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c"]]
    assert LEVEL["bench.run"] < LEVEL["bench.verdict"]
    # image.py once reached up to flow's seams for EngineSide (now in containers)
    assert _provisioning_upward(
        {"provisioning.image.ensure": {"provisioning.flow.seams", "provisioning.hosts.shell"}}
    ) == ["provisioning.image.ensure -> provisioning.flow.seams (provisioning.image is not "
          "above provisioning.flow)"]  # fmt: skip
