"""The hf-transformers stack: HF transformers model code under the HF Trainer (TRL,
accelerate FSDP2), traits read from its code and checked by hand.

Sources: the entry's comments and ``source`` in stacks.yaml (transformers Qwen3/Qwen3-MoE
modeling code, accelerate v1.13.0 fsdp_utils.py and dataclasses.py, trl benchmark-sft-moe).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from mosaic.arch import Geometry, MoEConfig
from mosaic.config.run_records import RunRecordWarning, load_run_records
from mosaic.errors import MosaicInputError
from mosaic.perf import host_time as host_time_module
from mosaic.perf.attention_kernels import resolve_attention_kernel
from mosaic.perf.calibration import default_calibration
from mosaic.perf.elementwise_traffic import (
    ElementwiseKernels,
    elementwise_kernels,
    elementwise_traffic_multiplier,
)
from mosaic.perf.plan import Sharding, single_plan
from mosaic.perf.workload import Workload
from mosaic.stacks import CrossEntropy, MicroBatchDefault, get_stack, stack_for_software

ROOT = Path(__file__).resolve().parents[2]
EXTRA = ROOT / "src" / "mosaic" / "evaluate" / "data" / "extra_runs.yaml"

# Qwen3-4B's block (Qwen/Qwen3-4B config.json): d 2560, 32 heads / 8 KV of 128, SwiGLU 9728
QWEN3_4B = Geometry(layers=36, d_model=2560, heads=32, kv_heads=8, head_dim=128, ffn=9728,
                    vocab=151936, glu=True)
QWEN3_MOE = Geometry(layers=48, d_model=2048, heads=32, kv_heads=4, head_dim=128, ffn=768,
                     vocab=151936, glu=True,
                     moe=MoEConfig(experts=128, top_k=8, expert_ffn=768))


def test_trainer_software_selects_hf_transformers_and_deepspeed_keeps_its_own() -> None:
    assert stack_for_software("TRL SFTTrainer (HF transformers 4.57 + accelerate FSDP2)"
                              ).name == "hf-transformers"
    assert stack_for_software("HF Trainer under accelerate launch").name == "hf-transformers"
    # the Trainer's own names, without TRL or accelerate beside them (these fell to `other`)
    for software in ("transformers Trainer, 1 node", "Huggingface Transformers 4.57",
                     "SFTTrainer, packed 16k"):
        assert stack_for_software(software).name == "hf-transformers", software
    # 'Transformer Engine' names no Hugging Face code
    assert stack_for_software("Transformer Engine 2.8 trainer").name == "other"
    # records naming DeepSpeed or Megatron beside HF transformers keep those stacks
    assert stack_for_software("DeepSpeed 0.11.1 ZeRO-3 + HF transformers LlamaForCausalLM"
                              ).name == "deepspeed"
    assert stack_for_software("ms-swift 3.3 swift sft (HF transformers + DeepSpeed ZeRO-2)"
                              ).name == "deepspeed"
    with pytest.raises(MosaicInputError, match="did you mean 'hf-transformers'"):
        get_stack("hf-transformer")


def test_hf_transformers_traits_as_its_code_sets_them() -> None:
    hf = get_stack("hf-transformers")
    assert "accelerate" in hf.source and "v1.13.0" in hf.source
    # gradient_accumulation_steps 1 by default: the per-device batch is one micro-batch
    assert hf.micro_batch_default is MicroBatchDefault.WHOLE_LOCAL_BATCH
    # FSDP2 per decoder layer, bf16 param_dtype over the fp32 shard TRL loads
    assert (hf.fsdp_gather, hf.fsdp_gather_bytes_per_param, hf.fsdp_shard_storage) == (
        "block", 2, "fp32")
    # ForCausalLMLoss upcasts the logits; no compile, no gradient checkpointing unless asked
    assert hf.cross_entropy is CrossEntropy.FP32_UPCAST
    assert (hf.torch_compile, hf.unstated_recompute) == (False, "none")
    # torch SDPA's FlashAttention-2 backend on Hopper (cuDNN is opt-in)
    choice = resolve_attention_kernel(None, "hf-transformers", "H100-SXM-80GB")
    assert choice.kernel == "fa2"
    # grouped_mm experts: device offsets, one op per projection, weighted after the experts
    assert (hf.dropless_host_sync, hf.expert_gemm_launch, hf.moe_probs_in_activation) == (
        False, "one_op", False)
    assert hf.layout_pp == (1,) and "zero1" not in hf.layout_sharding


def test_eager_hf_block_moves_the_fp32_rmsnorm_bytes_by_hand() -> None:
    """Qwen3-4B's block, eager (no compile): 280 B per d (two fp32-upcast RMSNorms and the
    residuals), 40 B per rotated q/k element, 28 B per SwiGLU element, over the analytical
    3 x 10 B per d and 3 x 3 x 2 B per SwiGLU element (perf/elementwise_traffic.py)."""
    workload = Workload(QWEN3_4B, global_batch=16, seq_len=16384, stack="hf-transformers")
    assert elementwise_kernels(workload) is ElementwiseKernels.EAGER_FP32_NORM
    rotated = 32 * 128 + 8 * 128
    eager = 280 * 2560 + 40 * rotated + 28 * 9728
    analytical = 30 * 2560 + 18 * 9728
    assert elementwise_traffic_multiplier(workload) == pytest.approx(eager / analytical)
    # a run that compiled (torch_compile true) runs Inductor's count instead
    compiled = Workload(QWEN3_4B, global_batch=16, seq_len=16384, stack="hf-transformers",
                        torch_compile=True)
    assert elementwise_kernels(compiled) is ElementwiseKernels.INDUCTOR


def test_grouped_mm_experts_have_no_per_expert_host_floor() -> None:
    """torch._grouped_mm runs each projection over all 128 local experts in one launch:
    no Transformer Engine per-group floor (kernels.te_grouped_linear_host_floor_s)."""
    plans = single_plan(dp=16, micro_batch=1, sharding=Sharding.FSDP)
    workload = Workload(QWEN3_MOE, global_batch=16, seq_len=16384, stack="hf-transformers")
    floor = host_time_module.expert_gemm_host_floor_s(
        workload, plans, np.array([48.0]), default_calibration(), "H100-SXM-80GB")
    assert floor[0] == 0.0


def test_unstated_micro_batch_is_the_per_device_batch(
        tmp_path: Path, fsdp_moe_run: Callable[..., dict[str, Any]]) -> None:
    """256 GPUs, 512 sequences, micro_seqs unstated: the HF Trainer runs the per-device
    batch of 2 in one forward (no gradient accumulation by default), not Megatron's 1."""
    run = fsdp_moe_run(512, id="hf-fsdp-512", software="TRL SFTTrainer, accelerate FSDP2")
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump({"runs": [run]}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RunRecordWarning)
        (record,) = load_run_records(path).records
    assert record.workload.stack == "hf-transformers"
    assert record.plan.row(0)["micro_batch"] == 2


def test_the_trl_benchmark_rows_name_the_stack() -> None:
    runs = [run for run in yaml.safe_load(EXTRA.read_text())["runs"]
            if run["id"].startswith("trlbench2604-")]
    assert len(runs) == 3
    assert {run["stack"] for run in runs} == {"hf-transformers"}


def _qwen3_moe_job(ep: int, stack: str = "hf-transformers"):
    from mosaic.config.job_schema import job_from_document

    return job_from_document({
        "model": {"layers": 48, "d_model": 2048, "heads": 32, "kv_heads": 4, "head_dim": 128,
                  "ffn": 6144, "vocab": 151936,
                  "moe": {"experts": 128, "top_k": 8, "expert_ffn": 768}},
        "batch": {"global_seqs": 16, "seq_len": 16384},
        "parallelism": {"tp": 1, "pp": 1, "ep": ep, "dp": 16, "sharding": "fsdp"},
        "performance": {"precision": "bf16", "stack": stack, "checkpointing": "full"},
        "hardware": {"system": "DGX-H100", "nodes": 2}}, "test")


def test_hf_expert_parallelism_is_no_token_dispatch_so_searches_keep_ep_1() -> None:
    """transformers' EP replicates the tokens over the expert group, masks the experts a
    rank does not hold and all-reduces the partial outputs (expert_parallelism.md; trait
    layout_ep [1]): none of mosaic's dispatchers, so a search tries ep 1 only, an ep pin is
    one line, and a job stating ep 8 is refused as one stating pp 2 is; torchtitan's search
    of the same model still tries expert parallelism."""
    from dataclasses import replace

    from mosaic.errors import InvalidLayoutError
    from mosaic.evaluate.job import predict_job
    from mosaic.perf.calibration import load_calibration
    from mosaic.perf.layouts import LayoutLimits, candidate_plans

    hf = _qwen3_moe_job(1)
    assert get_stack("hf-transformers").layout_ep == (1,)
    limits = LayoutLimits(tp=1, pp=1, micro_batches=(1,), sharding=("fsdp",),
                          checkpointing=("full",))
    assert set(candidate_plans(hf.workload, 16, 8, limits).ep.tolist()) == {1}
    titan = replace(hf.workload, stack="torchtitan")
    assert max(candidate_plans(titan, 16, 8, limits).ep.tolist()) > 1
    with pytest.raises(MosaicInputError,
                       match=r"^layout ep: stack 'hf-transformers' offers only ep 1$"):
        candidate_plans(hf.workload, 16, 8, replace(limits, ep=8))
    calibration = load_calibration("default")
    assert predict_job(hf, calibration).prediction is not None
    with pytest.raises(InvalidLayoutError,
                       match=r"invalid parallel layout: ep: stack 'hf-transformers' offers "
                             r"only ep 1$"):
        predict_job(_qwen3_moe_job(8), calibration)
    assert predict_job(_qwen3_moe_job(8, "torchtitan"), calibration).prediction is not None


def test_explain_lists_an_hf_expert_parallel_lever_as_breaking_the_stack_rule() -> None:
    """explain's ep levers (ep into the NVLink domain, ep doubled) move to a layout the
    stack does not run: listed as breaking that rule, never ranked feasible."""
    from mosaic.evaluate.diagnosis import rank_levers
    from mosaic.evaluate.job import predict_job
    from mosaic.perf.calibration import load_calibration

    spec = _qwen3_moe_job(1)
    calibration = load_calibration("default")
    current = predict_job(spec, calibration)
    levers = [lever for lever in rank_levers(spec.workload, spec.plan, current.machine,
                                             calibration)
              if lever.plan["ep"] != 1]
    assert levers
    for lever in levers:
        assert not lever.feasible
        assert "ep: stack 'hf-transformers' offers only ep 1" in lever.reason
