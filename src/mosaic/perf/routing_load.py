"""Expert load of the busiest EP rank under each MoE routing regime, and when the per-expert
token counts reach the host.

Every EP rank waits for the busiest one at each MoE layer, so the routed-expert GEMMs and the
all-to-all of a micro-batch take the time of the rank holding the most routed tokens. This
module gives that rank's load as a multiple of the even share (``routed_load_factor``):

- ``balanced`` (forced balance, Megatron-Core --moe-router-force-load-balancing: random router
  logits) and ``unknown`` (left to the calibrated per-regime factor): 1.
- ``token_drop`` with padding (--moe-pad-expert-input-to-capacity): every expert computes
  exactly its capacity, ``capacity_factor`` times the even share (Megatron-Core
  ``MoEAlltoAllTokenDispatcher.preprocess``: capacity·tp·ep tokens per local expert).
- ``token_drop`` without padding: the router drops each expert's tokens beyond
  capacity = ceil(T_local·K/E·capacity_factor) of every source rank (``moe_utils.
  topk_softmax_with_capacity``), before dispatch; the flex/DeepEP path masks the dropped
  pairs out of the dispatch (``_DeepepManager.setup_metadata``), so they are neither sent nor
  computed. No expert exceeds capacity_factor times the even share, and the busiest rank's
  load, the mean of min(expert load, capacity_factor) over its experts, is at most
  min(capacity_factor, imbalance), the value used here
  (docs/evidence/learned_router_load.md).
- ``dropless`` (a learned router without capacity): the imbalance.

The imbalance of a learned router is stated by a source or derived here from the published
expert-level maximal violation of its balancing method (Wang et al. 2024, arXiv:2408.15664,
Table 2: MaxVio_global = max_i load_i / mean load - 1) and the experts per rank
(``learned_router_imbalance``). Sources for the software behaviour: Megatron-LM @ 6a6cd478
(the Megatron-LM-250624 submodule of Pai-Megatron-Patch 2b201af),
megatron/core/transformer/moe/{moe_utils.py, router.py, token_dispatcher.py, fused_a2a.py};
deepseek-ai/DeepEP csrc/deep_ep.cpp (dispatch).
"""

from __future__ import annotations

import math

import numpy as np

from mosaic.arch.geometry import Geometry
from mosaic.perf.plan import ParallelPlans
from mosaic.perf.workload import Dispatcher, Workload

# Expert-level MaxVio_global (max expert load over the mean, minus 1) of a learned router
# by its balancing method: Wang et al. 2024 (arXiv:2408.15664) Table 2, 1B DeepSeekMoE model
# (64 routed experts, top-6) on 100B tokens: auxiliary loss with coefficient 1e-3 (the value
# Pai-Megatron-Patch's Qwen3 scripts and Megatron-Bridge recipes use) 0.72, their
# auxiliary-loss-free bias 0.04 (3B: 0.52 and 0.04). Measured on the validation set's global
# loads, so a lower bound for one micro-batch's.
ROUTER_MAX_VIOLATION = {"aux_loss": 0.72, "loss_free": 0.04}
# The routed experts of the model those violations were measured on (the 1B model above): the
# largest of that many expert loads, from which the expert-level spread is recovered.
ROUTER_MAX_VIOLATION_EXPERTS = 64

# Token-drop runs that do not state a capacity factor: 1.0, the value Megatron-Bridge's
# apply_moe_token_drop sets (src/megatron/bridge/training/utils/moe_token_drop.py @ v0.1.0rc4)
# and the one the recorded token-drop runs state where they state one.
DEFAULT_CAPACITY_FACTOR = 1.0


def learned_router_imbalance(experts: int, ep: np.ndarray | int, max_violation: float,
                             measured_experts: int = ROUTER_MAX_VIOLATION_EXPERTS
                             ) -> np.ndarray:
    """Busiest EP rank's routed tokens over the even share, for ``experts`` spread over
    ``ep`` ranks, from the expert-level maximal violation of the router, measured on a model
    of ``measured_experts`` routed experts.

    Expert loads taken as independent, normally distributed around the mean with relative
    spread s: the largest of the measured model's E_m is about 1 + s·sqrt(2 ln E_m) =
    1 + max_violation, so s = max_violation / sqrt(2 ln E_m). A rank's load is the mean of its
    E/ep experts (spread s / sqrt(E/ep)), and the largest of ep ranks is
    1 + max_violation · sqrt(ln ep / ln E_m) / sqrt(E/ep):
    1 + max_violation with E_m experts, one per rank; less with fewer ranks to take the
    largest of (8 experts on 8 ranks: 1 + max_violation/sqrt(2)); 1 with every expert on one
    rank, falling as 1/sqrt(experts per rank) in between. (The extreme-value factor belongs
    to the E_m loads the violation was read off, not to this model's E.)
    """
    ep = np.asarray(ep, dtype=float)
    if experts < 2:
        return np.ones_like(ep)
    per_rank = experts / ep
    return 1.0 + (max_violation * np.sqrt(np.log(ep) / math.log(measured_experts))
                  / np.sqrt(per_rank))


def router_imbalance(workload: Workload, plans: ParallelPlans) -> np.ndarray:
    """The learned router's busiest-rank load: the workload's stated ``routing_imbalance``,
    else :func:`learned_router_imbalance` for its stack's router balancing."""
    moe = workload.geometry.moe
    if moe is None:
        return np.ones(len(plans))
    if workload.routing_imbalance is not None:
        # one rank receives at most every routed copy: at most ep times the even share
        return np.minimum(workload.routing_imbalance, plans.ep.astype(float))
    violation = ROUTER_MAX_VIOLATION[
        router_balancing(workload.geometry, workload.traits.router_balancing)]
    return learned_router_imbalance(moe.experts, plans.ep, violation)


def stated_router_balancing(geometry: Geometry) -> str | None:
    """The model's stated ``moe.router.balancing`` (a property of the trained model, e.g.
    DeepSeek-V3's expert bias); None where the model states none."""
    moe = geometry.moe
    return None if moe is None or moe.router is None else moe.router.balancing


def router_balancing(geometry: Geometry, stack_balancing: str) -> str:
    """How the learned router is balanced: the model's stated balancing
    (:func:`stated_router_balancing`), else the stack's ``router_balancing`` trait,
    ``stack_balancing``."""
    return stated_router_balancing(geometry) or stack_balancing


def max_domains_per_token(workload: Workload, domains: np.ndarray) -> np.ndarray | None:
    """The most scale-up domains (nodes) one token's experts lie on, per plan whose EP group
    spans ``domains``: the workload's stated ``max_nodes_per_token``, else the model's
    group-limited routing, else None (no limit).

    Group-limited routing (``moe.router.groups``/``top_groups``) picks a token's experts
    inside its ``top_groups`` best groups of consecutive experts; EP ranks hold consecutive
    experts, so a group lies on ceil(D/G) domains when G and D divide one another and can
    straddle one more otherwise. DeepSeek-V3 sets one group per node for node-limited
    routing (arXiv:2412.19437 Sec. 3.2.2, M = 4), as Megatron-Core's moe_router_num_groups
    documents ('set equal to number of nodes in EP group', transformer_config.py @
    d98e8a64dd)."""
    if workload.max_nodes_per_token is not None:
        return np.full(len(domains), float(workload.max_nodes_per_token))
    moe = workload.geometry.moe
    router = None if moe is None else moe.router
    if router is None or not router.limits_groups:
        return None
    assert router.groups is not None and router.top_groups is not None
    d = np.asarray(domains, dtype=np.int64)
    g = router.groups
    aligned = (g % d == 0) | (d % g == 0)
    domains_per_group = -(-d // g) + np.where(aligned, 0, 1)
    return np.minimum(d, router.top_groups * domains_per_group).astype(float)


def capacity_factor(workload: Workload) -> float:
    """The token-drop capacity factor: stated, else :data:`DEFAULT_CAPACITY_FACTOR`."""
    moe = workload.geometry.moe
    stated = None if moe is None else moe.capacity_factor
    return DEFAULT_CAPACITY_FACTOR if stated is None else stated


def routed_load_factor(workload: Workload, plans: ParallelPlans) -> np.ndarray:
    """Routed tokens of the busiest EP rank over the even share, per plan (module docstring)."""
    if workload.geometry.moe is None or workload.routing in ("balanced", "unknown"):
        return np.ones(len(plans))
    if workload.routing == "token_drop":
        cap = capacity_factor(workload)
        if workload.pad_to_capacity:
            return np.full(len(plans), cap)
        return np.minimum(cap, router_imbalance(workload, plans))
    return router_imbalance(workload, plans)  # dropless


def expert_counts_reach_host(workload: Workload) -> bool:
    """Whether each MoE layer waits for its per-expert token counts on the host.

    On stacks that do it (the ``dropless_host_sync`` trait): Megatron-Core's all-to-all
    dispatcher copies the counts to the host and synchronises before the first permutation
    when a capacity factor is set and before the expert all-to-all when dropless; only
    drop-and-pad runs ``no_sync`` (token_dispatcher.py ``preprocess``). Its flex dispatcher
    refuses padding, and DeepEP's normal dispatch busy-waits on the host for the received
    per-expert counts (deep_ep.cpp; Megatron's fused_a2a passes no ``num_worst_tokens``).
    """
    if not workload.traits.dropless_host_sync:
        return False
    drop_and_pad = (workload.routing == "token_drop" and workload.pad_to_capacity
                    and workload.dispatcher is Dispatcher.ALLTOALL)
    return not drop_and_pad


def routing_assumptions(workload: Workload) -> list[str]:
    """One line per routing default the expert-load model fills in for ``workload``, and
    one for a stated capacity factor its routing regime does not read."""
    moe = workload.geometry.moe
    if moe is None:
        return group_limit_assumptions(workload)
    notes = capacity_factor_unread(workload)
    if workload.routing in ("balanced", "unknown"):
        return notes + group_limit_assumptions(workload)
    if workload.routing == "token_drop" and moe.capacity_factor is None:
        notes.append(f"model.moe.capacity_factor not stated with token_drop routing: "
                     f"{DEFAULT_CAPACITY_FACTOR:g} assumed (the default of Megatron-Bridge "
                     "apply_moe_token_drop and NeMo's MegatronTokenDropCallback)")
    # Under token drop the imbalance matters only where the capacity exceeds the even share
    # and the inputs are not padded to it.
    reads_imbalance = workload.routing == "dropless" or (
        not workload.pad_to_capacity and capacity_factor(workload) > 1.0)
    if workload.routing_imbalance is None and reads_imbalance:
        stated = stated_router_balancing(workload.geometry)
        balancing = stated or workload.traits.router_balancing
        source = f"{'the model' if stated else workload.stack}'s {balancing}"
        # A trained router's: Megatron-Core's MoE README (@ 6a6cd478, "OOM Caused by Token
        # Distribution Imbalance when Training From Scratch") reports severe imbalance while the
        # router is under-trained, in the first 100~300 steps from scratch.
        notes.append(f"routing_imbalance not stated: derived from {source} "
                     f"router balancing (expert MaxVio "
                     f"{ROUTER_MAX_VIOLATION[balancing]:g}, Wang et al. 2024) and the experts "
                     "per EP rank, i.e. a trained router's; a router in its first few hundred "
                     "steps from scratch is far less balanced (Megatron-Core MoE README): "
                     "state routing_imbalance for such a run")
    return notes + group_limit_assumptions(workload)


# What each regime other than token_drop costs in place of a capacity (module docstring).
_UNCAPPED_LOAD = {
    "dropless": "no token is dropped; the busiest EP rank carries the router's imbalance",
    "balanced": "forced balance; every EP rank carries the even share",
    "unknown": "the calibrated per-regime factor",
}


def capacity_factor_unread(workload: Workload) -> list[str]:
    """The line saying that a stated ``model.moe.capacity_factor`` is not read: only
    ``token_drop`` routing has a capacity (:func:`routed_load_factor`; the exports leave it
    out too, mosaic.export.spec.JobSpec.routing_notes)."""
    moe = workload.geometry.moe
    if moe is None or moe.capacity_factor is None or workload.routing == "token_drop":
        return []
    return [f"model.moe.capacity_factor {moe.capacity_factor:g} not read: routing is "
            f"{workload.routing} ({_UNCAPPED_LOAD[workload.routing]}); set "
            "performance.routing=token_drop to cost dropping at that capacity"]


def group_limit_assumptions(workload: Workload) -> list[str]:
    """The line saying that the model's group-limited router bounds a deduplicating
    dispatch (:func:`max_domains_per_token`), where it does and nothing stated overrides it."""
    moe = workload.geometry.moe
    router = None if moe is None else moe.router
    if (router is None or not router.limits_groups or workload.max_nodes_per_token is not None
            or not workload.dispatcher.deduplicates_per_node):
        return []
    return [f"the model's group-limited router (experts in the top {router.top_groups} of "
            f"{router.groups} groups of consecutive experts) bounds the nodes a token's "
            f"{workload.dispatcher.value} dispatch reaches; state "
            "performance.max_nodes_per_token to override"]
