"""Names that say which one: no two top-level classes in bench/, provisioning/ and tools/
share a name, private ones included, so a reader never needs the import line to know which
`Table` or `_Cell` is meant.

When a new class collides, rename the one that is cheaper to rename: a pydantic model that
is written into results.json or environment.json, or whose name is a `$defs` key in a
committed docs/*.schema.json, keeps its name and the other one moves.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("bench", "provisioning", "tools")


def _classes(source: str) -> list[str]:
    return [n.name for n in ast.parse(source).body if isinstance(n, ast.ClassDef)]


def collisions(sources: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    """Each class name defined at the top level of more than one (path, source), with the
    paths that define it."""
    where: dict[str, list[str]] = defaultdict(list)
    for path, source in sources:
        for name in _classes(source):
            where[name].append(path)
    return {name: paths for name, paths in sorted(where.items()) if len(paths) > 1}


def _tree() -> list[tuple[str, str]]:
    return [
        (str(p.relative_to(ROOT)), p.read_text(encoding="utf-8"))
        for package in PACKAGES
        for p in sorted((ROOT / package).rglob("*.py"))
    ]


def test_no_two_top_level_classes_share_a_name() -> None:
    tree = _tree()
    assert len(tree) > 100  # the walk found the packages
    found = collisions(tree)
    assert not found, "classes sharing a name (rename one so it says which): " + "; ".join(
        f"{name} in {', '.join(paths)}" for name, paths in found.items()
    )


def test_the_check_catches_a_collision_across_packages_and_a_private_one() -> None:
    sources = [
        ("bench/a.py", "class Table:\n    pass\n\nclass _Cell:\n    pass\n"),
        ("tools/b.py", "import x\n\nclass Table(x.Base):\n    pass\n"),
        ("provisioning/c.py", "class _Cell:\n    pass\n\ndef f() -> None:\n    class Local: ...\n"),
        ("bench/d.py", "def g() -> None:\n    class Local: ...\n\nclass Only: ...\n"),
    ]
    assert collisions(sources) == {
        "Table": ["bench/a.py", "tools/b.py"],
        "_Cell": ["bench/a.py", "provisioning/c.py"],
    }  # classes inside functions are not top-level and do not count
