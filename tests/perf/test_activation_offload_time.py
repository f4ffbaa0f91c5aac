"""Activation CPU offloading costs the copies no block compute hides (perf/step_time.py
_activation_offload_exposed_s), over the catalog's host link; Megatron-Core's rules."""

from dataclasses import replace
from pathlib import Path

import pytest

from mosaic.arch import Geometry
from mosaic.errors import MosaicInputError
from mosaic.evaluate.job import load_job_spec, predict_job
from mosaic.hardware import Cluster, get_device, get_system
from mosaic.perf.calibration import load_calibration
from mosaic.perf.constraints import plan_violations
from mosaic.perf.machine import machine_for
from mosaic.perf.memory import stage_activation_bytes
from mosaic.perf.plan import Checkpointing, Sharding, single_plan
from mosaic.perf.step_time import predict_step
from mosaic.perf.workload import Workload

GEOMETRY = Geometry(layers=4, d_model=64, heads=4, kv_heads=2, head_dim=16, ffn=160,
                    vocab=1000, norm="rmsnorm")
PLAN = single_plan(dp=8, micro_batch=2, sharding=Sharding.ZERO1)  # one micro-batch a step


def _workload(offloaded: int) -> Workload:
    return Workload(GEOMETRY, global_batch=16, seq_len=128,
                    offloaded_activation_layers=offloaded)


def _offload_s(offloaded: int, host_link_bw_bytes_per_s: float | None) -> float:
    machine = replace(machine_for(Cluster(system=get_system("DGX-H100"), n_nodes=1), "bf16"),
                      host_link_bw_bytes_per_s=host_link_bw_bytes_per_s)
    step = predict_step(_workload(offloaded), PLAN, machine, load_calibration(None))
    return float(step.analytic_breakdown_s["activation_offload"][0])  # before calibration


def test_a_slow_host_link_exposes_both_copies_of_each_offloaded_block():
    """Two of four blocks offloaded, one micro-batch: each block's saved bytes go out in the
    forward and come back in the backward. The bytes of one block are what offloading
    two blocks takes off the stage (3 of 4 stay resident: the memory model). At 1 MB/s each
    copy (tens of kB) takes tens of ms against microseconds of block compute, so the
    exposed time is 2 blocks x 2 copies x bytes / bandwidth, less that compute."""
    per_block = (stage_activation_bytes(_workload(0), PLAN, "first")[0]
                 - stage_activation_bytes(_workload(2), PLAN, "first")[0])
    slow = 1.0e6
    assert _offload_s(2, slow) == pytest.approx(2 * 2 * per_block / slow, rel=1e-3)


def test_no_offload_costs_nothing_and_a_fast_link_hides_the_copies():
    assert _offload_s(0, 64.0e9) == 0.0
    assert _offload_s(0, None) == 0.0  # no offload: the link is never read
    # a block of this model (479 kB) copies in 7.5 us at the H100's PCIe Gen5
    # 64 GB/s, less than its compute: hidden; slower links expose more
    assert _offload_s(2, 64.0e9) == 0.0 < _offload_s(2, 1.0e9) < _offload_s(2, 1.0e8)


def test_the_catalog_states_each_host_link_with_a_source():
    # PCIe Gen5 x16 on the x86 hosts (128 GB/s both ways), Gen4 on the A100, NVLink-C2C
    # shared by two GPUs on a Grace superchip
    assert get_device("H100-SXM-80GB").host_link_bw_bytes_per_s == 64.0e9
    assert get_device("A100-SXM-80GB").host_link_bw_bytes_per_s == 32.0e9
    assert get_device("GB200").host_link_bw_bytes_per_s == 225.0e9
    assert "PCIe Gen5" in get_device("B200").source("host_link_bw_bytes_per_s")


def test_a_device_without_a_host_link_cannot_cost_offload():
    with pytest.raises(MosaicInputError, match="no host link bandwidth for H100-SXM-80GB"):
        _offload_s(2, None)


@pytest.mark.parametrize("plan, rule", [
    (single_plan(dp=4, pp=2, micro_batch=2, sharding=Sharding.ZERO1),
     "pp=2 > 1 with offloaded_activation_layers=2 (Megatron-Core: no pipeline parallelism"),
    (single_plan(dp=8, micro_batch=2, sharding=Sharding.ZERO1,
                 checkpointing=Checkpointing.SELECTIVE),
     "checkpointing=selective with offloaded_activation_layers=2"),
])
def test_megatron_refuses_offload_with_a_pipeline_or_recompute(plan, rule):
    """Megatron-Core's TransformerConfig refuses cpu_offloading with pipeline parallelism
    and with any activation recomputation (transformer_config.py @ core_v0.16.0)."""
    messages = [v.message(plan, 0) for v in plan_violations(_workload(2), plan, 8)
                if v.violated[0]]
    assert any(rule in m for m in messages), messages
    assert not any(v.violated[0] for v in plan_violations(_workload(0), plan, 8)
                   if "offload" in v.rule)


def test_a_run_record_changed_by_set_is_held_to_the_rules_its_change_breaks():
    """A record's layout ran, so mosaic's rules are not applied to it; a --set that adds
    offload with recompute (a combination Megatron-Core refuses) is refused, the same offload
    without recompute is costed, and a stack without activation offload refuses it (found by
    a new-user trial)."""
    examples = Path(__file__).resolve().parents[2] / "examples/runs_example.yaml"
    qwen3 = Path(f"{examples}#example-bridge-qwen3-30b-a3b-b200-8-mxfp8")
    calibration = load_calibration(None)
    with pytest.raises(MosaicInputError, match="after --set: checkpointing=selective with "
                                                "offloaded_activation_layers=24"):
        predict_job(load_job_spec(qwen3, ["offloaded_activation_layers=24",
                                          "recompute=selective"]), calibration)
    changed = predict_job(load_job_spec(qwen3, ["offloaded_activation_layers=24"]),
                          calibration)
    assert changed.prediction.breakdown_s["activation_offload"][0] > 0
    assert predict_job(load_job_spec(qwen3), calibration).prediction.step_time_s[0] > 0
    torchtitan = Path(f"{examples}#example-torchtitan-llama3.1-8b-h100-8-fsdp")
    with pytest.raises(MosaicInputError, match="stack 'torchtitan' has no activation CPU"):
        load_job_spec(torchtitan, ["offloaded_activation_layers=8", "recompute=none"])
