"""What to measure: the shapes of a job (derived by the performance model itself), a
preset, or a shapes file.

A job's shapes are not re-derived here: the model is run once with *recording* measured
tables (:class:`RecordingGemmTable` and friends) that note every GEMM, grouped GEMM and
collective the model asks a table about and answer "not covered", so the list is exactly
what ``mosaic.perf`` prices for that job and layout. The LM-head GEMM (priced without a
table, ``perf.step_time._vocab_stage_times``) and the attention and streaming shapes are
added from the same perf helpers (``tokens_per_rank``, ``attention_widths``).
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from mosaic.errors import MosaicInputError
from mosaic.limits import is_number
from mosaic.schema_validation import load_yaml_mapping

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
PAPER_JOB = EXAMPLES / "appendix_e.yaml"  # the paper's Appendix E listing (Listing 1)


@dataclass(frozen=True, order=True)
class GemmShape:
    """C[m, n] = A[m, k] · B[k, n] as the forward pass runs it."""

    m: int
    n: int
    k: int
    source: str = ""


@dataclass(frozen=True, order=True)
class GroupedShape:
    """``groups`` expert GEMMs of ``m_per_group`` (mean) tokens each: [m, k] x [k, n]."""

    groups: int
    m_per_group: int
    n: int
    k: int
    source: str = ""


@dataclass(frozen=True, order=True)
class AttentionShape:
    """Causal self-attention of one micro-batch on one GPU (heads after TP)."""

    batch: int
    heads: int
    kv_heads: int
    seq: int
    head_dim: int
    source: str = ""


@dataclass(frozen=True, order=True)
class StreamShape:
    """Element-wise kernels of ``tokens`` x ``d_model`` activations, an FFN of ``width``
    and a vocabulary shard of ``vocab`` logits per token; the norms and residual adds run
    on ``norm_tokens`` (None: ``tokens``), a rank's sequence shard under sequence
    parallelism (perf.shapes.sequence_shard_tokens)."""

    tokens: int
    d_model: int
    width: int
    vocab: int
    source: str = ""
    norm_tokens: int | None = None

    @property
    def residual_tokens(self) -> int:
        """Tokens the norms and residual adds see."""
        return self.tokens if self.norm_tokens is None else self.norm_tokens


@dataclass(frozen=True, order=True)
class CollectiveUse:
    """A collective a job runs: kind, group size, message bytes (nccl-tests sizes) and the
    group members per scale-up domain the model placed it with."""

    collective: str
    group_size: int
    message_bytes: int
    source: str = ""
    ranks_per_domain: int = 0


@dataclass(frozen=True)
class BenchShapes:
    """Everything one bench run measures, before sizes are capped by the options."""

    name: str
    gemm: tuple[GemmShape, ...] = ()
    peak_sizes: tuple[int, ...] = ()
    grouped: tuple[GroupedShape, ...] = ()
    attention: tuple[AttentionShape, ...] = ()
    streams: tuple[StreamShape, ...] = ()
    optimizer_params: tuple[int, ...] = ()
    collective_uses: tuple[CollectiveUse, ...] = ()
    notes: tuple[str, ...] = field(default=(), compare=False)


# --------------------------------------------------------------------------------------
# Presets
# --------------------------------------------------------------------------------------

TINY = BenchShapes(
    name="tiny",
    gemm=(GemmShape(64, 96, 128, "tiny"), GemmShape(128, 64, 64, "tiny"),
          GemmShape(128, 128, 256, "tiny")),
    peak_sizes=(64, 128, 192),
    grouped=(GroupedShape(4, 32, 64, 48, "tiny"),),
    attention=(AttentionShape(1, 4, 2, 64, 32, "tiny"),),
    streams=(StreamShape(64, 64, 96, 512, "tiny"),),
    optimizer_params=(1 << 12, 1 << 14),
)
"""A few-second CPU sweep for tests and dry checks."""

GENERIC = BenchShapes(
    name="generic",
    gemm=tuple(GemmShape(m, n, k, "generic") for m in (2048, 8192, 16384)
               for n in (1024, 4096, 16384) for k in (1024, 4096, 16384)),
    peak_sizes=(2048, 4096, 8192, 12288, 16384),
    grouped=tuple(GroupedShape(g, m, 4096, 1536, "generic") for g in (8, 32)
                  for m in (128, 512, 2048)),
    attention=tuple(AttentionShape(1, 32, 8, s, 128, "generic") for s in (2048, 4096, 8192)),
    streams=(StreamShape(8192, 4096, 14336, 32768, "generic"),),
    optimizer_params=(1 << 24, 1 << 26, 1 << 28),
)
"""A device-agnostic grid around LLM training shapes (no job given)."""


def _int_shapes(arrays: list[np.ndarray]) -> list[tuple[int, ...]]:
    stacked = np.stack([np.rint(a.ravel()).astype(np.int64) for a in arrays], axis=1)
    return [tuple(int(v) for v in row) for row in np.unique(stacked, axis=0) if min(row) >= 1]


# --------------------------------------------------------------------------------------
# Recording tables: the performance model's own queries
# --------------------------------------------------------------------------------------


def _recorders() -> tuple[Any, Any, Any]:
    from mosaic.perf.collectives import BusBandwidthTable
    from mosaic.perf.kernels import GemmTable, GroupedGemmTable

    class RecordingGemmTable(GemmTable):
        def __init__(self) -> None:
            self.shapes: set[tuple[int, ...]] = set()

        def time_s(self, m: npt.ArrayLike, n: npt.ArrayLike, k: npt.ArrayLike,
                   dtype: str = "bf16") -> np.ndarray:
            arrays = np.broadcast_arrays(*(np.asarray(x, float) for x in (m, n, k)))
            self.shapes.update(_int_shapes(list(arrays)))
            return np.full(arrays[0].shape, np.nan)

    class RecordingGroupedTable(GroupedGemmTable):
        def __init__(self) -> None:
            self.shapes: set[tuple[int, ...]] = set()

        def time_s(self, groups: npt.ArrayLike, m_per_group: npt.ArrayLike,
                   n: npt.ArrayLike, k: npt.ArrayLike, dtype: str = "bf16") -> np.ndarray:
            arrays = np.broadcast_arrays(*(np.asarray(x, float)
                                           for x in (groups, m_per_group, n, k)))
            self.shapes.update(_int_shapes(list(arrays)))
            return np.full(arrays[0].shape, np.nan)

    class RecordingBusTable(BusBandwidthTable):
        def __init__(self) -> None:
            self.uses: set[tuple[str, int, int, int]] = set()

        def bus_bw_bytes_per_s(self, collective: str, n: npt.ArrayLike,
                               message_bytes: npt.ArrayLike, inside_domain: npt.ArrayLike,
                               ranks_per_domain: npt.ArrayLike) -> np.ndarray:
            n_a, size, per_domain = np.broadcast_arrays(
                np.asarray(n, float), np.asarray(message_bytes, float),
                np.asarray(ranks_per_domain, float))
            for g, b, k in _int_shapes([n_a, size, per_domain]):
                if g > 1:
                    self.uses.add((collective, g, b, k))
            return np.full(np.broadcast_shapes(n_a.shape, np.shape(inside_domain)), np.nan)

    return RecordingGemmTable(), RecordingGroupedTable(), RecordingBusTable()


# A CPU's BLAS reaches its sustained rate on blocks of a few hundred (its caches hold a few
# MiB per core), and a square fp32 GEMM of 4096 already takes about a second at the 0.1-0.2
# TFLOP/s of a server socket; the GPU sweep's 16384 takes a minute a call there (a trial:
# five minutes of bench for a 125k-parameter job). An AdamW step over 2^24 parameters moves
# some 300 MB, past any CPU's last-level cache, so larger ones add time, not information.
# bf16 on a CPU without native bf16 instructions is some 50x slower (docs/bench.md).
CPU_MAX_PEAK_SIZE = 4096
CPU_MAX_OPTIMIZER_PARAMS = 1 << 24


def _capped(sizes: tuple[int, ...], cap: int) -> tuple[int, ...]:
    """The sizes up to ``cap``; the smallest one where none is."""
    return tuple(size for size in sizes if size <= cap) or tuple(sorted(sizes))[:1]


def sized_for_device(shapes: BenchShapes, device_type: str,
                     families: tuple[str, ...] = ("gemm", "kernels")) -> BenchShapes:
    """``shapes`` with the peak sweep and the optimizer sizes a ``device_type`` needs: a
    CPU's stop at :data:`CPU_MAX_PEAK_SIZE` and :data:`CPU_MAX_OPTIMIZER_PARAMS` (the
    smallest of each kept), said in a note naming only what ``families`` measure (the peak
    sweep is gemm's, the optimizer step kernels'; a trial read the note under te-grouped);
    a GPU's as given."""
    if device_type != "cpu":
        return shapes
    peak = _capped(shapes.peak_sizes, CPU_MAX_PEAK_SIZE)
    optimizer = _capped(shapes.optimizer_params, CPU_MAX_OPTIMIZER_PARAMS)
    # family -> (its cap, the sizes the cap leaves out)
    capped = {"gemm": (f"the peak sweep stops at {CPU_MAX_PEAK_SIZE}",
                       [f"peak {s}" for s in shapes.peak_sizes if s not in peak]),
              "kernels": (f"the optimizer at {CPU_MAX_OPTIMIZER_PARAMS:,} parameters",
                          [f"adamw {p:,} params" for p in shapes.optimizer_params
                           if p not in optimizer])}
    if not any(dropped for _, dropped in capped.values()):
        return shapes
    ours = [capped[family] for family in capped if family in families]
    shown = [item for _, dropped in ours for item in dropped]
    notes = (shapes.notes if not shown else (
        *shapes.notes, f"on a CPU {' and '.join(cap for cap, _ in ours)} (not measured: "
                       f"{', '.join(shown)})"))
    return replace(shapes, peak_sizes=peak, optimizer_params=optimizer, notes=notes)


def shapes_from_model(workload: Any, plan: Any, cluster: Any, name: str,
                      usable_memory_fraction: float = 1.0) -> BenchShapes:
    """The shapes ``mosaic.perf`` prices for ``workload`` on ``cluster`` with ``plan``
    (a length-1 :class:`~mosaic.perf.plan.ParallelPlans`)."""
    from mosaic.perf.calibration import default_calibration
    from mosaic.perf.machine import MeasuredTables, machine_for
    from mosaic.perf.shapes import attention_widths, sequence_shard_tokens, tokens_per_rank
    from mosaic.perf.shapes import vocab_shard as vocab_shard_of
    from mosaic.perf.step_time import predict_step

    gemm, grouped, bus = _recorders()
    tables = MeasuredTables(gemm=gemm, grouped_gemm=grouped, collectives=bus)
    machine = machine_for(cluster, workload.precision, usable_memory_fraction, tables)
    predict_step(workload, plan, machine, default_calibration())

    geometry = workload.geometry
    tp, cp = int(plan.tp[0]), int(plan.cp[0])
    tokens = int(tokens_per_rank(workload, plan)[0])
    vocab_shard = int(np.ceil(vocab_shard_of(workload, plan)[0]))  # whole entries per rank
    gemm_shapes = {GemmShape(m, n, k, "model") for m, n, k in gemm.shapes}
    gemm_shapes.add(GemmShape(tokens, vocab_shard, geometry.d_model, "lm_head"))
    widths = attention_widths(workload.geometry)
    attention = AttentionShape(
        batch=int(plan.micro_batch[0]), heads=max(geometry.heads // tp, 1),
        kv_heads=max(getattr(geometry, "kv_heads", geometry.heads) // tp, 1),
        seq=workload.seq_len // cp, head_dim=widths.head_dim, source="model")
    width = geometry.moe.expert_ffn if geometry.moe else geometry.ffn // tp
    streams = StreamShape(tokens, geometry.d_model, width, vocab_shard, "model",
                          norm_tokens=int(sequence_shard_tokens(workload, plan)[0]))
    notes = []
    if cp > 1:
        notes.append(f"cp={cp}: attention timed on the local {workload.seq_len // cp}-token "
                     "chunk (ring exchange is a collective)")
    return BenchShapes(
        name=name,
        gemm=tuple(sorted(gemm_shapes)),
        peak_sizes=GENERIC.peak_sizes,
        grouped=tuple(sorted(GroupedShape(*s, source="model") for s in grouped.shapes)),
        attention=(attention,),
        streams=(streams,),
        optimizer_params=GENERIC.optimizer_params,
        collective_uses=tuple(sorted(CollectiveUse(c, g, b, "model", k)
                                     for c, g, b, k in bus.uses)),
        notes=tuple(notes),
    )


# --------------------------------------------------------------------------------------
# Shapes files
# --------------------------------------------------------------------------------------

_SECTIONS: dict[str, type] = {"gemm": GemmShape, "grouped": GroupedShape,
                              "attention": AttentionShape, "streams": StreamShape}


def _size(value: Any, where: str) -> int:
    """A size as the YAML file wrote it: an integer, or a whole number such as 1e6; the text
    '3_2' (which int() would read as 32) or a fraction is refused."""
    if not is_number(value) or (isinstance(value, float) and not value.is_integer()):
        raise MosaicInputError(f"{where}: {value!r} is not a whole number")
    return int(value)


def _entries(document: dict[str, Any], key: str, path: Path, what: str) -> list[Any]:
    """The list under ``key`` (absent or null: empty); a scalar or mapping there is named in
    one line (``streams: ''`` or ``peak_sizes: 4096`` ended in a TypeError; a fuzz trial)."""
    value = document.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise MosaicInputError(f"{path}: {key} must be a list of {what}, got {value!r:.60}")
    return value


def shapes_from_file(path: Path) -> BenchShapes:
    """A YAML file with optional sections gemm, grouped, attention, streams (lists of
    mappings with the fields of the shape classes), peak_sizes and optimizer_params."""
    document = load_yaml_mapping(path)  # the shared reader: bounded, YAML 1.2 numbers
    allowed = {*_SECTIONS, "peak_sizes", "optimizer_params", "name"}
    unknown = set(document) - allowed
    if unknown:
        raise MosaicInputError(f"{path}: unknown section(s) {sorted(unknown)}; "
                               f"allowed: {', '.join(sorted(allowed))}")
    sections: dict[str, Any] = {}
    for section, cls in _SECTIONS.items():
        items = []
        names = [f for f in cls.__dataclass_fields__ if f != "source"]  # the sizes
        required = [f for f, spec in cls.__dataclass_fields__.items()
                    if spec.default is MISSING and spec.default_factory is MISSING]
        for i, entry in enumerate(_entries(document, section, path, "mappings of sizes")):
            where = f"{path}: {section}[{i}]"
            if not isinstance(entry, dict):
                raise MosaicInputError(f"{where}: a mapping of sizes, got {entry!r}")
            missing = [f for f in required if f not in entry]
            unknown_fields = sorted(set(entry) - set(cls.__dataclass_fields__))
            if missing or unknown_fields:  # not the dataclass's own TypeError wording
                raise MosaicInputError(
                    f"{where}: " + "; ".join(
                        ([f"missing {', '.join(missing)}"] if missing else [])
                        + ([f"unknown {', '.join(unknown_fields)}"] if unknown_fields
                           else [])) + f"; fields: {', '.join(names)}")
            shape = cls(**{k: (str(v) if k == "source" else _size(v, f"{where}: {k}"))
                           for k, v in entry.items()})
            # an optional size left out (a stream's norm_tokens) is None, not a size (a
            # review: a streams section crashed the comparison)
            if min(v for f in names if (v := getattr(shape, f)) is not None) < 1:
                raise MosaicInputError(f"{path}: {section}[{i}]: every size must be >= 1")
            items.append(shape)
        sections[section] = tuple(items)
    for key in ("peak_sizes", "optimizer_params"):
        values = tuple(_size(v, f"{path}: {key}")
                       for v in _entries(document, key, path, "integers >= 1"))
        if any(v < 1 for v in values):
            raise MosaicInputError(f"{path}: {key} must be integers >= 1")
        sections[key] = values
    if not any(sections.values()):
        raise MosaicInputError(f"{path}: no shapes to measure; give at least one entry in "
                               f"{', '.join(_SECTIONS)}, peak_sizes or optimizer_params")
    return BenchShapes(name=str(document.get("name", path.stem)), **sections)
