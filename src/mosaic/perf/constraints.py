"""Divisibility rules a parallel plan must satisfy, evaluated over arrays of plans.

Each rule yields a boolean array (True = violated) and a message template; the layout
search drops violating plans and can report why, and a single job file with a violation
is rejected with the same message.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from mosaic.perf.pipeline_layout import leaves_empty_chunk, split_slots
from mosaic.perf.plan import Checkpointing, ParallelPlans, Sharding
from mosaic.perf.schedule import (
    dualpipe_pairs_stages,
    interleaved_rounds,
    laid_out,
    microbatches_per_schedule,
    n_microbatches,
    runs_schedule_per_pass,
    uses_dualpipe,
)
from mosaic.perf.workload import Dispatcher, Workload
from mosaic.stacks import StackTraits, get_stack


@dataclass(frozen=True)
class Violation:
    """One rule and the plans that break it; ``derived`` holds per-plan values the rule's
    message names besides the plan's own fields (e.g. micro-batches per schedule)."""

    rule: str
    violated: np.ndarray  # bool per plan
    derived: tuple[tuple[str, np.ndarray], ...] = ()

    def message(self, plans: ParallelPlans, index: int) -> str:
        values = plans.row(index)
        values.update((name, int(np.broadcast_to(value, self.violated.shape)[index]))
                      for name, value in self.derived)
        return self.rule.format(**values)


def _not_divisible(numerator: np.ndarray | int, denominator: np.ndarray | int) -> np.ndarray:
    numerator = np.asarray(numerator)
    denominator = np.asarray(denominator)
    return (denominator <= 0) | (np.mod(numerator, np.maximum(denominator, 1)) != 0)


def _pipeline_split_rule(workload: Workload, plans: ParallelPlans) -> tuple[str, np.ndarray]:
    """Even stages: pp·vpp divides the layers. Uneven stages: the stack's split
    (:attr:`Workload.stage_split`) leaves every chunk at least one block. A stated pipeline
    layout splits the plans of its pp and vpp itself (validated when read)."""
    rule, violated = _split_rule(workload, plans.pp * plans.vpp)
    return rule, violated & ~laid_out(plans, workload.pipeline_layouts)


def _split_rule(workload: Workload, chunks: np.ndarray) -> tuple[str, np.ndarray]:
    layers = workload.geometry.layers
    slots = split_slots(layers, workload.vocab_in_pipeline_split)
    if workload.vocab_in_pipeline_split:
        return (f"pp·vpp={{pp}}·{{vpp}} must divide layers + 2 = {slots} (embedding and loss "
                "each take a pipeline slot)", _not_divisible(slots, chunks))
    split = workload.stage_split
    if split is None:
        return f"pp·vpp={{pp}}·{{vpp}} must divide layers={layers}", _not_divisible(slots, chunks)
    return (f"pp·vpp={{pp}}·{{vpp}} leaves a pipeline chunk without blocks (layers={layers})",
            leaves_empty_chunk(layers, np.maximum(chunks, 1), split))


def _interleaved_microbatches_rule(workload: Workload, plans: ParallelPlans
                                   ) -> tuple[str, np.ndarray] | tuple[str, np.ndarray, dict]:
    """An interleaved pipeline (vpp > 1) needs at least pp micro-batches in each pipeline
    schedule it runs.

    Megatron-Core runs one schedule per step and micro-batches in groups of pp per model
    chunk (microbatch_group_size_per_vp_stage, default pp), refusing fewer micro-batches per
    step than pp: schedules.py @ core_v0.16.0 l. 995-1003, model_parallel_config.py l. 447;
    with fewer, the chunks run one after another and interleaving cannot shrink the bubble.

    A stack that calls the schedule once per gradient-accumulation pass (trait
    ``pipeline_schedule_per_pass``) with a stated local batch builds each schedule from the
    local batch alone: torchtitan's n_microbatches = local_batch_size //
    pipeline_parallel_microbatch_size (distributed/pipeline_parallel.py
    build_pipeline_schedule l. 186-194 @ v0.2.2; num_pp_microbatches "per data-parallel rank
    and gradient accumulation iteration", config/configs.py @ b5bcd76c66), so the count that
    matters is :func:`~mosaic.perf.schedule.microbatches_per_schedule`, not the step's (NeMo
    AutoModel likewise: n_microbatches = local_batch_size // microbatch_size,
    components/distributed/pipelining/functional.py build_pipeline_schedule @ 36044ad3d).
    Below pp·vpp torchtitan only warns ("may result in a bubble in the pipeline", same
    function) and torch's ScheduleInterleaved1F1B runs fewer than pp in one round
    (number_of_rounds = max(1, n_microbatches // pp_group_size): __init__ in
    distributed/pipelining/schedules.py, torch 2.13.0); mosaic's interleaved bubble and
    in-flight formulas (Narayanan et al. 2021, Sec. 2.2.2) assume full rounds of pp, so the
    rule keeps the threshold of pp and counts per schedule."""
    per_step = (f"vpp={{vpp}} > 1 needs at least pp={{pp}} micro-batches per step "
                f"(global_batch={workload.global_batch} / (dp·micro_batch={{dp}}·"
                "{micro_batch}))")
    local = workload.local_batch
    if not runs_schedule_per_pass(local, workload.traits.pipeline_schedule_per_pass):
        return per_step, (plans.vpp > 1) & (n_microbatches(workload, plans) < plans.pp)
    per_schedule = microbatches_per_schedule(workload, plans)
    return (f"vpp={{vpp}} > 1 needs at least pp={{pp}} micro-batches per pipeline schedule; "
            f"{workload.stack} runs one schedule per local batch, of local_seqs/micro_batch="
            f"{{schedule_microbatches}} (local_seqs={local}, micro_batch={{micro_batch}}); "
            "with fewer, interleaving cannot shrink the bubble (the stack warns of it): state "
            "vpp 1, a larger local_seqs or a smaller micro-batch",
            (plans.vpp > 1) & (per_schedule < plans.pp),
            {"schedule_microbatches": per_schedule})


def _torch_interleaved_rounds_rule(workload: Workload, plans: ParallelPlans
                                   ) -> tuple[str, np.ndarray, dict]:
    """torch.distributed.pipelining's interleaved schedules, which the per-pass stacks run
    for vpp > 1 (torchtitan's Interleaved1F1B, as mosaic's export writes it; NeMo AutoModel
    takes its schedule class from torch's get_schedule_class too: components/distributed/
    pipelining/functional.py build_pipeline_schedule l. 822-879 @ 36044ad3d), split a
    schedule's n micro-batches into max(1, n // pp) rounds of equal size and raise
    ValueError when the rounds do not divide n: ScheduleInterleaved1F1B and
    ScheduleInterleavedZeroBubble __init__, distributed/pipelining/schedules.py, torch
    2.13.0 (pp 4: 9 micro-batches make 2 rounds and are refused; 6 make one round and 10
    two, both run). n is the count of one schedule
    (:func:`~mosaic.perf.schedule.microbatches_per_schedule`)."""
    per_schedule = microbatches_per_schedule(workload, plans)
    rounds = interleaved_rounds(per_schedule, plans.pp)
    local = workload.local_batch
    count = (f"local_seqs/micro_batch={{schedule_microbatches}} (local_seqs={local}, "
             "micro_batch={micro_batch})" if local is not None else
             f"global_batch/(dp·micro_batch)={{schedule_microbatches}} (global_batch="
             f"{workload.global_batch}, dp={{dp}}, micro_batch={{micro_batch}})")
    return (f"vpp={{vpp}} > 1: torch's interleaved schedules split the micro-batches of one "
            f"pipeline schedule, {count}, into equal rounds, max(1, n // pp)={{rounds}} of "
            "them (pp={pp}), whose number must divide them (torch's ScheduleInterleaved1F1B "
            "and ScheduleInterleavedZeroBubble raise ValueError otherwise)",
            (plans.vpp > 1) & (plans.pp > 1) & (per_schedule % rounds != 0),
            {"schedule_microbatches": per_schedule, "rounds": rounds})


def _fsdp_shard_expert_rule(plans: ParallelPlans) -> tuple[str, np.ndarray]:
    """A stack that carves its expert groups out of the FSDP shard ranks (trait
    ``expert_groups_in_fsdp_shard``: torchtitan's parallel_dims efsdp = dp_shard·cp·tp /
    (etp·ep)): etp·ep must divide the shard ranks (dp under FSDP or ZeRO, which torchtitan
    runs as FSDP; the HSDP shard group; none without sharding) times cp·tp."""
    shard = np.where(plans.sharding == Sharding.NONE, 1,
                     np.where(plans.sharding == Sharding.HSDP, plans.hsdp_shard, plans.dp))
    return ("etp·ep={etp}·{ep} must divide the FSDP shard ranks·cp·tp (the stack builds its "
            "expert groups inside them: sharding {sharding}, dp={dp}, cp={cp}, tp={tp})",
            (plans.ep > 1) & _not_divisible(shard * plans.cp * plans.tp,
                                            plans.etp * plans.ep))


def _sharding_without_pp_ep_rule(traits: StackTraits, plans: ParallelPlans
                                 ) -> tuple[str, np.ndarray]:
    """Sharding modes the stack runs only at pp = ep = 1 (trait ``sharding_without_pp_ep``):
    NeMo AutoModel runs none, zero1 and zero2 with Megatron-FSDP or DDP, and its
    _create_device_meshes refuses pipeline and expert parallelism under both
    (components/distributed/mesh_utils.py l. 85-99 @ 36044ad3d)."""
    modes = [int(Sharding.parse(name)) for name in traits.sharding_without_pp_ep]
    return (f"sharding {{sharding}} with pp={{pp}}, ep={{ep}}: {traits.name} runs "
            f"{', '.join(traits.sharding_without_pp_ep)} only with pp = ep = 1 (its "
            "Megatron-FSDP and DDP strategies take no pipeline or expert parallelism); "
            "use fsdp or hsdp",
            np.isin(plans.sharding, modes) & ((plans.pp > 1) | (plans.ep > 1)))


def _sharding_without_sequence_parallel_rule(traits: StackTraits, plans: ParallelPlans
                                             ) -> tuple[str, np.ndarray]:
    """Sharding modes the stack runs only without sequence parallelism (trait
    ``sharding_without_sequence_parallel``): NeMo AutoModel runs none, zero1 and zero2 as
    its megatron_fsdp strategy, whose MegatronFSDPConfig has no sequence_parallel option (a
    recipe stating it is refused, "Unknown options for strategy 'megatron_fsdp'":
    components/distributed/config.py _resolve_strategy_config l. 488-491 @ 36044ad3d) and
    whose TP plan is built without it (megatron_fsdp.py l. 125-132). The message names the
    setting refused, then the stack, then the sharding and tp (job_schema.blame_override)."""
    modes = [int(Sharding.parse(name)) for name in traits.sharding_without_sequence_parallel]
    return (f"sequence_parallel on stack {traits.name} with sharding {{sharding}} and "
            f"tp={{tp}}: its Megatron-FSDP strategy, which runs "
            f"{', '.join(traits.sharding_without_sequence_parallel)}, has no sequence "
            "parallelism; state sequence_parallel false, or use fsdp or hsdp (FSDP2)",
            np.isin(plans.sharding, modes) & plans.sequence_parallel & (plans.tp > 1))


def _megatron_moe_rules(workload: Workload, plans: ParallelPlans
                        ) -> list[tuple[str, np.ndarray]]:
    """Megatron-Core's MoE configuration checks (stack trait megatron_moe_rules; a trial's
    exports of layouts mosaic ranked feasible stopped at start-up): add_bias_linear, which
    an attention-output or expert bias needs, only with etp 1 (transformer_config.py
    l. 2612-2615 @ d98e8a64dd); HSDP's dp/hsdp_shard distributed-optimizer instances must
    divide the expert data-parallel size tp·cp·dp/(ep·etp) (parallel_state.py l. 1447)."""
    rules = []
    if workload.geometry.linear_biases:
        rules.append(("etp={etp} > 1 with linear biases: Megatron-Core runs biases in an MoE "
                      "model only with etp=1", plans.etp > 1))
    instances = np.maximum(plans.dp // np.maximum(plans.hsdp_shard, 1), 1)
    expert_dp = plans.edp
    rules.append(("hsdp_shard={hsdp_shard}: its dp/hsdp_shard optimizer instances must divide "
                  "the expert data-parallel size tp·cp·dp/(ep·etp) (Megatron-Core)",
                  (plans.sharding == Sharding.HSDP) & _not_divisible(expert_dp, instances)))
    return rules


def _flex_dispatcher_rules(traits: StackTraits, dispatcher: Dispatcher, ep: np.ndarray,
                           etp: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """A stated DeepEP or HybridEP dispatcher needs more than one rank in the group it runs
    over (stack traits ``deepep_group``, ``hybridep_group``): Megatron-Core's
    MoEFlexTokenDispatcher asserts "DeepEP dispatcher requires TPxEP > 1" over expert-TP x EP
    (token_dispatcher.py l. 1836 @ d98e8a64dd; Megatron-Bridge's apply_flex_dispatcher_backend
    sets flex whatever the EP size, flex_dispatcher_backend.py @ 067f987df); torchtitan
    raises at ep 1 (models/deepseek_v3/infra/parallelize.py @ 1a36996b8); NeMo AutoModel
    builds its DeepEP and HybridEP dispatcher only in apply_ep, which asserts an EP mesh of
    more than one rank (components/moe/parallelizer.py @ 36044ad3d). torchtitan also runs
    DeepEP with etp 1 only (trait ``deepep_etp``: "DeepEP with Expert Tensor Parallelism
    (ETP) is not supported yet", NotImplementedError, same file @ 1a36996b8)."""
    group = {Dispatcher.DEEPEP: traits.deepep_group,
             Dispatcher.HYBRIDEP: traits.hybridep_group}.get(dispatcher)
    rules = []
    if group == "ep":
        rules.append((f"ep={{ep}} with the {dispatcher.value} dispatcher: it needs ep > 1 "
                      f"({traits.name} runs no {dispatcher.value} dispatcher at "
                      "expert_parallel_degree 1); state dispatcher alltoall or ep > 1",
                      ep == 1))
    elif group == "etp_ep":
        rules.append((f"etp·ep={{etp}}·{{ep}} with the {dispatcher.value} dispatcher: "
                      "Megatron-Core's flex dispatcher asserts TPxEP > 1; state dispatcher "
                      "alltoall or etp·ep > 1",
                      ep * etp == 1))
    if dispatcher is Dispatcher.DEEPEP and not traits.deepep_etp:
        rules.append((f"etp={{etp}} with the deepep dispatcher: {traits.name} runs DeepEP "
                      "with etp 1 only (NotImplementedError); state etp 1 or dispatcher "
                      "alltoall", etp > 1))
    return rules


def stated_dispatcher_refused(stack: str, dispatcher: str, ep: int, etp: int) -> bool:
    """Whether the layout rules refuse ``dispatcher`` on a layout of ``ep`` and ``etp`` when
    a job states it (:func:`_flex_dispatcher_rules`), as they do not refuse the stack's
    default: a job or plan written back leaves such a default unstated, so that it loads
    again with the dispatcher it was costed with (the stack's DeepEP on one expert rank).
    False for a name that is no dispatcher (the job's own check refuses it)."""
    if dispatcher not in {member.value for member in Dispatcher}:
        return False
    rules = _flex_dispatcher_rules(get_stack(stack), Dispatcher(dispatcher),
                                   np.asarray([ep]), np.asarray([etp]))
    return any(bool(np.any(broken)) for _, broken in rules)


def plan_violations(workload: Workload, plans: ParallelPlans, n_devices: int, *,
                    split_stated: bool = True) -> list[Violation]:
    """Every rule with the plans that violate it (Appendix D.1 plus Megatron-Core rules).

    ``split_stated`` False: the pipeline's layer split is not known (a recorded layout as
    a job file); Megatron-Core places any split, empty chunks included, with
    ``--pipeline-model-parallel-layout`` (Megatron-Bridge's DeepSeek-V3 recipes put 61 layers
    in 32 chunks, the last holding only the loss), so no split rule applies."""
    geometry = workload.geometry
    moe = geometry.moe
    experts = moe.experts if moe else 1
    micro_batches_per_step = plans.dp * plans.micro_batch
    expert_domain = plans.stage_ranks  # ranks an MoE layer repartitions (Eq. 24)
    rules = [
        (
            "tp·pp·cp·dp = {tp}·{pp}·{cp}·{dp} must equal the device count " + str(n_devices),
            plans.n_devices != n_devices,
        ),
        (f"tp={{tp}} must divide heads={geometry.heads}", _not_divisible(geometry.heads, plans.tp)),
        (
            f"tp={{tp}} must divide kv_heads={geometry.kv_heads} or be a multiple of it",
            _not_divisible(geometry.kv_heads, plans.tp)
            & _not_divisible(plans.tp, geometry.kv_heads),
        ),
        # only where a dense FFN block exists: an all-MoE model's ffn is a placeholder
        # (config.convert), and its experts split over etp (the rule below)
        *([(f"tp={{tp}} must divide ffn={geometry.ffn}", _not_divisible(geometry.ffn, plans.tp))]
          if geometry.dense_layer_count > 0 else []),
        *([_pipeline_split_rule(workload, plans)] if split_stated else []),
        # each sequence is cut into 2·cp chunks, two per CP rank for a balanced causal mask:
        # Megatron-LM arguments.py "seq-length should be a multiple of 2 *
        # context-parallel-size if context-parallel-size > 1"
        (
            f"2·cp=2·{{cp}} must divide seq_len={workload.seq_len} (cp > 1)",
            (plans.cp > 1) & _not_divisible(workload.seq_len, 2 * plans.cp),
        ),
        (
            f"dp·micro_batch={{dp}}·{{micro_batch}} must divide global_batch"
            f"={workload.global_batch}",
            _not_divisible(workload.global_batch, micro_batches_per_step),
        ),
        # a stated local batch: whole micro-batches per pass and whole passes per step
        # (torchtitan trainer.py asserts global_batch_size % (local_batch_size * dp) == 0;
        # NeMo AutoModel step_scheduler.py takes grad_acc_steps = global // (local * dp))
        *([(f"micro_batch={{micro_batch}} must divide local_seqs={local}",
            _not_divisible(local, plans.micro_batch)),
           (f"dp·local_seqs={{dp}}·{local} must divide global_batch={workload.global_batch}",
            _not_divisible(workload.global_batch, plans.dp * local))]
          if (local := workload.local_batch) is not None else []),
        # torchtitan without PP runs each local_batch_size batch in one forward (v0.2.2
        # train.py; micro-batches split it only under PP, pipeline_parallel.py), so a
        # smaller micro-batch at pp 1 would be another local batch
        *([(f"micro_batch={{micro_batch}} must equal local_seqs={local} at pp=1: "
            f"{workload.stack} runs the local batch in one forward without pipeline "
            "parallelism", (plans.pp == 1) & (plans.micro_batch != local))]
          if local is not None and workload.traits.micro_batch_default.local_batch_per_forward
          else []),
        (f"ep={{ep}} must divide experts={experts}", _not_divisible(experts, plans.ep))
        if moe else ("ep={ep} > 1 needs experts: a dense model has none (use ep=1)",
                     plans.ep > 1),
        (
            "etp·ep={etp}·{ep} must divide tp·cp·dp={tp}·{cp}·{dp} (expert mesh, Eq. 24)",
            _not_divisible(expert_domain, plans.expert_group_stride),
        ),
        ("vpp={vpp} > 1 needs pp > 1", (plans.vpp > 1) & (plans.pp == 1)),
        # DualPipe pairs stage r with stage pp - 1 - r (schedule.dualpipe_pairs_stages)
        *([("pp={pp}: DualPipe pairs stage r with stage pp − 1 − r and needs an even pp "
            "(or pp = 1)", ~dualpipe_pairs_stages(plans.pp))]
          if uses_dualpipe(workload) else []),
        _interleaved_microbatches_rule(workload, plans),
        *([_torch_interleaved_rounds_rule(workload, plans)]
          if workload.traits.pipeline_schedule_per_pass else []),
        # activation CPU offloading: Megatron-Core's TransformerConfig refuses it with
        # pipeline parallelism and with any activation recomputation
        # (transformer_config.py __post_init__ @ core_v0.16.0 and main d98e8a64dd)
        *([("pp={pp} > 1 with offloaded_activation_layers="
            f"{workload.offloaded_activation_layers} (Megatron-Core: no pipeline parallelism "
            "with CPU offloading)", plans.pp > 1),
           ("checkpointing={checkpointing} with offloaded_activation_layers="
            f"{workload.offloaded_activation_layers} (Megatron-Core: CPU offloading does not "
            "work with activation recomputation; checkpointing none)",
            plans.checkpointing != Checkpointing.NONE)]
          if workload.offloaded_activation_layers else []),
        *([_fsdp_shard_expert_rule(plans)] if workload.traits.expert_groups_in_fsdp_shard
          else []),
        *([_sharding_without_pp_ep_rule(workload.traits, plans)]
          if workload.traits.sharding_without_pp_ep else []),
        *([_sharding_without_sequence_parallel_rule(workload.traits, plans)]
          if workload.traits.sharding_without_sequence_parallel else []),
        # NeMo AutoModel's MoE parallelizer (ep > 1) refuses sequence parallelism:
        # "sequence_parallel=True is not supported by the custom MoE TP path yet"
        # (components/moe/parallelizer.py l. 233-237 @ 36044ad3d; trait ep_sequence_parallel).
        # The message names the setting refused, then the stack whose trait refuses it, then
        # the degrees: a --set of each is blamed in that order (job_schema.blame_override)
        *([(f"sequence_parallel on stack {workload.traits.name} with tp={{tp}} and "
            "ep={ep}: its MoE parallelizer runs an expert-parallel MoE model's TP without "
            "sequence parallelism; state sequence_parallel false",
            plans.sequence_parallel & (plans.tp > 1) & (plans.ep > 1))]
          if moe is not None and not workload.traits.ep_sequence_parallel else []),
        (
            "hsdp_shard={hsdp_shard} must divide dp={dp}",
            (plans.sharding == Sharding.HSDP) & _not_divisible(plans.dp, plans.hsdp_shard),
        ),
        (
            "ep={ep} and etp={etp} must be 1 for a dense model",
            np.full(len(plans), moe is None) & ((plans.ep > 1) | (plans.etp > 1)),
        ),
    ]
    if moe is not None:
        rules.append(
            (
                f"etp={{etp}} must divide expert_ffn={moe.expert_ffn}",
                _not_divisible(moe.expert_ffn, plans.etp),
            )
        )
    if moe is not None and workload.traits.megatron_moe_rules:
        rules += _megatron_moe_rules(workload, plans)
    if moe is not None and workload.dispatcher_stated:
        rules += _flex_dispatcher_rules(workload.traits, workload.dispatcher, plans.ep,
                                        plans.etp)
    if moe is not None and moe.shared_experts > 0:
        # the shared experts' one MLP splits over tp (its ColumnParallelLinear divides the
        # output size by the tp world size)
        shared = moe.shared_total_width
        rules.append((f"tp={{tp}} must divide the shared experts' width={shared}",
                      _not_divisible(shared, plans.tp)))
    mamba = geometry.mamba
    if mamba is not None:
        # Megatron-Core MambaMixer asserts nheads % tp == 0 and ngroups % tp == 0
        # (megatron/core/ssm/mamba_mixer.py @ d98e8a64dd)
        # and, with context parallelism, MambaContextParallel asserts (nheads/tp) % cp == 0
        # and (ngroups/tp) % cp == 0 or cp % (ngroups/tp) == 0 (mamba_context_parallel.py)
        groups_per_tp = np.maximum(mamba.groups // np.maximum(plans.tp, 1), 1)
        rules += [
            (f"tp={{tp}} must divide mamba.heads={mamba.heads}",
             _not_divisible(mamba.heads, plans.tp)),
            (f"tp={{tp}} must divide mamba.groups={mamba.groups}",
             _not_divisible(mamba.groups, plans.tp)),
            (f"tp·cp={{tp}}·{{cp}} must divide mamba.heads={mamba.heads}",
             _not_divisible(mamba.heads, plans.tp * plans.cp)),
            (f"cp={{cp}} and mamba.groups/tp = {mamba.groups}/{{tp}} must divide one another",
             _not_divisible(groups_per_tp, plans.cp) & _not_divisible(plans.cp, groups_per_tp)),
        ]
    gdn = geometry.gdn
    if gdn is not None:
        # Megatron-Core GatedDeltaNet splits its key and value heads over TP and, with context
        # parallelism, over TP·CP (num_value_heads // tp // cp; gated_delta_net/gdn.py
        # feat_dim_split @ d98e8a64dd)
        if not workload.gdn_context_parallel:
            rules.append(("cp={cp} with gated DeltaNet layers: Megatron-Core before NeMo 26.06 "
                          "refuses context parallelism for them (TransformerConfig asserts)",
                          plans.cp > 1))
        rules += [
            (f"tp·cp={{tp}}·{{cp}} must divide gdn.key_heads={gdn.key_heads}",
             _not_divisible(gdn.key_heads, plans.tp * plans.cp)),
            (f"tp·cp={{tp}}·{{cp}} must divide gdn.value_heads={gdn.value_heads}",
             _not_divisible(gdn.value_heads, plans.tp * plans.cp)),
        ]
    return [Violation(rule=rule[0], violated=np.asarray(rule[1], dtype=bool),
                      derived=tuple(rule[2].items()) if len(rule) > 2 else ())
            for rule in rules]


def rule_text(template: str) -> str:
    """A divisibility rule as people read it: its template without the per-plan value
    slots ('pp·vpp={pp}·{vpp} must divide layers=48' -> 'pp·vpp must divide layers=48'), with
    the fixed factors among them ('2·cp=2·{cp}' -> '2·cp', 'dp·local_seqs={dp}·16' ->
    'dp·local_seqs'; a review found 'dp·local_seqs·16' and raw '{cp}' in `layouts`)."""
    return re.sub(r"=(\d+·)*\{[a-z_]+\}(·(\{[a-z_]+\}|\d+))*", "", template)


def valid_mask(violations: list[Violation], n_plans: int) -> np.ndarray:
    """Plans that break no rule."""
    mask = np.ones(n_plans, dtype=bool)
    for violation in violations:
        mask &= ~violation.violated
    return mask


def broken_rules(violations: list[Violation], plans: ParallelPlans, index: int
                 ) -> dict[str, str]:
    """Every rule plan ``index`` breaks: its template -> the message with the plan's values."""
    return {violation.rule: violation.message(plans, index) for violation in violations
            if violation.violated[index]}


def layout_rules(workload: Workload) -> Callable[[ParallelPlans], dict[str, str]]:
    """The rules a length-1 plan of ``workload`` breaks, on its own device count
    (:func:`broken_rules`): what a stated layout's unstated defaults are checked against
    (config.layout.plan_from_blocks)."""
    return lambda plans: broken_rules(plan_violations(workload, plans,
                                                      int(plans.n_devices[0])), plans, 0)


def first_reason(violations: list[Violation], plans: ParallelPlans, index: int) -> str | None:
    """The first broken rule of plan ``index``, or None if it is valid."""
    for violation in violations:
        if violation.violated[index]:
            return violation.message(plans, index)
    return None
