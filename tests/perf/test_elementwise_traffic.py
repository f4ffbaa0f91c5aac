"""Element-wise traffic per implementation (docs/evidence/elementwise_fusion.md).

Bytes per token of one Llama-2-7B block (d 4096, 32 heads of 128, MHA, SwiGLU FFN 11008),
forward + backward, counted by hand from each implementation's kernels:

  analytical count (layer_costs): norms+residuals 30 B/d, SwiGLU 18 B/w
      30*4096 + 18*11008                     = 321,024
  Transformer Engine: 44 B/d, RoPE 8 B per q/k element, SwiGLU 16 B/w
      44*4096 + 8*(4096+4096) + 16*11008    = 421,888
  torch.compile (Inductor): 34 B/d, RoPE 8, SwiGLU 16
      34*4096 + 8*8192 + 16*11008           = 380,928
  eager torch (fp32-upcast RMSNorm, complex RoPE, silu then mul): 280 B/d, RoPE 40, 28 B/w
      280*4096 + 40*8192 + 28*11008         = 1,782,784
  eager torch with PyTorch's fused RMSNorm (>= 2.9), RoPE and SwiGLU still eager: 52 B/d
      52*4096 + 40*8192 + 28*11008          =   848,896
"""

from dataclasses import replace
from pathlib import Path

import pytest

from mosaic.config.run_records import load_run_records
from mosaic.evaluate.record_settings import apply_record_settings
from mosaic.perf.calibration import default_calibration
from mosaic.perf.elementwise_traffic import (
    ANALYTICAL_TRAFFIC,
    ElementwiseKernels,
    block_bytes_per_token,
    block_traffic,
    elementwise_kernels,
    elementwise_traffic_multiplier,
)
from mosaic.perf.machine import machine_for
from mosaic.perf.plan import Checkpointing
from mosaic.perf.step_time import predict_step

EXTRA = Path(__file__).resolve().parents[2] / "src/mosaic/evaluate/data/extra_runs.yaml"
BY_HAND = {
    ElementwiseKernels.TE_FUSED: 421_888,
    ElementwiseKernels.INDUCTOR: 380_928,
    ElementwiseKernels.EAGER_FP32_NORM: 1_782_784,
    ElementwiseKernels.EAGER_FUSED_RMSNORM: 848_896,
}
ANALYTICAL_BY_HAND = 321_024


@pytest.fixture(scope="module")
def tt165():
    """torchtitan PR #165's Llama-2-7B rows (eager and compiled, same layout)."""
    records = apply_record_settings(load_run_records(EXTRA)).records
    return {r.id: r for r in records if r.id.startswith("tt165-")}


def test_eager_rmsnorm_kernel_sum():
    """Eager RMSNorm forward: float() 2+4, pow 4+4, mean 4, x*rsqrt 4+4, type_as 4+2,
    *weight 2+2 = 36 B per element; two norms, their backward (92 each) and two residual
    adds with their gradient accumulations (2 x 12) make 280 B per d."""
    forward = (2 + 4) + (4 + 4) + 4 + (4 + 4) + (4 + 2) + (2 + 2)
    assert forward == 36
    assert block_traffic(ElementwiseKernels.EAGER_FP32_NORM).norm_residual_per_d == (
        2 * (forward + 92) + 2 * (6 + 6))


@pytest.mark.parametrize("kernels", sorted(BY_HAND))
def test_block_bytes_by_hand(tt165, kernels):
    workload = tt165["tt165-llama2-7b-h100-8-fsdp2-eager-ac"].workload
    assert block_bytes_per_token(block_traffic(kernels), workload) == BY_HAND[kernels]
    assert block_bytes_per_token(ANALYTICAL_TRAFFIC, workload) == ANALYTICAL_BY_HAND


def test_eager_and_compiled_runs_resolve_by_their_setting(tt165):
    eager = tt165["tt165-llama2-7b-h100-8-fsdp2-eager-ac"].workload
    compiled = tt165["tt165-llama2-7b-h100-8-fsdp2-compile-ac"].workload
    assert eager.torch_compile is False  # record setting
    assert elementwise_kernels(eager) is ElementwiseKernels.EAGER_FP32_NORM
    assert elementwise_kernels(compiled) is ElementwiseKernels.INDUCTOR  # stack default
    ratio = (elementwise_traffic_multiplier(eager)
             / elementwise_traffic_multiplier(compiled))
    assert ratio == pytest.approx(1_782_784 / 380_928)  # 4.68x the bytes
    assert elementwise_traffic_multiplier(eager) == pytest.approx(1_782_784 / 321_024)


def test_no_recompute_no_recomputed_traffic(tt165):
    """Without checkpointing the extra is (m_eager - m_inductor) x the analytical seconds."""
    calibration = replace(default_calibration(), stack_overhead={})
    record = tt165["tt165-llama2-7b-h100-8-fsdp2-compile-noac"]
    assert record.plan.checkpointing[0] == int(Checkpointing.NONE)
    machine = machine_for(record.cluster, record.workload.precision)
    compiled = predict_step(record.workload, record.plan, machine, calibration)
    eager = predict_step(replace(record.workload, torch_compile=False,
                                 eager_kernels="eager_fp32_norm"), record.plan, machine,
                         calibration)
    extra = (eager.analytic_breakdown_s["compute_elementwise_unfused"][0]
             - compiled.analytic_breakdown_s["compute_elementwise_unfused"][0])
    assert extra == pytest.approx(compiled.analytic_breakdown_s["compute_elementwise"][0]
                                  * (1_782_784 - 380_928) / 321_024, rel=1e-9)


def test_te_stack_ignores_torch_compile(tt165):
    workload = replace(tt165["tt165-llama2-7b-h100-8-fsdp2-eager-ac"].workload,
                       stack="megatron-core")
    for compiled in (None, False, True):
        assert elementwise_kernels(replace(workload, torch_compile=compiled)) is (
            ElementwiseKernels.TE_FUSED)


def test_eager_step_slower_by_the_extra_bytes(tt165):
    """Same layout (full AC), eager vs compiled: the step differs by the element-wise extra
    term alone, (m_eager - m_inductor) times the analytical element-wise seconds plus their
    recomputed forward third (backward = 2 x forward in the analytical count)."""
    calibration = replace(default_calibration(), stack_overhead={}, chi_a2a=0.0,
                          chi_pp=0.0, chi_overlap=0.0)
    record = tt165["tt165-llama2-7b-h100-8-fsdp2-compile-ac"]
    machine = machine_for(record.cluster, record.workload.precision)
    compiled = predict_step(record.workload, record.plan, machine, calibration)
    eager = predict_step(replace(record.workload, torch_compile=False,
                                 eager_kernels="eager_fp32_norm"), record.plan, machine,
                         calibration)
    base = compiled.analytic_breakdown_s["compute_elementwise"][0]
    extra = (eager.analytic_breakdown_s["compute_elementwise_unfused"][0]
             - compiled.analytic_breakdown_s["compute_elementwise_unfused"][0])
    assert record.plan.checkpointing[0] == int(Checkpointing.FULL)
    assert extra == pytest.approx(base * (1 + 1 / 3) * (1_782_784 - 380_928) / 321_024,
                                  rel=1e-9)
    assert eager.step_time_s[0] > compiled.step_time_s[0] + 0.99 * extra


def test_fused_rmsnorm_moves_what_the_native_layernorm_moves():
    """aten::_fused_rms_norm: forward reads x, writes y (4); backward writes dx from dy and x
    (6) and the weight gradient reads dy and x again (4); two norms and the residuals' 24:
    52 B per d, the native LayerNorm's count. RoPE and SwiGLU stay the eager ones."""
    fused = block_traffic(ElementwiseKernels.EAGER_FUSED_RMSNORM)
    assert fused.norm_residual_per_d == 2 * (4 + 6 + 4) + 24 == block_traffic(
        ElementwiseKernels.EAGER_NATIVE_NORM).norm_residual_per_d
    fp32 = block_traffic(ElementwiseKernels.EAGER_FP32_NORM)
    assert (fused.rope_per_element, fused.glu_per_element) == (
        fp32.rope_per_element, fp32.glu_per_element)


def test_the_torch_era_decides_the_eager_norm(tt165):
    """torchtitan's eager default is today's (nn.RMSNorm on PyTorch >= 2.9: the fused
    kernel); the 2024 rows run the fp32 composite (record settings), and only eager code
    reads the era: compiled, Inductor's kernels."""
    old = tt165["tt165-llama2-7b-h100-8-fsdp2-eager-ac"].workload
    assert old.eager_kernels == "eager_fp32_norm"  # record setting (PR #165, 2024-03)
    today = replace(old, eager_kernels=None)
    assert elementwise_kernels(today) is ElementwiseKernels.EAGER_FUSED_RMSNORM
    assert elementwise_traffic_multiplier(today) == pytest.approx(848_896 / 321_024)
    assert elementwise_kernels(replace(old, torch_compile=True)) is ElementwiseKernels.INDUCTOR


def test_kernel_notes_say_what_is_costed_and_what_is_ignored():
    """`mosaic perf` names the element-wise and MoE token-movement implementations: the
    stack's default, a stated torch_compile, and that Transformer Engine stacks ignore it."""
    from mosaic.arch import ladder_geometry
    from mosaic.perf.elementwise_traffic import kernel_assumptions
    from mosaic.perf.workload import Workload

    moe = Workload(geometry=ladder_geometry(8, 32, 2, 2), global_batch=64, seq_len=2048)
    assert kernel_assumptions(moe) == [
        "element-wise kernels: te_fused (megatron-core's default)",
        "MoE token movement: torch_index (megatron-core's default)",
        "LM loss: fused (megatron-core's default); one fp32 copy of the logits, max, exp "
        "and gradient in place (Megatron-Core's vocab_parallel_cross_entropy, megatron/core/"
        "tensor_parallel/cross_entropy.py), which runs without --cross-entropy-loss-fusion"]
    stated = replace(moe, torch_compile=True, moe_permute="te_fused", cross_entropy="te")
    assert kernel_assumptions(stated) == [
        "element-wise kernels: te_fused (megatron-core; torch_compile set)",
        "torch_compile has no effect on megatron-core: its model code runs te_fused kernels "
        "either way",
        "MoE token movement: te_fused (moe_permute set)"]
    eager = replace(moe, stack="torchtitan", torch_compile=False)
    assert kernel_assumptions(eager)[0] == (
        "element-wise kernels: eager_fused_rmsnorm (torchtitan; torch_compile set)")
    assert kernel_assumptions(eager)[-1] == "LM loss: fp32_upcast (torchtitan's default)"
    older = replace(eager, eager_kernels="eager_fp32_norm")
    assert kernel_assumptions(older)[0] == (
        "element-wise kernels: eager_fp32_norm (torchtitan; torch_compile and eager_kernels "
        "set)")
    assert "eager_kernels has no effect on a compiled model (torch_compile)" in (
        kernel_assumptions(replace(older, torch_compile=True)))
    # llm-foundry's eager code runs the native LayerNorm and no RoPE: no era to choose (a
    # review: the fused-RMSNorm era there had added 40 B of RoPE to a model without any)
    foundry = replace(moe, stack="llm-foundry", eager_kernels="eager_fused_rmsnorm")
    assert elementwise_kernels(foundry) is ElementwiseKernels.EAGER_NATIVE_NORM
    assert any(note.startswith("eager_kernels has no effect on llm-foundry")
               for note in kernel_assumptions(foundry))
    assert kernel_assumptions(replace(moe, eager_kernels="eager_fp32_norm"))[1] == (
        "eager_kernels has no effect on megatron-core: its model code runs te_fused kernels "
        "either way")
    # compiled blocks compile the loss with them (torchtitan since April 2025): the note
    # says so and how to state an older run's eager loss
    compiled = replace(moe, stack="torchtitan")
    assert kernel_assumptions(compiled)[-1].startswith(
        "LM loss: compiled (torchtitan's default); compiled with the model (4 B per logit)")
    assert "state cross_entropy: fp32_upcast (12 B)" in kernel_assumptions(compiled)[-1]


def test_a_record_stating_torch_compile_keeps_it_over_record_settings():
    """`mosaic perf RUNS.yaml#ID --set torch_compile=true` asks a record "what if": the
    record's own value wins over the record setting that marks the run eager."""
    from mosaic.evaluate.job import load_job_spec

    run = f"{EXTRA}#tt165-llama2-7b-h100-8-fsdp2-eager-ac"
    eager = load_job_spec(Path(run), [])
    compiled = load_job_spec(Path(run), ["torch_compile=true"])
    assert eager.workload.torch_compile is False  # the record setting (PR #165: eager rows)
    assert compiled.workload.torch_compile is True
    assert elementwise_kernels(compiled.workload) is ElementwiseKernels.INDUCTOR


def test_a_stack_moving_less_than_the_analytical_count_shows_no_negative_term():
    """Fused SwiGLU kernels move 16 B per FFN element against the analytical count's 18, so a
    wide-expert, top-8 MoE on compiled torchtitan moves fewer element-wise bytes than the
    count (multiplier < 1): the minimum term takes the difference and no breakdown term is
    negative (a fuzz trial printed compute_elementwise_unfused -0.098 s); the step is the
    sum either way."""
    import numpy as np

    from mosaic.arch import MoEConfig
    from mosaic.arch import ladder_geometry as rung
    from mosaic.hardware import Cluster, get_system
    from mosaic.perf.elementwise_traffic import elementwise_traffic_multiplier
    from mosaic.perf.plan import single_plan
    from mosaic.perf.workload import Workload

    base = rung(4, 64, 8, 1)
    moe = replace(base.moe, expert_ffn=8192)
    assert isinstance(moe, MoEConfig)
    workload = Workload(geometry=replace(base, moe=moe), global_batch=512, seq_len=8192,
                        stack="torchtitan")
    assert elementwise_traffic_multiplier(workload) < 1.0
    machine = machine_for(Cluster(system=get_system("DGX-H200"), n_nodes=8), "bf16")
    plan = single_plan(dp=64, ep=8, micro_batch=1, checkpointing=Checkpointing.FULL)
    step = predict_step(workload, plan, machine, default_calibration())
    terms = np.array([value[0] for value in step.breakdown_s.values()])
    assert (terms >= 0).all()
    assert step.breakdown_s["compute_elementwise_unfused"][0] == 0.0
    assert terms.sum() == pytest.approx(step.step_time_s[0], rel=1e-9)


def test_an_unknown_eager_era_is_refused_naming_the_known_ones():
    from mosaic.errors import MosaicInputError
    from mosaic.evaluate.job import load_job_spec

    run = f"{EXTRA}#tt165-llama2-7b-h100-8-fsdp2-eager-ac"
    with pytest.raises(MosaicInputError, match=r"eager_fp32_norm.*eager_fused_rmsnorm"):
        load_job_spec(Path(run), ["eager_kernels=eager_fp32"])


# QK-norm (docs/evidence/elementwise_fusion.md): bytes per normalised q/k element, forward +
# backward, summed from each implementation's kernels.
QK_NORM_BY_HAND = {
    ElementwiseKernels.TE_FUSED: 4 + 6,  # TE rmsnorm_fwd reads q, writes y; rmsnorm_bwd
    ElementwiseKernels.INDUCTOR: 0 + 2,  # fused into RoPE; its backward reads q too
    ElementwiseKernels.XLA: 0 + 2,  # as Inductor
    ElementwiseKernels.EAGER_FP32_NORM: 36 + 92,  # one eager fp32 RMSNorm's kernels
    ElementwiseKernels.EAGER_FUSED_RMSNORM: 4 + 6 + 4,  # aten::_fused_rms_norm (+ dweight)
    ElementwiseKernels.EAGER_NATIVE_NORM: 4 + 6 + 4,  # F.layer_norm (+ dgamma/dbeta)
}


@pytest.fixture(scope="module")
def qwen3_30b_bridge():
    """Qwen3-30B-A3B on Megatron-Bridge (d 2048, 32 q / 4 kv heads of 128, QK-norm, 128
    experts top-8 of 768, no shared expert)."""
    records = apply_record_settings(load_run_records(EXTRA)).records
    return next(r for r in records if r.id == "bskills-qwen3-30b-a3b-h100-16-ep16-a2a-nooverlap")


def test_qk_norm_block_bytes_by_hand(qwen3_30b_bridge):
    """Transformer Engine, one Qwen3-30B-A3B block, bytes per token: norms and residuals
    44 x 2048 = 90,112; RoPE 8 x (32 + 4) x 128 = 36,864; QK-norm 10 x 4,608 = 46,080;
    SwiGLU 16 x 8 x 768 = 98,304; permute and unpermute (8 + 16) x 8 x 2048 = 393,216:
    664,576, and 618,496 without the q/k norms."""
    workload = qwen3_30b_bridge.workload
    g = workload.geometry
    assert (g.qk_norm, g.d_model, g.heads, g.kv_heads, g.head_dim) == (True, 2048, 32, 4, 128)
    assert elementwise_kernels(workload) is ElementwiseKernels.TE_FUSED
    te = block_traffic(ElementwiseKernels.TE_FUSED)
    assert block_bytes_per_token(te, workload) == 664_576
    without = replace(workload, geometry=replace(g, qk_norm=False))
    assert block_bytes_per_token(te, without) == 618_496
    # the analytical count has no q/k norm: the multiplier carries the whole term
    assert (block_bytes_per_token(ANALYTICAL_TRAFFIC, workload)
            == block_bytes_per_token(ANALYTICAL_TRAFFIC, without))
    assert elementwise_traffic_multiplier(workload) == pytest.approx(
        elementwise_traffic_multiplier(without) * 664_576 / 618_496)


@pytest.mark.parametrize("kernels", sorted(QK_NORM_BY_HAND))
def test_qk_norm_bytes_per_implementation(qwen3_30b_bridge, kernels):
    """Each implementation adds its per-element count times the (32 + 4) x 128 normalised
    q/k elements, whether the norms span one head (Qwen3) or the projection (OLMoE)."""
    workload = qwen3_30b_bridge.workload
    g = workload.geometry
    without = replace(workload, geometry=replace(g, qk_norm=False))
    traffic = block_traffic(kernels)
    added = block_bytes_per_token(traffic, workload) - block_bytes_per_token(traffic, without)
    assert added == QK_NORM_BY_HAND[kernels] * (32 + 4) * 128
    projection = replace(workload, geometry=replace(g, qk_norm_span="projection"))
    assert block_bytes_per_token(traffic, projection) == block_bytes_per_token(traffic, workload)


def test_qk_norm_lengthens_the_step_by_its_bytes(qwen3_30b_bridge):
    """The step's element-wise extra is (multiplier - 1) x the analytical element-wise
    seconds; the analytical count per block is 30 x 2048 + 18 x 8 x 768 + 393,216 = 565,248
    B, so the q/k norms' 46,080 B add 46,080 / (618,496 - 565,248) of the extra without
    them."""
    calibration = replace(default_calibration(), stack_overhead={})
    record = qwen3_30b_bridge
    machine = machine_for(record.cluster, record.workload.precision)
    without = replace(record.workload, geometry=replace(record.workload.geometry,
                                                        qk_norm=False))
    assert block_bytes_per_token(ANALYTICAL_TRAFFIC, without) == 565_248
    with_norm = predict_step(record.workload, record.plan, machine, calibration)
    no_norm = predict_step(without, record.plan, machine, calibration)
    unfused_with = with_norm.analytic_breakdown_s["compute_elementwise_unfused"][0]
    unfused_without = no_norm.analytic_breakdown_s["compute_elementwise_unfused"][0]
    assert unfused_without > 0
    assert unfused_with - unfused_without == pytest.approx(
        unfused_without * 46_080 / (618_496 - 565_248), rel=1e-9)
    assert with_norm.step_time_s[0] > no_norm.step_time_s[0]


# MLA's latent RMSNorms (docs/evidence/elementwise_fusion.md): bytes per normalised element of
# the query latent and of the key/value latent, forward + backward, from each
# implementation's kernels.
LATENT_NORM_BY_HAND = {
    # TE rmsnorm_fwd / rmsnorm_bwd inside TELayerNormColumnParallelLinear (or a TE RMSNorm)
    ElementwiseKernels.TE_FUSED: (4 + 6, 4 + 6),
    # its own kernel between two GEMMs; the kv backward writes dx in place of the split's copy
    ElementwiseKernels.INDUCTOR: (4 + 6, 4 + 6 - 4),
    ElementwiseKernels.XLA: (4 + 6, 4 + 6 - 4),  # as Inductor
    ElementwiseKernels.EAGER_FP32_NORM: (36 + 92, 36 + 92),  # HF DeepseekV3RMSNorm
    ElementwiseKernels.EAGER_FUSED_RMSNORM: (4 + 6 + 4, 4 + 6 + 4),  # aten::_fused_rms_norm
    ElementwiseKernels.EAGER_NATIVE_NORM: (4 + 6 + 4, 4 + 6 + 4),  # F.layer_norm
}


@pytest.fixture(scope="module")
def mla_records():
    """DeepSeek-V3 (d 7168, 128 heads, rope 64, q latent 1536, kv latent 512, top-8 of 2048
    plus one shared 2048) on Megatron-Bridge and on compiled torchtitan, and DeepSeek-V3-16B
    (d 2048, 16 heads, no q latent, kv latent 512, top-6 of 1408 plus 2 x 1408 shared) on
    eager torchtitan (torch >= 2.9)."""
    records = {r.id: r for r in apply_record_settings(load_run_records(EXTRA)).records}
    return {"te": records["bridge2511-deepseekv3-w-o-mtp-gb300-256-bf16"],
            "inductor": records["nebius2603-deepseek-v3-b200-256-tp2pp2ep32-bf16-deepep"],
            "eager": records["tt1789-deepseek-v3-16b-h100-8-lbs4-ep8"]}


# (record, implementation, bytes per token of one block with the latent norms, their part)
MLA_BLOCK_BY_HAND = [
    # 44 x 7168 + 8 x (128 + 1) x 64 + 10 x (1536 + 512) + 16 x (8 + 1) x 2048
    # + (8 + 16) x 8 x 7168 = 315,392 + 66,048 + 20,480 + 294,912 + 1,376,256
    ("te", ElementwiseKernels.TE_FUSED, 2_073_088, 20_480),
    # 34 x 7168 + 66,048 + (10 x 1536 + 6 x 512) + 294,912 + 1,376,256
    ("inductor", ElementwiseKernels.INDUCTOR, 1_999_360, 18_432),
    # 52 x 2048 + 40 x (16 + 1) x 64 + 14 x 512 + 28 x (6 x 1408 + 2816) + 24 x 6 x 2048
    # = 106,496 + 43,520 + 7,168 + 315,392 + 294,912
    ("eager", ElementwiseKernels.EAGER_FUSED_RMSNORM, 767_488, 7_168),
]


@pytest.mark.parametrize(("name", "kernels", "total", "latent"), MLA_BLOCK_BY_HAND)
def test_mla_latent_norm_block_bytes_by_hand(mla_records, name, kernels, total, latent):
    """One MLA block's bytes per token count its q and kv latent norms; the analytical count
    has none, so the multiplier carries the whole term."""
    workload = mla_records[name].workload
    assert elementwise_kernels(workload) is kernels
    traffic = block_traffic(kernels)
    assert block_bytes_per_token(traffic, workload) == total
    assert (elementwise_traffic_multiplier(workload) * block_bytes_per_token(
        ANALYTICAL_TRAFFIC, workload) - total) == pytest.approx(0.0, abs=1e-6)
    assert latent == (LATENT_NORM_BY_HAND[kernels][0] * (workload.geometry.mla.q_lora_rank or 0)
                      + LATENT_NORM_BY_HAND[kernels][1] * workload.geometry.mla.kv_lora_rank)


@pytest.mark.parametrize("kernels", sorted(LATENT_NORM_BY_HAND))
def test_mla_latent_norm_bytes_per_implementation(mla_records, kernels):
    """Each implementation adds its per-element counts times the q latent (1536, gone when
    the query is not compressed) and the kv latent (512 more when it is 1024 wide)."""
    workload = mla_records["te"].workload
    g = workload.geometry
    traffic = block_traffic(kernels)
    q_per, kv_per = LATENT_NORM_BY_HAND[kernels]
    no_q = replace(workload, geometry=replace(g, mla=replace(g.mla, q_lora_rank=None)))
    assert (block_bytes_per_token(traffic, workload) - block_bytes_per_token(traffic, no_q)
            == q_per * 1536)
    wider_kv = replace(workload, geometry=replace(g, mla=replace(g.mla, kv_lora_rank=1024)))
    assert (block_bytes_per_token(traffic, wider_kv) - block_bytes_per_token(traffic, workload)
            == kv_per * 512)
    # the analytical count has no latent norm
    for other in (no_q, wider_kv):
        assert (block_bytes_per_token(ANALYTICAL_TRAFFIC, other)
                == block_bytes_per_token(ANALYTICAL_TRAFFIC, workload))


def test_mla_latent_norms_lengthen_the_step_by_their_bytes(mla_records):
    """DeepSeek-V3 on Transformer Engine: the analytical count per block is 30 x 7168 + 18 x
    9 x 2048 + 1,376,256 = 1,923,072 B; the element-wise extra is proportional to the bytes
    beyond it, 2,073,088 - 1,923,072 with the q latent norm and 2,057,728 - 1,923,072
    without it (10 x 1536 less)."""
    calibration = replace(default_calibration(), stack_overhead={})
    record = mla_records["te"]
    machine = machine_for(record.cluster, record.workload.precision)
    g = record.workload.geometry
    no_q = replace(record.workload, geometry=replace(g, mla=replace(g.mla, q_lora_rank=None)))
    assert block_bytes_per_token(ANALYTICAL_TRAFFIC, record.workload) == 1_923_072
    with_q = predict_step(record.workload, record.plan, machine, calibration)
    without_q = predict_step(no_q, record.plan, machine, calibration)
    unfused_with = with_q.analytic_breakdown_s["compute_elementwise_unfused"][0]
    unfused_without = without_q.analytic_breakdown_s["compute_elementwise_unfused"][0]
    assert unfused_without > 0
    assert unfused_with / unfused_without == pytest.approx(
        (2_073_088 - 1_923_072) / (2_057_728 - 1_923_072), rel=1e-9)
