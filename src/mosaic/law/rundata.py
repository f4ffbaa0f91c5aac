"""Scaling-law run data: one row per training run, validated once when it enters.

Columns (names are exact; extra columns are ignored):
    n_total       total parameters N_tot (dense runs: N)                    required
    n_active      activated parameters per token N_act         \\ one of these for
    sparsity      S = 1 - N_act / N_tot, in [0, 1)             /  sparse forms
    tokens        training tokens D                                          required
    split_factor  expert split factor G = d_ff / d_expert (Eq. 8)            joint form
    loss          final training loss (nats/token)                           required
    experts, top_k, layers, d_model                                          optional
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

import numpy as np

from mosaic.arch.counts import sparsity as stated_sparsity
from mosaic.errors import MosaicInputError
from mosaic.law.forms import LawForm
from mosaic.limits import LIMITS
from mosaic.table_files import float_column

if TYPE_CHECKING:  # pandas loads only where run tables are read (fast CLI start-up)
    import pandas as pd

REQUIRED_COLUMNS: tuple[str, ...] = ("n_total", "tokens", "loss")
OPTIONAL_COLUMNS: tuple[str, ...] = (
    "n_active",
    "sparsity",
    "split_factor",
    "experts",
    "top_k",
    "layers",
    "d_model",
    "vocab",  # the tokenizer's vocabulary (the loss's unit): the law file records its range
    # the distinct tokens a run's data held (Muennighoff et al. 2023; mosaic.law.datasets):
    # `law fit` warns of runs that repeat theirs, so a value that is no count is refused
    # rather than read as unknown (a trial: 'abc' and -1 silenced that warning)
    "unique_tokens",
)
# Optional columns a table may hold empty (runs.csv from result files older than the
# column): empty throughout reads as absent, an empty cell as not recorded.
UNRECORDED_OK = ("vocab", "unique_tokens")
# n_active and sparsity given together must agree to this absolute tolerance in S.
SPARSITY_AGREEMENT_TOL = 1e-4


def _as_column(values: np.ndarray) -> np.ndarray:
    column = np.array(values, dtype=float).reshape(-1)
    column.setflags(write=False)
    return column


def _known_values(values: np.ndarray | None) -> list[float]:
    """The distinct recorded (non-NaN) values of an optional column."""
    return [] if values is None else sorted(set(values[~np.isnan(values)].tolist()))


def _take(values: np.ndarray | None, mask: np.ndarray) -> np.ndarray | None:
    return None if values is None else values[mask]


def _check_positive(name: str, values: np.ndarray, source: str) -> None:
    bad = np.flatnonzero(~(np.isfinite(values) & (values > 0)))
    if bad.size:
        row = int(bad[0])
        shown = "empty (NaN)" if np.isnan(values[row]) else f"{values[row]:g}"
        raise MosaicInputError(
            f"{source}: row {row + 1}: column '{name}' is {shown}; it must be a "
            f"positive finite number ({bad.size} bad row(s) in total)"
        )


# The physical range of each column (mosaic.limits), the ranges `law predict` takes: a fit
# row above them (1e300 parameters, a loss of 1e6 nats) or a G below 1 (Eq. 8: d_expert
# = d_ff / G is never wider than the dense FFN) is a typo, not a run; so is a model of
# fewer than 1,000 parameters (counts in billions: a trial's n_total 0.057 was fitted, and
# `law predict` then refused the law's own range). Below the token floor a run is merely
# tiny (a test ladder trains on 512 tokens): fitted as given.
COLUMN_RANGES = {"n_total": "n_params", "n_active": "n_params", "tokens": "tokens",
                 "unique_tokens": "tokens", "split_factor": "split_factor", "loss": "loss"}
FLOORED_COLUMNS = ("split_factor", "n_total", "n_active")
# Fewer tokens per parameter than any run trains on: tokens and parameters in different
# units (a trial's tokens in billions beside raw parameter counts: 1e-9 tokens per
# parameter, fitted without a word). The smallest real ratio is orders above it (a
# test ladder's 512 tokens on its ~1e5 parameters: 5e-3).
MIN_TOKENS_PER_PARAM = 1e-4


def _check_range(name: str, values: np.ndarray, source: str) -> None:
    limits = LIMITS[COLUMN_RANGES[name]]
    floored = name in FLOORED_COLUMNS
    low = limits.low if floored else -np.inf
    bad = np.flatnonzero((values < low) | (values > limits.high))
    if bad.size:
        row = int(bad[0])
        allowed = limits.describe() if floored else f"at most {limits.high:g}"
        raise MosaicInputError(
            f"{source}: row {row + 1}: column '{name}' is {values[row]:g}; allowed "
            f"{allowed} ({limits.why}; {bad.size} bad row(s) in total)"
            + ("; counts are plain numbers (7e9, not 7 in billions)"
               if name in ("n_total", "n_active") and values[row] < limits.low else ""))


def _check_units(tokens: np.ndarray, n_total: np.ndarray, source: str) -> None:
    """Refuse rows with fewer than MIN_TOKENS_PER_PARAM tokens per parameter."""
    bad = np.flatnonzero(tokens < MIN_TOKENS_PER_PARAM * n_total)
    if bad.size:
        row = int(bad[0])
        raise MosaicInputError(
            f"{source}: row {row + 1}: tokens {tokens[row]:g} for n_total {n_total[row]:g} "
            f"is {tokens[row] / n_total[row]:.3g} tokens per parameter, below any run's "
            f"{MIN_TOKENS_PER_PARAM:g}: are tokens and parameters in the same units (plain "
            f"counts, not billions)? ({bad.size} such row(s))")


# Column names run tables often use for the documented ones (a trial's table had params,
# active_params and granularity, and learnt the names one error at a time)
COLUMN_SYNONYMS = {
    "n_total": ("params", "parameters", "n_params", "model_size", "total_params", "N"),
    "n_active": ("active_params", "n_act", "activated_params", "active_parameters"),
    "tokens": ("D", "train_tokens", "num_tokens", "training_tokens", "n_tokens"),
    "split_factor": ("granularity", "G"),
    "loss": ("final_loss", "val_loss", "eval_loss", "validation_loss"),
}


def check_columns(columns: Sequence[str], form: LawForm, source: str) -> None:
    """One line naming every column ``form`` needs that the table lacks, and the table's
    columns that look like them."""
    present = set(columns)
    needed = [*REQUIRED_COLUMNS]
    if "active_fraction" in form.features and not {"n_active", "sparsity"} & present:
        needed.append("n_active or sparsity")
    if "split_factor" in form.features:
        needed.append("split_factor")
    missing = [name for name in needed if name not in present]
    if not missing:
        return
    renames = [f"{other} -> {name.split()[0]}" for name in missing
               for other in COLUMN_SYNONYMS.get(name.split()[0], ()) if other in present]
    raise MosaicInputError(
        f"{source}: form '{form.name}' needs column(s) {missing}; found {list(columns)}"
        + (f"; rename {', '.join(renames)}" if renames else "")
        + _missing_columns_hint(missing))


def _missing_columns_hint(missing: Sequence[str]) -> str:
    """What to do about the missing sparsity and split-factor columns: --form per-g fits runs
    without a G column, not runs without a sparsity (it was suggested for Epoch's dense
    table, and then refused it)."""
    if "n_active or sparsity" in missing:
        return ("; dense runs fit --form chinchilla; MoE runs need each run's n_active"
                + (" and its G = d_ff / d_expert as split_factor"
                   if "split_factor" in missing else ""))
    if "split_factor" in missing:
        return "; add each run's G = d_ff / d_expert as split_factor, or fit --form per-g"
    return ""


@dataclass(frozen=True)
class RunData:
    """Validated run data as float arrays (SI counts; rows numbered from 1 in errors)."""

    n_total: np.ndarray
    tokens: np.ndarray
    loss: np.ndarray
    n_active: np.ndarray | None = None
    split_factor: np.ndarray | None = None
    extra: Mapping[str, np.ndarray] = field(default_factory=dict)
    source: str = "run data"

    def __post_init__(self) -> None:
        for name in ("n_total", "tokens", "loss", "n_active", "split_factor"):
            values = getattr(self, name)
            if values is not None:
                object.__setattr__(self, name, _as_column(values))
        object.__setattr__(
            self, "extra", MappingProxyType({k: _as_column(v) for k, v in self.extra.items()})
        )
        columns = {"n_total": self.n_total, "tokens": self.tokens, "loss": self.loss}
        columns |= {"n_active": self.n_active, "split_factor": self.split_factor}
        columns = {k: v for k, v in (columns | dict(self.extra)).items() if v is not None}
        lengths = {k: v.size for k, v in columns.items()}
        if len(set(lengths.values())) != 1:
            raise MosaicInputError(f"{self.source}: columns differ in length: {lengths}")
        if self.n_total.size == 0:
            raise MosaicInputError(f"{self.source}: no runs (the table is empty)")
        for name, values in columns.items():
            # a row that does not record its vocabulary is unknown, not wrong (a ladder
            # resumed across the column's introduction mixes both)
            _check_positive(name, np.where(np.isnan(values), 1.0, values)
                            if name in UNRECORDED_OK else values, self.source)
            if name in COLUMN_RANGES:
                _check_range(name, values, self.source)
        _check_units(self.tokens, self.n_total, self.source)
        vocabularies = _known_values(self.extra.get("vocab"))
        if len(vocabularies) > 1:
            raise MosaicInputError(
                f"{self.source}: runs of {len(vocabularies)} vocabularies "
                f"({', '.join(f'{v:g}' for v in vocabularies)}): their losses are in nats per "
                "token of different tokenizers; fit one vocabulary at a time")
        if self.n_active is not None:
            over = np.flatnonzero(self.n_active > self.n_total)
            if over.size:
                row = int(over[0])
                raise MosaicInputError(
                    f"{self.source}: row {row + 1}: n_active {self.n_active[row]:g} "
                    f"exceeds n_total {self.n_total[row]:g}"
                )

    @classmethod
    def from_frame(cls, frame: pd.DataFrame, source: str = "run data") -> RunData:
        """Build from a DataFrame with the documented column names."""
        missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
        if missing:
            from mosaic.law.datasets import dataset_hint  # (it builds on this module)

            hint = dataset_hint(frame.columns)
            raise MosaicInputError(
                f"{source}: missing required column(s) {missing}; found {list(frame.columns)}"
                + (f"; {hint}" if hint else "")
            )
        if frame.empty:
            raise MosaicInputError(f"{source}: no runs (the table has a header but no rows)")
        columns = {}
        for name in REQUIRED_COLUMNS + OPTIONAL_COLUMNS:
            if name in frame.columns:
                raw = frame[name]
                numeric = float_column(raw)
                not_number = np.flatnonzero(np.isnan(numeric) & raw.notna().to_numpy())
                if not_number.size:
                    row = int(not_number[0])
                    raise MosaicInputError(
                        f"{source}: row {row + 1}: column '{name}' is {raw.iloc[row]!r}, "
                        "which is not a number"
                    )
                if name in UNRECORDED_OK and np.isnan(numeric).all():
                    continue  # written empty by a tool that did not know it (older runs)
                columns[name] = numeric
        n_active = columns.pop("n_active", None)
        sparsity = columns.pop("sparsity", None)
        if sparsity is not None:
            bad = np.flatnonzero(~((sparsity >= 0) & (sparsity < 1)))
            if bad.size:
                row = int(bad[0])
                raise MosaicInputError(
                    f"{source}: row {row + 1}: sparsity is {sparsity[row]:g}; allowed: 0 <= S < 1"
                )
            from_sparsity = (1.0 - sparsity) * columns["n_total"]
            if n_active is None:
                n_active = from_sparsity
            else:
                mismatch = np.flatnonzero(
                    np.abs(stated_sparsity(n_active, columns["n_total"]) - sparsity)
                    > SPARSITY_AGREEMENT_TOL
                )
                if mismatch.size:
                    row = int(mismatch[0])
                    raise MosaicInputError(
                        f"{source}: row {row + 1}: sparsity {sparsity[row]:g} disagrees with "
                        f"1 - n_active/n_total = "
                        f"{stated_sparsity(n_active[row], columns['n_total'][row]):g}"
                    )
        return cls(
            n_total=columns.pop("n_total"),
            tokens=columns.pop("tokens"),
            loss=columns.pop("loss"),
            n_active=n_active,
            split_factor=columns.pop("split_factor", None),
            extra=columns,
            source=source,
        )

    @property
    def recorded_vocab(self) -> np.ndarray | None:
        """The one vocabulary the runs that record it share (a refused table mixes several),
        as a column for the law's fitted range; None when no run records it."""
        known = _known_values(self.extra.get("vocab"))
        return np.array(known) if known else None

    @property
    def n_runs(self) -> int:
        return int(self.n_total.size)

    @property
    def active_params(self) -> np.ndarray:
        """N_act per run; for dense data (no n_active/sparsity column) N_tot."""
        return self.n_total if self.n_active is None else self.n_active

    @property
    def sparsity(self) -> np.ndarray | None:
        """S = 1 - N_act / N_tot (Sec. 3.4), or None for dense data."""
        return None if self.n_active is None else stated_sparsity(self.n_active, self.n_total)

    @property
    def strata(self) -> np.ndarray:
        """Split factor per run (1 where the data has no split_factor column)."""
        return np.ones(self.n_runs) if self.split_factor is None else self.split_factor

    def with_split_factor(self, split_factor: float) -> RunData:
        """The runs of one G stratum; an error names the strata present if none match."""
        rows = self.strata == split_factor
        if not rows.any() and self.split_factor is None:
            raise MosaicInputError(
                f"{self.source}: no split_factor column (every run counts as G = 1): "
                f"--split-factor {split_factor:g} selects none; drop it, or add the column")
        if not rows.any():
            raise MosaicInputError(
                f"{self.source}: no runs with split_factor {split_factor:g}; "
                f"present: {np.unique(self.strata).tolist()}"
            )
        return self.subset(rows)

    def subset(self, mask: np.ndarray) -> RunData:
        """Rows where ``mask`` is True (boolean mask or integer indices, repeats allowed)."""
        return RunData(
            n_total=self.n_total[mask],
            tokens=self.tokens[mask],
            loss=self.loss[mask],
            n_active=_take(self.n_active, mask),
            split_factor=_take(self.split_factor, mask),
            extra={k: v[mask] for k, v in self.extra.items()},
            source=self.source,
        )

    def log_features(self, form: LawForm) -> np.ndarray:
        """(n, F) log-features in ``form.features`` order; clear error if a column is missing."""
        logs = {"n_total": np.log(self.n_total), "tokens": np.log(self.tokens)}
        if self.n_active is not None:
            logs["active_fraction"] = np.log(self.n_active) - np.log(self.n_total)
        if self.split_factor is not None:
            logs["split_factor"] = np.log(self.split_factor)
        column_for = {"active_fraction": "n_active or sparsity", "split_factor": "split_factor"}
        missing = [column_for[f] for f in form.features if f not in logs]
        if missing:
            raise MosaicInputError(
                f"{self.source}: form '{form.name}' needs column(s) {missing}, which are absent"
            )
        return np.column_stack([logs[f] for f in form.features])


def read_run_table(path: str | Path) -> pd.DataFrame:
    """The rows of a run data file (.csv or .parquet) as a DataFrame, unvalidated: for a
    caller that also reads columns RunData drops (a ladder's names and router health)."""
    from mosaic.table_files import read_table

    where = Path(path)
    if where.is_dir() or where.name == "result.json":  # a `mosaic train` output (a trial)
        raise MosaicInputError(
            f"run data file {path}: {'a folder' if where.is_dir() else 'one training run'}; "
            "the fitter reads a table of runs (.csv/.parquet, docs/law.md): `mosaic ladder "
            "run` writes one (FOLDER/runs.csv, fitted by `mosaic ladder fit FOLDER`), and "
            "`mosaic ladder collect RUN_FOLDERS... --out runs.csv` gathers separate "
            "`mosaic train` runs into one")
    if str(path).lower().endswith(".csv.gz"):  # Clark et al.'s file as published
        raise MosaicInputError(f"run data file {path}: compressed; decompress it, or for "
                               "Clark et al.'s curves.csv.gz use `mosaic law convert clark "
                               "FILE --out runs.csv`")
    return read_table(path, "run data file", allow_no_rows=True)


def load_run_data(path: str | Path) -> RunData:
    """Read run data from a .csv or .parquet file and validate it."""
    return RunData.from_frame(read_run_table(path), source=str(path))
