"""The `mosaic` command: thin subcommands that parse, call the library and render."""

from __future__ import annotations

import typer

from mosaic.cli import (
    arch_cmd,
    explain_cmd,
    law_cmd,
    layouts_cmd,
    perf_cmd,
    plan_cmd,
    validate_cmd,
)

app = typer.Typer(
    name="mosaic",
    help="Plan large Mixture-of-Experts pretraining runs (MOSAIC, arXiv 2608.10605).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

for _module in (arch_cmd, law_cmd, perf_cmd, layouts_cmd, explain_cmd, validate_cmd, plan_cmd):
    _module.register(app)
