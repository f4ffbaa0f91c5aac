"""Typed configuration of one training job (``mosaic train JOB.yaml``) and its defaults.

Every default is the paper's recipe (Appendix A) unless its comment says otherwise. The
schema is validated once when a file enters (one-line errors naming the field); nothing
here imports torch, so the planner can read and check a job without the ``train`` extra.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, model_validator

from mosaic.arch.geometry import AttentionKind, Geometry, MoEConfig, NormKind
from mosaic.arch.ladder import (
    LADDER_FFN_RATIO,
    LADDER_HEAD_DIM,
    LADDER_KV_HEADS,
    LADDER_MULTIPLIER,
    PAPER_DENSE_LAYERS,
    PAPER_ROUTER,
    PAPER_SHARED_EXPERTS,
    expert_width,
    ladder_geometry,
    ladder_kv_heads,
)
from mosaic.config.blocks import training_steps
from mosaic.config.convert import geometry_from_model
from mosaic.config.model_schema import model_block_from_document
from mosaic.errors import MosaicInputError, MosaicWarning
from mosaic.limits import LIMITS
from mosaic.output_kinds import output_command
from mosaic.schema_validation import NoBooleanNumbers, load_yaml_mapping, validate_mapping
from mosaic.train.schedule import WSDSchedule

BYTE_VOCAB = 256  # byte-level fallback: one token per byte
# Geometry features of other model families (mosaic.arch) that the paper's recipe lacks.
_UNSUPPORTED_FEATURES = ("expert_bias", "router_bias", "shared_expert_gate", "qk_norm",
                         "qkv_bias", "output_bias", "lm_head_bias", "attention_sinks",
                         "mtp_layers", "sliding_window")


class _Strict(NoBooleanNumbers):
    # no infinities or NaN in any number of a job (a tokens: .inf overflowed the step count,
    # a mu_b: .inf trained NaN router biases to the end)
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


# a ladder seed, bounded as every command bounds it (mosaic.limits)
LadderSeed = Annotated[int, Field(gt=0, le=LIMITS["ladder_q"].high)]


class LadderModel(_Strict):
    """A ladder rung (Sec. 7.1): seed q and the MoE axes; ``head_dim`` < 128 scales it down.

    With the paper's head width (128) and 8 KV heads the geometry is exactly
    :func:`mosaic.arch.ladder_geometry`; a smaller ``head_dim`` keeps the ladder's
    co-scaling (L = heads = 4q, d = heads·d_head, d_ff = 2.5·d) at a width a CPU can train.
    Where the KV heads do not divide the query heads (q = 3: 12 heads) GQA uses
    gcd(heads, kv_heads) KV heads.
    """

    q: LadderSeed = Field(description="ladder seed q")
    experts: int | None = Field(default=None, gt=0, description="routed experts E; None: dense")
    top_k: int | None = Field(default=None, gt=0, description="routed experts per token K")
    split_factor: int = Field(default=1, gt=0, description="G = d_ff / d_expert (Eq. 8)")
    head_dim: int = Field(default=LADDER_HEAD_DIM, gt=0, description="paper: 128")
    kv_heads: int = Field(default=LADDER_KV_HEADS, gt=0, description="paper: 8")
    gated_attention: bool = Field(default=False, description="head-wise sigmoid gate (A.1)")

    @model_validator(mode="after")
    def _top_k_within_experts(self) -> LadderModel:
        if self.experts is not None and self.top_k is not None and self.top_k > self.experts:
            raise ValueError(f"ladder.top_k ({self.top_k}) must not exceed ladder.experts "
                             f"({self.experts}): each token picks top_k distinct experts")
        return self


def ladder_rung_geometry(rung: LadderModel, vocab: int) -> Geometry:
    """Geometry of a (possibly scaled-down) ladder rung with vocabulary ``vocab``."""
    heads = LADDER_MULTIPLIER * rung.q
    if (rung.head_dim, rung.kv_heads) == (LADDER_HEAD_DIM, LADDER_KV_HEADS):
        return ladder_geometry(rung.q, rung.experts, rung.top_k, rung.split_factor,
                               vocab=vocab, gated_attention=rung.gated_attention)
    kv_heads = int(ladder_kv_heads(heads, rung.kv_heads))  # GQA needs kv_heads | heads
    if kv_heads != rung.kv_heads and "kv_heads" in rung.model_fields_set:
        warnings.warn(f"ladder.kv_heads {rung.kv_heads} does not divide the {heads} query "
                      f"heads of q={rung.q}: the rung uses gcd = {kv_heads} KV heads",
                      MosaicWarning, stacklevel=2)
    d_model = heads * rung.head_dim
    ffn = round(LADDER_FFN_RATIO * d_model)
    moe = None
    if rung.experts is not None:
        if rung.top_k is None:
            raise MosaicInputError("model.ladder.top_k is required when experts is given")
        moe = MoEConfig(experts=rung.experts, top_k=rung.top_k,
                        expert_ffn=expert_width(ffn, rung.split_factor),
                        shared_experts=PAPER_SHARED_EXPERTS, dense_layers=PAPER_DENSE_LAYERS,
                        router=PAPER_ROUTER)
    return Geometry(layers=LADDER_MULTIPLIER * rung.q, d_model=d_model, heads=heads,
                    kv_heads=kv_heads, head_dim=rung.head_dim, ffn=ffn, vocab=vocab, glu=True,
                    tied_embeddings=False, attention=AttentionKind.GQA,
                    gated_attention=rung.gated_attention, norm=NormKind.LAYERNORM, moe=moe)


class RoutingConfig(_Strict):
    """Routing and balancing (Algorithm 1, Appendix A.3); defaults are the paper's."""

    kind: Literal["lflb_gumbel", "softmax_topk"] = Field(
        default="lflb_gumbel",
        description="Algorithm 1, or the plain top-K softmax + load-balancing-loss baseline")
    tau: float = Field(default=0.01, ge=0, description="Gumbel temperature (A.3: 0.01)")
    rho: int = Field(default=12, gt=0, description="proposal size M = min(rho*K, E) (A.3: 12)")
    mu_b: float = Field(default=1e-3, ge=0, description="bias-controller step (Eq. 19: 1e-3)")
    eps: float = Field(default=1e-4, gt=0, description="Eq. 19 epsilon (1e-4)")
    router_norm: float | None = Field(
        default=1.0, gt=0, description="row-norm target c_r (A.3: 1.0); None: no RowNorm")
    center_noise: bool = Field(default=True, description="centre Gumbel noise per expert")
    z_loss_coef: float = Field(default=1e-4, ge=0, description="router z-loss (Eq. 23: 1e-4)")
    seq_aux_coef: float = Field(
        default=1e-3, ge=0, description="DeepSeek-V3 sequence-level balance loss (A.3: 1e-3)")
    lbl_coef: float = Field(
        default=1e-2, ge=0,
        description="baseline only: Switch load-balancing loss (Fedus et al., 2022: 1e-2)")


class OptimConfig(_Strict):
    """AdamW and the WSD schedule (Appendix A.2)."""

    lr: float | None = Field(default=None, gt=0, description="peak lr; None: Eq. 17")
    beta1: float = Field(default=0.9, ge=0, lt=1)
    beta2: float = Field(default=0.999, ge=0, lt=1)
    eps: float = Field(default=1e-14, gt=0, description="A.2: 1e-14")
    weight_decay: float = Field(default=0.1, ge=0, description="A.2: 0.1")
    grad_clip: float | None = Field(default=None, gt=0, description="A.2: no clipping")
    warmup_tokens: float = Field(default=1e8, ge=0, description="A.2: about 1e8 tokens")
    decay_fraction: float = Field(default=0.2, ge=0, le=1,
                                  description="linear decay to 0 over the last 20% of steps")


class DataConfig(_Strict):
    """Training tokens: a flat memory-mapped token file, or the bytes of any file."""

    path: Path | list[Path] | None = Field(
        default=None,
        description="token file (.bin), or for format 'bytes' any file(s), concatenated")
    format: Literal["bytes", "uint16", "uint32", "synthetic"] = Field(
        default="bytes", description="uint16/uint32: flat little-endian token ids (nanoGPT); "
                                     "synthetic: seeded uniform ids, for throughput only")
    vocab: int | None = Field(default=None, gt=0,
                              description="token-file vocabulary; default GPT-2's 50257")

    @model_validator(mode="after")
    def _path_given(self) -> DataConfig:
        if self.path is None and self.format != "synthetic":
            raise ValueError(f"data.path is required for format {self.format!r}")
        if self.path == []:  # every ladder rung failed on its 0 tokens (a fuzz trial)
            raise ValueError("data.path is an empty list; give a file path or a list of one "
                             "or more")
        if self.format == "bytes" and self.vocab not in (None, BYTE_VOCAB):
            raise ValueError(f"data.vocab {self.vocab} does not apply to format 'bytes', whose "
                             f"vocabulary is the {BYTE_VOCAB} byte values; leave it out, or "
                             "give a token file with format uint16/uint32")
        return self

    @property
    def paths(self) -> list[Path]:
        if self.path is None:
            return []
        return list(self.path) if isinstance(self.path, list) else [self.path]

    @property
    def vocab_size(self) -> int:
        if self.format == "bytes":
            return BYTE_VOCAB
        return self.vocab or 50257


class RunConfig(_Strict):
    """Batch, length, precision, logging and checkpointing of one run."""

    # bounded as every command bounds tokens (mosaic.limits): 1e30 trained "forever" at a
    # 2.8e-7 peak lr with only a repeated-data warning (a trial)
    tokens: float = Field(gt=0, le=LIMITS["tokens"].high,
                          description="training tokens D (rounded up to whole steps)")
    seq_len: int = Field(default=2048, gt=0, le=LIMITS["seq_len"].high,
                         description="A.2: T_seq = 2048")
    global_batch_seqs: int = Field(default=256, gt=0, le=LIMITS["global_batch"].high,
                                   description="sequences per step")
    micro_batch_seqs: int = Field(default=8, gt=0, le=LIMITS["micro_batch"].high,
                                  description="sequences per forward")
    seed: int = Field(default=0, ge=0)
    precision: Literal["auto", "bf16", "fp32"] = Field(
        default="auto", description="auto: bf16 autocast on CUDA (fp32 master), fp32 on CPU")
    device: Literal["auto", "cpu", "cuda"] = "auto"
    expert_parallel: int = Field(
        default=1, gt=0, description="expert-parallel degree ep under torchrun: each rank of "
                                     "a group of ep holds E/ep experts (all-to-all dispatch)")
    cpu_threads: int | None = Field(
        default=None, gt=0,
        description="torch intra-op threads on CPU; None: torch's default. 1 is fastest for "
                    "tiny models and on busy machines (OpenMP threads spin-wait)")
    expert_compute: Literal["auto", "grouped_mm", "loop"] = Field(
        default="auto", description="grouped GEMM where the device supports it, else a loop")
    log_every: int = Field(default=1, gt=0)
    checkpoint_every: int = Field(default=100, gt=0, description="steps between checkpoints")
    smoothing_beta: float = Field(default=0.9, ge=0, lt=1,
                                  description="EMA of the loss (bias-corrected)")
    device_name: str | None = Field(
        default=None, description="catalog device for MFU; default: detected CUDA device")
    achievable_flops_per_s: float | None = Field(
        default=None, gt=0, description="measured peak FLOP/s for a second MFU figure")
    bench_dir: Path | None = Field(
        default=None, description="a `mosaic bench gemm` output folder: its measured peak "
                                  "replaces achievable_flops_per_s")
    plot: bool = Field(default=False, description="write metrics.html (needs plotly)")
    memory_check: bool = Field(
        default=True, description="refuse (exit 2) a job whose estimated memory exceeds the "
                                  "device's free memory, before allocating it")

    @model_validator(mode="after")
    def _whole_micro_batches(self) -> RunConfig:
        # checked when the job is read: at the start of each run a grid's every rung failed
        # on it in turn (the processes' share is checked when they are known, trainer.py)
        if self.global_batch_seqs % self.micro_batch_seqs:
            raise ValueError(f"run.global_batch_seqs {self.global_batch_seqs} must be a "
                             f"multiple of run.micro_batch_seqs {self.micro_batch_seqs} (a "
                             "step is whole micro-batches)")
        return self


class TrainConfig(_Strict):
    """One training job: model geometry, routing, optimiser, data and run settings."""

    model: dict[str, Any] | None = Field(
        default=None, description="model block (docs/schema.md), moe nested as model.moe")
    moe: dict[str, Any] | None = Field(
        default=None, description="the paper listing's separate moe block (same as model.moe)")
    ladder: LadderModel | None = None
    routing: RoutingConfig = RoutingConfig()
    optim: OptimConfig = OptimConfig()
    data: DataConfig
    run: RunConfig

    @model_validator(mode="after")
    def _one_model(self) -> TrainConfig:
        if (self.model is None) == (self.ladder is None):
            raise ValueError("give exactly one of 'model' (with optional 'moe') or 'ladder'")
        if self.ladder is not None and self.moe is not None:
            raise ValueError("'moe' goes with 'model'; a ladder rung sets experts itself")
        return self

    def geometry(self, where: str = "config") -> Geometry:
        """The model's geometry (vocabulary from the data for ladder rungs); a geometry the
        trainer cannot build is a one-line MosaicInputError starting with ``where``."""
        try:
            return self._geometry(where)
        except MosaicInputError as exc:
            raise MosaicInputError(naming(where, exc)) from None

    def _geometry(self, where: str) -> Geometry:
        if self.ladder is not None:
            return ladder_rung_geometry(self.ladder, self.data.vocab_size)
        document = {"model": self.model} | ({} if self.moe is None else {"moe": self.moe})
        model = model_block_from_document(document, where)
        if model.moe is not None and model.moe.capacity_factor is not None:
            raise MosaicInputError(
                f"model.moe.capacity_factor is {model.moe.capacity_factor}; the trainer is "
                "dropless (Appendix A.2: infinite capacity), leave it unset")
        geometry = geometry_from_model(model, [], measured=False)
        if geometry.attention is AttentionKind.MLA:
            raise MosaicInputError("model.attention 'mla' is not implemented by the trainer; "
                                   "allowed: mha, gqa")
        unsupported = [name for name in _UNSUPPORTED_FEATURES
                       if getattr(geometry, name, False)
                       or getattr(geometry.moe, name, False)]
        if unsupported:
            raise MosaicInputError(
                f"model: {', '.join(unsupported)} not implemented by the trainer (the paper's "
                "recipe, Appendix A.1, uses none of them); remove them from the file")
        # model.py builds SwiGLU FFNs (Appendix A.1) and the per-head gate only: refused
        # here, not once the model is built mid-run (glu: false was an internal error there,
        # activation: geglu trained as SwiGLU without a word)
        if geometry.activation_name != "swiglu":
            field = "model.activation" if geometry.activation is not None else "model.glu"
            raise MosaicInputError(
                f"{field}: the trainer's FFNs are SwiGLU (Appendix A.1), this model's are "
                f"{geometry.activation_name}; state glu: true (activation swiglu) or leave "
                "both out")
        if geometry.attention_output_gate:
            raise MosaicInputError(
                "model.attention_output_gate is not implemented by the trainer; its gate is "
                "the paper's per-head one (model.gated_attention, Appendix A.1)")
        if geometry.is_hybrid:
            raise MosaicInputError("model.hybrid_pattern: the trainer builds the paper's "
                                   "transformers; a hybrid SSM/attention model is not "
                                   "supported")
        router = None if geometry.moe is None else geometry.moe.router
        if router is not None and replace(router, balancing=router.balancing or "loss_free"
                                          ) != PAPER_ROUTER:
            raise MosaicInputError(
                f"model.moe.router ({router.describe()}): the trainer runs the paper's router "
                f"(Alg. 1: {PAPER_ROUTER.describe()}); state that or leave the router out")
        if geometry.vocab < self.data.vocab_size:
            raise MosaicInputError(
                f"model.{self._vocab_key()} {geometry.vocab} is smaller than the data's "
                f"vocabulary {self.data.vocab_size} ("
                + (f"the {BYTE_VOCAB} byte values of data.format 'bytes'"
                   if self.data.format == "bytes"
                   else "data.vocab") + ")")
        return geometry

    def _vocab_key(self) -> str:
        """The spelling of the vocabulary field the model block uses (vocab or vocab_sz)."""
        model = self.model or {}
        return next((key for key in ("vocab", "vocab_sz", "vocab_size") if key in model),
                    "vocab")

    @property
    def tokens_per_step(self) -> int:
        return self.run.global_batch_seqs * self.run.seq_len

    @property
    def total_steps(self) -> int:
        """Optimizer steps of ``run.tokens``, the last one whole (as a job's)."""
        return training_steps(self.run.tokens, self.run.global_batch_seqs, self.run.seq_len)


def train_config_from_mapping(data: Any, where: str) -> TrainConfig:
    """Validate a parsed job document; MosaicInputError with one line on failure."""
    planning = {"parallelism", "hardware", "batch", "performance"} & set(
        data if isinstance(data, dict) else ())
    if planning and "run" not in data:
        raise MosaicInputError(
            f"{where}: a job file for the performance model (blocks {sorted(planning)}: "
            "mosaic perf, layouts, export), not a `mosaic train` job, which holds data, run "
            "and a model or ladder block (docs/train.md)")
    if isinstance(data, dict) and "recipe" in data and "run" not in data:
        # a grid also has a `ladder:` block: its nine unknown fields named neither tool
        raise MosaicInputError(
            f"{where}: a ladder grid (blocks recipe and ladder: `mosaic ladder run`), not a "
            "`mosaic train` job, which holds data, run and a model or ladder block "
            "(docs/train.md)")
    written_by = output_command(data)
    if written_by is not None and "run" not in data:  # a run's result.json or run.json given
        # back as its job (a trial: 25 unknown fields named, not the file it was)
        raise MosaicInputError(
            f"{where}: the file that `mosaic {written_by}` writes, not a `mosaic train` job, "
            "which holds data, run and a model or ladder block (docs/train.md)")
    config = validate_mapping(TrainConfig, data, where)
    config.geometry(where)  # surface geometry errors now, not mid-run
    if config.run.device_name is not None:  # now, not as every ladder rung's failure
        from mosaic.hardware import get_device

        try:
            get_device(config.run.device_name)
        except MosaicInputError as exc:
            raise MosaicInputError(f"{where}: run.device_name: {exc}") from None
    return config


def naming(where: str, exc: Exception) -> str:
    """``exc``'s message as one line that starts with ``where`` (the job or grid file it came
    from), unless it already does."""
    message = str(exc)
    return message if message.startswith(f"{where}:") else f"{where}: {message}"


@contextmanager
def job_errors(where: str) -> Iterator[None]:
    """Errors a job meets once it runs (a data file that cannot be read, a checkpoint of
    another job, a divergence) as one MosaicInputError line that starts with ``where``, the
    job or grid file: a user with several jobs is told which one failed (they named none)."""
    try:
        yield
    except MosaicInputError as exc:
        raise MosaicInputError(naming(where, exc)) from None
    except OSError as exc:
        if exc.filename is None:  # not about a path (a full disk, a pipe): as it was
            raise
        raise MosaicInputError(f"{where}: {exc.filename}: {exc.strerror or exc}") from None


def check_schedule(config: TrainConfig, where: str) -> None:
    """MosaicInputError when the job's warm-up and decay do not fit in its steps: checked
    when a job or a grid is read, so a ladder stops before its first rung, not at the rung."""
    try:
        WSDSchedule.build(1.0, config.total_steps, config.tokens_per_step,
                          config.optim.warmup_tokens, config.optim.decay_fraction)
    except MosaicInputError as exc:
        raise MosaicInputError(f"{where}: {exc}") from None


def resolve_data_paths(document: dict[str, Any], base: Path, where: str) -> dict[str, Any]:
    """A copy of a job document whose relative paths (data.path, run.bench_dir) start at
    ``base``, made absolute: the job's fingerprint holds them, so a run resumed or a ladder
    rerun from another working directory is the same job."""
    base = base.resolve()

    def resolve(entry: Any) -> Any:
        if not isinstance(entry, str | Path):  # a mapping became the path "{'file': ...}"
            raise MosaicInputError(f"{where}: data.path: expected a file path or a list of "
                                   f"them, got {entry!r:.60}")
        return entry if Path(entry).is_absolute() else str(base / entry)

    data = document.get("data")
    if isinstance(data, dict) and data.get("path") is not None:
        raw = data["path"]
        paths = [resolve(p) for p in raw] if isinstance(raw, list) else resolve(raw)
        document = {**document, "data": {**data, "path": paths}}
    run = document.get("run")
    if isinstance(run, dict) and run.get("bench_dir") is not None:
        document = {**document, "run": {**run, "bench_dir": resolve(run["bench_dir"])}}
    return document


def load_train_config(path: str | Path) -> TrainConfig:
    """Read and validate a job YAML; relative data paths are resolved against the file."""
    path = Path(path)
    document = resolve_data_paths(load_yaml_mapping(path), path.parent, str(path))
    config = train_config_from_mapping(document, str(path))
    check_schedule(config, str(path))
    return config
