"""Per-GPU memory model: hand-computed activations, sharding rules, pipeline stages."""

import warnings
from pathlib import Path

import numpy as np
import pytest

from mosaic.arch import Geometry, MoEConfig, count_parameters
from mosaic.config.run_records import RunRecordWarning, load_run_records
from mosaic.errors import MosaicInputError
from mosaic.evaluate.record_settings import apply_record_settings
from mosaic.perf.memory import (
    COMPONENTS,
    RUNTIME_RESERVE_BYTES,
    activation_bytes_per_layer,
    dense_mlp_activation_bytes,
    feasibility,
    heaviest_stage,
    memory_breakdown_bytes,
    moe_block_activation_bytes,
    stage_activation_bytes,
    stage_memory_breakdown_bytes,
    stage_parameters,
    total_memory_bytes,
)
from mosaic.perf.memory.activations import recompute_module_bytes
from mosaic.perf.plan import (
    Checkpointing,
    Sharding,
    plans_from_columns,
    single_plan,
)
from mosaic.perf.schedule import in_flight_microbatches, stage_layer_counts
from mosaic.perf.workload import Workload
from mosaic.units import GIB

CALIBRATION = Path(__file__).resolve().parents[2].parent / "shared" / "calibration"


def dense_geometry(**overrides) -> Geometry:
    spec = dict(
        layers=4, d_model=64, heads=4, kv_heads=2, head_dim=16, ffn=160, vocab=1000,
        norm="rmsnorm",
    )
    spec.update(overrides)
    return Geometry(**spec)


def moe_geometry(top_k: int = 2, **overrides) -> Geometry:
    moe = dict(experts=8, top_k=top_k, expert_ffn=32, shared_experts=1, dense_layers=1)
    moe.update(overrides)
    return dense_geometry(moe=MoEConfig(**moe))


def workload(geometry: Geometry, **overrides) -> Workload:
    spec = dict(global_batch=64, seq_len=128)
    spec.update(overrides)
    return Workload(geometry, **spec)


def total(workload_: Workload, **plan) -> float:
    return float(total_memory_bytes(memory_breakdown_bytes(workload_, single_plan(**plan)))[0])


# --- Activations -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("mode", "name"),
    [(Checkpointing.NONE, "none"), (Checkpointing.SELECTIVE, "selective"),
     (Checkpointing.FULL, "full")],
)
def test_dense_layer_activations_hand_computed(mode, name):
    s, b, h, a, f, t = 128, 2, 64, 4, 160, 2  # seq, micro-batch, width, heads, ffn, TP (+SP)
    sb = s * b
    q = 4 * 16  # query width: 4 heads of 16
    kv = 2 * 2 * 16  # K and V: 2 KV heads of 16 each, split over t = 2 groups
    softmax_stats = 4 * sb * a / t  # fp32 log-sum-exp per query and head
    attention = 2 * (2 * sb * h / t) + 2 * sb * (q + kv) / t + 2 * sb * q / t + softmax_stats
    mlp = 2 * (2 * sb * h / t) + 2 * sb * 3 * f / t  # norm in, GEMM-1 in; gate, up, SwiGLU out
    expected = {
        "none": attention + mlp,
        "selective": attention + mlp - softmax_stats,
        "full": 2 * sb * h / t,
    }[name]
    plans = single_plan(tp=t, micro_batch=b, checkpointing=mode, sequence_parallel=True)
    got = activation_bytes_per_layer(workload(dense_geometry()), plans, "dense")
    assert got[0] == pytest.approx(expected)


def test_fp8_saves_gemm_inputs_in_one_byte_by_hand():
    # Same layer as above without recompute: under FP8 the four GEMM inputs (QKV input and
    # FC1 input, 2sbh/t each with SP; the output projection's input sb·q/t; the SwiGLU
    # output sb·f/t) are saved as the 1-byte FP8 copies, so each loses one byte/element.
    s, b, h, f, t = 128, 2, 64, 160, 2
    sb, q = s * b, 4 * 16
    plans = single_plan(tp=t, micro_batch=b, checkpointing=Checkpointing.NONE,
                        sequence_parallel=True)
    bf16 = activation_bytes_per_layer(workload(dense_geometry()), plans, "dense")[0]
    fp8 = activation_bytes_per_layer(workload(dense_geometry(), precision="fp8"), plans,
                                     "dense")[0]
    assert bf16 - fp8 == pytest.approx(2 * sb * h / t + sb * q / t + sb * f / t)


def test_torchtitan_selective_is_per_op_sac_by_hand():
    # torchtitan's op-level SAC keeps the block input, the SDPA output (+ fp32 statistics)
    # and every second matmul output of Q, K, V, O, W1, W3, W2: Q, V, W1, W2 (bf16, tp=1).
    s, b, h, f, a = 128, 2, 64, 160, 4
    sb, q, v = s * b, 4 * 16, 2 * 16
    plans = single_plan(micro_batch=b, checkpointing=Checkpointing.SELECTIVE)
    work = workload(dense_geometry(), stack="torchtitan")
    expected = 2 * sb * (h + q + q + v + f + h) + 4 * sb * a
    assert activation_bytes_per_layer(work, plans, "dense")[0] == pytest.approx(expected)
    # Megatron-Core's selective (core attention only) keeps far more.
    megatron = activation_bytes_per_layer(workload(dense_geometry()), plans, "dense")[0]
    assert megatron > 1.5 * expected


def test_reproduces_korthikanti_without_dropout_masks():
    """MHA, GELU FFN of 4h, selective recompute: Korthikanti et al. 2022 give 34·sbh/t with
    SP and sbh(10 + 24/t) without; both include two 1-byte dropout masks (sbh each)."""
    geometry = Geometry(layers=2, d_model=256, heads=4, kv_heads=4, head_dim=64, ffn=1024,
                        vocab=1000, glu=False, attention="mha")
    s, b, h, t = 512, 2, 256, 4
    work = workload(geometry, seq_len=s)
    with_sp = single_plan(tp=t, micro_batch=b, checkpointing=Checkpointing.SELECTIVE)
    without_sp = single_plan(tp=t, micro_batch=b, checkpointing=Checkpointing.SELECTIVE,
                             sequence_parallel=False)
    sbh = s * b * h
    assert activation_bytes_per_layer(work, with_sp)[0] == pytest.approx(sbh * (34 - 2) / t)
    got = activation_bytes_per_layer(work, without_sp)[0]
    assert got == pytest.approx(sbh * (10 - 2 + 24 / t))


@pytest.mark.parametrize("stack, combine_copies", [("torchtitan", 1), ("megatron-core", 0)])
def test_moe_block_hand_computed(stack, combine_copies):
    """Megatron-Core scales the expert activation by the routing probabilities
    (activation_func_with_probs), so its combine saves no copy of the expert outputs."""
    geometry = moe_geometry(top_k=2)
    T, h, E, K, d_e = 256, 64, 8, 2, 32  # tokens (b=2, s=128), tp = cp = etp = 1
    copies = K * T
    expected = (
        2 * (2 * T * h)  # norm input and output
        + T * (2 * 4 * E + (8 + 4) * K)  # fp32 logits + scores, int64 index + fp32 prob
        + 2 * copies * h  # permuted expert inputs
        + 2 * copies * 3 * d_e  # gate, up, SwiGLU output per copy
        + combine_copies * 2 * K * T * h  # expert outputs kept for the weighted combine
        + 2 * T * 3 * d_e  # one shared expert of width d_e
    )
    got = moe_block_activation_bytes(workload(geometry, stack=stack), single_plan(micro_batch=2))
    assert got[0] == pytest.approx(expected)


@pytest.mark.parametrize("sequence_parallel", [False, True])
def test_shared_expert_gate_keeps_the_shared_output(sequence_parallel):
    """A sigmoid-gated shared expert (Qwen2-MoE, Qwen3-Next) multiplies its d-wide output by
    the gate, and the multiply keeps that output for the gate's gradient (Megatron-Core
    SharedExpertMLP.forward @ 0d8e0714): 2·T·h more bytes, over tp with sequence
    parallelism; shared-expert recompute drops them with the intermediates."""
    T, h, d_e, t = 256, 64, 32, 2  # tokens (b=2, s=128), tp 2
    plain = workload(moe_geometry(top_k=2))
    gated = workload(moe_geometry(top_k=2, shared_expert_gate=True))
    plan = single_plan(micro_batch=2, tp=t, sequence_parallel=sequence_parallel)
    extra = 2 * T * h / (t if sequence_parallel else 1)
    got = moe_block_activation_bytes(gated, plan)[0] - moe_block_activation_bytes(plain, plan)[0]
    assert got == pytest.approx(extra)
    recomputing = workload(moe_geometry(top_k=2, shared_expert_gate=True),
                           recompute_modules=("shared_experts",))
    dropped = recompute_module_bytes(recomputing, plan, "moe")[0]
    assert dropped == pytest.approx(2 * T * 3 * d_e / t + extra)


def test_moe_activations_grow_with_top_k_while_dense_formula_does_not():
    plans = single_plan(micro_batch=2)
    works = [workload(moe_geometry(k)) for k in (1, 2, 4)]
    moe_bytes = [moe_block_activation_bytes(w, plans)[0] for w in works]
    dense_bytes = [dense_mlp_activation_bytes(w, plans)[0] for w in works]
    assert moe_bytes[0] < moe_bytes[1] < moe_bytes[2]
    assert dense_bytes[0] == dense_bytes[1] == dense_bytes[2]


def test_expert_tp_all_gathers_tokens_but_splits_intermediates():
    """ETP all-gathers routed tokens (etp× the copies, full width h) and splits d_expert by
    etp, so only the permuted expert inputs grow."""
    geometry = moe_geometry(top_k=2)
    one = moe_block_activation_bytes(workload(geometry), single_plan(tp=2, etp=1, dp=2))
    two = moe_block_activation_bytes(workload(geometry), single_plan(tp=2, etp=2, dp=2))
    routed = 128 / 2  # b·s/(cp·tp) with SP
    assert two[0] - one[0] == pytest.approx(2 * (2 * routed) * 64)  # one more K·T·h in bf16


def test_moe_kind_needs_an_moe_geometry():
    with pytest.raises(MosaicInputError, match="moe"):
        activation_bytes_per_layer(workload(dense_geometry()), single_plan(), "moe")


def test_context_parallel_divides_activations():
    work = workload(dense_geometry())
    one = activation_bytes_per_layer(work, single_plan(cp=1, dp=2))[0]
    two = activation_bytes_per_layer(work, single_plan(cp=2, dp=1))[0]
    assert two == pytest.approx(one / 2)


def test_full_checkpointing_uses_less_memory_than_none():
    work = workload(moe_geometry())
    none, selective, full = (
        total(work, pp=2, dp=2, micro_batch=2, checkpointing=mode) for mode in Checkpointing
    )
    assert full < selective < none


# --- Pipeline stages ---------------------------------------------------------------------
def test_stage_layers_take_the_ceiling_and_the_dense_prefix_sits_first():
    geometry = dense_geometry(layers=10, moe=MoEConfig(experts=8, top_k=2, expert_ffn=32,
                                                       dense_layers=1))
    plans = single_plan(pp=4)  # chunks of ceil(10/4) = 3
    assert [int(x[0]) for x in stage_layer_counts(geometry, plans, "first")] == [3, 2]
    # Split not stated: the last rank gets a full chunk too (conservative); uneven stages
    # cut in order, 3 + 3 + 3 + 1, so the last rank holds the 1-block remainder.
    assert [int(x[0]) for x in stage_layer_counts(geometry, plans, "last")] == [3, 3]
    assert [int(x[0]) for x in stage_layer_counts(geometry, plans, "last",
                                                  "remainder_last")] == [1, 1]
    interleaved = single_plan(pp=2, vpp=2)  # chunks of 3: rank 0 holds [0,3) and [6,9)
    assert [int(x[0]) for x in stage_layer_counts(geometry, interleaved, "first")] == [6, 5]


def test_in_flight_microbatches_1f1b_and_interleaved():
    work = workload(dense_geometry(layers=16), global_batch=64)
    plain = single_plan(pp=4, dp=1)
    interleaved = single_plan(pp=4, vpp=2, dp=1)
    assert in_flight_microbatches(work, plain, "first")[0] == 4
    assert in_flight_microbatches(work, plain, "last")[0] == 1
    # Korthikanti et al. 2022: pp·(1 + (pp−1)/(pp·vpp)) = 4·(1 + 3/8)
    assert in_flight_microbatches(work, interleaved, "first")[0] == pytest.approx(5.5)
    few = workload(dense_geometry(layers=16), global_batch=4)  # n_mb = 4 caps it
    assert in_flight_microbatches(few, interleaved, "first")[0] == 4


def test_interleaving_increases_first_stage_activations():
    work = workload(dense_geometry(layers=16), global_batch=64)
    plain = stage_activation_bytes(work, single_plan(pp=4, dp=1), "first")[0]
    interleaved = stage_activation_bytes(work, single_plan(pp=4, vpp=2, dp=1), "first")[0]
    assert interleaved == pytest.approx(plain * 5.5 / 4)


def test_large_vocabulary_makes_the_last_stage_heaviest():
    big_vocab = workload(dense_geometry(vocab=200_000))
    small_vocab = workload(dense_geometry(vocab=100))
    plans = single_plan(pp=4, dp=1)
    assert heaviest_stage(big_vocab, plans)[0] == 3
    assert heaviest_stage(small_vocab, plans)[0] == 0
    first = stage_memory_breakdown_bytes(big_vocab, plans, "first")
    assert first["logits"][0] == 0
    assert memory_breakdown_bytes(big_vocab, plans)["logits"][0] > 0


def test_single_stage_holds_embedding_and_lm_head():
    geometry = dense_geometry()
    counts = count_parameters(geometry)
    params = stage_parameters(geometry, single_plan(tp=2), "first")
    assert params.vocab[0] == (counts.embedding + counts.lm_head) / 2


# --- Sharding ----------------------------------------------------------------------------
def test_expert_weights_halve_with_ep_while_dense_weights_do_not_change():
    geometry = moe_geometry()
    ep2 = stage_parameters(geometry, single_plan(dp=8, ep=2), "first")
    ep4 = stage_parameters(geometry, single_plan(dp=8, ep=4), "first")
    assert ep4.expert[0] == pytest.approx(ep2.expert[0] / 2)
    assert ep4.non_expert[0] == ep2.non_expert[0]
    work = workload(geometry)
    weights = [memory_breakdown_bytes(work, single_plan(dp=8, ep=e))["weights"][0] for e in (2, 4)]
    assert weights[0] - weights[1] == pytest.approx(2 * ep4.expert[0])


def test_tp_splits_dense_weights_and_etp_splits_experts():
    geometry = moe_geometry()
    base = stage_parameters(geometry, single_plan(tp=1, dp=4), "first")
    tp2 = stage_parameters(geometry, single_plan(tp=2, dp=2), "first")
    etp2 = stage_parameters(geometry, single_plan(tp=2, dp=2, etp=2), "first")
    assert tp2.dense[0] == pytest.approx(base.dense[0] / 2)
    assert tp2.expert[0] == base.expert[0]
    assert etp2.expert[0] == pytest.approx(base.expert[0] / 2)
    assert tp2.replicated[0] == base.replicated[0]  # norms and router stay whole


def test_zero1_shards_optimizer_states_by_dp():
    work = workload(dense_geometry())
    dp2 = memory_breakdown_bytes(work, single_plan(dp=2, sharding=Sharding.ZERO1))
    dp4 = memory_breakdown_bytes(work, single_plan(dp=4, sharding=Sharding.ZERO1))
    for name in ("optimizer_states", "master_weights"):
        assert dp4[name][0] == pytest.approx(dp2[name][0] / 2)
    for name in ("weights", "gradients"):
        assert dp4[name][0] == dp2[name][0]
    # Megatron-Core distributed optimizer, bf16 params + fp32 grads: 6 + 12/d bytes/param.
    n = count_parameters(work.geometry).n_total_with_embedding
    static = sum(dp4[name][0] for name in ("weights", "gradients", "optimizer_states",
                                            "master_weights"))
    assert static == pytest.approx((6 + 12 / 4) * n)


def test_zero2_shards_gradients_and_fsdp_also_shards_weights():
    work = workload(moe_geometry())
    n = count_parameters(work.geometry)
    plain = memory_breakdown_bytes(work, single_plan(dp=4, sharding=Sharding.NONE))
    zero2 = memory_breakdown_bytes(work, single_plan(dp=4, sharding=Sharding.ZERO2))
    fsdp = memory_breakdown_bytes(work, single_plan(dp=4, sharding=Sharding.FSDP))
    assert zero2["gradients"][0] == pytest.approx(plain["gradients"][0] / 4)
    assert zero2["weights"][0] == plain["weights"][0]
    assert fsdp["weights"][0] == pytest.approx(plain["weights"][0] / 4)
    assert plain["weights"][0] == 2 * n.n_total_with_embedding  # one stage, no TP/EP: all
    assert plain["optimizer_states"][0] == 8 * n.n_total_with_embedding  # AdamW


def test_fsdp_with_pipeline_keeps_the_stage_gathered():
    """Under PP, FSDP keeps the stage's bf16 parameters gathered and its fp32 gradients
    unsharded until the last micro-batch (torchtitan, torch.distributed.pipelining; not
    Megatron-FSDP: tests/perf/test_layer_costs.py)."""
    work = workload(dense_geometry(vocab=100), stack="torchtitan")
    plans = single_plan(pp=2, dp=4, sharding=Sharding.FSDP, checkpointing=Checkpointing.FULL)
    params = stage_parameters(work.geometry, plans, "first")
    buffers = stage_memory_breakdown_bytes(work, plans, "first")["communication_buffers"][0]
    pipeline_p2p = 2 * 2 * 128 * 64  # one received activation and one gradient, 2sbh each
    assert buffers == pytest.approx((2 + 4) * params.total[0] + pipeline_p2p)


def test_fsdp_shards_experts_over_edp():
    work = workload(moe_geometry())
    plans = single_plan(dp=8, ep=4, sharding=Sharding.FSDP)  # edp = 8/4 = 2
    params = stage_parameters(work.geometry, plans, "first")
    weights = memory_breakdown_bytes(work, plans)["weights"][0]
    assert weights == pytest.approx(2 * (params.expert[0] / 2 + params.non_expert[0] / 8))


def test_muon_keeps_one_buffer_except_for_embeddings():
    geometry = dense_geometry()
    counts = count_parameters(geometry)
    muon = memory_breakdown_bytes(workload(geometry, optimizer="muon"), single_plan())
    sgd = memory_breakdown_bytes(workload(geometry, optimizer="sgd"), single_plan())
    vocab = counts.embedding + counts.lm_head
    assert muon["optimizer_states"][0] == 4 * counts.n_total + 8 * vocab
    assert sgd["optimizer_states"][0] == 4 * counts.n_total_with_embedding


# --- Vectorisation, totals, feasibility ---------------------------------------------------
def test_vectorised_plans_match_single_plans():
    work = workload(moe_geometry(), global_batch=256)
    columns = dict(
        tp=[1, 2, 2, 4], pp=[1, 2, 4, 2], vpp=[1, 1, 2, 1], cp=[1, 1, 1, 2], dp=[16, 4, 2, 2],
        ep=[4, 2, 4, 8], etp=[1, 1, 2, 1], micro_batch=[1, 2, 1, 4],
        sharding=[0, 1, 3, 4], checkpointing=[0, 1, 2, 2], hsdp_shard=[16, 4, 2, 1],
        sequence_parallel=[True, True, False, True],
    )
    plans = plans_from_columns(**columns)
    batch = memory_breakdown_bytes(work, plans)
    for i in range(len(plans)):
        one = memory_breakdown_bytes(work, plans.take(i))
        for name in COMPONENTS:
            assert one[name][0] == pytest.approx(batch[name][i])


def test_total_and_runtime_reserve():
    breakdown = memory_breakdown_bytes(workload(dense_geometry()), single_plan())
    assert set(breakdown) == set(COMPONENTS)
    assert breakdown["runtime_reserve"][0] == RUNTIME_RESERVE_BYTES
    assert total_memory_bytes(breakdown)[0] == pytest.approx(
        sum(v[0] for v in breakdown.values())
    )


def test_feasibility_reports_overshoot():
    fits, overshoot = feasibility(np.array([70.0, 90.0]) * GIB, 100 * GIB, 0.8)
    assert fits.tolist() == [True, False]
    assert overshoot.tolist() == [0.0, pytest.approx(10 * GIB)]
    with pytest.raises(MosaicInputError, match="usable_fraction"):
        feasibility(np.array([1.0]), 1.0, 1.5)


# --- Published data points ---------------------------------------------------------------
def test_published_peak_memory_is_in_range():
    """Report predicted vs measured peak memory of every published run that reports one (all
    torchtitan, dense Llama-3.1, FSDP2), loaded as `mosaic validate` loads them; the band is
    loose on purpose (allocator peaks include fragmentation and torchtitan's unfused loss)."""
    path = CALIBRATION / "published_runs.yaml"
    if not path.exists():
        pytest.skip(f"{path} not found (../shared is absent)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RunRecordWarning)
        records = [r for r in apply_record_settings(load_run_records(path)).records
                   if r.measured_memory_bytes]
    assert len(records) >= 20
    ratios = []
    for record in records:
        breakdown = memory_breakdown_bytes(record.workload, record.plan)
        # torch.cuda.max_memory_reserved() excludes the CUDA context: compare without it.
        predicted = total_memory_bytes(breakdown)[0] - RUNTIME_RESERVE_BYTES
        ratios.append(predicted / record.measured_memory_bytes)
        print(f"{record.id}: measured {record.measured_memory_bytes / GIB:.1f} GiB, "
              f"predicted {predicted / GIB:.1f}")
    assert min(ratios) > 0.5 and max(ratios) < 1.5


def test_uneven_stages_put_the_ceiling_first_and_the_remainder_last():
    # 7 blocks over pp = 4: chunks of ceil(7/4) = 2 in order, 2 + 2 + 2 + 1, so the first
    # rank holds 2 blocks and the last rank (with the LM head) 1.
    geometry = dense_geometry(layers=7)
    plans = single_plan(pp=4)
    assert stage_layer_counts(geometry, plans, "first", "remainder_last")[0][0] == 2
    assert stage_layer_counts(geometry, plans, "last", "remainder_last")[0][0] == 1
