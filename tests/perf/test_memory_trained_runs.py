"""The mechanisms that let trained runs fit, each hand-computed: Transformer Engine's in-place
cross entropy, a bf16 optimizer (no fp32 master, bf16 moments), FSDP units kept gathered
through the step, and NeMo AutoModel's experts outside FSDP; the published trained runs."""

import warnings
from pathlib import Path

import pytest

from mosaic.arch import Geometry, MoEConfig
from mosaic.config.run_records import load_run_records
from mosaic.evaluate.record_settings import apply_record_settings
from mosaic.perf.memory import (
    logits_bytes,
    memory_breakdown_bytes,
    stage_memory_breakdown_bytes,
    stage_parameters,
    total_memory_bytes,
)
from mosaic.perf.plan import Checkpointing, Sharding, single_plan
from mosaic.perf.workload import OptimizerDtype, Workload
from mosaic.stacks import get_stack
from mosaic.units import GIB

ROOT = Path(__file__).resolve().parents[2]
PUBLISHED = ROOT.parent / "shared" / "calibration" / "published_runs.yaml"
AT_REST = ("weights", "gradients", "optimizer_states", "master_weights")


def dense() -> Geometry:
    return Geometry(layers=2, d_model=64, heads=4, kv_heads=2, head_dim=16, ffn=160,
                    vocab=1000, norm="rmsnorm")


def moe() -> Geometry:
    return Geometry(layers=2, d_model=64, heads=4, kv_heads=2, head_dim=16, ffn=160,
                    vocab=1000, norm="rmsnorm",
                    moe=MoEConfig(experts=8, top_k=2, expert_ffn=32, shared_experts=1))


def test_te_cross_entropy_keeps_only_the_bf16_logits():
    """TE parallel_cross_entropy writes the gradient into the bf16 logits in place: 2 B per
    logit element, a third of Megatron's native fused loss (bf16 + fp32 copy, 6 B)."""
    plan = single_plan(tp=2, dp=4, micro_batch=2)
    elements = 2 * 128 * 1000 / 2  # b·s × V/tp
    te = Workload(dense(), global_batch=16, seq_len=128, cross_entropy="te")
    native = Workload(dense(), global_batch=16, seq_len=128)
    assert logits_bytes(te, plan, "last")[0] == pytest.approx(2 * elements)
    assert logits_bytes(native, plan, "last")[0] == pytest.approx(6 * elements)


def test_megatron_bridge_recipes_run_the_te_loss():
    assert get_stack("megatron-bridge").cross_entropy == "te"
    assert get_stack("megatron-core").cross_entropy == "fused"


@pytest.mark.parametrize("stack, fp32_per_param, bf16_per_param", [
    # Megatron ZeRO-1 over dp = 8, bf16 grads: weights 2 + grads 2 + (master 4 + Adam 8)/8;
    # bf16 optimizer: 2 + 2 + Adam in bf16 4/8, no master.
    ("megatron-core", 2 + 2 + 12 / 8, 2 + 2 + 4 / 8),
])
def test_bf16_optimizer_under_zero1_by_hand(stack, fp32_per_param, bf16_per_param):
    plan = single_plan(dp=8, micro_batch=1, sharding=Sharding.ZERO1)
    params = stage_parameters(dense(), plan, "first").total[0]
    for dtype, per_param in (("fp32", fp32_per_param), ("bf16", bf16_per_param)):
        work = Workload(dense(), global_batch=16, seq_len=128, stack=stack,
                        grad_reduce_in_fp32=False, optimizer_dtype=dtype)
        parts = stage_memory_breakdown_bytes(work, plan, "first")
        assert sum(parts[n][0] for n in AT_REST) == pytest.approx(per_param * params)
    bf16 = Workload(dense(), global_batch=16, seq_len=128, optimizer_dtype="bf16")
    assert bf16.optimizer_dtype is OptimizerDtype.BF16
    assert stage_memory_breakdown_bytes(bf16, plan, "first")["master_weights"][0] == 0


def test_torch_fsdp_on_bf16_parameters_keeps_8_bytes_per_parameter():
    """torch FSDP2 on bf16 parameters: a bf16 shard (2), a gradient cast to the shard's
    dtype (2) and Adam's zeros_like moments (2 × 2) = 8 B/param, half of the fp32 case
    (fp32 shard 4 + fp32 grad 4 + moments 8 = 16)."""
    plan = single_plan(dp=8, micro_batch=1, sharding=Sharding.FSDP,
                       checkpointing=Checkpointing.FULL)
    params = stage_parameters(dense(), plan, "first").total[0] / 8
    for dtype, per_param in (("fp32", 16), ("bf16", 8)):
        work = Workload(dense(), global_batch=16, seq_len=128, stack="nemo-automodel",
                        optimizer_dtype=dtype)
        parts = stage_memory_breakdown_bytes(work, plan, "first")
        assert sum(parts[n][0] for n in AT_REST) == pytest.approx(per_param * params)


def test_fsdp_kept_gathered_holds_the_stage_without_pp():
    """pp = 1, 16 sequences over dp 4 at micro-batch 1: 4 micro-batches. Kept gathered,
    the whole stage is gathered in bf16 and its gradients accumulate unsharded in fp32
    (2 + 4 B per parameter); otherwise two gathered units and one unit's gradient."""
    plan = single_plan(dp=4, micro_batch=1, sharding=Sharding.FSDP,
                       checkpointing=Checkpointing.FULL)
    params = stage_parameters(dense(), plan, "first")
    kept = Workload(dense(), global_batch=16, seq_len=128, stack="nemo-automodel",
                    fsdp_keep_gathered=True)
    resharded = Workload(dense(), global_batch=16, seq_len=128, stack="nemo-automodel")
    buffers = stage_memory_breakdown_bytes(kept, plan, "first")["communication_buffers"][0]
    assert buffers == pytest.approx((2 + 4) * params.total[0])
    unit, block = params.largest_unit[0], params.largest_block[0]
    per_unit = stage_memory_breakdown_bytes(resharded, plan, "first")["communication_buffers"]
    assert per_unit[0] == pytest.approx(2 * (unit + block) + 4 * unit)


def test_fsdp_kept_gathered_with_one_micro_batch_reduces_each_units_gradient():
    """One micro-batch per step (16 sequences over dp 4 at micro-batch 4): no accumulation,
    so each unit's gradient is reduce-scattered in its backward: the stage's bf16
    parameters plus one unit's fp32 gradient."""
    plan = single_plan(dp=4, micro_batch=4, sharding=Sharding.FSDP,
                       checkpointing=Checkpointing.FULL)
    params = stage_parameters(dense(), plan, "first")
    kept = Workload(dense(), global_batch=16, seq_len=128, stack="nemo-automodel",
                    fsdp_keep_gathered=True)
    buffers = stage_memory_breakdown_bytes(kept, plan, "first")["communication_buffers"][0]
    assert buffers == pytest.approx(2 * params.total[0] + 4 * params.largest_unit[0])


def test_automodel_leaves_experts_without_an_expert_dp_group_out_of_fsdp():
    """dp = ep = 8: every expert-data-parallel group has one rank. AutoModel's MoE
    parallelizer makes the experts ignored_params of FSDP, so a stage kept gathered holds
    only the non-expert parameters gathered; torchtitan wraps them all the same."""
    plan = single_plan(dp=8, ep=8, micro_batch=1, sharding=Sharding.FSDP,
                       checkpointing=Checkpointing.FULL)
    params = stage_parameters(moe(), plan, "first")
    send = 2 * 2 * 128 * 64  # EP all-to-all send buffer: 2 B × K·T copies × h
    for stack, gathered in (("nemo-automodel", params.non_expert[0]),
                            ("torchtitan", params.total[0])):
        work = Workload(moe(), global_batch=64, seq_len=128, stack=stack,
                        fsdp_keep_gathered=True)
        buffers = stage_memory_breakdown_bytes(work, plan, "first")["communication_buffers"]
        assert buffers[0] == pytest.approx((2 + 4) * gathered + send)


def test_automodel_experts_with_an_expert_dp_group_are_gathered():
    plan = single_plan(dp=8, ep=4, micro_batch=1, sharding=Sharding.FSDP,
                       checkpointing=Checkpointing.FULL)  # edp = 2
    params = stage_parameters(moe(), plan, "first")
    work = Workload(moe(), global_batch=64, seq_len=128, stack="nemo-automodel",
                    fsdp_keep_gathered=True)
    send = 2 * 2 * 128 * 64
    buffers = stage_memory_breakdown_bytes(work, plan, "first")["communication_buffers"]
    assert buffers[0] == pytest.approx((2 + 4) * params.total[0] + send)


def _published():
    if not PUBLISHED.exists():
        pytest.skip("../shared/calibration/published_runs.yaml not available")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {r.id: r for r in apply_record_settings(load_run_records(PUBLISHED)).records}


@pytest.mark.parametrize("run_id", [
    "nemo2407-nemotron-340b-h100-128-fp8",
    "bridge2509-llama3-70b-gb200-64-fp8cs",
    "bridge2511-llama3-70b-gb200-64-fp8cs",
    "automodel-deepseek-v3-h100-256-bf16",
    "automodel-qwen3-30b-a3b-h100-8-bf16",
])
def test_trained_runs_fit_the_device_with_their_recipes_settings(run_id):
    record = _published()[run_id]
    total = total_memory_bytes(memory_breakdown_bytes(record.workload, record.plan))[0]
    capacity = record.system.device.hbm_bytes
    assert total <= capacity, f"{run_id}: {total / GIB:.1f} GiB"


def test_qwen3_30b_on_automodel_by_hand():
    """Qwen3-30B-A3B on 8 H100s, FSDP 8 = EP 8 (AutoModel @ 01926a5c44): 16 experts of
    48 layers × 3·2048·768 on each GPU (3.62e9 parameters) at 2 + 2 + 4 B in bf16, the
    non-expert 1.54e9 sharded 8 ways at 8 B and kept gathered at 2 + 4 B."""
    record = _published()["automodel-qwen3-30b-a3b-h100-8-bf16"]
    parts = memory_breakdown_bytes(record.workload, record.plan)
    experts = 16 * 48 * 3 * 2048 * 768
    params = stage_parameters(record.workload.geometry, record.plan, "first")
    assert params.expert[0] == experts
    non_expert = params.non_expert[0]
    assert 1.5e9 < non_expert < 1.6e9
    at_rest = sum(parts[n][0] for n in AT_REST)
    assert at_rest == pytest.approx(8 * (experts + non_expert / 8))
    assert parts["master_weights"][0] == 0
    send = 2 * 8 * (4 * 4096) * 2048  # EP send buffer: K·T token copies × h in bf16
    assert parts["communication_buffers"][0] == pytest.approx(6 * non_expert + send)


def test_job_files_carry_the_optimizer_dtype_and_kept_gathered_fsdp():
    from mosaic.config.job_schema import job_document, job_from_document, load_job

    job = load_job(ROOT / "examples" / "fsdp_moe_comm_bound.yaml",
                   ["hardware.system=DGX-H100"])
    assert job.workload.optimizer_dtype is OptimizerDtype.FP32
    assert not job.workload.fsdp_keep_gathered
    document = job_document(job)
    assert "optimizer_dtype" not in document["performance"]  # defaults stay implicit
    document["performance"] |= {"optimizer_dtype": "bf16", "fsdp_keep_gathered": True}
    amended = job_from_document(document, "amended.yaml")
    assert amended.workload.optimizer_dtype is OptimizerDtype.BF16
    assert amended.workload.fsdp_keep_gathered
    again = job_from_document(job_document(amended), "again.yaml")
    assert again.workload == amended.workload
    document["performance"]["optimizer_dtype"] = "fp16"
    from mosaic.errors import MosaicInputError
    with pytest.raises(MosaicInputError, match="optimizer_dtype"):
        job_from_document(document, "bad.yaml")


def _mla(q_lora_rank, moe_config=None) -> Geometry:
    from mosaic.arch import MLAConfig

    mla = MLAConfig(q_lora_rank=q_lora_rank, kv_lora_rank=32, qk_nope_head_dim=16,
                    qk_rope_head_dim=8, v_head_dim=16)
    return Geometry(layers=2, d_model=64, heads=4, kv_heads=4, head_dim=16, ffn=160,
                    vocab=1000, norm="rmsnorm", attention="mla", mla=mla, moe=moe_config)


@pytest.mark.parametrize("q_lora_rank, saved_width", [
    # wq (4 × 24), wkv_a (32 + 8), wkv_b (4 × (16 + 16)), wo (64): 1st and 3rd saved; four
    # attention matmuls, so the FFN's W1 (160) and W2 (64) are the 5th and 7th.
    (None, 4 * 24 + 4 * 32 + 160 + 64),
    # wq_a (16), wq_b (96), wkv_a (40), wkv_b (128), wo (64): 1st, 3rd, 5th saved; five, so
    # of W1, W3, W2 only W3 (the 7th) is.
    (16, 16 + 40 + 64 + 160),
])
def test_torchtitan_per_op_sac_of_an_mla_block_by_hand(q_lora_rank, saved_width):
    """torchtitan's per-op SAC saves every second aten.mm of a block, the attention output
    (4 heads × v 16) with its fp32 log-sum-exp, and the block input (h = 64); 256 tokens."""
    from mosaic.perf.memory import activation_bytes_per_layer

    plan = single_plan(dp=8, micro_batch=2, checkpointing=Checkpointing.SELECTIVE)
    work = Workload(_mla(q_lora_rank), global_batch=16, seq_len=128, stack="torchtitan")
    tokens = 256
    expected = 2 * tokens * (64 + saved_width + 4 * 16) + 4 * tokens * 4
    assert activation_bytes_per_layer(work, plan, "dense")[0] == pytest.approx(expected)


def test_torchtitan_per_op_sac_of_an_mla_moe_block_by_hand():
    """MLA with q_lora (five attention matmuls): of the gate (8 experts), the shared
    expert's W1, W3 (32 each) and W2 (64), the 2nd and 4th are saved: W1 and W2; the
    dispatch and combine all-to-all outputs (K·T = 2 × 256 copies × h) with ep = 2."""
    from mosaic.perf.memory import activation_bytes_per_layer

    moe_config = MoEConfig(experts=8, top_k=2, expert_ffn=32, shared_experts=1)
    plan = single_plan(dp=8, ep=2, micro_batch=2, checkpointing=Checkpointing.SELECTIVE)
    work = Workload(_mla(16, moe_config), global_batch=16, seq_len=128, stack="torchtitan")
    tokens = 256
    attention = 2 * tokens * (64 + 16 + 40 + 64 + 4 * 16) + 4 * tokens * 4
    expected = attention + 2 * tokens * (32 + 64) + 2 * 2 * (2 * tokens) * 64
    assert activation_bytes_per_layer(work, plan, "moe")[0] == pytest.approx(expected)
