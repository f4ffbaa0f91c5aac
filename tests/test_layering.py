"""One direction of dependency between the packages (GUIDE.md, "Layout"): every import of
one mosaic package by another, lazy ones included, is an allowed edge or a listed debt."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[1] / "src" / "mosaic"
FOUNDATION = {"arch", "hardware", "stacks"}
# package -> the packages it may import (root modules such as errors, limits and units are
# shared by all)
ALLOWED: dict[str, set[str]] = {
    "arch": set(), "hardware": set(), "stacks": set(),
    "law": {"arch"},
    "perf": FOUNDATION,
    # bench measures what perf models: it asks perf which shapes a job runs and how a
    # collective's time converts to bus bandwidth (GUIDE: bench imports nothing above the
    # evaluate and law stages that consume its tables)
    "bench": FOUNDATION | {"perf"},
    # the boundary: job, run and model files validated into perf's types, a job's measured
    # tables checked against the bench metadata beside them
    "config": FOUNDATION | {"perf", "bench"},
    "evaluate": FOUNDATION | {"law", "perf", "config", "bench"},  # it consumes bench tables
    "plan": FOUNDATION | {"law", "perf", "config", "evaluate"},
    "train": FOUNDATION | {"law", "config"},  # law: Eq. 17's learning-rate rule
    "export": FOUNDATION | {"law", "perf", "config", "evaluate", "plan"},
    "report": FOUNDATION | {"law", "perf", "config", "evaluate", "plan", "export"},
    "studio": FOUNDATION | {"law", "perf", "config", "evaluate", "plan", "export", "report"},
    "cli": FOUNDATION | {"law", "perf", "config", "evaluate", "plan", "export", "report",
                         "studio", "bench", "train"},
}
# Known debts, each to be paid by a move, not by widening ALLOWED (none at present: the
# studio's plan form and `mosaic plan` share mosaic.plan.inputs, December 2026).
DEBTS: set[tuple[str, str]] = set()
# A package's ``__main__`` (``python -m mosaic.bench`` under torchrun) is an entry point of
# the command line, not a module of the package: nothing imports it, so it is the CLI's layer.
ENTRY_POINT = "__main__.py"


ROOT = "(root)"  # the modules directly under mosaic/ (errors, limits, units, ...)


def _imported_packages(node: ast.AST, path: Path) -> list[str]:
    """The mosaic packages (first component below mosaic) an import statement names:
    absolute (``mosaic.perf.x``), ``from mosaic import perf``, or relative (``from ..perf``
    resolved against the file's own package)."""
    if isinstance(node, ast.Import):
        modules = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom):
        if node.level:
            package = path.relative_to(SOURCE).parts[:-1]
            base = ["mosaic", *package[:len(package) - node.level + 1]]
            modules = [".".join([*base, *filter(None, [node.module])])]
        else:
            modules = [node.module or ""]
        if modules[0] == "mosaic":  # from mosaic import perf, units
            modules = [f"mosaic.{alias.name}" for alias in node.names]
    else:
        return []
    return [name.split(".")[1] for name in modules
            if name.startswith("mosaic.") and (SOURCE / name.split(".")[1]).is_dir()]


def _edges() -> dict[tuple[str, str], list[str]]:
    edges: dict[tuple[str, str], list[str]] = defaultdict(list)
    for path in SOURCE.rglob("*.py"):
        parts = path.relative_to(SOURCE).parts
        source = (ROOT if len(parts) == 1 else "cli" if path.name == ENTRY_POINT
                  else parts[0])
        for node in ast.walk(ast.parse(path.read_text())):
            for target in _imported_packages(node, path):
                if target != source:
                    edges[(source, target)].append(f"{path.name}:{node.lineno}")
    return edges


def test_root_modules_import_no_package() -> None:
    """errors, limits, units and the other root modules are shared by every package, so
    they may import none of them (a root module importing perf would tie arch to perf)."""
    edges = _edges()
    assert not {edge: sites for edge, sites in edges.items() if edge[0] == ROOT}


def test_relative_and_from_mosaic_imports_are_seen() -> None:
    tree = ast.parse("from ..perf import memory\nfrom mosaic import plan, units\n")
    path = SOURCE / "evaluate" / "x.py"
    assert [_imported_packages(node, path) for node in tree.body] == [["perf"], ["plan"]]


def test_every_package_import_goes_down_or_is_a_listed_debt() -> None:
    edges = _edges()
    assert set(ALLOWED) == {p.name for p in SOURCE.iterdir()
                            if p.is_dir() and (p / "__init__.py").exists()}
    wrong = {edge: sites for edge, sites in edges.items() if edge[0] != ROOT
             and edge[1] not in ALLOWED[edge[0]] and edge not in DEBTS}
    assert not wrong, f"imports against the layering: {wrong}"
    paid = DEBTS - set(edges)
    assert not paid, f"debts paid, remove them from DEBTS: {paid}"
