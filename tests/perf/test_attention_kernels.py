"""Attention kernel family per stack and GPU generation (published relative rates)."""

from dataclasses import replace

import pytest

from mosaic.arch import ladder_geometry
from mosaic.errors import MosaicInputError
from mosaic.hardware import Cluster, get_system
from mosaic.perf.attention_kernels import (
    gpu_generation,
    materialises_scores,
    resolve_attention_kernel,
    stack_default_kernel,
)
from mosaic.perf.calibration import default_calibration
from mosaic.perf.machine import machine_for
from mosaic.perf.plan import single_plan
from mosaic.perf.step_time import predict_step
from mosaic.perf.workload import Workload
from mosaic.stacks import known_stacks


def test_generations_of_catalog_devices():
    assert gpu_generation("H100-SXM-96GB-500W") == "hopper"
    assert gpu_generation("GB200") == "blackwell"
    assert gpu_generation("A100-SXM-80GB") == "ampere"
    assert gpu_generation("MI300X") == "cdna3"  # no attention-kernel rates: the cuDNN rate
    assert gpu_generation("not-a-catalog-gpu") is None


def test_torchtitan_on_hopper_runs_flash_attention_2_at_fa3_paper_rates():
    # FA3 (≈ cuDNN) is 1.5-2.0x faster than FA2 forward and 1.5-1.75x backward (Shah et
    # al. 2024): midpoints 1.75 and 1.625.
    choice = resolve_attention_kernel(None, "torchtitan", "H100-SXM-80GB")
    assert choice.kernel == "fa2"
    assert choice.fwd_multiplier == pytest.approx(1 / 1.75, abs=1e-3)
    assert choice.bwd_multiplier == pytest.approx(1 / 1.625, abs=1e-3)
    # torchtitan selects cuDNN on Blackwell; Megatron-Core runs cuDNN everywhere.
    assert resolve_attention_kernel(None, "torchtitan", "B200").kernel == "cudnn"
    assert resolve_attention_kernel(None, "megatron-core", "H100-SXM-80GB").fwd_multiplier == 1
    # FA2 is the reference kernel on Ampere.
    assert resolve_attention_kernel("fa2", "megatron-core", "A100-SXM-80GB").fwd_multiplier == 1


def test_kernel_without_a_published_rate_is_refused():
    with pytest.raises(MosaicInputError, match=r"fa3.*blackwell"):
        resolve_attention_kernel("fa3", "megatron-core", "B200")
    with pytest.raises(MosaicInputError, match="allowed values are cudnn, fa2, fa3"):
        resolve_attention_kernel("fa9", "megatron-core", "B200")


def test_fa2_slows_the_attention_core_by_its_relative_rate():
    cluster = Cluster(system=get_system("dgx-h100"), n_nodes=1)
    machine = machine_for(cluster, "bf16")
    workload = Workload(geometry=ladder_geometry(8), global_batch=16, seq_len=8192,
                        attention_kernel="cudnn")
    plan = single_plan(dp=8)
    calibration = replace(default_calibration(), attention_efficiency={})
    cudnn = predict_step(workload, plan, machine, calibration)
    fa2 = predict_step(replace(workload, attention_kernel="fa2"), plan, machine, calibration)
    ratio = fa2.attention_core_s[0] / cudnn.attention_core_s[0]
    # Between the backward (1.625x) and forward (1.75x) slowdowns, less a little launch
    # latency that does not scale.
    assert 1.6 < ratio < 1.75
    assert fa2.attention_kernel == "fa2"
    assert fa2.step_time_s[0] > cudnn.step_time_s[0]


def test_reference_attention_saves_the_score_matrix_unless_recomputed():
    from mosaic.perf.memory import activation_bytes_per_layer, softmax_statistics_bytes
    from mosaic.perf.plan import Checkpointing

    geometry = ladder_geometry(4)  # 16 heads
    flash = Workload(geometry=geometry, global_batch=8, seq_len=4096)
    reference = replace(flash, attention_kernel="reference")
    plan = single_plan(tp=2, cp=2, dp=2, micro_batch=1)
    # bf16 probabilities: 2 B x b (1) x h/tp (8) x s/cp (2048) x s (4096) = 128 MiB a layer.
    assert softmax_statistics_bytes(reference, plan)[0] == 2 * 1 * 8 * 2048 * 4096
    # Flash keeps 4 B of log-sum-exp per query row and head.
    assert softmax_statistics_bytes(flash, plan)[0] == 4 * 1 * 8 * 2048
    none = replace(plan, checkpointing=plan.checkpointing * 0 + int(Checkpointing.NONE))
    selective = replace(plan, checkpointing=plan.checkpointing * 0 + int(Checkpointing.SELECTIVE))
    extra = (activation_bytes_per_layer(reference, none) - activation_bytes_per_layer(flash, none))
    assert extra[0] == 2 * 8 * 2048 * 4096 - 4 * 8 * 2048
    # Core-attention recompute drops whichever the kernel saved: the rest is identical.
    assert activation_bytes_per_layer(reference, selective)[0] == pytest.approx(
        activation_bytes_per_layer(flash, selective)[0])


def test_reference_attention_pays_for_the_full_score_matrix():
    machine = machine_for(Cluster(get_system("DGX-H100"), 1), "bf16")
    geometry = ladder_geometry(4)
    flash = Workload(geometry=geometry, global_batch=8, seq_len=8192, attention_kernel="cudnn")
    reference = replace(flash, attention_kernel="reference")
    plan = single_plan(dp=8)
    calibration = default_calibration()
    fast = predict_step(flash, plan, machine, calibration)
    slow = predict_step(reference, plan, machine, calibration)
    assert slow.attention_kernel == "reference"
    core = "compute_attention_core"
    # Twice the FLOPs (no causal skipping) plus softmax traffic over 8192^2 scores per head.
    assert slow.analytic_breakdown_s[core][0] > 1.5 * fast.analytic_breakdown_s[core][0]


def test_a_generation_without_published_kernel_rates_runs_at_the_cudnn_rate():
    # MI300X states its architecture (cdna3) in the catalog; no kernel table covers it.
    choice = resolve_attention_kernel(None, "megatron-core", "MI300X")
    assert (choice.generation, choice.fwd_multiplier, choice.bwd_multiplier) == (None, 1.0, 1.0)


@pytest.mark.parametrize("stack", sorted(known_stacks()))
def test_memory_reads_the_same_attention_kernel_as_the_time_model(stack):
    """The time model resolves a stack's default kernel with the GPU (resolve_attention_kernel)
    and the memory model without it (stack_default_kernel): on every catalog GPU the two
    agree on what the attention core saves (the score matrix or a log-sum-exp per row), so
    the memory verdict never depends on which of the two ran."""
    for device in ("A100-SXM-80GB", "H100-SXM-80GB", "B200", "GB300", "MI300X"):
        timed = resolve_attention_kernel(None, stack, device).kernel
        for seq_len in (512, 2048, 8192):
            assert materialises_scores(timed, seq_len) == materialises_scores(
                stack_default_kernel(stack), seq_len), (stack, device, seq_len)


def test_levanter_refuses_a_sequence_its_blockwise_attention_cannot_split():
    # flash_attention.py raises for a q axis of a block or more that blocks do not divide
    with pytest.raises(MosaicInputError, match="multiple of its 1024-token block"):
        Workload(geometry=ladder_geometry(4), global_batch=8, seq_len=1536, stack="levanter")
    for seq_len in (512, 1024, 4096):  # under one block it materialises; blocks divide these
        assert Workload(geometry=ladder_geometry(4), global_batch=8, seq_len=seq_len,
                        stack="levanter").seq_len == seq_len
    assert Workload(geometry=ladder_geometry(4), global_batch=8, seq_len=1536).seq_len == 1536


def test_an_amd_gpu_runs_the_flashattention2_algorithm_never_cudnn():
    """cuDNN and FlashAttention-3 are NVIDIA's: on an MI300X a stack whose default is cuDNN
    runs FlashAttention-2 (ROCm's port), and asking for cuDNN or FA3 there is refused."""
    assert resolve_attention_kernel(None, "torchtitan", "MI300X").kernel == "fa2"
    assert resolve_attention_kernel(None, "megatron-core", "MI300X").kernel == "fa2"
    for nvidia_only in ("cudnn", "fa3"):
        with pytest.raises(MosaicInputError, match="NVIDIA GPUs only"):
            resolve_attention_kernel(nvidia_only, "torchtitan", "MI300X")
