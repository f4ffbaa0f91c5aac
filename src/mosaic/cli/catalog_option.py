"""`--catalog FILE`: a user hardware catalog merged over the shipped one for this run."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from mosaic.hardware import Catalog, active_catalog, active_catalog_paths, use_catalog

# list[Path]: MOSAIC_CATALOG is split on os.pathsep, as PATH is (see mosaic.cli.main._root)
CatalogFileOption = Annotated[list[Path] | None, typer.Option(
    "--catalog", envvar="MOSAIC_CATALOG", metavar="FILE",
    help="your hardware catalog YAML (devices:, systems:; docs/hardware.md), merged over the "
         "shipped one: an entry with a shipped name replaces it (repeatable; env "
         f"MOSAIC_CATALOG: files separated by '{os.pathsep}', as in PATH)")]


def apply_catalog(paths: list[Path] | None) -> Catalog:
    """Validate and activate the user catalog(s), merged after those already in use (set by
    `mosaic --catalog FILE ...`: both spellings count, the command's files last); no paths
    keeps the catalog in use."""
    if not paths:
        return active_catalog()
    merged = list(active_catalog_paths())
    merged += [p for p in paths if p not in merged]  # MOSAIC_CATALOG reaches both options
    return use_catalog(*merged)
