"""The layout options `mosaic layouts` and `mosaic plan` share: pins and bounds of the
parallel layouts a search may use (:class:`mosaic.perf.layouts.LayoutLimits`)."""

from __future__ import annotations

from typing import Annotated

import typer

MaxTp = Annotated[int | None, typer.Option(
    "--max-tp", min=1, help="largest tp (default: the NVLink domain)")]
Tp = Annotated[str | None, typer.Option("--tp", help="pin tp, e.g. 1,2")]
Pp = Annotated[str | None, typer.Option("--pp", help="pin pp, e.g. 4 (1: no pipeline)")]
Vpp = Annotated[str | None, typer.Option("--vpp", help="pin vpp (default 1,2,4)")]
Cp = Annotated[str | None, typer.Option(
    "--cp", help="pin cp (default 1; up to 8 from 16k-token sequences)")]
Ep = Annotated[str | None, typer.Option("--ep", help="pin ep, e.g. 8")]
Etp = Annotated[str | None, typer.Option("--etp", help="pin expert tp")]
ShardingModes = Annotated[str | None, typer.Option(
    "--sharding", help="sharding modes: none, zero1, zero2, fsdp, hsdp (default all)")]
CheckpointingModes = Annotated[str | None, typer.Option(
    "--checkpointing", help="checkpointing modes: none, selective, full (default all)")]
MemoryFraction = Annotated[float | None, typer.Option(
    "--memory-fraction", help="Share of device memory a layout may fill (0, 1]; default: "
    "the stack's documented share (paper-nemo: 1.0, Table 3), else 0.9 (docs/plan.md); for "
    "`layouts`, a job file's hardware.usable_memory_fraction where it states one.")]
