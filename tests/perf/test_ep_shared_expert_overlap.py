"""Which EP all-to-alls hide behind the shared experts (stack trait ep_shared_expert_overlap).

Megatron-Core's shared-expert overlap (the paper's stack, F.3) runs each direction's dispatch
and combine behind the shared experts of that direction. torchtitan's standard expert
parallelism only overlaps the forward combine: the dispatch is consumed as soon as it lands,
and every backward all-to-all is waited at once (torch Functional.cpp AllToAllSingle::backward).
"""

from dataclasses import replace

import pytest
from pydantic import ValidationError

from mosaic.arch import ladder_geometry
from mosaic.errors import MosaicInputError
from mosaic.hardware import Cluster, get_system
from mosaic.perf.layer_costs import dispatch_all_to_all_s, moe_block_times
from mosaic.perf.machine import machine_for
from mosaic.perf.plan import single_plan
from mosaic.perf.workload import Workload
from mosaic.schema_validation import validate_mapping
from mosaic.stacks import get_stack
from mosaic.stacks.registry import _Entry

# One shared expert (the ladder's default, paper Sec. 3.1) and 64 routed experts, top-4.
GEOMETRY = ladder_geometry(4, experts=64, top_k=4, split_factor=4)
MEGATRON = Workload(geometry=GEOMETRY, global_batch=256, seq_len=4096, stack="megatron-core")
TITAN = replace(MEGATRON, stack="torchtitan")


def _charged(exposed: float, a2a: float) -> float:
    """The exposed all-to-all time plus the 18.9% the hidden rest of the four all-to-alls
    costs the compute beside it (collectives.OVERLAPPED_COLLECTIVE_COMPUTE_SLOWDOWN)."""
    return exposed + 0.189 * (4 * a2a - exposed)


def _machine(nodes: int):
    return machine_for(Cluster(system=get_system("DGX-H100"), n_nodes=nodes), "bf16")


def _one_all_to_all_and_shared_forward(machine, plan) -> tuple[float, float]:
    a2a = float(dispatch_all_to_all_s(machine, TITAN, plan)[0])
    shared_fwd = float(moe_block_times(machine, TITAN, plan).shared_expert[0]) / 3
    return a2a, shared_fwd


@pytest.mark.parametrize("nodes, plan", [
    (1, single_plan(dp=8, ep=8, micro_batch=4)),  # EP in one NVLink domain
    (8, single_plan(dp=64, ep=64, micro_batch=1)),  # EP across 8 nodes
])
def test_torchtitan_exposes_all_but_the_forward_combine(nodes, plan):
    machine = _machine(nodes)
    a2a, shared_fwd = _one_all_to_all_and_shared_forward(machine, plan)
    titan = float(moe_block_times(machine, TITAN, plan).ep_all_to_all[0])
    megatron = float(moe_block_times(machine, MEGATRON, plan).ep_all_to_all[0])
    # Forward: the dispatch whole, the combine beyond the shared experts' forward;
    # backward: both all-to-alls whole.
    assert titan == pytest.approx(_charged(a2a + max(0.0, a2a - shared_fwd) + 2 * a2a, a2a))
    # Megatron-Core: each direction's pair behind that direction's shared-expert compute.
    assert megatron == pytest.approx(_charged(max(0.0, 2 * a2a - shared_fwd)
                                              + max(0.0, 2 * a2a - 2 * shared_fwd), a2a))
    assert titan > megatron


def test_a_combine_shorter_than_the_shared_experts_leaves_three_all_to_alls_exposed():
    machine = _machine(1)
    plan = single_plan(dp=8, ep=8, micro_batch=4)
    # Top-1 routing to wide experts: one all-to-all moves a quarter of the top-4 bytes while
    # the shared expert is four times wider, so the combine hides behind it entirely.
    titan = replace(TITAN, geometry=ladder_geometry(4, experts=64, top_k=1, split_factor=1))
    a2a = float(dispatch_all_to_all_s(machine, titan, plan)[0])
    shared_fwd = float(moe_block_times(machine, titan, plan).shared_expert[0]) / 3
    assert a2a < shared_fwd  # the premise of this case
    assert moe_block_times(machine, titan, plan).ep_all_to_all[0] == pytest.approx(
        _charged(3 * a2a, a2a))
    # Megatron-Core hides the forward pair and, behind twice the shared forward, the
    # backward pair as well whenever 2·a2a fits there.
    megatron = replace(titan, stack="megatron-core")
    assert moe_block_times(machine, megatron, plan).ep_all_to_all[0] == pytest.approx(
        _charged(max(0.0, 2 * a2a - shared_fwd) + max(0.0, 2 * a2a - 2 * shared_fwd), a2a))


def test_the_trait_moves_no_compute_and_dense_stacks_keep_the_default():
    machine = _machine(8)
    plan = single_plan(dp=64, ep=64, micro_batch=1)
    titan, megatron = moe_block_times(machine, TITAN, plan), moe_block_times(machine, MEGATRON,
                                                                             plan)
    # (apart from each stack's own MoE token-movement kernels, perf/moe_permute_traffic)
    assert (titan.compute - titan.moe_permute)[0] == pytest.approx(
        (megatron.compute - megatron.moe_permute)[0])
    assert get_stack("torchtitan").ep_shared_expert_overlap == "forward_combine"
    for name in ("megatron-core", "megatron-bridge", "nemo-automodel", "paper-nemo"):
        assert get_stack(name).ep_shared_expert_overlap == "dispatch_combine"


def test_an_unknown_overlap_value_is_refused_naming_the_field():
    entry = {"description": "d", "keywords": [], "micro_batch_default": "one",
             "interleaved_vpp_default": 1, "fsdp_gather": "block",
             "fsdp_gather_bytes_per_param": 2, "attention_kernel": {"hopper": "fa2"},
             "dropless_host_sync": False, "selective_recompute": "per_op",
             "unstated_recompute": "selective", "cross_entropy": "fused",
             "fsdp_shard_storage": "fp32", "moe_probs_in_activation": False,
             "source": "s", "ep_shared_expert_overlap": "backward_only"}
    with pytest.raises((MosaicInputError, ValidationError)) as error:
        validate_mapping(_Entry, entry, "stack registry")
    assert "ep_shared_expert_overlap" in str(error.value)
