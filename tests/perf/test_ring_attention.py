"""Context-parallel attention as the stacks run it (perf/ring_attention.py), hand-computed."""

from dataclasses import replace

import numpy as np
import pytest

from mosaic.arch import ladder_geometry
from mosaic.hardware import Cluster, get_system
from mosaic.perf.attention_kernels import resolve_attention_kernel
from mosaic.perf.collectives import all_gather_time_s, send_recv_time_s
from mosaic.perf.kernels import AttentionEfficiency, flash_attention_time_s
from mosaic.perf.layer_costs import attention_times
from mosaic.perf.machine import machine_for
from mosaic.perf.plan import single_plan
from mosaic.perf.ring_attention import (
    RingKernels,
    ring_kernels,
    torch_ring_backward_bytes,
    torch_ring_exposed_s,
    torch_ring_forward_bytes,
)
from mosaic.perf.workload import Workload
from mosaic.stacks import get_stack

# eff = 0.5 · s_kv / (s_kv + 1000), head-dim term 1 (head_dim_half 0): easy to do by hand.
HALF = AttentionEfficiency(max_fraction=0.5, seq_half_tokens=1000.0, head_dim_half=0.0)
LATENCY_S = 3.5e-6  # kernels.kernel_latency_s (data/microbench_fits.yaml)


def test_ring_kernels_by_hand():
    # b=1, h=2, s=8192, cp=4, d=128, peak 1e15: local 2048 tokens.
    ring = ring_kernels(1, 2, 8192, np.array([4]), 128, 1e15, HALF, HALF)
    # Step 0: causal 2048 x 2048: 4·1·2·2048·2048·128 / 2 = 2,147,483,648 FLOPs at
    # 0.5·2048/3048 of the peak.
    first = LATENCY_S + 2_147_483_648 / (1e15 * 0.5 * 2048 / 3048)
    # Later steps: non-causal 2048 queries x 1024 keys: 4·2·2048·1024·128 = 2,147,483,648
    # FLOPs (the same half block) at 0.5·1024/2024 of the peak.
    step = LATENCY_S + 2_147_483_648 / (1e15 * 0.5 * 1024 / 2024)
    assert ring.first_forward[0] == pytest.approx(first, rel=1e-9)
    assert ring.step_forward[0] == pytest.approx(step, rel=1e-9)
    assert ring.forward[0] == pytest.approx(first + 3 * step, rel=1e-9)
    # Backward: 2.5x the FLOPs, same shapes.
    assert ring.backward[0] == pytest.approx(
        2 * LATENCY_S + 2.5 * (first - LATENCY_S) + 3 * (LATENCY_S + 2.5 * (step - LATENCY_S))
        - LATENCY_S, rel=1e-9)


def test_ring_kernels_do_the_causal_flops_of_one_kernel_but_take_longer():
    single = flash_attention_time_s(1, 2, 2048, 8192, 128, True, 1e15, efficiency=HALF)
    ring = ring_kernels(1, 2, 8192, np.array([4]), 128, 1e15, HALF, HALF)
    # One kernel over 2048 queries x 8192 keys, causal: 4·2·2048·8192·128/2 FLOPs, 4 times
    # step 0's, at the higher 8192-key efficiency.
    assert single == pytest.approx(LATENCY_S + 4 * 2_147_483_648
                                   / (1e15 * 0.5 * 8192 / 9192), rel=1e-9)
    assert ring.forward[0] > single
    # Without CP the ring is the one causal kernel over the sequence.
    alone = ring_kernels(1, 2, 8192, np.array([1]), 128, 1e15, HALF, HALF)
    assert alone.forward[0] == pytest.approx(
        flash_attention_time_s(1, 2, 8192, 8192, 128, True, 1e15, efficiency=HALF), rel=1e-12)


def test_torch_ring_eager_bytes_by_hand():
    # 1e6 output (= query) elements, 1e6 elements in each of K and V, cp = 4.
    # Forward: casts 6 + 6, three merges of 38 B per output element, three K/V
    # concatenations of 8 B per element: 12 + 114 + 24 = 150 B per element.
    assert torch_ring_forward_bytes(1e6, 1e6, 4) == pytest.approx(150e6)
    # Backward, Q: zero + cast 10, four fp32 accumulations of 10: 50 B per element.
    # K/V: zeros 8, casts 12, step-0 adds 20; three later steps of 26 (chunk add + cat)
    # + 8 (K/V cat); four send buffers of 16: 40 + 102 + 64 = 206 B per element.
    assert torch_ring_backward_bytes(1e6, 1e6, 4) == pytest.approx(256e6)
    assert torch_ring_forward_bytes(1e6, 1e6, 1) == 0.0
    assert torch_ring_backward_bytes(1e6, 1e6, 1) == 0.0


def test_torch_ring_exposes_the_all_gather_beyond_step_zero():
    ic = machine_for(Cluster(get_system("Grand-Teton-H100"), 1), "bf16").interconnect
    kv_bytes = 256e6  # one rank's K + V in bf16
    cp = np.array([8])
    gather = float(all_gather_time_s(kv_bytes * 8, 8, 1, ic))
    send = float(send_recv_time_s(kv_bytes * 2, False, ic))  # fp32 dK, dV
    quick = RingKernels(first_forward=np.array([0.0]), step_forward=np.array([0.0]),
                        first_backward=np.array([0.0]), step_backward=np.array([0.0]), cp=cp)
    forward, backward = torch_ring_exposed_s(quick, kv_bytes, cp, 1, False, ic)
    assert forward[0] == pytest.approx(gather)
    assert backward[0] == pytest.approx(gather + 8 * send)
    slow = replace(quick, first_forward=np.array([1.0]), first_backward=np.array([1.0]),
                   step_backward=np.array([1.0]))
    forward, backward = torch_ring_exposed_s(slow, kv_bytes, cp, 1, False, ic)
    # Every transfer hides behind a 1 s kernel except the last dK/dV send.
    assert forward[0] == 0.0
    assert backward[0] == pytest.approx(send)


def _llama8b(stack: str, seq_len: int) -> Workload:
    return Workload(geometry=ladder_geometry(8), global_batch=1, seq_len=seq_len,
                    stack=stack, attention_kernel="fa2")


def test_torchtitan_cp_pays_merges_megatron_only_the_ring_kernels_ulysses_one_kernel():
    machine = machine_for(Cluster(get_system("Grand-Teton-H100"), 1), "bf16")
    plan = single_plan(cp=8)
    megatron = attention_times(machine, _llama8b("megatron-core", 262144), plan)
    torchtitan = attention_times(machine, _llama8b("torchtitan", 262144), plan)
    ulysses = attention_times(machine, _llama8b("deepspeed", 262144), plan)
    geometry = ladder_geometry(8)
    heads, head_dim = geometry.heads, geometry.d_model // geometry.heads
    ring = ring_kernels(1, heads, 262144, np.array([8]), head_dim,
                        machine.attention_peak_flops_per_s, machine.attention_fwd,
                        machine.attention_bwd)
    assert megatron.core_forward[0] == pytest.approx(ring.forward[0])
    # torch's ring adds its eager merges to the same kernels.
    assert torchtitan.core_forward[0] > megatron.core_forward[0]
    # Ulysses: heads/cp over the whole sequence, one causal kernel (the same FLOPs at the
    # 262144-key efficiency).
    single = flash_attention_time_s(1, heads, 262144 / 8, 262144, head_dim, True,
                                    machine.attention_peak_flops_per_s,
                                    efficiency=machine.attention_fwd)
    assert ulysses.core_forward[0] == pytest.approx(single)
    assert ulysses.core_forward[0] < megatron.core_forward[0]


def test_context_parallel_traits():
    assert get_stack("torchtitan").context_parallel == "torch_ring"
    assert get_stack("deepspeed").context_parallel == "ulysses"
    assert get_stack("megatron-core").context_parallel == "ring_p2p"


def test_mpt_benchmarks_ran_flash_attention_1_at_half_fa2():
    """FA2 is ~2x FlashAttention(-1) (Dao 2023); Triton FA1 ~ CUDA FA1 (its docstring).
    llm-foundry itself runs FA2; the MPT benchmark rows carry their kernel as a record
    setting: Triton FA1, or CUDA FA1 where sweep.py passed 'flash' with flash-attn 1.0.9."""
    from mosaic.evaluate.record_settings import record_settings

    assert resolve_attention_kernel(None, "llm-foundry", "A100-SXM-80GB").kernel == "fa2"
    for kernel in ("triton", "fa1"):
        a100 = resolve_attention_kernel(kernel, "llm-foundry", "A100-SXM-80GB")
        assert (a100.fwd_multiplier, a100.bwd_multiplier) == (0.5, 0.5)
        h100 = resolve_attention_kernel(kernel, "llm-foundry", "H100-SXM-80GB")
        fa2 = resolve_attention_kernel("fa2", "llm-foundry", "H100-SXM-80GB")
        assert h100.fwd_multiplier == pytest.approx(fa2.fwd_multiplier / 2, abs=1e-3)
        assert h100.bwd_multiplier == pytest.approx(fa2.bwd_multiplier / 2, abs=1e-3)
    settings = record_settings()
    assert settings["mpt-7b-a100-8-s65536-amp_bf16"][0]["attention_kernel"] == "triton"
    assert settings["mpt-13b-h100-512-s2048-amp_bf16"][0]["attention_kernel"] == "triton"
    assert settings["mpt-7b-h100-512-s2048-amp_bf16"][0]["attention_kernel"] == "fa1"
