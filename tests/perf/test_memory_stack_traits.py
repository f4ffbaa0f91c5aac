"""What each stack allocates: loss working set, FSDP shard storage, MoE combine; OOM rows."""

import warnings
from pathlib import Path

import pytest

from mosaic.arch import Geometry, MLAConfig, MoEConfig
from mosaic.config.run_records import load_run_records
from mosaic.errors import MosaicInputError
from mosaic.evaluate.record_settings import apply_record_settings
from mosaic.perf.headroom import memory_headroom
from mosaic.perf.memory import (
    COMPONENTS,
    activation_bytes_per_layer,
    logits_bytes,
    stage_activation_bytes,
    stage_memory_breakdown_bytes,
    stage_parameters,
    total_memory_bytes,
)
from mosaic.perf.plan import Checkpointing, Sharding, single_plan
from mosaic.perf.workload import Workload

EXTRA_RUNS = Path(__file__).resolve().parents[2] / "src/mosaic/evaluate/data/extra_runs.yaml"


def geometry() -> Geometry:
    return Geometry(layers=2, d_model=64, heads=4, kv_heads=2, head_dim=16, ffn=160,
                    vocab=1000, norm="rmsnorm")


def workload(stack: str, **overrides) -> Workload:
    return Workload(geometry(), global_batch=16, seq_len=128, stack=stack, **overrides)


# One micro-batch of 2 sequences x 128 tokens = 256 tokens, vocab 1000.
@pytest.mark.parametrize("stack, overrides, tp, bytes_per_logit", [
    ("megatron-core", {}, 1, 6),  # bf16 logits + fp32 copy, softmax and gradient in place
    # eager: saved log-softmax + dense nll gradient + its backward output
    ("torchtitan", {"torch_compile": False}, 1, 12),
    # eager under loss_parallel: saved result, zeros, exp(x), their sum
    ("torchtitan", {"torch_compile": False}, 2, 16),
    # compiled with the model (trait compiled_loss): saved bf16 logits + bf16 gradient
    ("torchtitan", {}, 1, 4),
    ("torchtitan", {"cross_entropy": "fp32_upcast"}, 1, 12),  # a stated loss wins
    ("megatron-core", {"cross_entropy": "fp32_upcast"}, 1, 12),  # the workload overrides
    ("nemo-automodel", {}, 1, 8),  # bf16: logits, saved log-softmax, nll grad, its backward
])
def test_loss_working_set_by_hand(stack, overrides, tp, bytes_per_logit):
    plan = single_plan(tp=tp, dp=8 // tp, micro_batch=2, sharding=Sharding.FSDP)
    elements = 256 * 1000 / tp
    got = logits_bytes(workload(stack, **overrides), plan, "last")
    assert got[0] == pytest.approx(bytes_per_logit * elements)


def test_torch_fsdp_keeps_no_bf16_shard_while_megatron_fsdp_does():
    """torch FSDP2 keeps the sharded parameter in its fp32 dtype (the optimizer's master):
    16 B/param at rest (fp32 param 4 + fp32 grad 4 + Adam 8), Megatron FSDP 18 B."""
    plan = single_plan(dp=8, micro_batch=1, sharding=Sharding.FSDP,
                       checkpointing=Checkpointing.FULL)
    params = stage_parameters(geometry(), plan, "first").total[0] / 8  # pp = 1: all of them
    at_rest = ("weights", "gradients", "optimizer_states", "master_weights")
    for stack, per_param in (("torchtitan", 16), ("megatron-core", 18)):
        parts = stage_memory_breakdown_bytes(workload(stack), plan, "first")
        assert sum(parts[name][0] for name in at_rest) == pytest.approx(per_param * params)


def test_torch_fsdp_storage_only_changes_fully_sharded_plans():
    plan = single_plan(dp=8, micro_batch=1, sharding=Sharding.ZERO1)
    titan = stage_memory_breakdown_bytes(workload("torchtitan"), plan, "first")
    megatron = stage_memory_breakdown_bytes(workload("megatron-core"), plan, "first")
    assert titan["weights"][0] == megatron["weights"][0] > 0


def _predicted_peak_bytes(record) -> float:
    first = stage_memory_breakdown_bytes(record.workload, record.plan, "first")
    last = stage_memory_breakdown_bytes(record.workload, record.plan, "last")
    assert set(first) == set(COMPONENTS)
    return float(max(total_memory_bytes(first)[0], total_memory_bytes(last)[0]))


# Recorded OOMs the model does not reach, each a documented gap (docs/memory.md, "Known
# misses"); the list must shrink as the model learns them, never grow silently.
KNOWN_OOM_MISSES = {
    # torchtitan's DeepEP branch: 13.7 GiB more per 4096-token sequence (LBS 8 -> 10 on the
    # same 128 GPUs) although every block is checkpointed; mosaic counts 3.2
    "tt2237-qwen3-30b-a3b-b200-128-ep8-lbs16-deepep-oom",
    "tt2237-qwen3-30b-a3b-b200-128-ep8-lbs20-deepep-oom",
    # NeMo AutoModel DeepSeek-V3 on 64 GB200: the recipe's 27.6 GB per sequence under
    # whole-block checkpointing (lbs 1 -> 4) against mosaic's 7.9 GiB (lbs 2 -> 4)
    "automodel-deepseek-v3-gb200-64-bf16-te-gmm-lbs4-oom",
}


def test_every_recorded_oom_is_predicted_above_the_memory_a_plan_may_fill():
    """The planner's usable memory (perf.headroom: the share left after allocator
    fragmentation, which the model does not predict) is the line an OOM must cross."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        records = apply_record_settings(load_run_records(EXTRA_RUNS)).records
    ooms = [r for r in records if r.oom]
    assert len(ooms) >= 19
    usable = {r.id: memory_headroom(None, r.workload.stack).usable_fraction
              * r.system.device.hbm_bytes for r in ooms}
    missed = [r.id for r in ooms if _predicted_peak_bytes(r) <= usable[r.id]]
    assert sorted(missed) == sorted(KNOWN_OOM_MISSES)


def test_bf16_gradient_buffers_halve_the_gradients():
    plan = single_plan(dp=8, micro_batch=1, sharding=Sharding.ZERO1)
    fp32 = stage_memory_breakdown_bytes(workload("megatron-core"), plan, "first")
    bf16 = stage_memory_breakdown_bytes(
        workload("megatron-core", grad_reduce_in_fp32=False), plan, "first")
    params = stage_parameters(geometry(), plan, "first").total[0]  # ZeRO-1: grads unsharded
    assert fp32["gradients"][0] == pytest.approx(4 * params)
    assert bf16["gradients"][0] == pytest.approx(2 * params)


def test_cpu_offload_keeps_the_unoffloaded_blocks_and_one_in_transfer():
    """4 blocks, 2 offloaded: blocks 3 and 4 stay, and one offloaded block is resident
    while it is copied, so 3 of 4 blocks' saved activations remain on the GPU."""
    plan = single_plan(dp=8, micro_batch=2, sharding=Sharding.ZERO1)
    geo = Geometry(layers=4, d_model=64, heads=4, kv_heads=2, head_dim=16, ffn=160,
                   vocab=1000, norm="rmsnorm")
    kept = Workload(geo, global_batch=16, seq_len=128)
    offloaded = Workload(geo, global_batch=16, seq_len=128, offloaded_activation_layers=2)
    head_inputs = 2 * 2 * 256 * 64  # final-norm and LM-head inputs, 2 B x 256 tokens x h
    full = stage_activation_bytes(kept, plan, "first")[0] - head_inputs
    part = stage_activation_bytes(offloaded, plan, "first")[0] - head_inputs
    assert part == pytest.approx(0.75 * full)


def test_offloading_every_block_is_refused_and_the_most_keeps_one():
    # Megatron-Core refuses cpu_offloading_num_layers >= num_layers; at the most it allows
    # (1 of 2 blocks) one block stays and one is in transfer: the same bytes as no offload
    with pytest.raises(MosaicInputError, match="below the model's 2 layers"):
        workload("megatron-core", offloaded_activation_layers=99)
    plan = single_plan(dp=8, micro_batch=2, sharding=Sharding.ZERO1)
    none = stage_activation_bytes(workload("megatron-core"), plan, "first")[0]
    one = stage_activation_bytes(workload("megatron-core", offloaded_activation_layers=1),
                                 plan, "first")[0]
    assert one == pytest.approx(none)  # 2 blocks: offloading 1 leaves 1 + 1 in transfer


def moe_geometry() -> Geometry:
    return Geometry(layers=2, d_model=64, heads=4, kv_heads=2, head_dim=16, ffn=160,
                    vocab=1000, norm="rmsnorm",
                    moe=MoEConfig(experts=8, top_k=2, expert_ffn=32, shared_experts=1))


@pytest.mark.parametrize("modules, dropped", [
    (("core_attn",), 0),  # Megatron's default: nothing beyond selective
    (("core_attn", "moe_act"), 512 * 32 * 2),  # the experts' GEMM-2 input: 512 x d_e, bf16
    (("core_attn", "layernorm"), 2 * 256 * 64),  # the MoE block's pre-MLP norm output, bf16
    # gate, up (bf16) and GEMM-2 input (bf16)
    (("core_attn", "shared_experts"), 256 * 32 * (2 * 2 + 2)),
    # Without core_attn the attention core is not checkpointed: its softmax statistics
    # (fp32, 4 heads x 256 tokens) stay.
    (("moe_act",), 512 * 32 * 2 - 4 * 256 * 4),
])
def test_recompute_modules_drop_what_megatron_recomputes(modules, dropped):
    """256 tokens (b 2, s 128) routed to K = 2 experts of width 32: 512 copies."""
    plan = single_plan(dp=8, micro_batch=2, sharding=Sharding.ZERO1,
                       checkpointing=Checkpointing.SELECTIVE)
    base = Workload(moe_geometry(), global_batch=16, seq_len=128)
    with_modules = Workload(moe_geometry(), global_batch=16, seq_len=128,
                            recompute_modules=modules)
    got = (activation_bytes_per_layer(base, plan, "moe")[0]
           - activation_bytes_per_layer(with_modules, plan, "moe")[0])
    assert got == pytest.approx(dropped)


def test_mla_up_proj_drops_the_up_projected_q_k_v():
    mla = MLAConfig(q_lora_rank=None, kv_lora_rank=32, qk_nope_head_dim=16,
                    qk_rope_head_dim=8, v_head_dim=16)
    geo = Geometry(layers=2, d_model=64, heads=4, kv_heads=4, head_dim=16, ffn=160, vocab=1000,
                   norm="rmsnorm", attention="mla", mla=mla)
    plan = single_plan(dp=8, micro_batch=2, sharding=Sharding.ZERO1,
                       checkpointing=Checkpointing.SELECTIVE)
    base = Workload(geo, global_batch=16, seq_len=128)
    up = Workload(geo, global_batch=16, seq_len=128, recompute_modules=("mla_up_proj",))
    # Q: 4 heads x (16 + 8); K and V: 4 heads x (16 + 8 + 16); bf16, 256 tokens; less the
    # softmax statistics (fp32, 4 heads x 256 tokens) now kept: core_attn is not listed.
    expected = 2 * 256 * (4 * 24 + 4 * 40) - 4 * 256 * 4
    got = (activation_bytes_per_layer(base, plan, "dense")[0]
           - activation_bytes_per_layer(up, plan, "dense")[0])
    assert got == pytest.approx(expected)


def test_unknown_recompute_module_is_refused():
    with pytest.raises(MosaicInputError, match="recompute_modules"):
        Workload(geometry(), global_batch=16, seq_len=128, recompute_modules=("attn",))


def test_save_dots_keeps_every_matmul_output_of_a_dense_block():
    """MaxText's minimal_flash policy (jax-xla's selective): per token, the block input (64),
    Q (64), K and V (32 each), the context (64), O (64), W1 and W3 (160 each) and W2 (64),
    bf16; 256 tokens. Norms, SwiGLU and the softmax statistics are recomputed."""
    plan = single_plan(dp=8, micro_batch=2, sharding=Sharding.FSDP,
                       checkpointing=Checkpointing.SELECTIVE)
    per_token = 64 + 64 + 32 + 32 + 64 + 64 + 160 + 160 + 64
    got = activation_bytes_per_layer(workload("jax-xla"), plan, "dense")[0]
    assert got == pytest.approx(2 * 256 * per_token)
    # Megatron's selective keeps more of the same block (norm outputs, SwiGLU product)
    assert activation_bytes_per_layer(workload("megatron-core"), plan, "dense")[0] > got


def test_save_dots_moe_block_keeps_router_logits_expert_and_shared_outputs():
    """256 tokens, 8 experts top-2 of width 32, one shared expert of width 32: the router
    logits (8 per token), each of the 512 routed copies' W1, W3 (32 each) and W2 (64)
    outputs, the shared expert's W1, W3, W2 outputs, on top of the attention part."""
    plan = single_plan(dp=8, micro_batch=2, sharding=Sharding.FSDP,
                       checkpointing=Checkpointing.SELECTIVE)
    moe = Workload(moe_geometry(), global_batch=16, seq_len=128, stack="jax-xla")
    attention_part = 256 * (64 + 64 + 32 + 32 + 64 + 64)
    ffn_part = 256 * 8 + 512 * (32 + 32 + 64) + 256 * (32 + 32 + 64)
    got = activation_bytes_per_layer(moe, plan, "moe")[0]
    assert got == pytest.approx(2 * (attention_part + ffn_part))


def test_maxtext_a3_llama2_7b_fits_with_its_remat_policy():
    """The MaxText A3 8-GPU Llama2-7B run trained (remat_policy minimal_flash, per-device
    batch 4 x 4096): its activations under save-the-matmuls are 32 layers x 16,384 tokens
    x 2 B x (4096 input + 4 x 4096 attention + 4096 context + 2 x 11,008 + 4096)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        record = next(r for r in load_run_records(EXTRA_RUNS).records
                      if r.id == "maxtext2404-llama2-7b-a3-h100-8")
    per_layer = 16384 * 2 * (4096 + 4 * 4096 + 4096 + 2 * 11008 + 4096)
    got = activation_bytes_per_layer(record.workload, record.plan, "dense")[0]
    assert got == pytest.approx(per_layer)
    usable = (memory_headroom(None, record.workload.stack).usable_fraction
              * record.system.device.hbm_bytes)
    assert _predicted_peak_bytes(record) < usable
