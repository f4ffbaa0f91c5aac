"""The `mosaic` command: thin subcommands that parse, call the library and render.

Start-up is kept light: this module imports only typer. Each subcommand's module (and
the numerical libraries behind it) is imported when that subcommand runs, so `mosaic
--help` and `mosaic arch ...` do not pay for scipy, pandas or matplotlib.
"""

from __future__ import annotations

import importlib
import inspect
import os
import shlex
import sys
import warnings
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from typer.core import TyperCommand, TyperGroup, TyperOption

from mosaic.bench.families import FAMILIES
from mosaic.cli import warning_lines
from mosaic.errors import shown
from mosaic.torchrun_env import is_rank_zero, under_torchrun

_typer_display_type_rich = getattr(TyperOption, "display_type_rich", None)


def _display_type_rich(self: TyperOption, ctx: Any) -> str | None:
    """No value placeholder for an on/off flag: typer's rich help (0.2x, typer/core.py
    ``TyperOption.display_type_rich``) shows ``--json <bool>`` as if the flag took a value."""
    if self.is_flag and not self.count:
        return None
    return _typer_display_type_rich(self, ctx)


if hasattr(TyperOption, "display_type_rich"):  # typer < 0.2x writes no placeholder
    TyperOption.display_type_rich = _display_type_rich  # type: ignore[method-assign]

# To add a subcommand: one row here, `name: (module, one-line help)`. The module must have
# `register(app)` that attaches the command called `name` (tests check the help line
# matches the command's own docstring, so keep them in step).
COMMANDS: dict[str, tuple[str, str]] = {
    "arch": ("mosaic.cli.arch_cmd",
             "Exact parameter counts, sparsity and FLOPs per token of a transformer geometry."),
    "perf": ("mosaic.cli.perf_cmd",
             "Predict step time, tokens/s, MFU and per-GPU memory of one job, with "
             "breakdowns."),
    "layouts": ("mosaic.cli.layouts_cmd",
                "Rank every parallel layout of a job by predicted tokens/s (paper Sec. 5.2, "
                "App. E)."),
    "explain": ("mosaic.cli.explain_cmd",
                "Explain a job's predicted step: what bounds it, a measured gap, and levers "
                "to try."),
    "validate": ("mosaic.cli.validate_cmd",
                 "Predict each recorded run and compare with its measured tokens/s (and "
                 "memory)."),
    "calibrate": ("mosaic.cli.validate_cmd",
                  "Fit the model's free constants (χ_sys terms, stack and kernel factors) to "
                  "runs."),
    "plan": ("mosaic.cli.plan_cmd",
             "Jointly choose the MoE geometry, token budget and parallel layout for a "
             "cluster."),
    "law": ("mosaic.cli.law_cmd",
            "Loss law (paper Sec. 4, 6.1): predict, fit run data, model-FLOPs optimum."),
    "sweep": ("mosaic.cli.plan_cmd",
              "Budget sweeps of the MOSAIC optimum (paper Sec. 7.4, Fig. 11)."),
    "compare": ("mosaic.cli.compare_cmd",
                "Compare two jobs or two plans: step time, memory, MFU, tokens, loss, cost, "
                "inputs."),
    "hardware": ("mosaic.cli.hardware_cmd",
                 "The hardware catalog: list devices and node types, show one with its sources."),
    "stacks": ("mosaic.cli.stacks_cmd",
               "The software stacks the model knows: traits with sources, and their recipes."),
    "export": ("mosaic.cli.export_cmd",
               "Write a Megatron, NeMo, torchtitan or MaxText launch config for a job or a plan."),
    "bench": ("mosaic.cli.bench_cmd",
              "Microbenchmarks of your GPUs and network: tables for calibrate --microbench."),
    "report": ("mosaic.cli.report_cmd",
               "Write the self-contained HTML report (interactive figures and tables) of a "
               "result."),
    "studio": ("mosaic.cli.studio_cmd",
               "Start the local web studio: edit a job and see its step, layouts and plans "
               "live."),
    "train": ("mosaic.cli.ladder_cmd",
              "Train one job with the paper's MoE recipe (single process, or under torchrun)."),
    "ladder": ("mosaic.cli.ladder_cmd",
               "Train a grid of MoE geometries with the paper's recipe and fit the loss law."),
}


def reflowed_help(text: str) -> str:
    """A docstring's paragraphs as one line each, so help wraps at the terminal's width.

    typer 0.2x's rich help (typer/rich_utils.py ``_fix_linebreaks``) keeps the source's line
    breaks after the first paragraph, which a narrow terminal shows as ragged half-lines. A
    paragraph of ``- `` items keeps one line per item; one starting with ``\\b`` is left as is.
    """
    paragraphs = []
    for paragraph in text.strip().split("\n\n"):
        lines = [line.strip() for line in paragraph.strip().splitlines()]
        if not lines or lines[0].startswith("\b"):
            paragraphs.append(paragraph.strip())
            continue
        items: list[str] = []
        for line in lines:
            if items and not line.startswith("- "):
                items[-1] += " " + line
            else:
                items.append(line)
        paragraphs.append("\n".join(items))
    return "\n\n".join(paragraphs)


def _reflow_command_help(command: Any) -> None:
    """Reflow the help of a command and of every subcommand under it."""
    if command.help:
        command.help = reflowed_help(inspect.cleandoc(command.help))
    for sub in getattr(command, "commands", {}).values():
        _reflow_command_help(sub)


def _load_commands(module_name: str) -> dict[str, Any]:
    """Import one command module and return the click commands it registers."""
    module = importlib.import_module(module_name)
    holder = typer.Typer(pretty_exceptions_enable=False, add_completion=False)
    module.register(holder)
    group = typer.main.get_group(holder)
    for command in group.commands.values():
        _reflow_command_help(command)
    return dict(group.commands)


class LazyGroup(TyperGroup):
    """Root group that imports a subcommand's module only when that subcommand is used."""

    _listing_help = False

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self._loaded: dict[str, Any] = {}

    def list_commands(self, ctx: typer.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: typer.Context, cmd_name: str) -> Any:
        if cmd_name not in COMMANDS:
            return None
        if self._listing_help:  # the help listing needs only the one-line help
            return TyperCommand(cmd_name, help=COMMANDS[cmd_name][1])
        if cmd_name not in self._loaded:
            self._loaded.update(_load_commands(COMMANDS[cmd_name][0]))
        return self._loaded.get(cmd_name)

    def resolve_command(self, ctx: typer.Context, args: list[str]) -> Any:
        self.commands = {name: TyperCommand(name) for name in COMMANDS}  # for suggestions
        return super().resolve_command(ctx, args)

    def format_help(self, ctx: typer.Context, formatter: Any) -> None:
        self._listing_help = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing_help = False


app = typer.Typer(
    name="mosaic",
    cls=LazyGroup,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    epilog="Usual flow: `mosaic plan --gpu B200 --nodes 32 --days 20` picks the model, tokens "
           "and layout for a cluster and a window; `perf`, `layouts` and `explain` look into "
           "one job (examples/appendix_e.yaml); `export` writes its launch config. Job files: "
           "docs/schema.md. Each command: `mosaic COMMAND --help`.",
)


def _print_version(value: bool) -> None:
    if value:
        from mosaic import __version__

        typer.echo(f"mosaic {__version__}")
        raise typer.Exit()


# list[Path], not list[str]: typer splits a Path list's environment variable on os.pathsep
# (typer/_coercion.py, envvar_list_splitter; click.Path's likewise), a str list's on
# whitespace, which broke a catalog path with a space and read "a.yaml:b.yaml" as one file.
@app.callback()
def _root(ctx: typer.Context, catalog: Annotated[list[Path] | None, typer.Option(
        "--catalog", envvar="MOSAIC_CATALOG", metavar="FILE",
        help="your hardware catalog YAML, merged over the shipped one for any command "
             f"(repeatable; env MOSAIC_CATALOG: files separated by '{os.pathsep}', as in PATH)")
          ] = None,
          quiet: Annotated[bool, typer.Option(
              "--quiet", "-q", help="no progress lines or bars on stderr (also MOSAIC_QUIET=1)")
          ] = False,
          version: Annotated[bool, typer.Option(
              "--version", is_eager=True, callback=_print_version,
              help="print mosaic's version and exit")
          ] = False) -> None:
    """Plan large Mixture-of-Experts pretraining runs (MOSAIC, arXiv 2608.10605)."""
    from mosaic.cli.progress import set_quiet  # stdlib only: start-up stays light

    # Every invocation sets it, so one `-q` does not silence a later in-process call
    # (the studio, a test runner, a script calling the app twice).
    set_quiet(quiet)
    warning_lines.hold()  # this invocation holds its warnings again until its work begins
    # The catalog likewise: this invocation's files, or the shipped catalog (a catalog of an
    # earlier in-process call must not leak into this one; the catalog module is imported
    # only when used, to keep start-up light: not imported, nothing to reset).
    # Read at the catalog's first use: a command that needs no hardware (law fit, arch) is
    # not stopped by a broken MOSAIC_CATALOG file.
    if catalog:
        from mosaic.hardware.catalog import defer_catalog

        # a file the environment names says so in its errors (the command line named none)
        # (by name: typer vendors click's ParameterSource under a private module)
        source = ctx.get_parameter_source("catalog")
        from_env = getattr(source, "name", None) == "ENVIRONMENT"
        defer_catalog(*(Path(p) for p in catalog),
                      named_by="the MOSAIC_CATALOG environment variable" if from_env
                      else None)
    elif "mosaic.hardware.catalog" in sys.modules:
        from mosaic.hardware.catalog import active_catalog_paths, use_catalog

        if active_catalog_paths():
            use_catalog()


def _one_line(message: str) -> None:
    sys.stderr.write(warning_lines.one_line(message) + "\n")


INVALID = "Invalid value for "  # click's BadParameter.format_message


def usage_message(exc: Any) -> str:
    """A click usage error's message, with the value as typed where typer's pydantic
    coercion refused it: "Invalid value for '--days': Input should be a valid number" named
    no '21d' (a trial). Every numeric option of every command is parsed this way, so this
    one place covers them all."""
    message = exc.format_message()
    errors = getattr(exc.__cause__, "errors", None)  # a pydantic ValidationError
    reason = getattr(exc, "message", None)
    # click's BadParameter: "Invalid value for {the option}: {reason}"
    if (not callable(errors) or not isinstance(reason, str) or not reason
            or not message.startswith(INVALID) or not message.endswith(f": {reason}")):
        return message
    typed = [error.get("input") for error in errors()]
    if len(typed) != 1 or not isinstance(typed[0], str):
        return message
    option = message[len(INVALID):-len(f": {reason}")]
    return f"{INVALID}{option}: {shown(typed[0])}: {reason[:1].lower()}{reason[1:]}"


def _internal_error(exc: BaseException) -> None:
    warning_lines.flush(1)
    if os.environ.get("MOSAIC_DEBUG"):
        raise exc
    _one_line(f"error: internal error ({type(exc).__name__}: {exc}); this is a bug in mosaic, "
              "please report it (MOSAIC_DEBUG=1 shows the traceback)")
    sys.exit(1)


def _empty_argument(argv: list[str]) -> str | None:
    """What is wrong with an empty argument, or None: no mosaic argument or option value is
    empty, and the command line parser reads an empty path as '.' (`perf ""` said
    '.: is a directory')."""
    for index, argument in enumerate(argv):
        if argument.startswith("--") and argument.endswith("=") and "=" not in argument[:-1]:
            return f"option {argument[:-1]} was given an empty value"
        if argument.strip():
            continue
        after = f" (after {argv[index - 1]})" if index else ""
        return f"argument {index + 1}{after} is empty; give a file, a name or a value"
    return None


# Options of the root command that people also type after the subcommand
# (`mosaic plan ... --quiet`): moved before it, where the parser reads them.
GLOBAL_FLAGS = ("--quiet", "-q")


def hoist_global_flags(argv: list[str]) -> list[str]:
    """``argv`` with the root command's flags (:data:`GLOBAL_FLAGS`) moved to the front
    (`mosaic plan --q 12 --quiet` read --quiet as a misspelt --q)."""
    flags = [a for a in argv if a in GLOBAL_FLAGS]
    return flags + [a for a in argv if a not in GLOBAL_FLAGS] if flags else argv


INTERRUPTED = 130  # the shell's status for SIGINT (128 + 2)
_BENCH_RERUN = "rerun {command} to measure the rest (the cases measured are kept)"
# commands whose rerun resumes where an interrupted run stopped, and what the rerun does:
# training, and the bench's measuring subcommands (not `bench compare`, which measures none)
_RESUMING_COMMANDS = {
    ("train",): "resume with: {command} (it goes on from the last checkpoint in --out, or "
                "starts again where none was written yet)",
    ("ladder", "run"): "resume with: {command} (finished rungs are kept; the interrupted "
                       "one goes on from its last checkpoint)",
    **{("bench", name.replace("_", "-")): _BENCH_RERUN for name in (*FAMILIES, "all")},
}


def _interrupted() -> NoReturn:
    """Ctrl-C: one line (and how to resume, for the commands that keep their work),
    status 130."""
    warning_lines.flush(INTERRUPTED)
    words = [word for word in sys.argv[1:] if not word.startswith("-")]  # flags move
    hints = [hint for command, hint in _RESUMING_COMMANDS.items()
             if tuple(words[:len(command)]) == command and "--dry-run" not in sys.argv]
    # the command itself, as the docs promise (a trial read "rerun the same command")
    command = shlex.join(["mosaic", *sys.argv[1:]])
    if under_torchrun():  # a worker of torchrun (mosaic.torchrun_env), e.g.
        # `torchrun ... $(which mosaic) ladder run`: every rank was told to rerun
        # `mosaic ladder run`, without torchrun (a trial)
        if not is_rank_zero():
            sys.exit(INTERRUPTED)  # one line, from rank 0, as `-m mosaic.train` says it
        command = f"torchrun ... {shlex.join(sys.argv)}"  # sys.argv[0]: the mosaic script
    _one_line("error: interrupted" + (f"; {hints[0].format(command=command)}" if hints
                                      else ""))
    sys.exit(INTERRUPTED)


def main() -> None:
    """Console entry point: usage errors (unknown option, unparsable value) as one line.

    Anything the commands did not turn into a one-line input error is a bug; it is still
    reported as one line (exit status 1) unless MOSAIC_DEBUG=1 asks for the traceback.
    """
    warnings.showwarning = warning_lines.warning_line
    warning_lines.reset()
    sys.argv[1:] = hoist_global_flags(sys.argv[1:])
    empty = _empty_argument(sys.argv[1:])
    if empty is not None:
        _one_line(f"error: {empty}")
        sys.exit(2)
    try:
        code = app(standalone_mode=False)
    except typer.Abort:
        _interrupted()
    except typer.Exit as exc:
        warning_lines.flush(exc.exit_code)
        sys.exit(exc.exit_code)
    except BrokenPipeError:
        # stdout closed early (`mosaic ... | head`): nothing more to say.
        sys.stderr.close()
        sys.exit(0)
    except Exception as exc:
        # click's UsageError family (typer vendors click), matched by shape
        if not (hasattr(exc, "format_message") and hasattr(exc, "exit_code")):
            _internal_error(exc)
        warning_lines.flush(exc.exit_code)
        if type(exc).__name__ == "NoArgsIsHelpError":  # bare `mosaic law`: help, not an error
            exc.show()
            sys.exit(0)
        else:
            _one_line(f"error: {usage_message(exc)}")
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        _interrupted()
    code = code if isinstance(code, int) else 0
    if code == INTERRUPTED:  # typer turns Ctrl-C into Exit(130), returned when not standalone
        _interrupted()
    warning_lines.flush(code)
    sys.exit(code)
