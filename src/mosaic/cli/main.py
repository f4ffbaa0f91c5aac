"""The `mosaic` command: thin subcommands that parse, call the library and render."""

from __future__ import annotations

import sys

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
from mosaic.cli.common import error_console

app = typer.Typer(
    name="mosaic",
    help="Plan large Mixture-of-Experts pretraining runs (MOSAIC, arXiv 2608.10605).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

for _module in (arch_cmd, law_cmd, perf_cmd, layouts_cmd, explain_cmd, validate_cmd, plan_cmd):
    _module.register(app)


def main() -> None:
    """Console entry point: usage errors (unknown option, unparsable value) as one line."""
    try:
        code = app(standalone_mode=False)
    except Exception as exc:  # typer's (or click's) UsageError family, matched by shape
        if not (hasattr(exc, "format_message") and hasattr(exc, "exit_code")):
            raise
        if type(exc).__name__ == "NoArgsIsHelpError":
            exc.show()
        else:
            error_console.print(f"error: {exc.format_message()}", markup=False,
                                highlight=False, soft_wrap=True)
        sys.exit(exc.exit_code)
    sys.exit(code if isinstance(code, int) else 0)
