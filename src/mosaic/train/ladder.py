"""The ladder runner: train a grid of rungs with one recipe, write ``runs.csv`` for the law.

A grid file holds a ``recipe`` (every job block except the model and ``run.tokens``,
shared by all rungs) and a ``ladder`` block: lists of seeds q, experts E, top-K, split
factors G and token budgets D whose product (minus inadmissible points: K > E, G not
dividing d_ff, S below ``s_min``) are the rungs, plus optional explicit ``runs``. Each rung
trains into ``OUT/runs/<name>/`` (resuming from its checkpoint; finished rungs are
skipped), and ``OUT/runs.csv`` gets one row per finished rung in the columns
:mod:`mosaic.law.rundata` reads, the loss being the smoothed final training loss (Sec. 3.1).
"""

from __future__ import annotations

import csv
import itertools
import json
import math
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import ConfigDict, Field

from mosaic.arch import Geometry, count_parameters
from mosaic.arch.counts import sparsity as sparsity_of
from mosaic.arch.ladder import LADDER_HEAD_DIM, LADDER_KV_HEADS
from mosaic.errors import MosaicInputError, MosaicWarning
from mosaic.io_atomic import atomic_path
from mosaic.limits import LIMITS, is_finite_number
from mosaic.schema_validation import NoBooleanNumbers, load_yaml_mapping, validate_mapping
from mosaic.torchrun_env import is_rank_zero
from mosaic.train.config import (
    LadderModel,
    LadderSeed,
    TrainConfig,
    check_schedule,
    resolve_data_paths,
    train_config_from_mapping,
)
from mosaic.train.result_files import (
    RESULT_FILE,
    RESULT_FINGERPRINT,
    RUN_INFO_FILE,
    read_run_json,
)

RUNS_CSV = "runs.csv"
# The columns `mosaic law fit` reads (mosaic/law/rundata.py), then bookkeeping columns.
CSV_COLUMNS = ("name", "n_total", "n_active", "sparsity", "tokens", "split_factor", "loss",
               "experts", "top_k", "layers", "d_model", "q", "final_loss", "peak_lr", "steps",
               "wall_s", "tokens_per_s", "starved_experts", "vocab")


class _Strict(NoBooleanNumbers):
    model_config = ConfigDict(extra="forbid", frozen=True)


# Bounded as every command bounds these quantities (mosaic.limits; the seed: LadderSeed in
# train.config): a grid entry of 1e41 overflowed inside numpy, one of 1e40 sequences listed
# 6e47-token rungs (a fuzz trial).
ExpertCount = Annotated[int, Field(gt=0, le=LIMITS["experts"].high)]
SplitFactor = Annotated[int, Field(gt=0, le=LIMITS["split_factor"].high)]
TokenBudget = Annotated[float, Field(gt=0, le=LIMITS["tokens"].high)]
TokensPerParam = Annotated[float, Field(gt=0, le=LIMITS["tpp"].high)]


class Rung(_Strict):
    """One explicit rung."""

    q: LadderSeed
    experts: ExpertCount
    top_k: ExpertCount
    split_factor: SplitFactor = 1
    tokens: TokenBudget


class LadderBlock(_Strict):
    """Axes of the grid (Sec. 7.1 ladder; Appendix C ranges for the paper's own sweep)."""

    q: list[LadderSeed] = Field(default_factory=list, description="ladder seeds")
    experts: list[ExpertCount] = Field(default_factory=list)
    top_k: list[ExpertCount] = Field(default_factory=list)
    split_factor: list[SplitFactor] = Field(default_factory=lambda: [1])
    tokens: list[TokenBudget] = Field(default_factory=list, description="token budgets D")
    tokens_per_active_param: list[TokensPerParam] = Field(
        default_factory=list, description="or budgets D = TPP·N_act (paper: TPP 10.8-70)")
    head_dim: int = Field(default=LADDER_HEAD_DIM, gt=0, description="paper: 128")
    kv_heads: int = Field(default=LADDER_KV_HEADS, gt=0, description="paper: 8")
    gated_attention: bool = False
    s_min: float = Field(default=0.0, ge=0, lt=1, description="drop rungs with S < s_min")
    runs: list[Rung] = Field(default_factory=list, description="explicit extra rungs")


class GridFile(_Strict):
    recipe: dict[str, Any]
    ladder: LadderBlock


@dataclass(frozen=True)
class LadderJob:
    """One rung: its name and complete training job."""

    name: str
    config: TrainConfig


def rung_name(q: int, experts: int, top_k: int, split: int, tokens: float) -> str:
    return f"q{q}_E{experts}_K{top_k}_G{split}_D{tokens:.3g}".replace("+", "")


def _checkpoints_as_at_full_scale(config: TrainConfig, step_ratio: float) -> TrainConfig:
    """``config`` of a rung shortened to ``step_ratio`` of its steps by ``--scale``, with
    ``checkpoint_every`` shortened alike, so a rung keeps the checkpoints it has at full
    scale (a killed 20-step rung of a --scale 0.2 trial had none: checkpoint_every stayed
    50). A resumable setting: not part of the rung's identity."""
    every = max(1, round(config.run.checkpoint_every * step_ratio))
    return config.model_copy(update={"run": config.run.model_copy(
        update={"checkpoint_every": every})})


def _read_grid(path: Path) -> tuple[LadderBlock, dict[str, Any]]:
    """A grid file's ladder block and its recipe (data paths resolved), checked."""
    document = load_yaml_mapping(path)
    if "run" in document and "recipe" not in document:  # a job: eight unknown fields before
        raise MosaicInputError(
            f"{path}: a `mosaic train` job (blocks data, run and a model or one ladder "
            "rung), not a ladder grid, which holds a recipe (the job's blocks but the model) "
            "and a ladder block of lists (docs/train.md, \"The ladder\")")
    grid = validate_mapping(GridFile, document, str(path))
    recipe = dict(grid.recipe)
    if not isinstance(recipe.get("run", {}), dict):
        raise MosaicInputError(f"{path}: recipe.run must be a mapping of run settings, got "
                               f"{recipe['run']!r:.60}")
    if "model" in recipe or "ladder" in recipe or "moe" in recipe:
        raise MosaicInputError(f"{path}: recipe must not hold a model; the ladder block sets it")
    if "tokens" in recipe.get("run", {}):  # each rung's budget is the ladder's (a trial's
        # recipe.run.tokens: 5000 was dropped without a word)
        raise MosaicInputError(f"{path}: recipe.run.tokens: the ladder sets each rung's "
                               "tokens (ladder.tokens, ladder.tokens_per_active_param or "
                               "ladder.runs[].tokens); drop it from the recipe")
    return grid.ladder, resolve_data_paths(recipe, path.parent, f"{path}: recipe")


def _stated_kv_heads(block: LadderBlock) -> dict[str, int]:
    """kv_heads only where the grid states it: a rung warns about a stated one only."""
    return {"kv_heads": block.kv_heads} if "kv_heads" in block.model_fields_set else {}


def rung_geometry(path: str | Path, q: int, experts: int | None, top_k: int | None,
                  split_factor: int, tokens: float) -> Geometry:
    """The geometry `mosaic ladder run` gives rung (q, E, K, G) of the grid file ``path``
    at full scale, whether or not the grid lists it: the grid's head_dim, kv_heads,
    gated_attention and data vocabulary, built through the same job validation as
    :func:`load_grid`'s rungs (``tokens``: the rung's budget, which that validation reads).
    `law predict --q` built the paper's width 128 instead, 977 M parameters for the tiny
    ladder's 3.8 M rung q2_E16_K1_G1 (a trial)."""
    path = Path(path)
    block, recipe = _read_grid(path)
    where = f"{path}: rung q={q} E={experts} K={top_k} G={split_factor}"
    rung = validate_mapping(LadderModel, {
        "q": q, "experts": experts, "top_k": top_k, "split_factor": split_factor,
        "head_dim": block.head_dim, "gated_attention": block.gated_attention,
        **_stated_kv_heads(block)}, where)
    config = train_config_from_mapping(
        {**recipe, "ladder": rung.model_dump(exclude_unset=True),
         "run": {**dict(recipe.get("run", {})), "tokens": tokens}}, where)
    return config.geometry(where)


def load_grid(path: str | Path, scale: float = 1.0) -> list[LadderJob]:
    """Rungs of a grid file; ``scale`` multiplies the head width and every token budget."""
    path = Path(path)
    block, recipe = _read_grid(path)
    if not 0 < scale <= 1:
        raise MosaicInputError(f"--scale must satisfy 0 < scale <= 1, got {scale}")
    points = [(r.q, r.experts, r.top_k, r.split_factor, ("D", r.tokens)) for r in block.runs]
    explicit = len(points)  # the runs: entries, refused rather than skipped when inadmissible
    budgets = ([("D", t) for t in block.tokens]
               + [("TPP", t) for t in block.tokens_per_active_param])
    axes = (block.q, block.experts, block.top_k, block.split_factor, budgets)
    if all(axes):
        points += list(itertools.product(*axes))
    elif any(axes[:2] + axes[4:]) and not block.runs:
        missing = [n for n, a in zip(("q", "experts", "top_k", "split_factor",
                                      "tokens or tokens_per_active_param"), axes,
                                     strict=True) if not a]
        raise MosaicInputError(f"{path}: ladder axes {missing} are empty")
    if not points:
        raise MosaicInputError(f"{path}: the ladder has no rungs (give axes or runs)")
    head_dim = max(8, int(block.head_dim * scale) // 8 * 8) if scale < 1 else block.head_dim
    run_settings = dict(recipe.get("run", {}))
    jobs: dict[str, LadderJob] = {}
    # why each grid point was skipped, by axis value: a value none of whose points is
    # admissible is named (a trial's split_factor [1, 3] lost 8 of 19 rungs without a word)
    skipped: dict[tuple[str, Any], set[str]] = {}
    kept: set[tuple[str, Any]] = set()
    stated_kv = _stated_kv_heads(block)
    for index, (q, experts, top_k, split, (kind, budget)) in enumerate(points):
        stated = index < explicit
        values = _axis_values(q, experts, top_k, split, kind, budget)
        if top_k > experts:
            if stated:
                raise MosaicInputError(f"{path}: ladder.runs[{index}]: top_k ({top_k}) must "
                                       f"not exceed experts ({experts})")
            _note_skipped(skipped, values, "K > E")
            continue
        rung = LadderModel(q=q, experts=experts, top_k=top_k, split_factor=split,
                           head_dim=head_dim, gated_attention=block.gated_attention,
                           **stated_kv)
        where = f"{path}: rung q={q} E={experts} K={top_k} G={split}"
        try:
            config = train_config_from_mapping(
                {**recipe, "ladder": rung.model_dump(exclude_unset=True),
                 "run": {**run_settings, "tokens": budget * scale}}, where)
            if kind == "TPP":  # D = TPP·N_act of this rung's geometry
                tokens = budget * float(count_parameters(config.geometry()).n_active) * scale
                config = train_config_from_mapping(
                    {**recipe, "ladder": rung.model_dump(exclude_unset=True),
                     "run": {**run_settings, "tokens": tokens}}, where)
        except MosaicInputError as exc:
            if "split factor" in str(exc) and not stated:  # G must divide d_ff: no point
                _note_skipped(skipped, values, "G not dividing d_ff")
                continue
            raise
        if scale < 1:
            full = (budget if kind == "D" else budget * float(count_parameters(
                train_config_from_mapping(
                    {**recipe, "ladder": {**rung.model_dump(exclude_unset=True),
                                          "head_dim": block.head_dim},
                     "run": {**run_settings, "tokens": budget}}, where).geometry()).n_active))
            config = _checkpoints_as_at_full_scale(config, config.run.tokens / full)
        tokens = config.run.tokens
        sparsity = float(count_parameters(config.geometry()).sparsity)
        if sparsity < block.s_min:
            if stated:
                raise MosaicInputError(f"{where}: ladder.runs[{index}] has sparsity "
                                       f"{sparsity:.3f}, below ladder.s_min {block.s_min:g}")
            _note_skipped(skipped, values, "S below s_min")
            continue
        check_schedule(config, where)
        name = (rung_name(q, experts, top_k, split, tokens) if kind == "D"
                else f"q{q}_E{experts}_K{top_k}_G{split}_T{budget:g}")
        if name in jobs and jobs[name].config != config:  # budgets equal to 3 digits
            raise MosaicInputError(f"{where}: two rungs would both be named {name} (token "
                                   "budgets equal to three significant digits); make them "
                                   "differ more or drop one")
        jobs[name] = LadderJob(name, config)
        kept.update(values)  # a stated run's values give a rung too
    if not jobs:
        raise MosaicInputError(f"{path}: every grid point was inadmissible (K > E, G not "
                               "dividing d_ff, or S below s_min)")
    unused = [f"{axis} {value:g} ({', '.join(sorted(skipped[(axis, value)]))})"
              for axis, value in skipped if (axis, value) not in kept]
    if unused:
        warnings.warn(f"{path}: grid value(s) that give no rung, every point with them "
                      f"inadmissible: {'; '.join(unused)}; check them, or drop them from "
                      "the grid", MosaicWarning, stacklevel=2)
    return list(jobs.values())


def _axis_values(q: int, experts: int, top_k: int, split: int, kind: str,
                 budget: float) -> tuple[tuple[str, Any], ...]:
    """(grid axis, value) pairs of one grid point, named as the grid file names them."""
    budget_axis = "ladder.tokens" if kind == "D" else "ladder.tokens_per_active_param"
    return (("ladder.q", q), ("ladder.experts", experts), ("ladder.top_k", top_k),
            ("ladder.split_factor", split), (budget_axis, budget))


def _note_skipped(skipped: dict[tuple[str, Any], set[str]],
                  values: tuple[tuple[str, Any], ...], reason: str) -> None:
    """Record why a grid point was skipped under each of its axis values."""
    for value in values:
        skipped.setdefault(value, set()).add(reason)


def csv_row(name: str, result: dict[str, Any], q: int) -> dict[str, Any]:
    """A runs.csv row from a rung's result.json."""
    row = {key: result[key] for key in ("n_total", "n_active", "sparsity", "tokens",
                                        "split_factor", "experts", "top_k", "layers",
                                        "d_model", "peak_lr", "steps", "wall_s",
                                        "tokens_per_s", "final_loss")}
    row["sparsity"] = float(sparsity_of(result["n_active"], result["n_total"]))  # as law fit checks
    row["starved_experts"] = result.get("starved_experts")  # absent from older result files
    row["vocab"] = result.get("vocab")  # the loss's unit; absent from older result files
    return {"name": name, "q": q, "loss": result["smoothed_loss"], **row}


def result_folders(folders: list[Path]) -> list[Path]:
    """The run folders of ``folders``: each one holding a ``result.json``, else its
    subfolders that do (a parent of run folders, or a ladder's ``--out`` with its
    ``runs/``); MosaicInputError for one with neither, and for a run folder without a
    result (stopped before its budget, or failed), which a parent would otherwise skip
    without a word (a trial collected 2 of 4 runs and was told nothing)."""
    found: list[Path] = []
    for folder in folders:
        if (folder / RESULT_FILE).is_file():
            found.append(folder)
            continue
        _refuse_unfinished([folder])
        parent = folder / "runs" if (folder / "runs").is_dir() else folder  # a ladder's --out
        inner = sorted(p for p in parent.iterdir()) if parent.is_dir() else []
        finished = [p for p in inner if (p / RESULT_FILE).is_file()]
        if not finished:
            raise MosaicInputError(f"{folder}: no {RESULT_FILE} in it or one level down (give "
                                   "`mosaic train --out` folders, their parent, or a ladder's "
                                   "--out folder)")
        _refuse_unfinished([p for p in inner if p not in finished])
        found += finished
    return found


def _refuse_unfinished(folders: list[Path]) -> None:
    """A run folder (its ``run.json``) without ``result.json``: the run stopped before its
    token budget or failed, and its loss is not the budget's."""
    unfinished = [folder for folder in folders if (folder / RUN_INFO_FILE).is_file()]
    if unfinished:
        raise MosaicInputError(
            f"{', '.join(map(str, unfinished))}: a run without {RESULT_FILE} (stopped before "
            "its token budget, or failed): finish it (rerun the same `mosaic train` command) "
            "or leave its folder out")


def collect_result_rows(folders: list[Path]) -> list[dict[str, Any]]:
    """runs.csv rows of separate ``mosaic train`` runs, one per folder holding a
    ``result.json`` (a folder without one is searched one level down, so a parent of run
    folders works too), named by the folder; a run's ladder rung ``q`` from its job (0
    for a model block). MosaicInputError for a folder with no result, an unreadable one or
    a run that stopped before its token budget (its loss is not the budget's)."""
    found = result_folders(folders)
    rows = []
    jobs: dict[str, str] = {}  # job fingerprint -> the first folder that trained it
    for folder in found:
        path = folder / RESULT_FILE
        result = read_run_json(path, "mosaic train result")
        if not isinstance(result, dict):
            raise MosaicInputError(f"{path}: not a mosaic result (a JSON object of fields)")
        if result.get("complete") is not True:
            raise MosaicInputError(f"{path}: the run stopped after {result.get('steps')} of "
                                   f"{result.get('total_steps')} steps; finish it (rerun the same "
                                   "`mosaic train` command) or leave its folder out")
        fingerprint = result.get(RESULT_FINGERPRINT)
        if isinstance(fingerprint, str) and fingerprint in jobs:
            # the same job (model, data, recipe, seed) trains to the same loss: a fit would
            # count one measurement twice (a trial collected three copies of one run)
            raise MosaicInputError(f"{folder} and {jobs[fingerprint]} hold results of the same "
                                   "job (model, data, recipe and seed): one measurement, "
                                   "which a law fit would weight twice; leave one out")
        if isinstance(fingerprint, str):
            jobs[fingerprint] = str(folder)
        try:
            _check_result_numbers(result)
            rows.append(csv_row(folder.name, result, _ladder_rung(result)))
        except KeyError as exc:
            raise MosaicInputError(f"{path}: no {exc.args[0]!r}; not a `mosaic train` "
                                   "result") from None
        except ValueError as exc:  # a damaged or hand-edited field
            raise MosaicInputError(f"{path}: {exc}") from None
    names = [row["name"] for row in rows]
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise MosaicInputError(f"two runs share a folder name ({', '.join(twice)}): rename one "
                               "(runs.csv names each run by its folder)")
    synthetic = [folder.name for folder in found if _data_format(folder) == "synthetic"]
    if synthetic:  # (a trial collected examples/train_q4_h200.yaml's run beside real ones)
        warnings.warn(f"{', '.join(synthetic)}: trained on data.format synthetic (uniform "
                      "random ids, for throughput): a loss of about ln(vocab) whatever the "
                      "model, which no loss law describes; leave such runs out of a fit",
                      MosaicWarning, stacklevel=2)
    return rows


def _data_format(folder: Path) -> str | None:
    """data.format of the job a run folder's result records (None where unreadable)."""
    try:
        result = json.loads((folder / RESULT_FILE).read_text())
        job = json.loads(result.get(RESULT_FINGERPRINT) or "{}")
        return (job.get("data") or {}).get("format")
    except (OSError, TypeError, ValueError, AttributeError, RecursionError):
        return None


# result.json fields a runs.csv row copies: each a positive finite number (a fuzz trial's
# null loss ended in a traceback, n_active -1 and experts "abc" were written on); experts
# and top_k are 0 for a dense model (trainer.py's result).
_POSITIVE_RESULT_FIELDS = ("n_total", "n_active", "tokens", "smoothed_loss", "split_factor",
                           "layers", "d_model", "steps")
_COUNT_RESULT_FIELDS = ("experts", "top_k")


def _check_result_numbers(result: dict[str, Any]) -> None:
    """ValueError naming the first field of ``result`` that is not what a run writes."""
    for name in (*_POSITIVE_RESULT_FIELDS, *_COUNT_RESULT_FIELDS):
        value = result[name]
        count = name in _COUNT_RESULT_FIELDS
        if not is_finite_number(value) or value < 0 or (value == 0 and not count):
            raise ValueError(f"{name} is {value!r}; a run writes a "
                             + ("count >= 0" if count else "positive number") + " there")
    if result["n_active"] > result["n_total"]:
        raise ValueError(f"n_active {result['n_active']} exceeds n_total {result['n_total']}")
    if result["top_k"] > result["experts"] or (result["top_k"] == 0) != (
            result["experts"] == 0):
        raise ValueError(f"top_k {result['top_k']} with experts {result['experts']}: a dense "
                         "run writes 0 for both, an MoE run 1 <= top_k <= experts")
    starved, vocab = result.get("starved_experts"), result.get("vocab")
    if starved is not None and (not is_finite_number(starved) or starved < 0):
        raise ValueError(f"starved_experts is {starved!r}; a run writes a count >= 0 or null")
    if vocab is not None and (isinstance(vocab, bool) or not isinstance(vocab, int)
                              or vocab < 1):
        raise ValueError(f"vocab is {vocab!r}; a run writes a positive whole number or null")


def _ladder_rung(result: dict[str, Any]) -> int:
    """The ladder seed q of the job a result records (0 for a model block, or a record
    this cannot read: q only labels the row)."""
    try:
        job = json.loads(result.get(RESULT_FINGERPRINT) or "{}")
        return int((job.get("ladder") or {}).get("q") or 0)
    # (JSONDecodeError is a ValueError; RecursionError: a fingerprint nested deeper than
    # json reads)
    except (TypeError, ValueError, AttributeError, RecursionError):
        return 0


def write_runs_csv(rows: list[dict[str, Any]], path: Path) -> Path:
    """``rows`` as runs.csv at ``path``, written atomically (:mod:`mosaic.io_atomic`: an
    interrupted write leaves no cut table, a device such as /dev/full is one error line)."""
    with atomic_path(path) as temp, temp.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: (repr(v) if isinstance(v, float) else v) for k, v in row.items()})
    return path


def run_ladder(jobs: list[LadderJob], out_dir: str | Path,
               progress: Callable[[str], None] | None = None,
               only: list[str] | None = None) -> Path:
    """Train every rung (resumable) and write ``runs.csv``; returns its path."""

    from mosaic.train.distributed import barrier, init_distributed, shutdown
    from mosaic.train.plot import require_plot_extra

    require_plot_extra(any(job.config.run.plot for job in jobs))
    out_dir = Path(out_dir)
    main = is_rank_zero()
    if main:
        (out_dir / "runs").mkdir(parents=True, exist_ok=True)
    selected = [j for j in jobs if only is None or j.name in only]
    finished_results(jobs, out_dir)  # a rung finished by another job stops the ladder first
    _refuse_to_drop_listed_rungs(jobs, out_dir)
    from mosaic.train.data import data_files

    for job in selected:  # once, not as every rung's failure (a fuzz trial: 19 of them)
        if job.config.data.format != "synthetic" and job.config.data.path is not None:
            data_files(job.config.data.path, "recipe.data.path")
    context = init_distributed(jobs[0].config.run.device)  # one process group for all rungs
    try:
        _run_selected(selected, jobs, out_dir, progress, main, context)
        barrier(context)
    finally:
        shutdown(context)
    return out_dir / RUNS_CSV


def _run_selected(selected: list[LadderJob], jobs: list[LadderJob], out_dir: Path,
                  progress: Callable[[str], None] | None, main: bool, context: Any) -> None:
    """Train the selected rungs in order. A rung that fails (an unreadable checkpoint, a
    divergence) does not stop the others: every rank meets the same error, so all go on to
    the next rung, and the failures are one error at the end."""
    from mosaic.train.trainer import format_record, read_finished_result, train

    failures: list[str] = []
    for index, job in enumerate(selected, start=1):
        rung_dir = out_dir / "runs" / job.name
        if read_finished_result(rung_dir, job.config) is not None:
            if progress and main:
                progress(f"[{index}/{len(selected)}] {job.name}: done earlier, skipped")
        else:
            if progress and main:
                progress(f"[{index}/{len(selected)}] {job.name}: {job.config.total_steps} steps")
            every = max(1, job.config.total_steps // 5)
            try:
                train(job.config, rung_dir, context=context,
                      log=_every(progress, job.name, every, format_record) if progress
                      else None)
            except MosaicInputError as exc:  # which rung failed (--quiet shows no progress)
                failures.append(f"rung {job.name}: {exc}")
                if progress and main:
                    progress(f"[{index}/{len(selected)}] {job.name}: failed ({exc}); "
                             "going on with the next rung")
        if main:
            collect_runs(jobs, out_dir)
    if len(failures) == 1 and len(selected) == 1:
        raise MosaicInputError(failures[0])
    if failures:
        others = ("none trained" if len(failures) == len(selected)  # not "the others
                  else "the others trained")  # trained" when every rung failed (a trial)
        raise MosaicInputError(
            f"{len(failures)} of {len(selected)} rungs failed ({others}; "
            f"{RUNS_CSV} holds every finished rung; rerun to retry the failed ones): "
            + "; ".join(failures))


def finished_results(jobs: list[LadderJob], out_dir: Path) -> dict[str, dict[str, Any]]:
    """The result of every finished rung of the grid, by name, each checked to have been
    trained by this grid's job for it (``trainer.read_finished_result``: a rung folder
    finished under another recipe, --scale or grid is an error naming what differs)."""
    from mosaic.train.trainer import read_finished_result

    results = {}
    for job in jobs:
        try:
            result = read_finished_result(out_dir / "runs" / job.name, job.config)
        except MosaicInputError as exc:
            raise MosaicInputError(f"rung {job.name}: {exc}") from None
        if result is not None:
            results[job.name] = asdict(result)
    return results


def finished_rungs(out_dir: Path) -> list[str]:
    """Names of every finished rung under ``out_dir/runs``, whichever grid trained it."""
    runs = out_dir / "runs"
    return sorted(path.parent.name for path in runs.glob(f"*/{RESULT_FILE}")
                  ) if runs.is_dir() else []


def _refuse_to_drop_listed_rungs(jobs: list[LadderJob], out_dir: Path) -> None:
    """Refuse, before any training, a grid whose runs.csv would lose rungs the folder's
    runs.csv lists: every ladder run rewrites it with its own grid's rungs, and a trial's
    `--scale 0.1 --only ...` into a finished 19-rung folder left it one row."""
    path = out_dir / RUNS_CSV
    if not path.is_file():
        return
    from mosaic.table_files import read_table

    listed = read_table(path, "runs file", allow_no_rows=True)
    names = {job.name for job in jobs}
    dropped = [str(name) for name in listed.get("name", []) if str(name) not in names]
    if dropped:
        raise MosaicInputError(
            f"{path} lists {len(dropped)} rung(s) this grid (at this --scale) does not hold "
            f"({', '.join(dropped[:3])}{' ...' if len(dropped) > 3 else ''}); a ladder run "
            f"rewrites {RUNS_CSV} with its own grid's rungs, so they would drop out of it: "
            "give a scaled or other grid its own --out (finished rungs are kept under "
            f"{out_dir / 'runs'} either way), or move {RUNS_CSV} aside to replace it")


def finished_elsewhere(jobs: list[LadderJob], out_dir: Path) -> list[str]:
    """Names of the finished rungs under ``out_dir/runs`` that are not rungs of ``jobs``
    (another grid trained into the same folder)."""
    names = {job.name for job in jobs}
    return [name for name in finished_rungs(out_dir) if name not in names]


def collect_runs(jobs: list[LadderJob], out_dir: Path) -> list[dict[str, Any]]:
    """Rewrite ``runs.csv`` with every finished rung of the grid, in grid order."""
    results = finished_results(jobs, out_dir)
    rows = []
    for job in jobs:
        if job.name in results:
            assert job.config.ladder is not None
            rows.append(csv_row(job.name, results[job.name], job.config.ladder.q))
    write_runs_csv(rows, out_dir / RUNS_CSV)
    return rows


def _every(progress: Callable[[str], None], name: str, every: int,
           formatter: Callable[[dict[str, Any]], str]) -> Callable[[dict[str, Any]], None]:
    printed: set[int] = set()

    def log(record: dict[str, Any]) -> None:  # the first logged step of every bucket
        bucket = record["step"] // every
        if bucket not in printed:
            printed.add(bucket)
            progress(f"  {name} {formatter(record)}")

    return log


def ladder_summary(rows: list[dict[str, Any]]) -> list[list[str]]:
    """Table rows for people: name, N_tot, N_act, S, D, loss."""
    return [[r["name"], f"{float(r['n_total']):.4g}", f"{float(r['n_active']):.4g}",
             f"{float(r['sparsity']):.3f}", f"{float(r['tokens']):.3g}",
             f"{float(r['loss']):.4f}"] for r in rows if not math.isnan(float(r["loss"]))]
