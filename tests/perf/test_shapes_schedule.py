"""Every shared shape and schedule quantity has one definition, read by both models."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np
import pytest

from mosaic.arch import Geometry, MoEConfig
from mosaic.perf.memory import attention_activation_bytes, moe_block_activation_bytes
from mosaic.perf.plan import single_plan
from mosaic.perf.schedule import derive_schedule
from mosaic.perf.shapes import derive_shapes
from mosaic.perf.workload import Workload

PERF = Path(__file__).resolve().parents[2] / "src" / "mosaic" / "perf"
# quantity -> the one module that defines it
SHARED = {
    "tokens_per_rank": "shapes.py", "sequence_shard_divisor": "shapes.py",
    "routed_tokens": "shapes.py", "local_experts": "shapes.py",
    "expert_copies": "shapes.py", "tokens_per_expert": "shapes.py",
    "n_microbatches": "schedule.py", "in_flight_microbatches": "schedule.py",
    "stage_layer_counts": "schedule.py", "bubble_fraction": "schedule.py",
    "attention_widths": "shapes.py", "vocab_shard": "shapes.py",
}
# Re-derivations of the same quantities by hand (the bugs this layout prevents).
INLINE = (r"experts\s*/\s*plans\.ep\b", r"micro_batch\s*\*\s*workload\.seq_len",
          r"global_batch\s*//\s*\(plans\.dp", r"key_value\s*/\s*(plans\.)?tp\b",
          r"vocab\s*/\s*plans\.tp\b")


def test_each_shared_quantity_is_defined_in_exactly_one_module() -> None:
    defined: dict[str, list[str]] = {name: [] for name in SHARED}
    for path in PERF.rglob("*.py"):  # the memory package's modules too
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name in defined:
                defined[node.name].append(path.name)
    assert defined == {name: [module] for name, module in SHARED.items()}


def test_no_module_rederives_a_shared_quantity_inline() -> None:
    for path in PERF.rglob("*.py"):
        if path.name in ("shapes.py", "schedule.py"):
            continue
        text = path.read_text()
        for pattern in INLINE:
            assert not re.search(pattern, text), f"{path.name} re-derives /{pattern}/"


def _moe(tp: int, sequence_parallel: bool, d_model: int = 256,
         seq_len: int = 512) -> tuple[Workload, object]:
    geometry = Geometry(layers=4, d_model=d_model, heads=4, kv_heads=4, head_dim=d_model // 4,
                        ffn=4 * d_model, vocab=1000,
                        moe=MoEConfig(experts=8, top_k=2, expert_ffn=d_model, dense_layers=1))
    workload = Workload(geometry, global_batch=32, seq_len=seq_len)
    plan = single_plan(tp=tp, dp=4, ep=2, micro_batch=2, sequence_parallel=sequence_parallel)
    return workload, plan


def test_shapes_by_hand_with_and_without_sequence_parallelism() -> None:
    workload, plan = _moe(tp=2, sequence_parallel=True)
    shapes = derive_shapes(workload, plan)
    assert shapes.tokens_per_rank[0] == 2 * 512  # b·s/cp
    assert shapes.routed_tokens[0] == 512  # SP shards the MoE input over tp = 2
    assert shapes.local_experts[0] == 4  # E/ep
    assert shapes.expert_copies[0] == 512 * 2  # K copies
    assert shapes.tokens_per_expert[0] == 512 * 2 * 2 / 8  # routed·ep·etp·K/E
    workload, plan = _moe(tp=2, sequence_parallel=False)
    assert derive_shapes(workload, plan).routed_tokens[0] == 1024  # each TP rank routes all


def test_time_and_memory_models_see_the_same_routed_tokens() -> None:
    """With tp = 2 and sequence parallelism off, both models route the whole CP shard: the
    MoE block's saved activations and its router time double against SP on."""
    from mosaic.hardware import Cluster, get_system
    from mosaic.perf.layer_costs import moe_block_times
    from mosaic.perf.machine import machine_for

    machine = machine_for(Cluster(get_system("p6-b200.48xlarge"), 1), "bf16")
    # Large enough that the router's GEMM and streams are bandwidth-bound, not launch-bound.
    on, plan_on = _moe(2, True, d_model=4096, seq_len=16384)
    off, plan_off = _moe(2, False, d_model=4096, seq_len=16384)
    router_ratio = (moe_block_times(machine, off, plan_off).router[0]
                    / moe_block_times(machine, on, plan_on).router[0])
    memory_ratio = (moe_block_activation_bytes(off, plan_off)[0]
                    / moe_block_activation_bytes(on, plan_on)[0])
    assert router_ratio > 1.5 and memory_ratio > 1.2


def test_schedule_by_hand() -> None:
    workload, _ = _moe(1, False)
    plan = single_plan(pp=2, vpp=2, dp=4, micro_batch=2)
    schedule = derive_schedule(workload, plan)
    assert schedule.n_microbatches[0] == 32 // (4 * 2)
    # 4 layers in pp·vpp = 4 chunks of 1: rank 0 holds blocks 0 and 2 (block 0 dense).
    assert (schedule.first.blocks[0], schedule.first.moe_blocks[0]) == (2, 1)
    assert (schedule.last.blocks[0], schedule.last.moe_blocks[0]) == (2, 2)
    assert schedule.bubble_fraction[0] == pytest.approx((2 - 1) / (2 * 4))
    # Interleaved 1F1B warm-up (Megatron-Core): first rank (2(pp-1) + (vpp-1)pp + 1)/vpp.
    assert schedule.in_flight_first[0] == pytest.approx((2 * 1 + 1 * 2 + 1) / 2)
    assert np.all(schedule.in_flight_last <= schedule.in_flight_first)


def test_a_middle_stage_past_a_dense_prefix_is_the_heaviest_by_hand() -> None:
    """DeepSeek-V3-like: 3 dense blocks then MoE blocks, 16 blocks over pp=4 (chunks of 4).
    Rank 0 holds blocks 0-3 (1 MoE), rank 1 blocks 4-7 (4 MoE) with one micro-batch fewer
    in flight, rank 3 blocks 12-15 (4 MoE) with one in flight. The memory model takes the
    largest of the three; it used to read only the first and last ranks."""
    from mosaic.perf.memory import (
        heaviest_stage,
        memory_breakdown_bytes,
        stage_memory_breakdown_bytes,
        total_memory_bytes,
    )
    from mosaic.perf.schedule import in_flight_microbatches, stage_layer_counts

    geometry = Geometry(layers=16, d_model=512, heads=8, kv_heads=8, head_dim=64, ffn=2048,
                        vocab=1000, moe=MoEConfig(experts=64, top_k=8, expert_ffn=1024,
                                                  dense_layers=3))
    workload = Workload(geometry, global_batch=64, seq_len=2048)
    plan = single_plan(pp=4, dp=2, ep=2, micro_batch=1)
    counts = {s: tuple(int(v[0]) for v in stage_layer_counts(geometry, plan, s))
              for s in ("first", "middle", "last")}
    assert counts == {"first": (4, 1), "middle": (4, 4), "last": (4, 4)}
    assert [in_flight_microbatches(workload, plan, s)[0] for s in ("first", "middle", "last")
            ] == [4, 3, 1]
    totals = {s: total_memory_bytes(stage_memory_breakdown_bytes(workload, plan, s))[0]
              for s in ("first", "middle", "last")}
    assert totals["middle"] > max(totals["first"], totals["last"])
    assert total_memory_bytes(memory_breakdown_bytes(workload, plan))[0] == totals["middle"]
    assert heaviest_stage(workload, plan)[0] == 1
    # Without a dense prefix the middle rank holds the first rank's blocks: never heavier.
    plain = Workload(Geometry(layers=16, d_model=512, heads=8, kv_heads=8, head_dim=64,
                              ffn=2048, vocab=1000,
                              moe=MoEConfig(experts=64, top_k=8, expert_ffn=1024)),
                     global_batch=64, seq_len=2048)
    assert heaviest_stage(plain, plan)[0] in (0, 3)


def test_kv_heads_fewer_than_tp_are_replicated_in_both_models() -> None:
    """GQA with 2 KV heads at tp 4: each rank holds 1 query group of Q (8 heads / 4) but a
    whole KV head (2 heads over min(4, 2) ranks), in the QKV GEMM the time model prices and
    in the activations the memory model keeps (both read shapes.AttentionWidths; before,
    the time model split K/V over tp)."""
    from mosaic.hardware import Cluster, get_system
    from mosaic.perf.layer_costs import attention_times
    from mosaic.perf.machine import machine_for
    from mosaic.perf.shapes import attention_widths

    geometry = Geometry(layers=2, d_model=512, heads=8, kv_heads=2, head_dim=64, ffn=2048,
                        vocab=1000)
    widths = attention_widths(geometry)
    tp = np.array([1, 2, 4, 8])
    # hand: Q 8·64 = 512, K+V 2·2·64 = 256, split over min(tp, 2)
    assert list(widths.key_value_per_rank(tp)) == [256, 128, 128, 128]
    assert list(widths.projection_per_rank(tp)) == [768, 384, 256, 192]
    machine = machine_for(Cluster(system=get_system("DGX-H100"), n_nodes=1), "bf16")

    def gemm_s(kv_heads: int) -> float:
        model = Geometry(layers=2, d_model=4096, heads=32, kv_heads=kv_heads, head_dim=128,
                         ffn=8192, vocab=1000)
        workload = Workload(model, global_batch=8, seq_len=4096)
        return float(attention_times(machine, workload, single_plan(tp=4)).gemm[0])

    # at tp 4 (and large enough GEMMs to leave the latency floor), 2 KV heads over 2 ranks
    # put as much K/V on a rank as 4 heads over 4 (2·128 wide)
    assert gemm_s(2) == pytest.approx(gemm_s(4), rel=1e-12)
    assert gemm_s(1) == pytest.approx(gemm_s(4), rel=1e-12)  # one KV head, whole on each
    assert gemm_s(8) > gemm_s(4)  # 8 KV heads over 4 ranks: 2·256 wide

    def saved_bytes(kv_heads: int) -> float:
        model = Geometry(layers=2, d_model=4096, heads=32, kv_heads=kv_heads, head_dim=128,
                         ffn=8192, vocab=1000)
        workload = Workload(model, global_batch=8, seq_len=4096)
        return float(attention_activation_bytes(workload, single_plan(tp=4))[0])

    # the memory model keeps the same K/V width per rank: 2 heads at tp 4 save what 4 do,
    # 8 heads (2 per rank) save one more K and V head: 2·128 bf16 values per token, 4096
    # tokens per rank
    assert saved_bytes(2) == saved_bytes(4) == saved_bytes(1)
    assert saved_bytes(8) - saved_bytes(4) == pytest.approx(4096 * 2 * 128 * 2)


def test_qk_norm_saves_the_pre_norm_query_and_key():
    """A QK-norm block's q and k RMSNorms save their inputs, the QKV GEMM's q and k before
    the norm, beside the rotated q, k the attention core keeps (Megatron-Core
    Attention.forward q_layernorm/k_layernorm: TE RMSNorm saves its input; HF Qwen3
    q_norm/k_norm). By hand, Qwen3-30B-A3B's attention (32 heads, 4 KV heads, head_dim 128)
    at tp 2 with 4096 tokens per rank: (32·128/2 + 4·128/2) bf16 values per token."""

    def saved_bytes(qk_norm: bool) -> float:
        model = Geometry(layers=2, d_model=2048, heads=32, kv_heads=4, head_dim=128,
                         ffn=6144, vocab=1000, qk_norm=qk_norm)
        workload = Workload(model, global_batch=8, seq_len=4096)
        return float(attention_activation_bytes(workload, single_plan(tp=2))[0])

    assert saved_bytes(True) - saved_bytes(False) == pytest.approx(
        4096 * (32 * 128 / 2 + 4 * 128 / 2) * 2)
