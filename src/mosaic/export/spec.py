"""One framework-neutral description of what to launch: model, layout, batch, precision."""

from __future__ import annotations

import re
import warnings
from collections.abc import Set as AbstractSet
from copy import deepcopy
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from mosaic.arch import AttentionKind, Geometry, QKNormSpan, RouterConfig, ladder_geometry
from mosaic.errors import MosaicInputError, shown
from mosaic.limits import shown_number
from mosaic.perf.pipeline_layout import (
    BLOCK,
    blocks_per_chunk,
    chunk_block_counts,
    chunk_layout,
    expand_layout,
    first_last_stage_layers,
    layout_for,
    stages_uneven,
)
from mosaic.perf.plan import default_sequence_parallel
from mosaic.perf.routing_load import router_balancing
from mosaic.perf.workload import experts_fuse_grouped_mlp
from mosaic.schema_validation import path_exists
from mosaic.stacks import DEFAULT_STACK, get_stack

# The auxiliary-loss coefficient of an aux_loss router: the one Wang et al. 2024
# (arXiv:2408.15664, Table 2) measured the MaxVio mosaic costs at, and the value
# Megatron-Bridge's MoE recipes set (perf/routing_load.py ROUTER_MAX_VIOLATION).
AUX_LOSS_COEFF = 1e-3
# The expert-bias update rate of loss-free balancing: Wang et al. 2024's u = 0.001, DeepSeek-V3's
# bias update speed (arXiv:2412.19437 Sec. 4.2), Megatron-Core's moe_router_bias_update_rate.
BIAS_UPDATE_RATE = 1e-3

SHARDING_MODES = ("none", "zero1", "zero2", "fsdp", "hsdp")
CHECKPOINTING_MODES = ("none", "selective", "full")
# mosaic.perf.workload.Fp8Recipe values; "none" = no FP8 GEMMs.
FP8_RECIPES = ("none", "delayed", "current", "blockwise", "mxfp8")
# mosaic.perf.workload.Workload.routing values (docs/perf.md).
ROUTING_MODES = ("dropless", "balanced", "token_drop", "unknown")


@dataclass(frozen=True)
class ExportSpec:
    """Everything an exporter reads. Batch sizes are in sequences.

    ``dp`` is the data-parallel degree over the whole job (devices = tp·pp·cp·dp, the
    Megatron-Core convention); ``micro_seqs`` is sequences per micro-batch per DP rank, as in
    the ``batch`` block (docs/schema.md). ``fp8_recipe`` is the workload's resolved recipe
    (``none`` without FP8 GEMMs); ``routing`` the MoE routing regime, which decides whether
    the capacity factor is written. ``assumptions`` are the source's defaulted fields (one
    line each, ``JobSpec.assumptions``); ``warnings`` mosaic's verdicts on the job (memory);
    ``job`` its canonical job document (the ``yaml`` target).
    """

    geometry: Geometry
    tp: int
    pp: int
    vpp: int
    cp: int
    dp: int
    ep: int
    etp: int
    micro_seqs: int
    global_seqs: int
    seq_len: int
    local_seqs: int | None = None  # the job's batch.local_seqs: one rank's batch per pass
    sharding: str = "zero1"
    hsdp_shard: int | None = None
    sequence_parallel: bool = False
    checkpointing: str = "none"
    precision: str = "bf16"
    dispatcher: str = "alltoall"
    ep_overlap: bool = False
    dispatch_fp8: bool = False
    tp_comm_overlap: bool = False
    full_iteration_cuda_graph: bool = False
    layer_cuda_graphs: bool = False
    stack: str = DEFAULT_STACK
    optimizer: str = "adamw"
    fp8_recipe: str = "none"
    fp8_param_gather: bool = False
    fp4_param_gather: bool = False
    routing: str = "dropless"
    pad_to_capacity: bool = False
    # how the costed learned router is balanced (the model's stated router, else the stack's
    # router_balancing trait: aux_loss or loss_free, perf/routing_load.py): the export asks
    # the target for the same
    router_balancing: str = "aux_loss"
    # the workload's other settings (mosaic.perf.workload.Workload, same names and defaults)
    recompute_modules: tuple[str, ...] | None = None
    recompute_block_fraction: float | None = None
    cross_entropy: str | None = None
    grad_reduce_in_fp32: bool = True
    offloaded_activation_layers: int = 0
    optimizer_dtype: str = "fp32"
    dp_comm_overlap: bool = True
    max_nodes_per_token: int | None = None
    fp8_glu_inputs: bool = False
    fused_grouped_mlp: bool = False
    # the calibration profile a plan was predicted with (its name), for the job's header
    calibration: str | None = None
    fp8_dot_product_attention: bool = False
    quantised_gemms: str = "all"  # Workload.quantised_gemms
    expert_gemm: str = "grouped"
    fsdp_keep_gathered: bool = False
    loss_chunks: int = 1
    torch_compile: bool | None = None
    moe_permute: str | None = None
    eager_kernels: str | None = None
    attention_kernel: str | None = None
    fsdp_gather: str | None = None
    vocab_in_pipeline_split: bool = False
    # the pipeline layout (Megatron-Core --pipeline-model-parallel-layout) where one splits
    # this plan (its pp and vpp), else None; derived: the remainder-last split of
    # uneven_stages true, which targets without the layout flag express their own way
    pipeline_layout: str | None = None
    pipeline_layout_derived: bool = False
    # how the costed plan cuts the blocks where pp·vpp leaves them uneven: the stack's split
    # under uneven_stages true (Workload.stage_split, remainder_last or extra_first), None
    # where no split is stated (uneven_stages unstated: a recorded one; a plan)
    stage_split: str | None = None
    routing_imbalance: float | None = None
    # the stack's pipeline schedule trait (stacks.yaml pipeline_schedule; 'dualpipe' for
    # the dualpipe stack) and the GPUs per node of the job's system (None: not known, e.g. a plan)
    pipeline_schedule: str | None = None
    gpus_per_node: int | None = None
    architecture: str | None = None  # the GPU generation of the job's system, where known
    stack_version: str | None = None  # the job's stated release (YY.MM), if any
    assumptions: tuple[str, ...] = ()
    # mosaic's own verdicts on the job, e.g. that it does not fit its GPUs' memory: every
    # exported file's header repeats them (WARNING lines), not only stderr
    warnings: tuple[str, ...] = ()
    # mosaic's notes on the job as the target runs it (another stack than the one costed)
    notes: tuple[str, ...] = ()
    # the tokens to train: a plan's D (its optimum's tokens) or a job's training.tokens;
    # None where the source gives no budget
    train_tokens: float | None = None
    train_goodput: float | None = None  # a plan's goodput, a job's training.goodput
    # a plan's loss on repeated data (--unique-tokens): what a job file cannot hold
    repeated_data_note: str | None = None
    job: dict[str, Any] | None = None
    source: str = ""

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "vpp", "cp", "dp", "ep", "etp", "micro_seqs",
                     "global_seqs", "seq_len"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise MosaicInputError(f"{self.source}: {name} must be a positive integer, "
                                       f"got {shown(value)}")
        if self.sharding not in SHARDING_MODES:
            raise MosaicInputError(f"{self.source}: sharding {shown(self.sharding)} is not one of "
                                   f"{', '.join(SHARDING_MODES)}")
        if self.checkpointing not in CHECKPOINTING_MODES:
            raise MosaicInputError(f"{self.source}: checkpointing {shown(self.checkpointing)} is "
                                   f"not one of {', '.join(CHECKPOINTING_MODES)}")
        for name, allowed in (("fp8_recipe", FP8_RECIPES), ("routing", ROUTING_MODES)):
            if getattr(self, name) not in allowed:
                raise MosaicInputError(f"{self.source}: {name} {shown(getattr(self, name))} is not "
                                       f"one of {', '.join(allowed)}")
        if (self.fp8_recipe == "none") != (self.precision != "fp8"):
            raise MosaicInputError(f"{self.source}: fp8_recipe {shown(self.fp8_recipe)} does "
                                   f"not fit precision {shown(self.precision)} (a recipe exactly "
                                   "with fp8)")
        if self.global_seqs % (self.dp * self.micro_seqs):
            raise MosaicInputError(
                f"{self.source}: global batch {self.global_seqs} is not a multiple of "
                f"dp·micro_seqs = {self.dp}·{self.micro_seqs}")

    @property
    def train_steps(self) -> int | None:
        """Optimizer steps that train ``train_tokens`` at the global batch (the last one
        whole), or None without a token budget."""
        if self.train_tokens is None:
            return None
        from mosaic.config.blocks import training_steps

        return training_steps(self.train_tokens, self.global_seqs, self.seq_len)

    @property
    def capacity_factor(self) -> float | None:
        """The capacity factor to write: under ``token_drop`` the model's, else 1.0 (the
        default the perf model assumes, mosaic.perf.routing_load.DEFAULT_CAPACITY_FACTOR);
        None (dropless) under every other regime, whatever the model block states, since
        the prediction did not drop tokens."""
        moe = self.geometry.moe
        if moe is None or self.routing != "token_drop":
            return None
        from mosaic.perf.routing_load import DEFAULT_CAPACITY_FACTOR

        return DEFAULT_CAPACITY_FACTOR if moe.capacity_factor is None else moe.capacity_factor

    def routing_notes(self) -> list[str]:
        """What every target should know about the routing regime (added to its notes)."""
        moe = self.geometry.moe
        if moe is None:
            return []
        notes = []
        if self.routing != "token_drop" and moe.capacity_factor is not None:
            notes.append(f"model.moe.capacity_factor {moe.capacity_factor:g} not written: "
                         f"routing is {self.routing} (no token dropping); set "
                         "performance.routing=token_drop to drop tokens at that capacity")
        if self.routing == "balanced":
            notes.append("routing balanced (forced load balance, a benchmark setting: "
                         "Megatron-Core --moe-router-force-load-balancing, random router "
                         "logits) not written: a trained router is exported, dropless")
        if self.routing == "unknown":
            notes.append("routing unknown: exported dropless")
        return notes

    def megatron_core_fields(self, balancing: bool = True) -> dict[str, Any]:
        """Megatron-Core ``TransformerConfig`` fields whose defaults differ from what mosaic
        costs (megatron/core/transformer/transformer_config.py @ d98e8a64dd), by field
        name; the Megatron export writes each as its flag, the NeMo one as a model field.

        - ``hidden_dropout`` and ``attention_dropout`` default to 0.1; mosaic costs no
          dropout, and pretraining recipes turn it off.
        - A learned router: Megatron-LM's ``--moe-aux-loss-coeff`` defaults to 0.0, so
          ``aux_loss`` balancing is off. An ``aux_loss`` stack gets the 1e-3 that the
          imbalance mosaic costs was measured at (perf/routing_load.py, Wang et al. 2024
          Table 2); a ``loss_free`` one the expert bias, which Megatron-Core allows with
          sigmoid scores only.
        - A router the model states (``moe.router``) is written as trained: its score
          function, the expert bias of loss-free balancing, the top-k scaling factor, and
          ``moe_router_pre_softmax`` for softmax weights not renormalised over the K chosen
          (Megatron-Core otherwise takes the softmax after top-k, which renormalises;
          moe_utils.topk_routing_with_score_function), and group-limited routing
          (``moe_router_num_groups``, ``moe_router_group_topk``). What it cannot express:
          :meth:`router_notes`.
        - Top-1 with softmax scores needs ``moe_router_pre_softmax`` (a softmax over one
          selected logit has a zero gradient; TransformerConfig.__post_init__ raises).

        ``balancing`` False leaves the balancing to a recipe the file is merged over (a
        Megatron-Bridge recipe sets its model's own: DeepSeek-V3's seq_aux_loss at 1e-4).
        """
        fields: dict[str, Any] = {"hidden_dropout": 0.0, "attention_dropout": 0.0}
        moe = self.geometry.moe
        if moe is None:
            return fields
        router = moe.router
        # the expert bias runs with sigmoid scores only (TransformerConfig.__post_init__)
        expert_bias = (self.router_balancing == "loss_free"
                       and (router is None or router.score == "sigmoid"))
        if balancing and expert_bias:
            fields |= {"moe_router_load_balancing_type": "none",
                       "moe_router_score_function": "sigmoid",
                       "moe_router_enable_expert_bias": True}
        elif balancing:
            fields |= {"moe_router_load_balancing_type": "aux_loss",
                       "moe_aux_loss_coeff": AUX_LOSS_COEFF}
        if router is not None:
            fields["moe_router_score_function"] = router.score
            if expert_bias:
                fields["moe_router_enable_expert_bias"] = True
            if router.top_k_scaling != 1.0:
                fields["moe_router_topk_scaling_factor"] = router.top_k_scaling
            if router.score == "softmax" and not router.normalize_top_k:
                fields["moe_router_pre_softmax"] = True
            if _megatron_scores_groups(moe.top_k, router):  # router_notes otherwise
                fields |= {"moe_router_num_groups": router.groups,
                           "moe_router_group_topk": router.top_groups}
        if moe.top_k == 1 and fields.get("moe_router_score_function", "softmax") == "softmax":
            fields["moe_router_pre_softmax"] = True
        return fields

    def router_notes(self) -> list[str]:
        """What Megatron-Core cannot express of the router the model states (@ d98e8a64dd)."""
        moe = self.geometry.moe
        router = None if moe is None else moe.router
        if moe is None or router is None:
            return []
        notes = []
        if self.router_balancing == "loss_free" and router.score == "softmax":
            notes.append("loss-free balancing with softmax scores: Megatron-Core's expert bias "
                         "runs with sigmoid scores only (TransformerConfig.__post_init__), so "
                         "no expert bias is written: the auxiliary loss (Megatron) or the "
                         "recipe's balancing (NeMo) stands in, less balanced than the "
                         "loss-free router mosaic costed")
        if router.score == "sigmoid" and not router.normalize_top_k and moe.top_k > 1:
            notes.append("sigmoid scores not renormalised over the top-k: Megatron-Core always "
                         "renormalises the K chosen sigmoid scores "
                         "(moe_utils.topk_routing_with_score_function)")
        if router.limits_groups and router.top_groups is not None:
            per_group = moe.top_k // router.top_groups
            if not _megatron_scores_groups(moe.top_k, router):
                notes.append(f"group-limited routing with top-{moe.top_k} over "
                             f"{router.top_groups} groups: Megatron-Core scores a group by "
                             "its top K/top_groups scores, which needs K a multiple of "
                             "top_groups (K below it scores every group 0), so no groups "
                             "are written")
            elif per_group != 2:
                notes.append(f"group-limited routing: Megatron-Core scores a group by its top "
                             f"{per_group} scores (K/top_groups), DeepSeek-V3's router by "
                             "its top 2")
        if moe.top_k == 1 and router.normalize_top_k:
            notes.append("top-1 with normalize_top_k: Megatron-Core weights the one expert by "
                         f"its {router.score} score (top-1 softmax needs pre-softmax, and a "
                         "single sigmoid score is not renormalised), not by 1")
        return notes

    def ep_overlap_conflicts(self) -> list[str]:
        """Why Megatron-Core's TransformerConfig.__post_init__ refuses the batch-level EP
        overlap mosaic costed for this job, one reason each (megatron/core/transformer/
        transformer_config.py @ d98e8a64dd, the overlap_moe_expert_parallel_comm asserts);
        empty where it accepts it or the job has none."""
        if not self.ep_overlap:
            return []
        modules = self.recompute_modules or ()
        conflicts = [
            (self.ep == 1, "ep = 1: it needs expert parallelism"),
            (self.pp > 1 and self.vpp == 1, "pp > 1 and no virtual stages: it asserts "
             "virtual_pipeline_model_parallel_size is set; run vpp > 1"),
            (self.checkpointing == "full", "full recompute: it asserts recompute_granularity "
             "!= 'full'; use selective recompute"),
            (self.checkpointing == "selective" and "moe" in modules, "'moe' in "
             "recompute_modules: it asserts the MoE part is not recomputed"),
            (self.geometry.mtp_layers > 1, f"{self.geometry.mtp_layers} MTP layers: it "
             "supports at most one"),
            (self.precision == "fp32", "fp32: it needs a bf16 or fp16 model"),
        ]
        return [reason for refused, reason in conflicts if refused]

    @property
    def megatron_ep_overlap(self) -> bool:
        """Whether the batch-level EP overlap mosaic costed is one Megatron-Core accepts
        (:meth:`ep_overlap_conflicts`), and so is written."""
        return self.ep_overlap and not self.ep_overlap_conflicts()

    def megatron_core_refusals(self) -> list[str]:
        """Settings of this job that Megatron-Core's TransformerConfig.__post_init__ refuses
        in this combination (megatron/core/transformer/transformer_config.py @ d98e8a64dd):
        not written (the file would not launch), each with what the launch needs instead;
        then what it cannot express of the model's router (:meth:`router_notes`)."""
        notes = self.router_notes()
        notes += [f"ep_overlap with {reason}; not written (the overlap mosaic costed needs "
                  "it changed)" for reason in self.ep_overlap_conflicts()]
        if self.dispatch_fp8:
            notes.append("dispatch_fp8 (MXFP8 dispatch and combine), not written: "
                         "TransformerConfig raises unless the flex dispatcher runs the "
                         "'ncclep' backend with use_transformer_engine_op_fuser and grouped "
                         f"GEMM; mosaic costed the {self.dispatcher} dispatcher")
        return notes

    @property
    def architecture_assumptions(self) -> list[str]:
        """The source's defaulted ``model.*`` fields: values the launcher receives that no
        one stated (e.g. a run record without ``model.norm``)."""
        lines = [f"{line}; written as such, set {line.split()[0]} if the model differs"
                 for line in self.assumptions if line.startswith("model.")]
        if any(line.startswith("model.norm not stated") for line in lines) \
                and not self.geometry.qk_norm:
            # model.qk_norm defaults to false without an assumption line (config/blocks.py)
            lines.append("model.qk_norm false written (the schema's default): a model with "
                         "QK-norm (e.g. Qwen3) needs model.qk_norm: true")
        return lines

    @property
    def recompute_blocks_per_chunk(self) -> tuple[int, bool] | None:
        """Under full recompute of a share of the blocks (``recompute_block_fraction``):
        (blocks recomputed per pipeline chunk, whether that count is exact), the count
        Megatron-Core's ``recompute_method block`` takes as ``recompute_num_layers``
        (transformer_config.py: 'the number of transformer layers to recompute within each
        pipeline stage'); None without such a share."""
        fraction = self.recompute_block_fraction
        if self.checkpointing != "full" or fraction is None:
            return None
        per_chunk = blocks_per_chunk(self.geometry.layers, self.pp * self.vpp)
        blocks = fraction * per_chunk
        return round(blocks), abs(blocks - round(blocks)) < 1e-6

    def megatron_dispatcher(self, unsupported: list[str]) -> str:
        """The EP dispatcher a Megatron-Core file launches: the costed one, except DeepEP
        (a stack's default; a stated one is refused at etp·ep = 1 by the layout rules) on
        an expert group of one rank, which Megatron-Core's flex dispatcher asserts against
        ("DeepEP dispatcher requires TPxEP > 1", token_dispatcher.py @ d98e8a64dd) and
        Megatron-Bridge's own EP-1 recipes run as alltoall (recipes/olmoe/h100/olmoe_7b.py
        @ 067f987df): alltoall, said in ``unsupported``. The group rule is Megatron-Core's
        own (:func:`~mosaic.perf.constraints.stated_dispatcher_refused`), whatever stack
        the job was costed on."""
        from mosaic.perf.constraints import stated_dispatcher_refused

        if not stated_dispatcher_refused("megatron-core", self.dispatcher, self.ep, self.etp):
            return self.dispatcher
        unsupported.append(
            "deepep (the stack's default dispatcher) at etp·ep = 1 written as alltoall: "
            "Megatron-Core's flex dispatcher asserts TPxEP > 1; mosaic costed deepep, which "
            "at one expert rank moves no token over the network either")
        return "alltoall"

    def stated_node_limit_note(self) -> str | None:
        """Why a stated ``max_nodes_per_token`` is not written: the model's own group-limited
        router is (:meth:`megatron_core_fields`); None where nothing overrides it."""
        moe = self.geometry.moe
        router = None if moe is None else moe.router
        if self.max_nodes_per_token is None or router is None or not router.limits_groups:
            return None
        return (f"max_nodes_per_token {self.max_nodes_per_token}: the model's router is "
                f"written instead (its experts in the top {router.top_groups} of "
                f"{router.groups} groups), which limits the nodes a token reaches where a "
                "group is a node's experts")

    def node_limited_groups(self) -> tuple[int, str | None]:
        """(expert groups = nodes the EP group spans, a reason it cannot be written) for
        node-limited routing (Megatron-Core moe_router_num_groups: 'Node-limited routing: set
        moe_router_num_groups equal to number of nodes in EP group')."""
        node = self.gpus_per_node
        moe = self.geometry.moe
        if node is None or moe is None:
            return 0, "the GPUs per node are not known"
        if self.ep <= node or self.ep % node:
            return 0, f"ep {self.ep} is not a whole number of {node}-GPU nodes"
        groups = self.ep // node
        limit = self.max_nodes_per_token or 0
        if moe.experts % groups or moe.top_k % limit:
            return 0, (f"{moe.experts} experts in {groups} node groups with top-{moe.top_k} "
                       f"over {limit} groups do not divide evenly")
        return groups, None

    @property
    def uneven_stages(self) -> bool:
        """pp·vpp leaves the stages uneven (perf.pipeline_layout.stages_uneven: with the
        embedding and loss in the split, pp·vpp divides layers + 2 and is even)."""
        return bool(stages_uneven(self.geometry.layers, self.pp * self.vpp,
                                  self.vocab_in_pipeline_split))

    def costed_chunk_blocks(self) -> list[int]:
        """Transformer blocks of each of the pp·vpp pipeline chunks as mosaic costed them: a
        pipeline layout's chunks (stated, or the remainder-last split of a Megatron-Core
        stack's uneven_stages), else the stated split or the stack's (trait
        ``uneven_stage_split``, :func:`~mosaic.perf.pipeline_layout.chunk_block_counts`)."""
        if self.pipeline_layout is not None:
            return [chunk.count(BLOCK) for chunk in expand_layout(self.pipeline_layout)]
        split = self.stage_split or get_stack(self.stack).uneven_stage_split
        return chunk_block_counts(self.geometry.layers, self.pp * self.vpp, split)

    @property
    def n_devices(self) -> int:
        return self.tp * self.pp * self.cp * self.dp

    @property
    def micro_batches_per_step(self) -> int:
        """Micro-batches each DP rank runs per optimizer step (accumulation or pipeline)."""
        return self.global_seqs // (self.dp * self.micro_seqs)

    @property
    def megatron_fsdp(self) -> bool:
        """The sharding modes Megatron-Core runs as Megatron-FSDP (ZeRO-2, FSDP, HSDP)."""
        return self.sharding in ("zero2", "fsdp", "hsdp")

    @property
    def hsdp_replicas(self) -> int:
        """Replica groups of HSDP (dp / shard group size); 1 for the other modes."""
        if self.sharding != "hsdp" or not self.hsdp_shard:
            return 1
        return max(1, self.dp // self.hsdp_shard)

    def hybrid_layer_pattern(self) -> str:
        """A hybrid model's layer pattern as Megatron-Core reads it: with pipeline stages, cut
        by '|' into pp·vpp segments of ceil(L/(pp·vpp)) layers (Megatron-LM derives the
        virtual stages from the segments and refuses --num-virtual-stages-per-pipeline-rank
        with --hybrid-layer-pattern, arguments.py; a pattern without '|' under pp > 1 is
        deprecated, hybrid_layer_allocation.py @ d98e8a64dd); whole without pipelining. MTP
        depths follow as '/'-separated copies of ``mtp_pattern``, one per depth (the unified
        pattern, hybrid_layer_allocation.py ``parse_hybrid_pattern``: "<main_pattern>/
        <mtp_pattern>/<mtp_pattern>/...")."""
        pattern = self.geometry.hybrid_pattern
        assert pattern is not None
        depth = self.geometry.mtp_pattern
        mtp = "".join("/" + depth for _ in range(self.geometry.mtp_layers)) if depth else ""
        if self.pp * self.vpp == 1:
            return pattern + mtp
        per_segment = blocks_per_chunk(len(pattern), self.pp * self.vpp)
        return "|".join(pattern[start:start + per_segment]
                        for start in range(0, len(pattern), per_segment)) + mtp

    def mixer_ffn_pairs(self) -> list[str] | None:
        """A gated DeltaNet model's decoder blocks, each a mixer layer ('G' or '*') and its
        FFN layer ('E' or '-'), as Qwen3-Next's GPT form and MaxText's qwen3_next block build
        them; None for any other pattern (or a model without gated DeltaNet layers)."""
        pattern = self.geometry.hybrid_pattern
        if pattern is None or self.geometry.gdn is None or self.geometry.mamba is not None:
            return None
        pairs = [pattern[i:i + 2] for i in range(0, len(pattern), 2)]
        if len(pattern) % 2 or any(p[0] not in "G*" or p[1] not in "E-" for p in pairs):
            return None
        return pairs

    def full_attention_cycle(self) -> int | None:
        """k when every k-th block (and only those) has full attention and every block an
        MoE FFN: MaxText's qwen3_next decoder (inhomogeneous_layer_cycle_interval, layer l
        full attention when (l + 1) % k == 0, src/maxtext/layers/decoders.py); else None."""
        pairs = self.mixer_ffn_pairs()
        if pairs is None or any(p[1] != "E" for p in pairs):
            return None
        mixers = "".join(p[0] for p in pairs)
        if "*" not in mixers:
            return None
        cycle = mixers.index("*") + 1
        expected = "".join("*" if (i + 1) % cycle == 0 else "G" for i in range(len(mixers)))
        # whole cycles only: MaxText scans num_decoder_layers / cycle blocks
        return cycle if mixers == expected and len(mixers) % cycle == 0 else None

    def moe_layer_pattern(self) -> list[int]:
        """1 for an MoE block, 0 for a dense one, per block."""
        return [int(self.geometry.is_moe_layer(i)) for i in range(self.geometry.layers)]


# Transformer Engine takes a sliding window under context parallelism only over a2a or
# all_gather (context_parallel.py asserts); Megatron's default cp_comm_type is p2p
WINDOW_CP_NOTE = "context parallelism over a2a (a sliding window needs it): costed as the ring"


# The first release (a job's stack_version, YY.MM) with each Megatron-Core argument for an
# uneven split: num_layers_in_first/last_pipeline_stage (--decoder-first/last-pipeline-num-
# layers) came with core_v0.9.0 (NVIDIA/Megatron-LM fa8bb5921b "Uneven Pipeline
# Parallelism", 2024-09), which NeMo 24.09 ships (NeMo docs, software component versions);
# pipeline_model_parallel_layout with core_v0.13.0 (77732c3628, 2025-06), and the first
# release known to ship one is NeMo 25.09, Megatron Core 0.14.0 (Megatron-Bridge
# docs/releases/software-versions.md; 25.07's is not on record)
FIRST_LAST_STAGE_SINCE = (24, 9)
PIPELINE_LAYOUT_SINCE = (25, 9)


@dataclass(frozen=True)
class StageSplitSpelling:
    """A Megatron-Core target's names for the split's settings (Megatron-LM flags, or
    TransformerConfig fields as Megatron-Bridge sets them)."""

    first: str
    last: str
    layout: str


@dataclass(frozen=True)
class MegatronStageSplit:
    """How a Megatron-Core file states the costed uneven split: the blocks of the first and
    last pipeline ranks (None: the middle ranks' share), or a layout; ``notes``: what it
    cannot state, or a stated release that may lack what it writes."""

    first_layers: int | None = None
    last_layers: int | None = None
    layout: str | None = None
    notes: tuple[str, ...] = ()


def megatron_stage_split(spec: ExportSpec, names: StageSplitSpelling
                         ) -> MegatronStageSplit | None:
    """The costed uneven split (:meth:`ExportSpec.costed_chunk_blocks`) as Megatron-Core
    states it: the first/last rank sizes where they give it
    (:func:`~mosaic.perf.pipeline_layout.first_last_stage_layers`, the older arguments),
    else the layout (a derived one as costed; one from the chunks otherwise), the layout
    first for a derived one unless the job's release predates it. None where no split is
    to be stated: even stages, or a hybrid pattern's '|' segments or a stated layout carry
    it."""
    if (not spec.uneven_stages or spec.geometry.is_hybrid
            or (spec.pipeline_layout is not None and not spec.pipeline_layout_derived)):
        return None
    stages = f"{spec.geometry.layers} layers on pp·vpp = {spec.pp * spec.vpp}"
    if spec.vocab_in_pipeline_split:
        # TransformerConfig raises a ValueError for either beside account_for_*_in_pipeline_
        # split, and with those Megatron-LM asserts (layers + 2) % pp == 0 (@ d98e8a64dd)
        return MegatronStageSplit(notes=(
            f"uneven pipeline stages ({stages}, the embedding and the loss counted as "
            f"layers): Megatron-Core takes neither {names.first} / {names.last} nor "
            f"{names.layout} beside account_for_embedding/loss_in_pipeline_split, and with "
            "them needs layers + 2 divisible by pp; state the split as a layout by hand in "
            "their place",))
    if spec.stage_split is None:
        return MegatronStageSplit(notes=(
            f"uneven pipeline stages ({stages}): the job does not state the split "
            "(performance.uneven_stages unstated, costed with full first and last chunks): "
            f"set {names.first} / {names.last} or {names.layout} by hand",))
    from mosaic.stacks.registry import format_release, parse_release

    counts = spec.costed_chunk_blocks()
    release = parse_release(spec.stack_version)
    before_layout = release is not None and release < PIPELINE_LAYOUT_SINCE
    first_last = first_last_stage_layers(counts, spec.pp)
    if first_last is not None and (not spec.pipeline_layout_derived or before_layout):
        notes = ()
        if release is not None and release < FIRST_LAST_STAGE_SINCE:
            notes = (f"{names.first} / {names.last} (written for the costed split) came with "
                     f"Megatron-Core core_v0.9.0 (NeMo {format_release(FIRST_LAST_STAGE_SINCE)}"
                     f"); stack_version {spec.stack_version} predates them, and its "
                     f"Megatron-Core splits the layers only evenly",)
        return MegatronStageSplit(first_layers=first_last[0], last_layers=first_last[1],
                                  notes=notes)
    layout = spec.pipeline_layout or chunk_layout(counts, spec.geometry.mtp_layers)
    notes = ()
    if before_layout:
        notes = (f"{names.layout} (written for the costed split, which {names.first} / "
                 f"{names.last} cannot give: each rank's virtual stages and the middle ranks "
                 "must hold equal blocks) came with Megatron-Core core_v0.13.0; stack_version "
                 f"{spec.stack_version} predates NeMo {format_release(PIPELINE_LAYOUT_SINCE)} "
                 "(Megatron Core 0.14.0), the first release known to have it",)
    return MegatronStageSplit(layout=layout, notes=notes)


def window_note(geometry: Geometry) -> str:
    """The model's sliding window in words, for a target that cannot write it."""
    every = (f", full attention on one layer in {geometry.full_attention_every} (the last)"
             if geometry.full_attention_every else " on every layer")
    return f"a sliding window of {geometry.sliding_window} keys{every}"


def fsdp_for_zero(sharding: str) -> str:
    """The sharding a target without ZeRO-1/2 (torchtitan's FSDP2, MaxText's fsdp axis)
    runs for a ``sharding`` job: FSDP for zero1 and zero2, else the same."""
    return "fsdp" if sharding in ("zero1", "zero2") else sharding


def projection_qk_norm_notes(geometry: Geometry, written_as: str, hint: str = ""
                             ) -> list[str]:
    """What a target that normalises each head's queries and keys (Megatron-Core
    ``qk_layernorm``, torchtitan's and MaxText's Qwen3 blocks) writes for q/k norms across
    the whole projection (OLMoE, MiniMax-M2), and the gains the two differ by."""
    if not geometry.qk_norm or geometry.qk_norm_span is QKNormSpan.HEAD:
        return []
    gains = (geometry.heads + geometry.kv_heads) * geometry.head_dim
    return [f"q/k norms across the whole projection ({gains:,} gains per layer, as OLMoE "
            f"and MiniMax-M2 build them): written as {written_as}, which normalise each "
            f"head ({2 * geometry.head_dim:,} gains){hint}"]


def lm_head_bias_notes(geometry: Geometry, target: str) -> list[str]:
    """What a target whose LM head has no bias (Megatron-Core's output layer, bias=False;
    torchtitan's and MaxText's unembeddings) leaves out of a model with one."""
    if not geometry.lm_head_bias:
        return []
    return [f"an LM-head bias ({geometry.vocab:,} parameters, Phi-3.5-MoE): {target} builds "
            "its output layer without one; the exported model lacks it"]


def _add_bias_linear_parts(geometry: Geometry) -> list[tuple[str, bool]]:
    """(part, whether the model has its bias) for every linear Megatron-Core's
    add_bias_linear biases, @ d98e8a64dd: attention.py's linear_qkv (add_bias_linear or
    add_qkv_bias; MLA's down and up projections never, multi_latent_attention.py) and
    linear_proj; mlp.py's fc1 and fc2 (dense blocks and shared experts); moe/experts.py's
    grouped fc1 and fc2; moe/router.py's bias."""
    parts = [("the attention output", geometry.output_bias)]
    if geometry.attention is not AttentionKind.MLA:
        parts.insert(0, ("the Q, K and V projections", geometry.qkv_bias))
    moe = geometry.moe
    if moe is None or moe.dense_layers > 0 or moe.moe_every > 1:
        parts.append(("the dense blocks' MLPs", False))  # arch.counts: dense FFNs bias-free
    if moe is not None:
        parts += [("the experts", moe.expert_bias), ("the router", moe.router_bias)]
    return parts


def bias_free_notes(geometry: Geometry, builder: str, hint: str = "") -> list[str]:
    """What a target whose model builds every linear without a bias (``builder``, e.g.
    torchtitan v0.2.2's llama3, llama4, qwen3 and deepseek_v3 families: ``bias=False``
    throughout their ``model.py``) leaves out of a model with biases
    (:func:`_add_bias_linear_parts`)."""
    parts = [part for part, has in _add_bias_linear_parts(geometry) if has]
    if not parts:
        return []
    return [f"biases on {_joined(parts)}: {builder} builds them without biases; the "
            f"exported model lacks them{hint}"]


def megatron_bias_notes(geometry: Geometry) -> list[str]:
    """What Megatron-Core's one add_bias_linear switch does to a model whose biases differ
    by part (:func:`_add_bias_linear_parts`). On (geometry.linear_biases: an attention
    output or expert bias), it also biases the parts that have none: Phi-3.5-MoE's
    bias-free experts and router (a trial). Off, a router bias has no switch of its own and
    is dropped."""
    parts = _add_bias_linear_parts(geometry)
    if geometry.linear_biases:
        extra = [part for part, has in parts if not has]
        if not extra:
            return []
        reasons = " and ".join(reason for reason, has in (
            ("attention output", geometry.output_bias),
            ("expert", geometry.moe is not None and geometry.moe.expert_bias)) if has)
        return [f"add_bias_linear (for the {reasons} biases) also biases {_joined(extra)}, "
                "which this model does not: the exported model has a few more parameters "
                "than the costed one"]
    if geometry.moe is not None and geometry.moe.router_bias:
        return ["the router bias has no Megatron-Core switch but add_bias_linear, which this "
                "model's bias-free attention output and experts leave off: the exported "
                "router has no bias"]
    return []


def _joined(parts: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def spec_from_job(job: Any, source: str) -> ExportSpec:
    """From a validated job (``mosaic.config.job_schema.JobSpec``)."""
    from mosaic.config.job_schema import job_document

    workload = job.workload
    plan = job.plan.row(0)
    layout = layout_for(workload.pipeline_layouts, int(plan["pp"]), int(plan["vpp"]))
    system = _catalog_system(job.system_name)
    return ExportSpec(
        geometry=workload.geometry,
        tp=plan["tp"], pp=plan["pp"], vpp=plan["vpp"], cp=plan["cp"], dp=plan["dp"],
        ep=plan["ep"], etp=plan["etp"], micro_seqs=plan["micro_batch"],
        global_seqs=workload.global_batch, seq_len=workload.seq_len,
        local_seqs=workload.local_batch,
        sharding=str(plan["sharding"]), hsdp_shard=plan.get("hsdp_shard") or None,
        sequence_parallel=bool(plan.get("sequence_parallel", False)),
        checkpointing=str(plan["checkpointing"]),
        precision=str(workload.precision), dispatcher=str(workload.dispatcher),
        ep_overlap=workload.ep_overlap, dispatch_fp8=workload.dispatch_fp8,
        tp_comm_overlap=workload.tp_comm_overlap,
        full_iteration_cuda_graph=workload.full_iteration_cuda_graph,
        layer_cuda_graphs=workload.layer_cuda_graphs,
        stack=str(workload.stack), optimizer=str(workload.optimizer),
        fp8_recipe=str(workload.fp8_recipe), fp8_param_gather=workload.fp8_param_gather,
        fp4_param_gather=workload.fp4_param_gather,
        routing=str(workload.routing), pad_to_capacity=workload.pad_to_capacity,
        router_balancing=router_balancing(workload.geometry, workload.traits.router_balancing),
        recompute_modules=workload.recompute_modules,
        recompute_block_fraction=workload.recompute_block_fraction,
        cross_entropy=None if workload.cross_entropy is None else str(workload.cross_entropy),
        grad_reduce_in_fp32=workload.grad_reduce_in_fp32,
        offloaded_activation_layers=workload.offloaded_activation_layers,
        optimizer_dtype=str(workload.optimizer_dtype),
        dp_comm_overlap=workload.dp_comm_overlap,
        max_nodes_per_token=workload.max_nodes_per_token,
        fp8_glu_inputs=workload.fp8_glu_inputs, fused_grouped_mlp=workload.fused_grouped_mlp,
        fp8_dot_product_attention=workload.fp8_dot_product_attention,
        quantised_gemms=str(workload.quantised_gemms),
        expert_gemm=str(workload.expert_gemm),
        fsdp_keep_gathered=workload.fsdp_keep_gathered, loss_chunks=workload.loss_chunks,
        torch_compile=workload.torch_compile,
        moe_permute=None if workload.moe_permute is None else str(workload.moe_permute),
        eager_kernels=None if workload.eager_kernels is None else str(workload.eager_kernels),
        attention_kernel=(None if workload.attention_kernel is None
                          else str(workload.attention_kernel)),
        fsdp_gather=None if workload.fsdp_gather is None else str(workload.fsdp_gather),
        vocab_in_pipeline_split=workload.vocab_in_pipeline_split,
        pipeline_layout=None if layout is None else layout.text,
        pipeline_layout_derived=layout is not None and layout.derived,
        stage_split=workload.stage_split,
        routing_imbalance=workload.routing_imbalance,
        pipeline_schedule=workload.traits.pipeline_schedule,
        gpus_per_node=None if system is None else system.gpus_per_node,
        architecture=None if system is None else system.device.architecture,
        stack_version=getattr(job, "stack_version", None),
        train_tokens=getattr(job, "train_tokens", None),
        train_goodput=getattr(job, "train_goodput", None),
        assumptions=tuple(job.assumptions), job=job_document(job), source=source,
    )


def _catalog_system(system_name: str) -> Any:
    """The catalog system of that name; None where the name is not in the catalog."""
    from mosaic.hardware import get_system

    try:
        return get_system(system_name)
    except MosaicInputError:
        return None


# The workload settings beside layout, batch, precision, dispatcher and routing that the
# prediction reads, with the value that means "not set" (Workload's defaults): a target
# writes each one that is set, or lists it as not expressed (:func:`unexpressed`).
WORKLOAD_SETTINGS: dict[str, object] = {
    "recompute_modules": None, "recompute_block_fraction": None, "cross_entropy": None,
    "grad_reduce_in_fp32": True, "offloaded_activation_layers": 0, "optimizer_dtype": "fp32",
    "dp_comm_overlap": True, "max_nodes_per_token": None, "fp8_glu_inputs": False,
    "fused_grouped_mlp": False, "fp8_dot_product_attention": False,
    "quantised_gemms": "all", "expert_gemm": "grouped", "fsdp_keep_gathered": False,
    "loss_chunks": 1,
    "torch_compile": None, "moe_permute": None, "eager_kernels": None,
    "attention_kernel": None,
    "fsdp_gather": None, "vocab_in_pipeline_split": False, "pipeline_layout": None,
    "routing_imbalance": None,
    "ep_overlap": False, "dispatch_fp8": False, "tp_comm_overlap": False,
    "full_iteration_cuda_graph": False, "layer_cuda_graphs": False, "pipeline_schedule": None,
}
# Settings that only say how the modelled run behaves, with nothing a launcher sets: a
# measured router imbalance, the stack's own kernels and code paths
DESCRIPTIVE = {"routing_imbalance": "a property of the trained router, not a launch setting",
               "moe_permute": "the stack's MoE token-movement code, not a launch setting",
               "eager_kernels": "the eager model code's norm, RoPE and activation kernels "
                                "(its torch version), not a launch setting",
               "fsdp_gather": "the stack's FSDP gather granularity, not a launch setting"}


def set_settings(spec: ExportSpec) -> dict[str, object]:
    """The settings of :data:`WORKLOAD_SETTINGS` the spec sets (DualPipe counts as set;
    1F1B is every target's schedule)."""
    found = {}
    for name, unset in WORKLOAD_SETTINGS.items():
        value = getattr(spec, name)
        if name == "pipeline_schedule":  # a schedule matters only with pipeline stages
            unset = value if value in (None, "1f1b") or spec.pp == 1 else None
        if value != unset and not (name == "recompute_modules" and spec.checkpointing
                                   != "selective"):
            found[name] = value
    return found


def unexpressed(spec: ExportSpec, written: AbstractSet[str], target: str) -> list[str]:
    """One NOT EXPRESSED line for each set setting the target neither writes (``written``)
    nor flags itself: what the prediction read that the file does not carry."""
    lines = []
    for name, value in set_settings(spec).items():
        if name in written or (name == "pipeline_layout" and spec.pipeline_layout_derived):
            continue  # (a derived layout is uneven_stages, which each target handles)
        text = " ".join(value) if isinstance(value, tuple) else value
        why = DESCRIPTIVE.get(name, f"{target} has no setting for it")
        lines.append(f"performance.{name} {text} (the prediction used it; {why})")
    return lines


def _plan_geometry(optimum: dict[str, Any], source: str) -> Geometry:
    """The optimum's geometry: its model block (a `--backbone` plan), else a ladder point
    (q, E, K, G)."""
    if "model" in optimum:
        from mosaic.config.model_schema import geometry_from_document

        return geometry_from_document({"model": optimum["model"]}, f"{source}: optimum")
    try:
        q = int(optimum["q"])
        experts = optimum.get("experts")
        return ladder_geometry(q, None if experts is None else int(experts),
                               None if experts is None else int(optimum["top_k"]),
                               int(optimum.get("split_factor") or 1))
    except KeyError as exc:
        raise MosaicInputError(f"{source}: optimum has no field {shown(exc.args[0])}; expected "
                               "the output of `mosaic plan --json`") from None


def _optimum_layout(document: dict[str, Any], source: str, geometry: Geometry, stack: str
                    ) -> tuple[dict[str, Any], int, int, str | None, tuple[str, ...]]:
    """(layout, global batch, sequence length, dispatcher, assumptions) of a plan
    document's optimum.

    Its ``parallelism`` and ``batch`` blocks (docs/schema.md) when present, resolved as a
    job's are (config.layout.plan_from_blocks: an unstated field gets the job's default, not
    one of the export's own; a review found sequence parallelism off and etp 1 for blocks
    a job costs with them on); else the ``plan`` row and the envelope's batch of older plan
    documents.
    """
    optimum, envelope = document["optimum"], document.get("envelope") or {}
    if "parallelism" in optimum and "batch" in optimum:
        from mosaic.config.blocks import BatchBlock, ParallelismBlock
        from mosaic.config.layout import plan_from_blocks
        from mosaic.perf.constraints import layout_rules
        from mosaic.perf.plan import Checkpointing
        from mosaic.perf.workload import Workload
        from mosaic.schema_validation import validate_mapping

        where = f"{source}: optimum.parallelism"
        block = validate_mapping(ParallelismBlock, optimum["parallelism"], where)
        batch = validate_mapping(BatchBlock, optimum["batch"], f"{source}: optimum.batch")
        if block.dp is None:
            raise MosaicInputError(f"{where}: dp not stated (a plan's optimum states it)")
        workload = Workload(geometry, batch.global_seqs, batch.seq_len, stack=stack)
        notes: list[str] = []
        plans = plan_from_blocks(
            block, batch, dp=block.dp, layers=geometry.layers, is_moe=geometry.is_moe,
            stack=stack, measured=False, notes=notes, where=where,
            checkpointing=Checkpointing.parse((optimum.get("plan") or {}).get(
                "checkpointing", "none")),
            layout_rules=layout_rules(workload))
        layout = {**plans.row(0), **block.model_dump(include={
            "pipeline_layout", "ep_overlap", "dispatch_fp8", "tp_comm_overlap",
            "hsdp_shard"})}  # unstated: the whole dp group, as the file says it
        return (layout, batch.global_seqs, batch.seq_len, block.dispatcher,
                tuple(f"plan {note}" for note in notes))
    step = document.get("optimum_step") or {}
    plan = dict(optimum.get("plan") or {}) | dict(step.get("plan") or {})
    missing = [k for k in ("tp", "pp", "cp", "dp", "ep", "micro_batch") if k not in plan]
    if missing or "global_batch" not in envelope or "seq_len" not in envelope:
        raise MosaicInputError(f"{source}: plan document lacks {missing or 'envelope batch'}")
    return plan, int(envelope["global_batch"]), int(envelope["seq_len"]), None, ()


def _megatron_scores_groups(top_k: int, router: RouterConfig) -> bool:
    """Whether Megatron-Core can run the router's group limit: it scores a group by the sum
    of its top K/top_groups scores (moe_utils.group_limited_topk), so K must be a multiple
    of top_groups (K below it scores every group 0)."""
    return (router.limits_groups and router.top_groups is not None
            and top_k % router.top_groups == 0)


def split_plan_reference(path: str | Path) -> tuple[Path, int | None]:
    """``PLAN.json#N`` -> (the plan file, rank N of its ranked candidates, 1 = the optimum);
    a path without a rank, or one that exists as written, gives (path, None)."""
    text = str(path)
    head, _, tail = text.rpartition("#")
    if not head or Path(head).suffix.lower() != ".json" or path_exists(text):
        return Path(text), None
    if not re.fullmatch(r"[0-9]+", tail) or int(tail) < 1:
        raise MosaicInputError(f"{text}: #{tail} must be a candidate's rank, 1 for the "
                               "optimum, 2 for the runner-up, ...")
    return Path(head), int(tail)


def plan_pick_name(source: str | Path) -> str:
    """What ``PLAN.json`` or ``PLAN.json#N`` exports: 'the optimum' or 'the rank-N candidate'."""
    rank = split_plan_reference(source)[1]
    return "the optimum" if rank in (None, 1) else f"the rank-{rank} candidate"


def plan_candidate(document: dict[str, Any], rank: int, source: str) -> dict[str, Any]:
    """The plan document with its rank-``rank`` trainable candidate as the optimum (1 is the
    optimum itself): what `export` and `compare` read for ``PLAN.json#N``."""
    candidates = document.get("candidates") if isinstance(document, dict) else None
    if not isinstance(candidates, list) or not candidates:
        raise MosaicInputError(f"{source}: the plan lists no ranked candidates")
    if rank > len(candidates):
        raise MosaicInputError(f"{source}: rank {rank} of {len(candidates)} ranked candidates")
    if rank == 1:
        return document
    chosen = candidates[rank - 1]
    if not isinstance(chosen, dict):
        raise MosaicInputError(f"{source}: candidate {rank} is not a mapping")
    # the optimum's step breakdown describes the optimum only (the candidate has no coverage
    # block of its own either; it has its law extrapolation flags)
    return {key: value for key, value in document.items() if key != "optimum_step"} | {
        "optimum": chosen}


def spec_from_plan_document(document: dict[str, Any], source: str) -> ExportSpec:
    """From the JSON of ``mosaic plan --json`` (its optimum and the optimum's layout); a
    document of another shape (a hand-edited or truncated plan) is refused in one line."""
    if not isinstance(document, dict) or "optimum" not in document:
        raise MosaicInputError(f"{source}: not a `mosaic plan --json` document (no 'optimum')")
    for block in ("optimum", "envelope"):
        if document.get(block) and not isinstance(document[block], dict):
            raise MosaicInputError(f"{source}: '{block}' is a {type(document[block]).__name__}"
                                   "; a `mosaic plan --json` document holds a mapping there")
    try:
        return _spec_from_plan(document, source)
    except MosaicInputError as exc:  # the geometry's and layout's own rules: name the file
        if str(exc).startswith(f"{source}:"):
            raise
        raise MosaicInputError(f"{source}: {exc}") from None
    except (TypeError, ValueError, AttributeError) as exc:  # a field of the wrong type
        raise MosaicInputError(f"{source}: not a well-formed `mosaic plan --json` document "
                               f"({type(exc).__name__}: {exc})") from None


def _spec_from_plan(document: dict[str, Any], source: str) -> ExportSpec:
    optimum = document["optimum"]
    if not optimum:
        raise MosaicInputError(f"{source}: the plan has no trainable optimum to export")
    envelope = document.get("envelope") or {}
    geometry = _plan_geometry(optimum, source)
    stack = str(envelope.get("stack", DEFAULT_STACK))
    plan, global_batch, seq_len, dispatcher, defaulted = _optimum_layout(document, source,
                                                                         geometry, stack)
    precision, recipe, assumed = _plan_precision(envelope)
    spec = ExportSpec(
        geometry=geometry,
        tp=int(plan["tp"]), pp=int(plan["pp"]), vpp=int(plan.get("vpp") or 1),
        cp=int(plan["cp"]), dp=int(plan["dp"]), ep=int(plan.get("ep") or 1),
        etp=int(plan.get("etp") or 1), micro_seqs=int(plan["micro_batch"]),
        global_seqs=global_batch, seq_len=seq_len,
        sharding=str(plan.get("sharding", "zero1")),
        hsdp_shard=plan.get("hsdp_shard") or None,
        sequence_parallel=bool(plan.get("sequence_parallel",
                                        default_sequence_parallel(int(plan["tp"])))),
        checkpointing=str(plan.get("checkpointing", "none")),
        precision=precision, fp8_recipe=recipe, assumptions=(*defaulted, *assumed),
        dispatcher=str(dispatcher or envelope.get("dispatcher", "alltoall")),
        ep_overlap=bool(plan.get("ep_overlap") or envelope.get("ep_overlap", False)),
        dispatch_fp8=bool(plan.get("dispatch_fp8", False)),
        tp_comm_overlap=bool(plan.get("tp_comm_overlap", False)),
        full_iteration_cuda_graph=bool(envelope.get("full_iteration_cuda_graph", False)),
        fp8_param_gather=bool(envelope.get("fp8_param_gather", False)),
        fp4_param_gather=bool(envelope.get("fp4_param_gather", False)),
        grad_reduce_in_fp32=bool(envelope.get("grad_reduce_in_fp32", True)),
        cross_entropy=envelope.get("cross_entropy"),
        fused_grouped_mlp=(bool(envelope.get("fused_grouped_mlp", False))
                           and experts_fuse_grouped_mlp(geometry)),
        quantised_gemms=str(envelope.get("quantised_gemms", "all")),
        # the optimizer the plan costed every candidate with (plans before it said: AdamW)
        optimizer=str(envelope.get("optimizer", "adamw")),
        optimizer_dtype=str(envelope.get("optimizer_dtype", "fp32")),
        pipeline_layout=plan.get("pipeline_layout") or None,
        stack=stack, source=source,
        router_balancing=router_balancing(geometry, get_stack(stack).router_balancing),
        train_tokens=float(optimum["tokens"]) if optimum.get("tokens") else None,
        train_goodput=(envelope.get("goodput") or {}).get("goodput"),
        repeated_data_note=_repeated_data_note(document),
        warnings=_cheapest_budget_warnings(document),
        # the profile's file where the plan recorded one (a user's profile), else its name
        calibration=((document.get("calibration") or {}).get("file")
                     or (document.get("calibration") or {}).get("name")),
        gpus_per_node=_plan_gpus_per_node(envelope, source),
        # the GPU generation, as a job's system gives it (a trial's B200 plan was told of
        # Hopper's CUDA_DEVICE_MAX_CONNECTIONS rule, which a job file of it was not)
        architecture=_plan_architecture(envelope),
    )
    release = envelope.get("stack_version")
    return replace(spec, stack_version=None if release is None else str(release),
                   job=_with_release(_plan_job_document(spec, envelope,
                                                        document.get("layout_limits") or {}),
                                     release, source))


def _repeated_data_note(document: dict[str, Any]) -> str | None:
    """The plan's loss counted its tokens as repeats of ``--unique-tokens`` (Muennighoff et
    al. 2023's effective data D'); a job has no field for it, so `compare` of the exported
    job reads every token as new and its loss is lower (a trial: 1.3371 against the plan's
    1.3472, unsaid)."""
    unique = (document.get("search_space") or {}).get("unique_tokens")
    optimum = document["optimum"]
    if not unique or not optimum.get("effective_tokens"):
        return None
    return (f"the plan's loss counts repeated data: {float(unique):.4g} unique tokens, "
            f"{float(optimum.get('epochs') or 0):.3g} epochs, effective D' "
            f"{float(optimum['effective_tokens']):.4g} of {float(optimum['tokens']):.4g}; a job "
            "has no field for unique tokens, so `mosaic compare` of this job reads every token "
            "as new (a lower loss)")


def _cheapest_budget_warnings(document: dict[str, Any]) -> tuple[str, ...]:
    """A plan of ``--target-loss`` answers with its cheapest budget (``cheapest.choice``),
    but its ``optimum`` and candidates are the planned envelope's: exported, a trial launched
    the envelope's run (10 days, 629 B tokens) for a target the plan met in 7.35 days
    (462 B tokens), unsaid. Says so, and how to export the cheapest budget's job."""
    choice = (document.get("cheapest") or {}).get("choice") or {}
    envelope = document.get("envelope") or {}
    if not choice or ((choice.get("nodes"), choice.get("days"))
                      == (envelope.get("nodes"), envelope.get("days"))):
        return ()
    nodes, days = choice["nodes"], float(choice["days"])
    tokens = (choice.get("optimum") or {}).get("tokens")
    budget = f"{nodes} nodes x {days:.4g} days" + (
        f" ({float(tokens):.4g} tokens, loss {float(choice['loss']):.4f})"
        if tokens and choice.get("loss") is not None else "")
    return (f"this is the planned envelope's pick ({envelope.get('nodes')} nodes x "
            f"{float(envelope.get('days') or 0):.4g} days), not the cheapest budget reaching "
            f"the target loss {document['cheapest'].get('target_loss')}: {budget}; to export "
            f"that one, plan again with --nodes {nodes} --days {days:.6g} (no --target-loss)",)


def _with_release(document: dict[str, Any], release: Any, source: str) -> dict[str, Any]:
    """The plan's job document naming the stack release it was planned on, with every
    setting that release's recipes could fill written as the plan ran it (the canonical
    :func:`~mosaic.config.job_schema.job_document`), so the job predicts the plan's step
    again (a trial's exported job lost '26.04'). Checked by loading it: where the release's
    recipes for this model would still change what the plan ran (a recipe's recompute
    modules or pipeline layout for a DeepSeek-V3 shape, a review), where the job's node type
    is not in the active catalog (the plan's ``--catalog`` not given again), or without a
    release, the document as it is."""
    if release is None:
        return document
    from mosaic.config.job_schema import job_document, job_from_document

    with warnings.catch_warnings():  # the job's own load says them once, not here again
        warnings.simplefilter("ignore")
        try:
            planned = job_from_document(deepcopy(document), source)
            released = job_document(replace(planned, stack_version=str(release))) | {
                block: document[block] for block in ("search", "training") if block in document}
            reloaded = job_from_document(deepcopy(released), source)
        except MosaicInputError:
            return document
    return released if _same_prediction(planned, reloaded) else document


def _same_prediction(a: Any, b: Any) -> bool:
    """Whether two job specs predict the same step time and memory (under the default
    calibration: a setting that changes neither, e.g. a GDN option of a model without
    GDN layers, is no difference)."""
    from mosaic.evaluate.job import predict_job
    from mosaic.perf.calibration import default_calibration

    calibration = default_calibration()
    try:
        first, second = (predict_job(spec, calibration).prediction for spec in (a, b))
    except MosaicInputError:
        return False
    return bool(np.isclose(first.step_time_s[0], second.step_time_s[0], rtol=1e-12)
                and np.isclose(first.memory_bytes[0], second.memory_bytes[0], rtol=1e-12))


def _plan_gpus_per_node(envelope: dict[str, Any], source: str) -> int | None:
    """The GPUs per node of a plan's node type: its envelope's ``gpus_per_node``, which
    must be a whole number and, where the catalog has the ``system``, that system's own
    (the job document exported names the system, and the layout checks read its count). A
    hand-edited 'abc' ended in a TypeError in the MaxText export and was written as
    torchrun's --nproc_per_node by the torchtitan one; 3 on an 8-GPU node set MaxText's
    DCN split by it."""
    from mosaic.hardware import get_system

    stated = envelope.get("gpus_per_node")
    if stated is not None and (isinstance(stated, bool) or not isinstance(stated, int)
                               or stated < 1):
        raise MosaicInputError(f"{source}: envelope.gpus_per_node is {shown_number(stated)}; "
                               "a `mosaic plan --json` document holds a whole number of GPUs "
                               "there")
    try:
        system = get_system(str(envelope.get("system")))
    except MosaicInputError:  # refused by the layout checks, with the catalog hint
        return stated
    if stated is not None and stated != system.gpus_per_node:
        raise MosaicInputError(f"{source}: envelope.gpus_per_node {stated} is not system "
                               f"{system.name}'s {system.gpus_per_node} (an edited plan?); "
                               "rerun `mosaic plan` for another node type")
    return system.gpus_per_node


def _plan_architecture(envelope: dict[str, Any]) -> str | None:
    """The GPU generation of a plan's node type (its envelope's ``system``), None where the
    catalog no longer has it."""
    from mosaic.hardware import get_system

    try:
        return get_system(str(envelope.get("system"))).device.architecture
    except MosaicInputError:
        return None


def _plan_precision(envelope: dict[str, Any]) -> tuple[str, str, tuple[str, ...]]:
    """(precision, FP8 recipe, assumption lines) of a plan's envelope: a recipe name such as
    'mxfp8' states its recipe; plain 'fp8' takes the envelope's ``fp8_recipe`` (the recipe
    the plan ran, stated or its stack's default), else, in plan documents from before it
    was written, the stack's default, as the planner's workload does
    (mosaic.perf.workload.Workload._resolve_fp8_recipe)."""
    from mosaic.perf.workload import (
        FP4_RECIPES,
        Fp8Recipe,
        default_fp8_recipe,
        precision_lane,
        stated_fp8_recipe,
    )
    from mosaic.perf.workload import FP8_RECIPES as RECIPE_NAMES

    name = str(envelope.get("precision", "bf16"))
    stack = str(envelope.get("stack", DEFAULT_STACK))
    recipe = stated_fp8_recipe(name)
    if recipe is None and envelope.get("fp8_recipe"):  # the recipe the plan ran
        return "fp8", str(Fp8Recipe(envelope["fp8_recipe"])), ()
    if recipe is None:  # plain fp8: the stack's default recipe
        recipe = default_fp8_recipe(stack)
        assumed = (f"fp8 recipe not stated in the plan: {recipe} ({stack}'s default, as "
                   "planned)",)
        return "fp8", str(recipe), assumed
    if name in RECIPE_NAMES or name in FP4_RECIPES:
        return precision_lane(name), str(recipe), ()
    return name, str(Fp8Recipe.NONE), ()


def _plan_job_document(spec: ExportSpec, envelope: dict[str, Any],
                       layout_limits: dict[str, Any]) -> dict[str, Any]:
    """The job file of a plan's optimum (docs/schema.md blocks): what `mosaic perf` reads to
    predict that one layout again, and the layout options the plan narrowed in its search
    block, which `mosaic layouts` keeps to."""
    from mosaic.config.convert import model_document
    from mosaic.config.job_schema import SEARCH_LIMIT_FIELDS, training_block
    from mosaic.config.layout import batch_document
    from mosaic.perf.constraints import stated_dispatcher_refused

    parallelism: dict[str, Any] = {
        "tp": spec.tp, "pp": spec.pp, "vpp": spec.vpp, "cp": spec.cp, "dp": spec.dp,
        "ep": spec.ep, "etp": spec.etp, "sequence_parallel": spec.sequence_parallel,
        "sharding": spec.sharding}
    # (a stack's default the layout rules refuse stated stays the default, as in a job's)
    if not stated_dispatcher_refused(spec.stack, spec.dispatcher, spec.ep, spec.etp):
        parallelism["dispatcher"] = spec.dispatcher
    if spec.sharding == "hsdp" and spec.hsdp_shard:
        parallelism["hsdp_shard"] = spec.hsdp_shard
    for flag in ("ep_overlap", "dispatch_fp8", "tp_comm_overlap"):
        if getattr(spec, flag):
            parallelism[flag] = True
    if spec.pipeline_layout is not None:
        parallelism["pipeline_layout"] = spec.pipeline_layout
    from mosaic.perf.workload import job_precision_name

    performance: dict[str, Any] = {"precision": job_precision_name(spec.precision),
                                   "checkpointing": spec.checkpointing, "stack": spec.stack}
    if spec.fp8_recipe != "none":
        performance["fp8_recipe"] = spec.fp8_recipe
    if spec.full_iteration_cuda_graph:
        performance["full_iteration_cuda_graph"] = True
    for name in ("fp8_param_gather", "fp4_param_gather", "fused_grouped_mlp",
                 "fp8_dot_product_attention"):
        if getattr(spec, name):
            performance[name] = True
    if not spec.grad_reduce_in_fp32:
        performance["grad_reduce_in_fp32"] = False
    if spec.quantised_gemms != "all":
        performance["quantised_gemms"] = spec.quantised_gemms
    if spec.cross_entropy is not None:
        performance["cross_entropy"] = spec.cross_entropy
    if spec.optimizer_dtype != "fp32":
        performance["optimizer_dtype"] = spec.optimizer_dtype
    hardware: dict[str, Any] = {"system": envelope.get("system")}
    if envelope.get("nodes") is not None:
        hardware["nodes"] = envelope["nodes"]
    headroom = envelope.get("memory_headroom") or {}
    if headroom.get("origin") not in (None, "default"):  # a stated or the stack's share
        hardware["usable_memory_fraction"] = headroom.get("usable_memory_fraction")
    return {"model": model_document(spec.geometry),
            "parallelism": parallelism,
            "batch": batch_document(spec.global_seqs, spec.seq_len, spec.micro_seqs),
            "performance": performance,
            "optimizer": {"kind": spec.optimizer},
            "search": {"devices": spec.n_devices} | {
                name: value for name, value in layout_limits.items()
                if name in SEARCH_LIMIT_FIELDS},
            "hardware": {k: v for k, v in hardware.items() if v is not None}} | (
        training_block(spec.train_tokens, spec.train_goodput))
