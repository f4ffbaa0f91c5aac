"""`--catalog FILE`: a user hardware catalog merged over the shipped one for this run."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mosaic.hardware import Catalog, active_catalog, use_catalog

CatalogFileOption = Annotated[list[Path] | None, typer.Option(
    "--catalog", envvar="MOSAIC_CATALOG", metavar="FILE",
    help="your hardware catalog YAML (devices:, systems:; docs/hardware.md), merged over the "
         "shipped one: an entry with a shipped name replaces it (repeatable; env "
         "MOSAIC_CATALOG)")]


def apply_catalog(paths: list[Path] | None) -> Catalog:
    """Validate and activate the user catalog(s); no paths keeps the catalog in use (the
    shipped one, or one set by `mosaic --catalog FILE ...`)."""
    return use_catalog(*paths) if paths else active_catalog()
