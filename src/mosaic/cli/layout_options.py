"""The layout options `mosaic layouts` and `mosaic plan` share: pins and bounds of the
parallel layouts a search may use (:class:`mosaic.perf.layouts.LayoutLimits`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

import typer

from mosaic.cli.common import parse_ints
from mosaic.errors import MosaicInputError
from mosaic.limits import check_range
from mosaic.perf.layouts import LayoutLimits

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


def int_list(option: str, text: str | None) -> tuple[int, ...] | None:
    """Parse "1,2,4" into (1, 2, 4) parallel degrees; None when the option is not given."""
    if text is None:
        return None
    values = parse_ints(option, text)
    for value in values:
        check_range(option, value, "parallel_degree", integer=True)
    return values


def name_list(text: str | None) -> tuple[str, ...] | None:
    """Parse "zero1,fsdp" into names; None when the option is not given."""
    return None if text is None else tuple(part.strip() for part in text.split(","))


def layout_limits(*, max_tp: int | None = None, tp: str | None = None, pp: str | None = None,
                  vpp: str | None = None, cp: str | None = None, ep: str | None = None,
                  etp: str | None = None, mbs: str | None = None,
                  default_micro_batches: Sequence[int] | None = None,
                  sharding: str | None = None, checkpointing: str | None = None
                  ) -> LayoutLimits:
    """The options' limits; ``default_micro_batches`` when --mbs is not given (None: the
    layout search's own default)."""
    micro_batches = int_list("--mbs", mbs)
    pinned_tp = int_list("--tp", tp)
    if max_tp is not None and pinned_tp is not None and max(pinned_tp) > max_tp:
        # LayoutLimits refuses it too, in its field names; say it in the options' names
        raise MosaicInputError(f"--tp {max(pinned_tp)} exceeds --max-tp {max_tp}: pin tp "
                               "values within the cap, or drop one of the two options")
    return LayoutLimits(
        max_tp=max_tp, tp=pinned_tp, pp=int_list("--pp", pp),
        vpp=int_list("--vpp", vpp), cp=int_list("--cp", cp), ep=int_list("--ep", ep),
        etp=int_list("--etp", etp),
        micro_batches=default_micro_batches if micro_batches is None else micro_batches,
        sharding=name_list(sharding), checkpointing=name_list(checkpointing),
    )
