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
    "config": FOUNDATION,
    "evaluate": FOUNDATION | {"law", "perf", "config", "bench"},  # it consumes bench tables
    "plan": FOUNDATION | {"law", "perf", "config", "evaluate"},
    "bench": FOUNDATION | {"config"},
    "train": FOUNDATION | {"law", "config"},  # law: Eq. 17's learning-rate rule
    "export": FOUNDATION | {"law", "perf", "config", "evaluate", "plan"},
    "report": FOUNDATION | {"law", "perf", "config", "evaluate", "plan", "export"},
    "studio": FOUNDATION | {"law", "perf", "config", "evaluate", "plan", "export", "report"},
    "cli": FOUNDATION | {"law", "perf", "config", "evaluate", "plan", "export", "report",
                         "studio", "bench", "train"},
}
# Known debts (an architecture review, December 2026), each to be paid by a move, not by
# widening ALLOWED: the job and run schemas build perf's Workload and read bench's tables;
# bench prices its shapes with perf and runs its `python -m mosaic.bench` entry from the
# CLI; the studio's plan form reuses the CLI's plan inputs (plan_cmd.build_inputs).
DEBTS = {("config", "perf"), ("config", "bench"), ("bench", "perf"), ("bench", "cli"),
         ("studio", "cli")}


def _edges() -> dict[tuple[str, str], list[str]]:
    edges: dict[tuple[str, str], list[str]] = defaultdict(list)
    for path in SOURCE.rglob("*.py"):
        parts = path.relative_to(SOURCE).parts
        if len(parts) == 1:
            continue  # a root module
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            for name in names:
                target = name.split(".")[1] if name.startswith("mosaic.") else None
                if target and target != parts[0] and (SOURCE / target).is_dir():
                    edges[(parts[0], target)].append(f"{path.name}:{node.lineno}")
    return edges


def test_every_package_import_goes_down_or_is_a_listed_debt() -> None:
    edges = _edges()
    assert set(ALLOWED) == {p.name for p in SOURCE.iterdir()
                            if p.is_dir() and (p / "__init__.py").exists()}
    wrong = {edge: sites for edge, sites in edges.items()
             if edge[1] not in ALLOWED[edge[0]] and edge not in DEBTS}
    assert not wrong, f"imports against the layering: {wrong}"
    paid = DEBTS - set(edges)
    assert not paid, f"debts paid, remove them from DEBTS: {paid}"
