"""`mosaic stacks list|show`: the software stacks the model knows and their recipes."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any, get_args

import typer

from mosaic.cli.common import JsonFlag, guarded, print_json, print_key_value_table, print_table
from mosaic.config.recipes import PrecisionName, Recipe, recipes
from mosaic.errors import MosaicInputError, shown
from mosaic.hardware import get_device
from mosaic.perf.workload import job_precision_name
from mosaic.stacks import known_stacks
from mosaic.stacks.registry import (
    StackTraits,
    check_release,
    format_release,
    get_stack,
    names_point_release,
    parse_release,
)

stacks_app = typer.Typer(
    name="stacks",
    help="The software stacks the model knows: traits with sources, and their recipes.",
    no_args_is_help=True,
)


def _release_text(release: tuple[int, int] | None) -> str:
    return "-" if release is None else format_release(release)


def recipe_document(recipe: Recipe) -> dict[str, Any]:
    """One recipe as plain data (the fields of its data file)."""
    return {
        "label": recipe.label, "stack": recipe.stack,
        "software_pattern": (None if recipe.software_pattern is None
                             else recipe.software_pattern.pattern),
        "point_release": recipe.point_release,
        "since": None if recipe.since is None else _release_text(recipe.since),
        "until": None if recipe.until is None else _release_text(recipe.until),
        "model": (None if recipe.model is None
                  else dict(zip(("layers", "d_model", "experts"), recipe.model, strict=True))),
        "moe": recipe.moe,
        "gpus": None if recipe.gpus is None else sorted(recipe.gpus),
        "generations": None if recipe.generations is None else sorted(recipe.generations),
        "precisions": None if recipe.precisions is None else sorted(recipe.precisions),
        "settings": recipe.settings, "source": recipe.source,
    }


def stack_document(traits: StackTraits) -> dict[str, Any]:
    """A stack's traits and the recipes filed under it."""
    document = {field.name: getattr(traits, field.name)
                for field in dataclasses.fields(traits)}
    return {**document, "recipes": [recipe_document(r) for r in recipes()
                                    if r.stack == traits.name]}


def list_command(json_output: JsonFlag = False) -> None:
    """List the stacks: name, what it is, the words that select it in a record's software."""
    documents = [stack_document(get_stack(name)) for name in known_stacks()]
    if json_output:
        print_json({"stacks": documents})
        return
    print_table(
        "Stacks (performance.stack in a job; a record's software text picks one by keyword)",
        ["name", "description", "keywords", "recipes"],
        [[d["name"], d["description"], ", ".join(d["keywords"]) or "-",
          str(len(d["recipes"]))] for d in documents])


def show_command(
    name: Annotated[str, typer.Argument(help="stack name (see `mosaic stacks list`)")],
    release: Annotated[str | None, typer.Option(
        help="only recipes of this release, YY.MM (e.g. 26.04), or of a point release "
             "YY.MM.0N (26.04.01)")] = None,
    gpu: Annotated[str | None, typer.Option(
        help="only recipes for this catalog device (e.g. H100-SXM-80GB)")] = None,
    precision: Annotated[str | None, typer.Option(
        help="only recipes for this precision (bf16, fp8-cs, mxfp8, nvfp4, ...)")] = None,
    json_output: JsonFlag = False,
) -> None:
    """Show one stack's traits (each with its source) and the recipes filed under it."""
    traits = get_stack(name)  # an unknown name: one line with the closest known stack
    name = traits.name
    if release is not None:
        check_release(release, "--release")
    wanted = None if release is None else parse_release(release)
    point = None if release is None else names_point_release(release)
    device_name = None if gpu is None else get_device(gpu).name  # aliases resolve
    precision = None if precision is None else job_precision_name(precision)  # fp4: nvfp4
    if precision is not None and precision not in get_args(PrecisionName):
        raise MosaicInputError(f"--precision {shown(precision)}: allowed "
                               f"{', '.join(get_args(PrecisionName))}")
    document = stack_document(traits)
    chosen = [r for r in recipes()
              if r.stack == name and r.may_match(wanted, device_name, precision, point)]
    document["recipes"] = [recipe_document(r) for r in chosen]
    if json_output:
        print_json(document)
        return
    prose = ("description", "source", "memory_source")
    rows = [(key, _text(value)) for key, value in document.items()
            if key not in ("name", "recipes", *prose)]
    print_key_value_table(f"Stack {name}: {document['description']}", rows)
    for key in prose[1:]:
        if document[key]:
            print(f"{key}: {document[key]}")
    if not document["recipes"]:
        filtered = " match these filters" if any((release, gpu, precision)) else ""
        print(f"no recipes of {name}{filtered}")
        return
    print_table(
        f"Recipes of {name} (applied where a run or job leaves the setting unstated)",
        ["label", "releases", "model", "GPUs", "precisions", "settings"],
        [[d["label"], f"{d['since'] or 'any'}..{d['until'] or ''}",
          _text(d["model"]) if d["model"] else ("MoE" if d["moe"] else
                                                "dense" if d["moe"] is False else "any"),
          _text(d["gpus"] or d["generations"] or "any"), _text(d["precisions"] or "any"),
          _text(d["settings"])] for d in document["recipes"]])


def _text(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{key}={_text(item)}" for key, item in value.items()) or "-"
    if isinstance(value, (list, tuple)):
        return ", ".join(map(str, value)) or "-"
    return "-" if value is None else str(value)


stacks_app.command("list")(guarded(list_command))
stacks_app.command("show")(guarded(show_command))


def register(app: typer.Typer) -> None:
    """Attach the `stacks` sub-command group to the top-level app."""
    app.add_typer(stacks_app, name="stacks")
