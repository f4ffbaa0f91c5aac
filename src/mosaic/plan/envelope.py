"""The hardware budget of a MOSAIC search and the architecture grid it searches.

Defaults are the paper's Table 3 envelope (Sec. 7.3): 32 p6-b200.48xlarge nodes (256 B200),
20 days, goodput 1.0, B_global = 1024, T_seq = 2048, TPP = D / N_act in [40, 150], S ≥ 0.7,
q ∈ {8..18 step 2}, E ∈ {4, ..., 512} (13 values), K ∈ {1, 2, 4, 6, 8}, G ∈ {1, 2, 4, 8}.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from mosaic.arch import Geometry, LadderGrid, enumerate_ladder_grid
from mosaic.arch.backbone import enumerate_backbone_grid
from mosaic.config.convert import model_document
from mosaic.errors import MosaicInputError, shown
from mosaic.hardware import Cluster, System
from mosaic.law.repetition import effective_tokens
from mosaic.limits import LIMITS, check_range
from mosaic.perf.calibration import Calibration
from mosaic.perf.headroom import MemoryHeadroom, memory_headroom
from mosaic.perf.layouts import LayoutLimits, require_pipeline_layout_flag
from mosaic.perf.machine import check_dispatcher_runs, check_precision_on_device
from mosaic.perf.workload import (
    Dispatcher,
    Fp8Recipe,
    OptimizerDtype,
    OptimizerKind,
    Precision,
    QuantisedGemms,
    check_quantised_gemms,
    default_fp8_recipe,
    enum_member,
)
from mosaic.plan.goodput import ConstantGoodput, Goodput
from mosaic.stacks import DEFAULT_STACK, get_stack
from mosaic.units import HOURS_PER_DAY, SECONDS_PER_DAY, SECONDS_PER_HOUR


def planning_stack(calibration: Calibration, stack: str | None = None) -> str:
    """The stack a plan runs on: the user's, else the calibration profile's, else
    :data:`DEFAULT_STACK` (every plan names it in its output). An empty name is an error."""
    if stack is not None:
        return get_stack(stack).name  # an empty or unknown name lists the known stacks
    return calibration.stack or DEFAULT_STACK


# Table 3 (Sec. 7.3).
TABLE3_SYSTEM = "p6-b200.48xlarge"
TABLE3_NODES = 32
TABLE3_DAYS = 20.0
TABLE3_GOODPUT = 1.0
TABLE3_GLOBAL_BATCH = 1024
TABLE3_SEQ_LEN = 2048
TABLE3_TPP = (40.0, 150.0)
TABLE3_S_MIN = 0.7
TABLE3_Q = (8, 10, 12, 14, 16, 18)
TABLE3_EXPERTS = (4, 6, 8, 16, 24, 32, 48, 96, 128, 192, 256, 384, 512)
TABLE3_TOP_K = (1, 2, 4, 6, 8)
TABLE3_SPLIT = (1, 2, 4, 8)
# Inner layout search of Table 3: B_micro in {1, 2, 4}, every checkpointing mode the
# performance model has (none, selective, full), every other axis at the search default.
TABLE3_LAYOUT_LIMITS = LayoutLimits(micro_batches=(1, 2, 4))

@dataclass(frozen=True)
class DollarBudget:
    """A budget in USD at a price per GPU-hour: the window it buys on N GPUs is
    T_train = usd / (price · N_dev) hours, the inverse of the run's cost
    (:mod:`mosaic.plan.cost`). With ``max_days`` (``--days`` given beside the budget, "21
    days and at most $1M") the window is the smaller of the two; :meth:`binds` says which.
    """

    usd: float
    price_usd_per_gpu_hour: float
    max_days: float | None = None

    def __post_init__(self) -> None:
        for flag, value in (("--budget-usd", self.usd),
                            ("--price-per-gpu-hour", self.price_usd_per_gpu_hour),
                            *((("--days", self.max_days),) if self.max_days is not None
                              else ())):
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise MosaicInputError(f"{flag} must be a positive number, got {shown(value)}")

    def budget_days(self, n_devices: int) -> float:
        """The days the budget alone buys on ``n_devices`` GPUs."""
        return self.usd / (self.price_usd_per_gpu_hour * n_devices * HOURS_PER_DAY)

    def binds(self, n_devices: int) -> str:
        """Which limit sets the window on ``n_devices`` GPUs: 'budget', or 'days' where
        ``max_days`` is the shorter (a tie goes to the budget: it is spent either way)."""
        if self.max_days is not None and self.max_days < self.budget_days(n_devices):
            return "days"
        return "budget"

    def days(self, n_devices: int) -> float:
        """The window on ``n_devices`` GPUs: what the budget buys, or ``max_days`` where it
        is shorter; one outside the physical range of a window is an error naming the
        budget."""
        if self.binds(n_devices) == "days":
            assert self.max_days is not None
            return float(self.max_days)  # Envelope checks its range as it checks --days
        days = self.budget_days(n_devices)
        window = LIMITS["days"]
        if not window.low <= days <= window.high:
            raise MosaicInputError(
                f"--budget-usd {self.usd:g} at {self.price_usd_per_gpu_hour:g} USD per "
                f"GPU-hour on {n_devices} GPUs buys {days:.3g} days, outside "
                f"{window.low:g}..{window.high:g} days")
        return days

    def to_dict(self, n_devices: int | None = None) -> dict[str, Any]:
        """The budget; on ``n_devices`` GPUs also the days it buys and which limit binds."""
        document: dict[str, Any] = {"usd": self.usd,
                                    "price_usd_per_gpu_hour": self.price_usd_per_gpu_hour}
        if self.max_days is not None:
            document["max_days"] = self.max_days
        if n_devices is not None:
            document["budget_days"] = self.budget_days(n_devices)
            document["binds"] = self.binds(n_devices)
        return document

    def window_text(self, n_devices: int) -> str:
        """'--budget-usd 1,000,000 binds (--days 30)' / '--days 21 binds (--budget-usd
        1,000,000 buys 65.1 days)': which of the two limits set the window."""
        usd = f"--budget-usd {self.usd:,.0f}"
        if self.max_days is None:
            return usd
        if self.binds(n_devices) == "days":
            return (f"--days {self.max_days:g} binds; {usd} buys "
                    f"{self.budget_days(n_devices):.3g} days")
        return f"{usd} binds; --days {self.max_days:g} is longer"


# The recipe settings (mosaic.config.recipes) an envelope carries to every candidate.
ENVELOPE_RECIPE_SETTINGS = ("ep_overlap", "full_iteration_cuda_graph", "fp8_param_gather",
                            "fp4_param_gather", "grad_reduce_in_fp32", "cross_entropy",
                            "fused_grouped_mlp")


@dataclass(frozen=True)
class Envelope:
    """Cluster, window and batch: (F_peak, N_dev, T_train, M_dev) and B of Sec. 2.2.

    Attributes:
        system: node type (device, host size, links).
        n_nodes: hosts in the cluster.
        days: training window T_train in days.
        goodput: η_good model (Sec. 2.1). A cluster whose goodput is 0 (it fails faster
            than it checkpoints) trains nothing: one plan refuses it
            (:func:`mosaic.plan.search.search`), a sweep or a cheapest-budget search shows
            that budget as untrainable.
        global_batch: B_global, sequences per optimizer step.
        seq_len: T_seq, tokens per sequence.
        precision: GEMM precision of every candidate (MFU is against the bf16 peak either
            way); the device must have a peak for it.
        stack: software stack every candidate runs on (:mod:`mosaic.stacks`); its traits
            shape the time model and the layouts a search may use.
        dispatcher: EP token dispatch of every candidate (alltoall, deepep, hybridep).
        dispatcher_stated: the user named the dispatcher (False: the stack's default or a
            release recipe's, not held to the stated-DeepEP layout rule).
        headroom: share of device memory a layout may fill (:mod:`mosaic.perf.headroom`);
            None = the stack's documented share, else the default 0.9.
        stack_version: the stack's release (YY.MM) the settings below were taken from;
            None = not stated.
        ep_overlap, full_iteration_cuda_graph, fp8_param_gather, fp4_param_gather,
            grad_reduce_in_fp32, cross_entropy: the workload settings of every candidate
            (:class:`~mosaic.perf.workload.Workload`), e.g. what a stack release's recipes
            set for every MoE model (:data:`ENVELOPE_RECIPE_SETTINGS`); cross_entropy None
            = the stack's loss.
        fused_grouped_mlp: the routed experts of every MoE candidate with a SwiGLU
            activation run as Transformer Engine's fused grouped MLP (needs precision fp8
            with fp8_recipe mxfp8; Workload.fused_grouped_mlp).
        fp8_recipe: the FP8 recipe of every candidate under fp8 precision (e.g. mxfp8);
            None = the stack's default (``Workload.fp8_recipe``).
        quantised_gemms: which GEMMs of every MoE candidate the low precision runs: all, or
            the routed experts' grouped GEMMs alone with the rest in bf16 (torchtitan's
            quantize.grouped_mm converters; ``Workload.quantised_gemms``).
        dollar_budget: a budget in USD that sets ``days`` for the cluster's GPUs
            (``--budget-usd``), also when the node count changes (a node sweep at equal
            cost); None when the window is given in days. A budget with ``max_days``
            (``--days`` beside ``--budget-usd``) sets the smaller of the two windows. A
            window given to :meth:`with_budget` drops it.
        optimizer, optimizer_dtype: the optimizer every candidate trains with and the dtype
            of its parameter copy and moments (``Workload.optimizer``/``optimizer_dtype``:
            they set the optimizer state's memory, perf.memory.parameter_states, and its
            step time); a job's ``optimizer.kind`` and ``performance.optimizer_dtype``.
        balanced_pipeline: every pipelined layout of every candidate is split by a balanced
            Megatron-Core pipeline layout (the embedding, the loss and the MTP modules as
            layer slots, :func:`mosaic.perf.pipeline_layout.balanced_layout`), as
            ``mosaic layouts --balanced-pipeline`` does, instead of Megatron's default split
            (whole blocks per stage, the embedding on the first and the loss and MTP modules
            on the last).
    """

    system: System
    n_nodes: int = TABLE3_NODES
    days: float = TABLE3_DAYS
    goodput: Goodput = field(default_factory=lambda: ConstantGoodput(TABLE3_GOODPUT))
    global_batch: int = TABLE3_GLOBAL_BATCH
    seq_len: int = TABLE3_SEQ_LEN
    precision: Precision = Precision.BF16
    stack: str = DEFAULT_STACK
    dispatcher: Dispatcher = Dispatcher.ALLTOALL
    dispatcher_stated: bool = True
    headroom: MemoryHeadroom | None = None
    stack_version: str | None = None
    ep_overlap: bool = False
    full_iteration_cuda_graph: bool = False
    fp8_recipe: Fp8Recipe | None = None
    fp8_param_gather: bool = False
    fp4_param_gather: bool = False
    grad_reduce_in_fp32: bool = True
    cross_entropy: str | None = None
    fused_grouped_mlp: bool = False
    quantised_gemms: QuantisedGemms = QuantisedGemms.ALL
    optimizer: OptimizerKind = OptimizerKind.ADAMW
    optimizer_dtype: OptimizerDtype = OptimizerDtype.FP32
    balanced_pipeline: bool = False
    dollar_budget: DollarBudget | None = None

    def __post_init__(self) -> None:
        traits = get_stack(self.stack)  # an unknown stack names the known ones
        if self.fused_grouped_mlp and not traits.fused_grouped_mlp:
            raise MosaicInputError(f"fused_grouped_mlp with stack {self.stack}: the fused "
                                   "grouped MLP is Megatron-Core's Transformer Engine "
                                   "op-fuser path (docs/stacks.md)")
        if self.balanced_pipeline:  # refused before any worker starts
            require_pipeline_layout_flag(self.stack)
        if self.headroom is None:
            object.__setattr__(self, "headroom", memory_headroom(None, self.stack))
        object.__setattr__(self, "precision", enum_member(Precision, self.precision, "--precision"))
        object.__setattr__(self, "dispatcher",
                           enum_member(Dispatcher, self.dispatcher, "--dispatcher"))
        # one line naming what the GPU lacks (NVFP4/MXFP8 need Blackwell; any other lane
        # needs a peak for it), the same words as a job's
        check_precision_on_device(self.system.device, self.precision, self.fp8_recipe)
        check_dispatcher_runs(self.system.device.name, self.stack, self.dispatcher, moe=True,
                              named="--dispatcher")  # every candidate is an MoE
        object.__setattr__(self, "optimizer",
                           enum_member(OptimizerKind, self.optimizer, "--optimizer"))
        object.__setattr__(self, "optimizer_dtype", enum_member(
            OptimizerDtype, self.optimizer_dtype, "--optimizer-dtype"))
        object.__setattr__(self, "quantised_gemms", enum_member(
            QuantisedGemms, self.quantised_gemms, "--quantised-gemms"))
        check_quantised_gemms(self.quantised_gemms, self.precision, str(self.precision),
                              {"fp8_param_gather": self.fp8_param_gather,
                               "fp4_param_gather": self.fp4_param_gather}, traits)
        if self.fused_grouped_mlp and (self.precision is not Precision.FP8
                                       or (self.fp8_recipe or default_fp8_recipe(self.stack))
                                       is not Fp8Recipe.MXFP8):
            raise MosaicInputError(
                "fused_grouped_mlp needs precision mxfp8: Transformer Engine fuses the grouped "
                "MLP only under MXFP8 block scaling (docs/evidence/fused_grouped_mlp.md)")
        # Physical ranges before any work (mosaic.limits): the same bounds in every command.
        check_range("nodes", self.n_nodes, "nodes", integer=True)
        if self.dollar_budget is not None:  # the window the budget buys on these GPUs
            object.__setattr__(self, "days", self.dollar_budget.days(self.n_devices))
        check_range("days", self.days, "days")
        check_range("global_batch", self.global_batch, "global_batch", integer=True)
        check_range("seq_len", self.seq_len, "seq_len", integer=True)
        check_range("devices (nodes x GPUs per node)", self.n_nodes * self.system.gpus_per_node,
                    "devices", integer=True)

    @property
    def usable_memory_fraction(self) -> float:
        """Share of device memory a layout may fill (see :attr:`headroom`)."""
        assert self.headroom is not None  # set in __post_init__
        return self.headroom.usable_fraction

    @property
    def usable_memory_bytes(self) -> float:
        """Bytes of one device a layout may fill (the headroom policy on this GPU)."""
        assert self.headroom is not None  # set in __post_init__
        return self.headroom.usable_bytes(self.system.device.hbm_bytes)

    @property
    def cluster(self) -> Cluster:
        return Cluster(system=self.system, n_nodes=self.n_nodes)

    @property
    def n_devices(self) -> int:
        """N_dev."""
        return self.n_nodes * self.system.gpus_per_node

    @property
    def window_from_budget(self) -> bool:
        """The dollar budget sets the window (not a shorter ``--days`` beside it)."""
        return (self.dollar_budget is not None
                and self.dollar_budget.binds(self.n_devices) == "budget")

    @property
    def train_s(self) -> float:
        """T_train in seconds."""
        return self.days * SECONDS_PER_DAY

    @property
    def goodput_fraction(self) -> float:
        """η_good(N_dev)."""
        return self.goodput.fraction(self.n_devices)

    @property
    def peak_flops_per_s_per_device(self) -> float:
        """F_peak: dense bf16 datasheet peak, the MFU denominator (Eq. 1)."""
        return self.system.device.mfu_peak_flops_per_s

    @property
    def gemm_peak_flops_per_s_per_device(self) -> float:
        """Dense datasheet peak of the GEMM precision's lane (fp8, fp4 or bf16): what every
        candidate's GEMMs run at (perf.machine.Machine.gemm_peak_flops_per_s)."""
        return self.system.device.peak_flops_per_s_for(str(self.precision))

    @property
    def gemm_lane_peak_ratio(self) -> float:
        """The GEMM lane's peak over the bf16 MFU denominator: the most MFU can reach
        (perf.machine.Machine.gemm_lane_peak_ratio of every candidate)."""
        return self.gemm_peak_flops_per_s_per_device / self.peak_flops_per_s_per_device

    @property
    def c_peak_flops(self) -> float:
        """C_peak = F_peak · N_dev · T_train (Sec. 2.1); Table 3 gives 9.95e23."""
        return self.peak_flops_per_s_per_device * self.n_devices * self.train_s

    @property
    def gpu_hours(self) -> float:
        return self.n_devices * self.train_s / SECONDS_PER_HOUR

    def with_budget(self, *, n_nodes: int | None = None, days: float | None = None) -> Envelope:
        """The same envelope with another node count and/or window; under a dollar budget
        a new node count gets the window the budget buys, and a window given drops it."""
        if days is not None:
            return replace(self, n_nodes=self.n_nodes if n_nodes is None else n_nodes,
                           days=days, dollar_budget=None)
        return replace(self, n_nodes=self.n_nodes if n_nodes is None else n_nodes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "system": self.system.name,
            "gpu": self.system.device.name,
            "nodes": self.n_nodes,
            "gpus_per_node": self.system.gpus_per_node,
            "network": self.system.network_text(),
            # per GPU, one direction: what a --scale-out-gbps what-if sets
            "scale_out_bw_bytes_per_s_per_device": self.system.scale_out_bw_bytes_per_s,
            "n_devices": self.n_devices,
            "days": self.days,
            **({"dollar_budget": self.dollar_budget.to_dict(self.n_devices)}
               if self.dollar_budget is not None else {}),
            "train_s": self.train_s,
            "goodput": self.goodput.describe(self.n_devices),
            "global_batch": self.global_batch,
            "seq_len": self.seq_len,
            "precision": str(self.precision),
            **({"fp8_recipe": str(self.fp8_recipe or default_fp8_recipe(self.stack))}
               if self.precision is Precision.FP8 else {}),
            "stack": self.stack,
            "dispatcher": str(self.dispatcher),
            **({"stack_version": self.stack_version} if self.stack_version else {}),
            "ep_overlap": self.ep_overlap,
            "full_iteration_cuda_graph": self.full_iteration_cuda_graph,
            "fp8_param_gather": self.fp8_param_gather,
            "fp4_param_gather": self.fp4_param_gather,
            "grad_reduce_in_fp32": self.grad_reduce_in_fp32,
            **({"cross_entropy": self.cross_entropy} if self.cross_entropy else {}),
            **({"fused_grouped_mlp": True} if self.fused_grouped_mlp else {}),
            **({"quantised_gemms": str(self.quantised_gemms)}
               if self.quantised_gemms is not QuantisedGemms.ALL else {}),
            # every candidate's optimizer: its state's memory and step (a plan assumed
            # AdamW in fp32 without a word, and the studio planned a Muon job on it)
            "optimizer": str(self.optimizer),
            "optimizer_dtype": str(self.optimizer_dtype),
            "balanced_pipeline": self.balanced_pipeline,
            "peak_flops_per_s_per_device": self.peak_flops_per_s_per_device,
            "hbm_bytes_per_device": self.system.device.hbm_bytes,
            "memory_headroom": self.headroom.to_dict(self.system.device.hbm_bytes)
            if self.headroom is not None else {},
            "c_peak_flops": self.c_peak_flops,
            "gpu_hours": self.gpu_hours,
        }


def _positive_ints(name: str, values: tuple[int, ...]) -> tuple[int, ...]:
    if not values:
        raise MosaicInputError(f"grid axis {name} is empty; give at least one value")
    return tuple(int(v) for v in values)


@dataclass(frozen=True)
class SearchSpace:
    """The outer grid (q, E, K, G) with its sparsity guard, and the TPP range (Sec. 7.3).

    Attributes:
        q, experts, top_k, split_factor: axis values of the ladder grid (Sec. 7.1).
        s_min: geometry guard S ≥ s_min (the law's data support, Sec. 7.3).
        tpp_min, tpp_max: D / N_act range; D below tpp_min·N_act is not worth training,
            D above tpp_max·N_act is capped there.
        backbone: the user's model; when set, the grid varies ``layers``, ``d_model``,
            experts, top_k and split_factor around it (:mod:`mosaic.arch.backbone`) and
            ``q`` is unused.
        layers, d_model: depth and width axes of a backbone grid (default: its own).
        max_total_params, max_active_params: caps on N_tot and N_act (non-embedding, as
            the law and the plan's table count them), e.g. what one serving node holds or a
            latency budget allows; None = no cap.
        s_max: sparsity cap S ≤ s_max (e.g. the expert count a team's router or serving
            stack takes); None = no cap.
        unique_tokens: the unique data U the run draws from; tokens beyond it are repeated
            and the law sees the effective data D' (:mod:`mosaic.law.repetition`); None =
            every token is new (the paper's assumption).
    """

    q: tuple[int, ...] = TABLE3_Q
    experts: tuple[int, ...] = TABLE3_EXPERTS
    top_k: tuple[int, ...] = TABLE3_TOP_K
    split_factor: tuple[int, ...] = TABLE3_SPLIT
    s_min: float = TABLE3_S_MIN
    tpp_min: float = TABLE3_TPP[0]
    tpp_max: float = TABLE3_TPP[1]
    backbone: Geometry | None = None
    layers: tuple[int, ...] = ()
    d_model: tuple[int, ...] = ()
    max_total_params: float | None = None
    max_active_params: float | None = None
    s_max: float | None = None
    unique_tokens: float | None = None

    def __post_init__(self) -> None:
        kinds = {"q": "ladder_q", "experts": "experts", "top_k": "experts",
                 "split_factor": "split_factor"}
        if self.backbone is not None:
            kinds = {"experts": "experts", "top_k": "experts", "split_factor": "split_factor",
                     "layers": "layers", "d_model": "width"}
            object.__setattr__(self, "layers", tuple(self.layers) or (self.backbone.layers,))
            object.__setattr__(self, "d_model",
                               tuple(self.d_model) or (self.backbone.d_model,))
        for name, kind in kinds.items():
            values = _positive_ints(name, tuple(getattr(self, name)))
            for value in values:
                check_range(f"--{name.replace('_', '-')}", value, kind, integer=True)
            object.__setattr__(self, name, values)
        size = len(self.experts) * len(self.top_k) * len(self.split_factor) * (
            len(self.q) if self.backbone is None else len(self.layers) * len(self.d_model))
        check_range("grid size (q x E x K x G values)", size, "grid", integer=True)
        for name in ("tpp_min", "tpp_max"):
            check_range(f"--tpp {name[4:]}", getattr(self, name), "tpp")
        if not (math.isfinite(self.s_min) and 0 <= self.s_min < 1):
            raise MosaicInputError(f"s_min must be in [0, 1), got {self.s_min!r}")
        if self.s_max is not None and not (math.isfinite(self.s_max)
                                           and self.s_min <= self.s_max < 1):
            raise MosaicInputError(f"--s-max must be in [s_min, 1) = [{self.s_min:g}, 1), "
                                   f"got {self.s_max!r}")
        for name in ("max_total_params", "max_active_params"):
            value = getattr(self, name)
            if value is not None:
                check_range(f"--{name.replace('_', '-')}", value, "n_params")
        if self.unique_tokens is not None:
            check_range("--unique-tokens", self.unique_tokens, "tokens")
        if not (math.isfinite(self.tpp_min) and math.isfinite(self.tpp_max)
                and 0 < self.tpp_min <= self.tpp_max):
            raise MosaicInputError(
                f"TPP range must satisfy 0 < min <= max, got {self.tpp_min!r}:{self.tpp_max!r}"
            )

    def enumerate(self) -> LadderGrid:
        """The admissible geometries under the caps; an empty grid is an error that says
        why."""
        return self._capped(self._admissible())

    def law_tokens(self, tokens: Any) -> np.ndarray:
        """The tokens the law sees for ``tokens`` trained: the effective data D' when the
        unique data is bounded (Muennighoff et al. 2023, Eq. 5), else the tokens."""
        return effective_tokens(tokens, self.unique_tokens)

    def epochs(self, tokens: Any) -> np.ndarray | None:
        """Passes over the unique data (None when it is unbounded)."""
        if self.unique_tokens is None:
            return None
        return np.asarray(tokens, dtype=float) / self.unique_tokens

    def caps(self) -> list[tuple[str, str, float]]:
        """(flag, grid column, cap) of every cap that is set."""
        caps = (("--max-total-params", "n_total", self.max_total_params),
                ("--max-active-params", "n_active", self.max_active_params),
                ("--s-max", "sparsity", self.s_max))
        return [(flag, column, float(cap)) for flag, column, cap in caps if cap is not None]

    def _capped(self, grid: LadderGrid) -> LadderGrid:
        """``grid`` without the geometries above a cap; every geometry above one is an
        error naming the cap and the smallest value the grid holds."""
        keep = np.ones(len(grid), dtype=bool)
        for flag, column, cap in self.caps():
            values = getattr(grid, column)
            below = values <= cap
            if not (keep & below).any():
                smallest = float(values[keep].min())
                shown = f"{smallest:.3f}" if column == "sparsity" else f"{smallest:.3g}"
                raise MosaicInputError(
                    f"{flag} {cap:g}: no geometry of the grid is that small (the smallest "
                    f"left has {shown}); raise the cap or {self._smaller_hint(column)}")
            keep &= below
        return grid if keep.all() else grid.take(np.flatnonzero(keep))

    def _smaller_hint(self, column: str) -> str:
        """Which axes give geometries below a cap on ``column``: S falls with fewer experts
        or more of them active; counts fall with a smaller model and fewer experts."""
        if column == "sparsity":
            return "give fewer --experts or more --top-k"
        size = "--q" if self.backbone is None else "--layers/--d-model"
        active = "--top-k" if column == "n_active" else "--experts"
        return f"give smaller {size} or {active} values"

    def broken_caps(self, **values: float) -> list[str]:
        """The caps a point off the grid breaks (``n_total=..., n_active=..., sparsity=...``),
        e.g. the model-FLOPs view's continuous optimum: 'n_total 4.1e+11 > --max-total-params
        1e+11'; with ``tokens=...``, also tokens beyond the unique data, which a point that
        counts every token as new does not discount."""
        broken = [f"{column} {values[column]:.3g} > {flag} {cap:g}"
                  for flag, column, cap in self.caps()
                  if column in values and values[column] > cap]
        if (self.unique_tokens is not None and "tokens" in values
                and values["tokens"] > self.unique_tokens):
            broken.append(f"tokens {values['tokens']:.3g} > --unique-tokens "
                          f"{self.unique_tokens:g} (Eq. 16 counts every token as new)")
        return broken

    def _admissible(self) -> LadderGrid:
        if self.backbone is not None:
            grid, refusal = enumerate_backbone_grid(
                self.backbone, self.layers, self.d_model, self.experts, self.top_k,
                self.split_factor, s_min=self.s_min)
            if len(grid) == 0:
                raise MosaicInputError(
                    f"no variant of the backbone is admissible (e.g. {refusal or 'K > E'}); "
                    f"change --layers/--d-model/--experts/--top-k/--split-factor or --s-min")
            return grid
        grid = enumerate_ladder_grid(
            self.q, self.experts, self.top_k, self.split_factor, s_min=self.s_min
        )
        if len(grid) == 0:
            raise MosaicInputError(
                f"the architecture grid is empty: no (q, E, K, G) with K <= E, G dividing "
                f"d_ff and S >= {self.s_min:g}; widen --experts/--top-k or lower --s-min"
            )
        return grid

    def to_dict(self) -> dict[str, Any]:
        limits = {name: getattr(self, name) for name in
                  ("s_max", "max_total_params", "max_active_params", "unique_tokens")
                  if getattr(self, name) is not None}
        if self.backbone is not None:
            return {"backbone": model_document(self.backbone), "layers": list(self.layers),
                    "d_model": list(self.d_model), "experts": list(self.experts),
                    "top_k": list(self.top_k), "split_factor": list(self.split_factor),
                    "s_min": self.s_min, "tpp": [self.tpp_min, self.tpp_max], **limits}
        return {
            "q": list(self.q),
            "experts": list(self.experts),
            "top_k": list(self.top_k),
            "split_factor": list(self.split_factor),
            "s_min": self.s_min,
            "tpp": [self.tpp_min, self.tpp_max],
            **limits,
        }

