"""The maps stay true: every package's `__init__` docstring lists exactly its modules and
subpackages (one line each: the name, two or more spaces, what it owns),
docs/ARCHITECTURE.md names every package and every module group, and `make help` (made
from the `## ` after each Makefile target) lists every target once.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOP = ("bench", "provisioning", "tools")
# A listed line: indented or not, a module name, two or more spaces, then what it owns.
LISTED = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s{2,}\S")


def _packages() -> list[Path]:
    return sorted(p.parent for top in TOP for p in (ROOT / top).rglob("__init__.py"))


def _contents(package: Path) -> set[str]:
    modules = {p.stem for p in package.glob("*.py") if p.stem != "__init__"}
    subpackages = {p.parent.name for p in package.glob("*/__init__.py")}
    return modules | subpackages


def listed(docstring: str) -> set[str]:
    return {m.group(1) for line in docstring.splitlines() if (m := LISTED.match(line))}


def _docstring(package: Path) -> str:
    return ast.get_docstring(ast.parse((package / "__init__.py").read_text("utf-8"))) or ""


def _mismatches(package: Path) -> list[str]:
    name = ".".join(package.relative_to(ROOT).parts)
    have, said = _contents(package), listed(_docstring(package))
    return [f"{name}: lists {m}, which is not there" for m in sorted(said - have)] + [
        f"{name}: does not list {m}" for m in sorted(have - said)
    ]


def test_every_package_docstring_lists_exactly_its_modules() -> None:
    assert [m for package in _packages() for m in _mismatches(package)] == []


def missing_from(text: str, packages: list[Path]) -> list[str]:
    """Packages TEXT does not name: a top one as `name/`, a subpackage as `` `name/` ``."""
    missing = []
    for package in packages:
        parts = package.relative_to(ROOT).parts
        wanted = f"{parts[0]}/" if len(parts) == 1 else f"`{parts[-1]}/`"
        if wanted not in text:
            missing.append("/".join(parts))
    return missing


def test_architecture_names_every_package() -> None:
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text("utf-8")
    assert missing_from(text, _packages()) == []


def test_the_checks_see_a_missing_and_an_extra_module(tmp_path: Path) -> None:
    assert listed(
        '"""Intro line.\n\n    hosts  one\n    ghost  two\nProse with one space.\n"""'
    ) == {
        "hosts",
        "ghost",
    }
    package = ROOT / "provisioning" / "hosts"
    assert _mismatches(package) == []
    said = listed(_docstring(package))
    assert "remote" in said and len(said) == len(_contents(package))
    slurm = ROOT / "provisioning" / "slurm"
    assert missing_from("| `hosts/` | ... |", [package, slurm]) == ["provisioning/slurm"]


# A rule line: `target: prerequisites`, not `NAME := value`; `.PHONY` and file targets
# ($(STAMP), $(COMPOSE_PLUGIN)) start otherwise.
RULE = re.compile(r"^([a-zA-Z0-9_-]+):(?![:=])([^#]*)(## .*)?$")


def makefile_help(text: str) -> tuple[set[str], dict[str, int]]:
    """The targets of TEXT, and how many `## ` lines each has."""
    targets: set[str] = set()
    described: dict[str, int] = {}
    for line in text.splitlines():
        m = RULE.match(line)
        if m:
            targets.add(m.group(1))
            if m.group(3) and m.group(3).strip() != "##":
                described[m.group(1)] = described.get(m.group(1), 0) + 1
    return targets, described


def test_every_make_target_has_one_help_line() -> None:
    targets, described = makefile_help((ROOT / "Makefile").read_text("utf-8"))
    assert sorted(t for t in targets if described.get(t) != 1) == []
    assert {"help", "test", "unit", "lint", "bench"} <= targets


def test_the_help_check_sees_a_target_without_a_line_and_one_with_two() -> None:
    text = "a: b ## one\nb:\nc: ## x\nc: d ## y\nV := 1\n\techo not: a target ## no\n"
    targets, described = makefile_help(text)
    assert targets == {"a", "b", "c"}
    assert described == {"a": 1, "c": 2}
