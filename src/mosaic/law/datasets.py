"""Adapters for public scaling-law datasets, and the published fits they are checked against."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from types import MappingProxyType

import numpy as np
import pandas as pd

from mosaic.arch.flops import FLOPS_PER_PARAM_TOKEN
from mosaic.errors import MosaicInputError
from mosaic.law.rundata import RunData

# Hoffmann et al. (2022), "Training Compute-Optimal LLMs", Sec. 3.3 (Approach 3 fit).
HOFFMANN_2022_FIT = MappingProxyType(
    {"E": 1.69, "A": 406.4, "B": 410.7, "alpha": 0.34, "beta": 0.28}
)
# Epoch AI's converged Huber fit (delta 1e-3, summed over the 240 kept rows, residual
# log L_pred - log L_obs) of the Chinchilla form to their reconstruction of Hoffmann et al.
# Fig. 4 (Besiroglu et al. 2024, arXiv:2404.10102; github.com/epoch-research/analyzing-chinchilla).
EPOCH_HUBER_FIT = MappingProxyType(
    {"E": 1.8172, "A": 477.8, "B": 2143.0, "alpha": 0.3473, "beta": 0.3672}
)
EPOCH_HUBER_OBJECTIVE = 0.00101827
EPOCH_HUBER_DELTA = 1e-3
EPOCH_DROPPED_ROWS = 5  # Epoch drop the 5 largest-loss rows, keeping 240


# Clark et al. 2022 ("Unified Scaling Laws for Routed Language Models", ICML 2022) train
# every run 250k steps of 256 sequences x 2048 tokens (the repository's README and the paper:
# ~130B tokens, fixed D): tokens at an evaluation step = step x 256 x 2048.
CLARK_TOKENS_PER_STEP = 256 * 2048
CLARK_ROUTERS = ("Dense", "S-Base", "RL-R", "Hash")
# Besiroglu et al. 2024's printed estimates (E 1.8172, A 482.01, B 2085.43, alpha 0.3478,
# beta 0.3658): their summed Huber objective on the 240 rows is 0.0010228, above the
# converged optimum EPOCH_HUBER_FIT reaches (0.0010183): the printed values are not the
# objective's minimum (A and B are loosely pinned, standard errors 125 and 1293).
BESIROGLU_2024_PRINTED = MappingProxyType(
    {"E": 1.8172, "A": 482.01, "B": 2085.43, "alpha": 0.3478, "beta": 0.3658}
)
DATASETS = ("epoch", "clark", "muennighoff")


def _read(path: str | Path, what: str, needed: list[str],
          numeric: Iterable[str] = (), allow_missing: bool = False) -> pd.DataFrame:
    """The CSV with its ``needed`` columns, each of ``numeric`` a finite number in every row
    (a fuzz trial: a non-numeric cell ended in a traceback, NaN and inf were written on),
    or an empty cell where ``allow_missing`` (Clark et al.'s curves leave some evaluations
    empty; a run table built from them is checked as `law fit` checks it); at least one
    row."""
    path = Path(path)
    if not path.is_file():
        raise MosaicInputError(f"{what} {str(path)!r} does not exist or is not a file")
    try:
        frame = pd.read_csv(path)  # compression (.gz) inferred from the name
    except (ValueError, OSError, UnicodeDecodeError, pd.errors.ParserError) as exc:
        raise MosaicInputError(f"{what} {path}: not a readable CSV ({exc})") from None
    missing = [c for c in needed if c not in frame.columns]
    if missing:
        raise MosaicInputError(f"{path}: missing column(s) {missing} of the {what}")
    if frame.empty:
        raise MosaicInputError(f"{path}: no rows in the {what}")
    for column in numeric:
        values = pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=float)
        missing_cell = frame[column].isna().to_numpy()
        bad = np.flatnonzero(~np.isfinite(values) & ~(allow_missing & missing_cell))
        if bad.size:
            row = int(bad[0])
            raise MosaicInputError(
                f"{path}: line {row + 2}, column {column!r}: {str(frame[column].iloc[row])!r} "
                "is not a finite number" + (f" ({bad.size} such rows)" if bad.size > 1 else ""))
        frame[column] = values
    return frame


def epoch_chinchilla_table(path: str | Path, keep_all: bool = False) -> pd.DataFrame:
    """Epoch's ``svg_extracted_data.csv`` as a run table: n_total = "Model Size", tokens =
    C / (6 N); the five rows with the largest loss dropped as in Epoch's analysis (240
    left) unless ``keep_all``."""
    columns = ["Model Size", "Training FLOP", "loss"]
    frame = _read(path, "Epoch Chinchilla CSV", columns, numeric=columns)
    if not keep_all and len(frame) <= EPOCH_DROPPED_ROWS:
        raise MosaicInputError(f"{path}: {len(frame)} row(s); Epoch's analysis drops the "
                               f"{EPOCH_DROPPED_ROWS} largest-loss rows, which would leave "
                               "none (--keep-all keeps them)")
    if not keep_all:
        cutoff = np.sort(frame["loss"].to_numpy())[-EPOCH_DROPPED_ROWS]
        frame = frame[frame["loss"] < cutoff]
    n_params = frame["Model Size"].to_numpy(dtype=float)
    return pd.DataFrame({
        "n_total": n_params,
        "tokens": frame["Training FLOP"].to_numpy(dtype=float) / (FLOPS_PER_PARAM_TOKEN * n_params),
        "loss": frame["loss"].to_numpy(dtype=float)})


def load_epoch_chinchilla(path: str | Path) -> RunData:
    """Epoch's ``svg_extracted_data.csv`` as run data (:func:`epoch_chinchilla_table`)."""
    return RunData.from_frame(epoch_chinchilla_table(path), source=str(path))


def clark_routing_table(path: str | Path, router: str | None = None) -> pd.DataFrame:
    """Clark et al.'s ``curves.csv.gz`` as a run table: each run's last evaluation, n_total
    = total_parameter_count, tokens = step x 256 x 2048, loss = loss_validation, experts,
    top_k, split_factor 1 (an expert is the dense FFN's size), router_type kept; only
    ``router``'s runs (and the dense ones, its S = 0 baseline) when given.

    n_active, the parameters a token sees: dense_parameter_count N (the base model) plus
    k - 1 more expert copies, each of P = (N_tot - N) / (copies - 1) parameters over the
    routed layers, copies = E for a routed run and k for a dense one whose FLOPs are
    raised k-fold (``flop_increase``): every copy is then active, n_active = N_tot. (Both
    give P = 8.39M for the 25M base: E = 64, k = 1 at N_tot 555.9M and dense k = 4 at
    52.5M.)"""
    numeric = ["step", "loss_validation", "total_parameter_count", "dense_parameter_count",
               "num_experts", "k"]
    frame = _read(path, "Clark et al. routing CSV", ["hyper_id", *numeric, "router_type"],
                  numeric=numeric, allow_missing=True)
    if router is not None:
        if router not in CLARK_ROUTERS:
            raise MosaicInputError(f"--router {router!r}: allowed: {', '.join(CLARK_ROUTERS)}")
        frame = frame[frame["router_type"].isin({router, "Dense"})]
    last = frame.sort_values("step").groupby("hyper_id", sort=True).tail(1)
    last = last.sort_values("hyper_id")
    return pd.DataFrame({
        "n_total": last["total_parameter_count"].to_numpy(dtype=float),
        "n_active": _clark_active_parameters(last),
        "tokens": last["step"].to_numpy(dtype=float) * CLARK_TOKENS_PER_STEP,
        "loss": last["loss_validation"].to_numpy(dtype=float),
        "experts": last["num_experts"].to_numpy(dtype=float),
        "top_k": last["k"].to_numpy(dtype=float),
        "split_factor": np.ones(len(last)),
        "router_type": last["router_type"].to_numpy()})


def _clark_active_parameters(runs: pd.DataFrame) -> np.ndarray:
    """Parameters a token sees (:func:`clark_routing_table`)."""
    base = runs["dense_parameter_count"].to_numpy(dtype=float)
    total = runs["total_parameter_count"].to_numpy(dtype=float)
    top_k = runs["k"].to_numpy(dtype=float)
    copies = np.maximum(runs["num_experts"].to_numpy(dtype=float), top_k)
    per_copy = np.where(copies > 1, (total - base) / np.maximum(copies - 1, 1), 0.0)
    return base + (top_k - 1) * per_copy


def muennighoff_table(path: str | Path, single_epoch: bool = False) -> pd.DataFrame:
    """The data-constrained runs (Muennighoff et al. 2023) as a run table: n_total, tokens,
    unique_tokens (billions in the file) and loss = val_loss; only the runs that saw each
    token once (tokens = unique_tokens) when ``single_epoch``: the law forms here treat
    every token as new, and repeated tokens are worth less (R_D*, mosaic.law.repetition)."""
    columns = ["params_billion", "tokens_billion", "unique_tokens_billion", "val_loss"]
    frame = _read(path, "data-constrained runs CSV", columns, numeric=columns)
    table = pd.DataFrame({
        "n_total": frame["params_billion"].to_numpy(dtype=float) * 1e9,
        "tokens": frame["tokens_billion"].to_numpy(dtype=float) * 1e9,
        "unique_tokens": frame["unique_tokens_billion"].to_numpy(dtype=float) * 1e9,
        "loss": frame["val_loss"].to_numpy(dtype=float)})
    if single_epoch:
        table = table[~repeats_data(table)].reset_index(drop=True)
    return table


def epochs_over_data(table: pd.DataFrame) -> np.ndarray:
    """Per run: tokens / unique_tokens, the epochs over its data; NaN where either is not a
    positive number, or without a unique_tokens column."""
    if "unique_tokens" not in table.columns:
        return np.full(len(table), np.nan)
    unique = pd.to_numeric(table["unique_tokens"], errors="coerce").to_numpy(dtype=float)
    tokens = pd.to_numeric(table["tokens"], errors="coerce").to_numpy(dtype=float)
    with np.errstate(all="ignore"):
        return np.where((unique > 0) & (tokens > 0), tokens / unique, np.nan)


def repeats_data(table: pd.DataFrame) -> np.ndarray:
    """Per run: whether it saw some token more than once (tokens above unique_tokens)."""
    with np.errstate(invalid="ignore"):
        return epochs_over_data(table) > 1.0 + 1e-9


# Column signatures of the public files, for a hint when one is given to the fitter as is.
_SIGNATURES = {"epoch": {"Model Size", "Training FLOP", "loss"},
               "clark": {"hyper_id", "loss_validation", "total_parameter_count"},
               "muennighoff": {"params_billion", "tokens_billion", "val_loss"}}


def dataset_hint(columns: Iterable[object]) -> str | None:
    """How to convert a public dataset whose raw columns these are, or None."""
    names = {str(c) for c in columns}
    for name, signature in _SIGNATURES.items():
        if signature <= names:
            return (f"this looks like the {name} dataset as published: convert it with "
                    f"`mosaic law convert {name} FILE --out runs.csv`")
    return None
