"""Hand-computed checks of the sourced memory mechanisms: eager fp32-norm model code,
DeepSpeed ZeRO's gradient partitions and live parameters, the loss and the recompute
working set never live together, and what a device (nvidia-smi) figure adds."""

from pathlib import Path

import pytest

from mosaic.arch import Geometry
from mosaic.config.run_records import load_run_records
from mosaic.evaluate.validation_report import measured_like
from mosaic.perf.device_memory import (
    CUDA_CONTEXT_BYTES,
    NCCL_CONNECTION_BYTES,
    outside_allocator_bytes,
)
from mosaic.perf.memory import (
    activation_bytes_per_layer,
    eager_elementwise_extra_bytes,
    layer_input_bytes,
    layer_working_set_bytes,
    logits_bytes,
    stage_activation_bytes,
    stage_memory_breakdown_bytes,
    stage_parameters,
)
from mosaic.perf.plan import Checkpointing, Sharding, single_plan
from mosaic.perf.workload import Workload

EXTRA_RUNS = Path(__file__).resolve().parents[2] / "src/mosaic/evaluate/data/extra_runs.yaml"


def geometry(vocab: int = 1000, **overrides) -> Geometry:
    shape = dict(layers=2, d_model=64, heads=4, kv_heads=2, head_dim=16, ffn=160, vocab=vocab,
                 norm="rmsnorm")
    return Geometry(**{**shape, **overrides})


def workload(stack: str, vocab: int = 1000, **overrides) -> Workload:
    return Workload(geometry(vocab), global_batch=16, seq_len=128, stack=stack, **overrides)


# One micro-batch of 2 x 128 = 256 tokens per GPU, d_model 64, SwiGLU FFN 160.
PLAN = dict(dp=8, micro_batch=2, sharding=Sharding.FSDP)


def test_eager_fp32_norm_code_saves_each_norms_fp32_copy_and_the_silu_output():
    """Two norms x 256 tokens x 64 x 4 B (fp32 copy + normalised bf16 - the bf16 input) and
    the SiLU output, 256 x 160 x 2 B: 131,072 + 81,920 = 212,992 B per block."""
    plan = single_plan(**PLAN, checkpointing=Checkpointing.NONE)
    eager = workload("torchtitan", torch_compile=False, eager_kernels="eager_fp32_norm")
    assert eager_elementwise_extra_bytes(eager, plan, "dense")[0] == 212_992
    compiled = workload("torchtitan")
    saved = (activation_bytes_per_layer(eager, plan, "dense")[0]
             - activation_bytes_per_layer(compiled, plan, "dense")[0])
    assert saved == 212_992
    # Inductor fuses them; the native LayerNorm kernel saves its bf16 input as counted.
    assert eager_elementwise_extra_bytes(compiled, plan, "dense")[0] == 0
    assert eager_elementwise_extra_bytes(workload("llm-foundry"), plan, "dense")[0] == 0


def test_pytorch_fused_rmsnorm_saves_no_fp32_copy_but_eager_swiglu_keeps_its_silu():
    """PyTorch >= 2.9's fused RMSNorm (torchtitan's eager default) saves its bf16 input and a
    per-row rstd, as counted: only the eager SwiGLU's SiLU output remains, 256 x 160 x 2 B =
    81,920 B per block (the fp32 era's 212,992 less its two fp32 norm copies)."""
    plan = single_plan(**PLAN, checkpointing=Checkpointing.NONE)
    today = workload("torchtitan", torch_compile=False)
    assert eager_elementwise_extra_bytes(today, plan, "dense")[0] == 81_920


def test_deepspeed_zero_keeps_gradient_partitions_in_the_model_dtype():
    """DeepSpeed get_data_types: bf16 gradients under any ZeRO stage (2 B, sharded over 8);
    fp32 accumulation without ZeRO (4 B, whole). Megatron-Core keeps fp32 buffers."""
    sharded = single_plan(**PLAN)
    params = stage_parameters(geometry(), sharded, "first").total[0]
    deepspeed = workload("deepspeed")
    grads = stage_memory_breakdown_bytes(deepspeed, sharded, "first")["gradients"][0]
    assert grads == pytest.approx(2 * params / 8)
    ddp = single_plan(dp=8, micro_batch=2, sharding=Sharding.NONE)
    assert stage_memory_breakdown_bytes(deepspeed, ddp, "first")["gradients"][0] == (
        pytest.approx(4 * params))
    megatron = stage_memory_breakdown_bytes(workload("megatron-core"), sharded, "first")
    assert megatron["gradients"][0] == pytest.approx(4 * params / 8)


def test_deepspeed_zero3_gathers_up_to_max_live_parameters():
    """Llama-2-7B shapes: 6.7e9 parameters, so the gathered bf16 copies stop at
    stage3_max_live_parameters = 1e9 (2 GB), plus one block's bf16 gradients: the block
    (4 x 4096^2 + 3 x 4096 x 11008 + 2 x 4096 = 202,383,360 parameters) is the largest unit."""
    llama = Workload(Geometry(layers=32, d_model=4096, heads=32, kv_heads=32, head_dim=128,
                              ffn=11008, vocab=32000, norm="rmsnorm"),
                     global_batch=8, seq_len=4096, stack="deepspeed")
    plan = single_plan(dp=8, micro_batch=1, sharding=Sharding.FSDP)
    buffers = stage_memory_breakdown_bytes(llama, plan, "first")["communication_buffers"][0]
    assert buffers == pytest.approx(2 * 1e9 + 2 * 202_383_360)
    # A small model is gathered whole.
    small = single_plan(**PLAN)
    params = stage_parameters(geometry(), small, "first")
    got = stage_memory_breakdown_bytes(workload("deepspeed"), small, "first")
    assert got["communication_buffers"][0] == pytest.approx(
        2 * params.total[0] + 2 * params.largest_unit[0])


def test_loss_and_full_recompute_working_set_are_never_live_together():
    """Full recompute, pp = 1: each of the 2 blocks keeps its input (2 x 256 x 64 =
    32,768 B) and the head two more; the loss (12 B x 256 x 1000 = 3,072,000 B with
    torchtitan's eager loss) is freed before the last block is recomputed, and here it
    exceeds that block's working set, which then adds nothing: 4 x 32,768 = 131,072 B."""
    plan = single_plan(**PLAN, checkpointing=Checkpointing.FULL)
    titan = workload("torchtitan", cross_entropy="fp32_upcast")
    assert layer_input_bytes(titan, plan)[0] == 32_768
    assert logits_bytes(titan, plan, "last")[0] == 3_072_000
    assert layer_working_set_bytes(titan, plan, "dense")[0] < 3_072_000
    assert stage_activation_bytes(titan, plan, "first")[0] == 131_072
    # A vocab of 8: the loss (12 x 256 x 8 = 24,576 B) is smaller; the excess counts.
    tiny = workload("torchtitan", vocab=8, cross_entropy="fp32_upcast")
    excess = layer_working_set_bytes(tiny, plan, "dense")[0] - 24_576
    assert stage_activation_bytes(tiny, plan, "first")[0] == pytest.approx(131_072 + excess)


def test_outside_allocator_bytes_by_hand():
    """NCCL per connection: LL 524,288 + LL128 4,915,200 + Simple 4,194,304 = 9,633,792 B;
    a collective communicator: 16 channels x 3 connections = 462,422,016 B. dp 8 alone:
    context 287,047,680 + one communicator = 749,469,696 B. tp 2, dp 4, pp 2: two
    communicators and two pipeline peers x 16 channels x 4 MiB (134,217,728 B)."""
    assert NCCL_CONNECTION_BYTES == 9_633_792
    assert CUDA_CONTEXT_BYTES == 287_047_680
    assert outside_allocator_bytes(single_plan(dp=8))[0] == 749_469_696
    assert outside_allocator_bytes(single_plan(tp=2, dp=4, pp=2))[0] == (
        287_047_680 + 2 * 462_422_016 + 134_217_728)
    # EP all-to-all: ep - 1 peers on the Simple protocol.
    assert outside_allocator_bytes(single_plan(dp=8, ep=8))[0] == (
        749_469_696 + 7 * 16 * 4_194_304)


def test_device_figures_are_compared_with_the_total_plus_what_lives_outside_the_allocator():
    if not EXTRA_RUNS.exists():
        pytest.skip(f"{EXTRA_RUNS} not found")
    records = {r.id: r for r in load_run_records(EXTRA_RUNS).records}
    flagperf = [r for r in records.values()
                if r.id.startswith("flagperf-") and r.measured_memory_bytes]
    assert flagperf and all(r.memory_measure == "device" for r in flagperf)
    record = records["flagperf-llama2-7b-h800-8-zero3"]
    assert measured_like(record, 1e10) == 1e10 + 749_469_696  # dp 8: one communicator
    titan = records["tt165-llama2-7b-h100-8-fsdp2-compile-ac"]  # peak reserved
    assert titan.memory_measure == "allocator" and measured_like(titan, 1e10) == 1e10
    # Peak active (the source's 23.92% of 95.0396 GiB): the tensors, the total less the
    # 2 GiB runtime reserve that stands for the allocator's extra.
    active = records["tt165-llama2-7b-h100-8-fsdp2-eager-ac"]
    assert active.memory_measure == "allocated"
    assert active.measured_memory_bytes == pytest.approx(22.73 * 2**30)
    assert measured_like(active, 1e10) == 1e10 - 2 * 2**30


def test_megatron_core_up_to_0_7_shifts_the_fp32_logits_out_of_place():
    """core_v0.6.0 cross_entropy.py: bf16 logits 2 + their fp32 copy 4 + the max-shifted
    fp32 tensor 4 = 10 B per element at the forward peak, 256 x 1000 elements: 2,560,000 B
    (6 B, 1,536,000, once the shift is in place from core_v0.8.0)."""
    plan = single_plan(**PLAN)
    old = workload("megatron-core", cross_entropy="fused_out_of_place")
    assert logits_bytes(old, plan, "last")[0] == 2_560_000
    assert logits_bytes(workload("megatron-core"), plan, "last")[0] == 1_536_000


def test_a_chunked_loss_keeps_one_chunks_logits():
    """torchtitan ChunkedCELoss over 8 chunks, eager loss: 12 B x 256 x 1000 / 8 =
    384,000 B."""
    plan = single_plan(**PLAN)
    eager = workload("torchtitan", loss_chunks=8, cross_entropy="fp32_upcast")
    assert logits_bytes(eager, plan, "last")[0] == 384_000
    with pytest.raises(Exception, match="loss_chunks"):
        workload("torchtitan", loss_chunks=0)
    # more chunks than tokens lowered the predicted memory (a fuzz trial: 1e6 chunks of a
    # 2,048-token sequence): refused
    with pytest.raises(Exception, match=r"loss_chunks must lie in 1\.\.seq_len \(128\)"):
        workload("torchtitan", loss_chunks=129)
