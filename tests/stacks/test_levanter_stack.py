"""The levanter stack: traits read from its code, checked by hand.

Sources and derivations: docs/evidence/levanter_stack.md. The FSDP MoE shape below is the
fine-grained MoE of examples/fsdp_moe_comm_bound.yaml (28 layers, d 2048, 128 experts of
width 1408, top-8, 2 shared experts) on 256 H100s with plain FSDP.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from mosaic.arch import Geometry, MoEConfig
from mosaic.config.run_records import RunRecordWarning, load_run_records
from mosaic.hardware import Cluster, get_system
from mosaic.perf import data_parallel_time as data_parallel_module
from mosaic.perf import host_time as host_time_module
from mosaic.perf import layer_costs
from mosaic.perf.attention_kernels import resolve_attention_kernel
from mosaic.perf.calibration import default_calibration
from mosaic.perf.layer_costs import (
    REFERENCE_SOFTMAX_BWD_BYTES_PER_SCORE,
    REFERENCE_SOFTMAX_FWD_BYTES_PER_SCORE,
    jax_flash_block_fraction,
)
from mosaic.perf.machine import machine_for
from mosaic.perf.memory import softmax_statistics_bytes
from mosaic.perf.moe_permute_traffic import MoePermute, permute_bytes, permute_traffic
from mosaic.perf.plan import Sharding, single_plan
from mosaic.perf.step_time import predict_step
from mosaic.perf.workload import Dispatcher, Workload
from mosaic.stacks import MicroBatchDefault, get_stack, stack_for_software

ROOT = Path(__file__).resolve().parents[2]
PUBLISHED = ROOT.parent / "shared" / "calibration" / "published_runs.yaml"
EXTRA = ROOT / "src" / "mosaic" / "evaluate" / "data" / "extra_runs.yaml"

FINE_MOE = Geometry(layers=28, d_model=2048, heads=16, kv_heads=16, head_dim=128, ffn=10944,
                    vocab=102400, glu=True,
                    moe=MoEConfig(experts=128, top_k=8, expert_ffn=1408, shared_experts=2,
                                  dense_layers=1))


def test_levanter_software_selects_levanter_and_maxtext_stays_jax_xla() -> None:
    assert stack_for_software("levanter (JAX) on CoreWeave H100").name == "levanter"
    assert stack_for_software("levanter, jax 0.7").name == "levanter"
    assert stack_for_software("MaxText (JAX/XLA) 2024-04").name == "jax-xla"
    assert stack_for_software("JAX/XLA FSDP").name == "jax-xla"
    assert "levanter" not in get_stack("jax-xla").keywords


def test_levanter_traits_as_its_code_sets_them() -> None:
    levanter, maxtext = get_stack("levanter"), get_stack("jax-xla")
    # whole-batch steps (per_device_parallelism -1), fp32 at rest, bf16 gathers
    assert levanter.micro_batch_default is MicroBatchDefault.WHOLE_LOCAL_BATCH
    assert (levanter.fsdp_gather_bytes_per_param, maxtext.fsdp_gather_bytes_per_param) == (2, 4)
    assert levanter.fsdp_shard_storage == maxtext.fsdp_shard_storage == "fp32"
    # gradient_checkpointing True: block inputs saved, the block recomputed
    assert (levanter.unstated_recompute, maxtext.unstated_recompute) == ("full", "selective")
    # no Transformer Engine in a pip/uv install: the blockwise JAX attention everywhere
    assert set(levanter.attention_kernel.values()) == {"jax_flash"}
    for gpu in ("A100-SXM-80GB", "H100-SXM-80GB", "B200"):
        choice = resolve_attention_kernel(None, "levanter", gpu)
        assert (choice.kernel, choice.fwd_multiplier, choice.bwd_multiplier) == (
            "jax_flash", 1.0, 1.0)
    # what it shares with MaxText: XLA fusions, XLA's fused log-softmax, no host sync
    assert levanter.elementwise_kernels == "xla" and levanter.cross_entropy == "fused"
    assert levanter.dropless_host_sync is False and levanter.moe_permute == "levanter"
    assert levanter.layout_vpp == (1,) and "zero1" not in levanter.layout_sharding


def _collective_bytes(stack: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, float]:
    """Bytes handed to the FSDP all-gather and reduce-scatter of one unit (recorded)."""
    seen: dict[str, float] = {}

    def recorder(name: str, original):
        def wrapped(full_bytes, *args, **kwargs):
            seen[name] = seen.get(name, 0.0) + float(np.sum(full_bytes))
            return original(full_bytes, *args, **kwargs)
        return wrapped

    monkeypatch.setattr(data_parallel_module, "all_gather_time_s",
                        recorder("gather", data_parallel_module.all_gather_time_s))
    monkeypatch.setattr(data_parallel_module, "reduce_scatter_time_s",
                        recorder("scatter", data_parallel_module.reduce_scatter_time_s))
    machine = machine_for(Cluster(get_system("dgx-h100"), 32), "bf16")
    workload = Workload(FINE_MOE, global_batch=256, seq_len=4096, stack=stack,
                        grad_reduce_in_fp32=stack != "levanter")
    plans = single_plan(dp=256, micro_batch=1, sharding=Sharding.FSDP)
    data_parallel_module.fsdp_unit_collectives_s(machine, workload, plans)
    dense, expert = data_parallel_module.fsdp_unit_parameters(workload, plans)
    seen["unit_params"] = float(dense[0] + expert[0])
    monkeypatch.undo()
    return seen


def test_fp32_at_rest_gathers_twice_the_bytes_of_levanters_bf16_cast(
        monkeypatch: pytest.MonkeyPatch) -> None:
    levanter = _collective_bytes("levanter", monkeypatch)
    maxtext = _collective_bytes("jax-xla", monkeypatch)
    assert levanter["unit_params"] == maxtext["unit_params"] > 0
    # by hand: a unit's parameters x 2 B (bf16 after mp.cast_to_compute) vs x 4 B (MaxText)
    assert levanter["gather"] == pytest.approx(2 * levanter["unit_params"])
    assert maxtext["gather"] == pytest.approx(4 * maxtext["unit_params"])
    # levanter's gradients reduce-scatter in bf16 (its recipe), MaxText's fp32 buffers
    assert levanter["scatter"] == pytest.approx(2 * levanter["unit_params"])
    assert maxtext["scatter"] == pytest.approx(4 * maxtext["unit_params"])


def test_levanter_fsdp_moe_batch_sweep_gathers_once_per_step(
        tmp_path: Path, fsdp_moe_run: Callable[..., dict[str, Any]]) -> None:
    """Global batch 256, 512, 1024 on the same 256 GPUs: one whole-batch step each, the
    same per-step parameter gathers, so tokens/s rises with batch as they amortise."""
    batches = (256, 512, 1024)
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump({"runs": [
        fsdp_moe_run(b, id=f"levanter-fsdp-{b}", software="levanter (JAX/XLA)",
                     gpu="H100-SXM-80GB", recompute="unknown") for b in batches]}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RunRecordWarning)
        records = load_run_records(path).records
    assert len(records) == 3
    gathers, steps, tokens_per_s = [], [], []
    for batch, record in zip(batches, records, strict=True):
        workload = record.workload
        assert workload.stack == "levanter"
        assert record.plan.row(0)["micro_batch"] == batch // 256  # whole local batch
        assert workload.grad_reduce_in_fp32 is False  # levanter's recipe: bf16 reduction
        assert any("full assumed" in note for note in record.assumptions)
        machine = machine_for(record.cluster, workload.precision)
        prediction = predict_step(workload, record.plan, machine, default_calibration())
        assert prediction.attention_kernel == "jax_flash"
        unit = data_parallel_module.data_parallel_collectives_s(machine, workload, record.plan)
        gathers.append(float(unit["unit_gather"][0]))
        steps.append(float(prediction.step_time_s[0]))
        tokens_per_s.append(float(prediction.tokens_per_s[0]))
        # tokens/s is the whole batch over one step
        assert tokens_per_s[-1] == pytest.approx(batch * 4096 / steps[-1])
    assert gathers[0] == pytest.approx(gathers[1]) == pytest.approx(gathers[2])
    assert tokens_per_s[0] < tokens_per_s[1] < tokens_per_s[2]
    # the per-step gathers amortise: 4x the batch costs less than 4x the step time
    assert steps[2] < 4 * steps[0]


def test_jax_flash_block_fraction_by_hand() -> None:
    # n = s / 1024 blocks, key blocks 0..i for query block i: n(n+1)/2 of n^2 pairs
    assert jax_flash_block_fraction(4096) == pytest.approx(10 / 16)
    assert jax_flash_block_fraction(2048) == pytest.approx(3 / 4)
    assert jax_flash_block_fraction(1024) == 1.0
    assert jax_flash_block_fraction(8192, 2048) == pytest.approx(10 / 16)  # Mixtral's block


def test_jax_flash_attention_time_by_hand(monkeypatch: pytest.MonkeyPatch) -> None:
    """With GEMMs at 1 s per FLOP-unit and HBM at 1 s per byte-unit the blockwise kernel's
    time is a count: b = 2, 16 heads, s = 4096, head_dim 128, block 1024 (10 of 16 pairs)."""
    monkeypatch.setattr(layer_costs, "gemm_s",
                        lambda machine, workload, m, n, k: 2.0 * np.asarray(m) * n * k)
    monkeypatch.setattr(layer_costs, "streaming_time_s", lambda nbytes, bw: np.asarray(nbytes))
    machine = machine_for(Cluster(get_system("dgx-h100"), 1), "bf16")
    geometry = Geometry(layers=4, d_model=2048, heads=16, kv_heads=16, head_dim=128,
                        ffn=8192, vocab=32000)
    workload = Workload(geometry, global_batch=16, seq_len=4096, stack="levanter")
    plans = single_plan(dp=8, micro_batch=2)
    heads, seq_q = np.array([16.0]), np.array([4096.0])
    fwd, bwd = layer_costs._jax_flash_attention_s(machine, workload, plans, heads, seq_q, 128)
    rows, s, block, d, f = 2 * 16 * 4096, 4096, 1024, 128, 10 / 16
    gemm = 2 * (2 * rows * block * d) * (f * s / block)  # QK^T and PV on 10 of 16 pairs
    scores = rows * s * f
    assert fwd[0] == pytest.approx(gemm + scores * REFERENCE_SOFTMAX_FWD_BYTES_PER_SCORE)
    assert bwd[0] == pytest.approx(2.5 * gemm + scores * (
        REFERENCE_SOFTMAX_FWD_BYTES_PER_SCORE + REFERENCE_SOFTMAX_BWD_BYTES_PER_SCORE))
    ref_fwd, _ = layer_costs._reference_attention_s(machine, workload, plans, heads, seq_q, 128)
    assert fwd[0] == pytest.approx(f * ref_fwd[0])  # the reference kernel on the causal pairs


def test_jax_flash_saves_log_sum_exp_and_materialises_below_one_block() -> None:
    geometry = Geometry(layers=4, d_model=2048, heads=16, kv_heads=16, head_dim=128,
                        ffn=8192, vocab=32000)
    plans = single_plan(dp=8, micro_batch=2)
    long = Workload(geometry, global_batch=16, seq_len=4096, stack="levanter")
    # fp32 log-sum-exp per query row and head: 4 B x b (2) x h (16) x s (4096)
    assert softmax_statistics_bytes(long, plans)[0] == 4 * 2 * 16 * 4096
    # s = 512 < the 1024 block: simple_attention_with_dropout keeps the bf16 probabilities,
    # batch x heads x seq^2 x 2 B
    short = Workload(geometry, global_batch=16, seq_len=512, stack="levanter")
    assert softmax_statistics_bytes(short, plans)[0] == 2 * 16 * 512 ** 2 * 2
    # the same job on MaxText's stack (cuDNN) keeps only the log-sum-exp
    maxtext = Workload(geometry, global_batch=16, seq_len=512, stack="jax-xla")
    assert softmax_statistics_bytes(maxtext, plans)[0] == 4 * 2 * 16 * 512


def test_levanter_moe_token_movement_by_hand() -> None:
    """One Qwen3-30B-A3B layer on one rank, T = 4096 tokens, 32,768 copies, d 2048:
    forward 6 B per copy + 2 per token, backward 18 + 2 (moe_permute_traffic)."""
    geometry = Geometry(layers=48, d_model=2048, heads=32, kv_heads=4, head_dim=128,
                        ffn=6144, vocab=151936, glu=True,
                        moe=MoEConfig(experts=128, top_k=8, expert_ffn=768, shared_experts=0,
                                      dense_layers=0))
    workload = Workload(geometry, global_batch=256, seq_len=4096, stack="levanter")
    forward, backward = permute_bytes(workload, np.array([32768.0]), np.array([128]))
    assert forward[0] == (6 * 32768 + 2 * 4096) * 2048 == 419_430_400
    assert backward[0] == (18 * 32768 + 2 * 4096) * 2048 == 1_224_736_768
    # no EP dispatcher: the same code whatever the dispatcher field says
    assert permute_traffic(MoePermute.LEVANTER, Dispatcher.HYBRIDEP, True) == permute_traffic(
        MoePermute.LEVANTER, Dispatcher.ALLTOALL, False)


def _software_strings(path: Path) -> list[str]:
    document = yaml.safe_load(path.read_text())
    runs = document["runs"] if isinstance(document, dict) else document
    return [run.get("software") or "" for run in runs]


@pytest.mark.parametrize("path", [PUBLISHED, EXTRA], ids=["published", "extra"])
def test_no_shipped_record_changes_stack(path: Path) -> None:
    if not path.exists():
        pytest.skip(f"{path} is absent (needs ../shared next to the repository)")
    for software in _software_strings(path):
        stack = stack_for_software(software).name
        assert stack != "levanter", software
        if "maxtext" in software.lower():
            assert stack == "jax-xla", software


def test_one_op_expert_gemm_has_no_per_expert_host_floor() -> None:
    """TE GroupedLinear's host floor grows with the local experts (per group: 16 us forward,
    51 us backward, kernels.te_grouped_linear_host_floor_s); levanter's ragged dot is one op.
    With 128 local experts and 27 MoE blocks the per-group floor is 27 x 2 x (60 + 313 +
    128 x (16 + 51)) us per micro-batch; levanter's is zero."""
    from mosaic.perf.kernels import te_grouped_linear_host_floor_s

    plans = single_plan(dp=256, micro_batch=1, sharding=Sharding.FSDP)
    moe_blocks = np.array([27.0])
    per_group = Workload(FINE_MOE, global_batch=256, seq_len=4096, stack="jax-xla")
    one_op = Workload(FINE_MOE, global_batch=256, seq_len=4096, stack="levanter")
    isolated = replace(default_calibration(), host_in_block_factor=1.0)
    floor = host_time_module.expert_gemm_host_floor_s(per_group, plans, moe_blocks, isolated,
                                                      "H100-SXM-80GB")[0]
    by_hand = 27 * 2 * (te_grouped_linear_host_floor_s(128)
                        + te_grouped_linear_host_floor_s(128, backward=True))
    assert floor == pytest.approx(float(by_hand))
    assert 0.4 < floor < 0.6  # ~0.48 s: it would hide nothing at one sequence per GPU
    assert host_time_module.expert_gemm_host_floor_s(one_op, plans, moe_blocks,
                                                 default_calibration(), "H100-SXM-80GB")[0] == 0.0


def test_xla_expanded_ragged_dot_costs_every_local_expert(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    """XLA's RaggedDotRewriter multiplies every routed copy by every local expert: with
    GEMMs counted in FLOPs, the routed-expert GEMMs cost E_loc (here 128) times the grouped
    GEMM's 2·copies·n·k. FINE_MOE on one rank of dp 256 (no EP), micro-batch 1 x 4096."""
    monkeypatch.setattr(layer_costs, "gemm_s",
                        lambda machine, workload, m, n, k, routed_experts=False:
                        2.0 * np.asarray(m) * n * k)
    monkeypatch.setattr(layer_costs, "_grouped_gemm",
                        lambda machine, workload, g, m, n, k: 2.0 * np.asarray(g) * m * n * k)
    machine = machine_for(Cluster(get_system("dgx-h100"), 32), "bf16")
    plans = single_plan(dp=256, micro_batch=1, sharding=Sharding.FSDP)
    grouped = Workload(FINE_MOE, global_batch=256, seq_len=4096, stack="levanter")
    expanded = Workload(FINE_MOE, global_batch=256, seq_len=4096, stack="levanter",
                        expert_gemm="xla_expanded")
    grouped_s = layer_costs.moe_block_times(machine, grouped, plans).mlp_gemm[0]
    expanded_s = layer_costs.moe_block_times(machine, expanded, plans).mlp_gemm[0]
    copies, d, width = 4096 * 8, 2048, 1408
    by_hand = 3 * 2 * copies * d * width * (2 + 1)  # fwd + bwd (x3), up (GLU, 2w) + down
    assert grouped_s == pytest.approx(by_hand)
    assert expanded_s == pytest.approx(128 * by_hand)
    with pytest.raises(Exception, match="expert_gemm"):
        Workload(FINE_MOE, global_batch=256, seq_len=4096, expert_gemm="dense")


def test_a_levanter_layout_search_offers_no_pipeline_and_a_batch_lever_keeps_one_step():
    """levanter's mesh is replica x data x model (no pipeline axis; trait layout_pp [1]), and
    it runs the whole local batch in one step: explain's doubled global batch doubles the
    micro-batch, so its prediction equals the job run at twice the batch."""
    from mosaic.config.job_schema import job_from_document
    from mosaic.evaluate.diagnosis import rank_levers
    from mosaic.evaluate.job import predict_job
    from mosaic.perf.calibration import load_calibration
    from mosaic.perf.layouts import LayoutLimits, candidate_plans

    def job(global_seqs):
        return job_from_document({
            "model": {"layers": 24, "d_model": 2048, "heads": 16, "kv_heads": 16,
                      "head_dim": 128, "ffn": 1408, "vocab": 128256,
                      "moe": {"experts": 64, "top_k": 8, "expert_ffn": 1408}},
            "batch": {"global_seqs": global_seqs, "seq_len": 4096},
            "parallelism": {"tp": 1, "pp": 1, "dp": 256, "sharding": "fsdp"},
            "performance": {"precision": "bf16", "stack": "levanter"},
            "hardware": {"system": "DGX-H100", "nodes": 32}}, "test")

    spec = job(256)
    plans = candidate_plans(spec.workload, 256, 8, LayoutLimits())
    assert set(plans.pp.tolist()) == {1}
    calibration = load_calibration("default")
    current = predict_job(spec, calibration)
    doubled = predict_job(job(512), calibration).prediction
    lever = next(lv for lv in rank_levers(spec.workload, spec.plan, current.machine,
                                          calibration) if "global batch" in lv.description)
    assert lever.plan["micro_batch"] == 2 * int(spec.plan.micro_batch[0])
    assert lever.tokens_per_s == pytest.approx(float(doubled.tokens_per_s[0]), rel=1e-9)
