"""NVFP4 training precision (the fp4 lane): Transformer Engine's NVFP4BlockScaling recipe as
Megatron-Core and Megatron-Bridge run it. Expected values by hand from the datasheet peaks in
the catalog (B200: 9 PFLOP/s dense FP4, 4.5 FP8), the NVFP4 format (a 4-bit value per element
and a 1-byte E4M3 scale per 16 elements) and TE's quantiser (NVFP4Quantizer::quantize_impl @
v2.9: an amax pass, a row-wise cast and a fused Hadamard-transform cast of the column-wise copy,
each reading the bf16 tensor)."""

import json
from copy import deepcopy
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from mosaic.arch import ladder_geometry
from mosaic.cli.main import app
from mosaic.config.run_records import _validate_entry, run_record_from_entry
from mosaic.errors import MosaicInputError
from mosaic.hardware import Cluster, get_system
from mosaic.perf.fitted_constants import fitted
from mosaic.perf.layer_costs import gemm_s, quantise_cast_s
from mosaic.perf.machine import machine_for
from mosaic.perf.workload import NVFP4_ELEMENT_BYTES, Precision, Workload, precision_lane

B200 = Cluster(system=get_system("DGX-B200"), n_nodes=1)
H100 = Cluster(system=get_system("DGX-H100"), n_nodes=1)
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
# a small MoE job on one B200 node (docs/schema.md blocks)
JOB = {
    "model": {"layers": 8, "d_model": 2048, "ffn": 5632, "heads": 16, "kv_heads": 4,
              "vocab": 50257, "moe": {"experts": 16, "top_k": 2, "expert_ffn": 1408}},
    "batch": {"global_seqs": 64, "seq_len": 4096, "micro_seqs": 1},
    "parallelism": {"tp": 1, "pp": 1, "ep": 8, "dp": 8, "sharding": "zero1"},
    "performance": {"precision": "nvfp4", "stack": "megatron-core"},
    "hardware": {"system": "DGX-B200", "nodes": 1},
}


def _workload(precision: str, **settings) -> Workload:
    return Workload(geometry=ladder_geometry(8), global_batch=8, seq_len=4096,
                    precision=precision, **settings)


def test_nvfp4_names_the_fp4_lane_and_its_bytes():
    assert precision_lane("nvfp4") == "fp4"
    assert precision_lane("mxfp8") == "fp8"
    assert NVFP4_ELEMENT_BYTES == 0.5 + 1 / 16
    assert _workload("fp4").gemm_element_bytes == 0.5625
    assert _workload("fp8").gemm_element_bytes == 1.0


def test_fp4_gemms_run_at_the_fp4_peak_and_need_blackwell():
    machine = machine_for(B200, Precision.FP4)
    assert machine.gemm_peak_flops_per_s == 9.0e15
    assert machine.mfu_peak_flops_per_s == 2.25e15  # MFU stays against the bf16 peak
    with pytest.raises(MosaicInputError, match="Blackwell"):
        machine_for(H100, Precision.FP4)


def test_a_large_fp4_gemm_takes_half_the_fp8_time_on_b200():
    # 16384^3 is compute-bound on either lane: the time scales with the 9 / 4.5 peak ratio.
    fp4 = gemm_s(machine_for(B200, Precision.FP4), _workload("fp4"), 16384, 16384, 16384)
    fp8 = gemm_s(machine_for(B200, Precision.FP8), _workload("fp8"), 16384, 16384, 16384)
    assert float(fp8 / fp4) == pytest.approx(2.0, rel=0.01)


def test_nvfp4_cast_of_one_ffn_gemm_by_hand():
    machine = machine_for(B200, Precision.FP4)
    fwd, bwd = quantise_cast_s(machine, _workload("fp4"), 4096.0, ((4096, 14336),))
    bandwidth = 7.7e12 * fitted("kernels", "elementwise_hbm_efficiency")
    latency = fitted("kernels", "kernel_latency_s")
    # three reads of 2 B (amax, row-wise cast, column-wise transform-and-cast) and two
    # NVFP4 copies of 0.5625 B: 7.125 B per element
    assert fwd == pytest.approx(latency + 4096 * 4096 * 7.125 / bandwidth, rel=1e-12)
    assert bwd == pytest.approx(latency + 4096 * 14336 * 7.125 / bandwidth, rel=1e-12)


def test_fp4_parameter_gathers_move_nvfp4_weights_and_need_nvfp4():
    # the gather moves the packed E2M1 values, two per byte (Megatron-Core's param buffer
    # holds half the logical numel); the block scales are made again after it
    assert _workload("fp4", fp4_param_gather=True).gemm_weight_gather_bytes(2.0) == 0.5
    assert _workload("fp4").gemm_weight_gather_bytes(2.0) == 2.0
    with pytest.raises(MosaicInputError, match="fp4_param_gather needs precision nvfp4"):
        _workload("bf16", fp4_param_gather=True)
    with pytest.raises(MosaicInputError, match="fp8_param_gather needs precision fp8"):
        _workload("fp4", fp8_param_gather=True)


def _record(software: str, precision: str = "nvfp4"):
    runs = yaml.safe_load((EXAMPLES / "runs_example.yaml").read_text())["runs"]
    raw = deepcopy(next(r for r in runs if r["id"].startswith("example-bridge-qwen3")))
    raw.update(software=software, gpu="B200", precision=precision)
    return run_record_from_entry(_validate_entry(raw, "test"))


@pytest.mark.parametrize(("software", "gathers"), [
    ("NeMo 26.04 container / Megatron-Bridge", False),  # @ v0.4.0: no FP4 gathers
    ("NeMo 26.04.01 container / Megatron-Bridge", True),  # @ v0.4.2: fp4_param_gather True
    ("NeMo 26.06 container / Megatron-Bridge", True),  # @ v0.5.0
])
def test_bridge_nvfp4_runs_gather_fp4_weights_from_2604_01(software, gathers):
    record = _record(software)
    assert record.workload.precision is Precision.FP4
    assert record.workload.fp4_param_gather is gathers


def test_an_nvfp4_job_predicts_and_exports_megatron_fp4_flags(tmp_path):
    job = deepcopy(JOB)
    job["performance"]["fp4_param_gather"] = True
    path = tmp_path / "nvfp4.yaml"
    path.write_text(yaml.safe_dump(job))
    result = CliRunner().invoke(app, ["perf", str(path), "--json"])
    assert result.exit_code == 0, result.output
    assert '"precision": "fp4"' in result.output
    exported = CliRunner().invoke(app, ["export", str(path), "--to", "megatron"])
    assert exported.exit_code == 0, exported.output
    assert "--fp4-format e2m1" in exported.output
    assert "--fp4-recipe nvfp4" in exported.output and "--fp4-param-gather" in exported.output
    job["hardware"] = {"system": "DGX-H100", "nodes": 1}
    path.write_text(yaml.safe_dump(job))
    refused = CliRunner().invoke(app, ["perf", str(path)])
    assert refused.exit_code == 2 and "Blackwell" in refused.output


def test_fp4_and_nvfp4_spell_the_same_job(tmp_path):
    outputs = []
    for name in ("fp4", "nvfp4"):
        job = deepcopy(JOB)
        job["performance"]["precision"] = name
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(job))
        result = CliRunner().invoke(app, ["perf", str(path), "--json"])
        assert result.exit_code == 0, result.output
        outputs.append(json.loads(result.output)["step_time_s"])
    assert outputs[0] == outputs[1]


def test_a_job_names_a_point_release_by_its_stack_version(tmp_path):
    """stack_version 26.04.01 (Megatron-Bridge v0.4.2) takes the point release's NVFP4
    parameter gathers; 26.04 (v0.4.0) does not; a malformed point release is refused."""
    gathers = {}
    for version in ("26.04", "26.04.01"):
        job = deepcopy(JOB)
        job["performance"].update(stack="megatron-bridge", stack_version=version)
        path = tmp_path / f"{version}.yaml"
        path.write_text(yaml.safe_dump(job))
        result = CliRunner().invoke(app, ["perf", str(path), "--json"])
        assert result.exit_code == 0, result.output
        gathers[version] = "FP4 parameter gathers" in CliRunner().invoke(
            app, ["perf", str(path)]).output
    assert gathers == {"26.04": False, "26.04.01": True}
    job = deepcopy(JOB)
    job["performance"].update(stack="megatron-bridge", stack_version="26.04.1")
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(job))
    refused = CliRunner().invoke(app, ["perf", str(path)])
    assert refused.exit_code == 2 and "26.04.01" in refused.output


def test_layer_cuda_graphs_refuse_what_megatron_refuses(tmp_path):
    """One capture per step or per layer; no CUDA graphs with activation offload; full
    recompute only in a whole-step graph (transformer_config.py @ d98e8a64dd)."""
    with pytest.raises(MosaicInputError, match="choose one"):
        _workload("bf16", layer_cuda_graphs=True, full_iteration_cuda_graph=True)
    with pytest.raises(MosaicInputError, match="activation offloading"):
        _workload("bf16", layer_cuda_graphs=True, offloaded_activation_layers=2)
    job = deepcopy(JOB)
    job["performance"].update(precision="bf16", layer_cuda_graphs=True, checkpointing="full")
    path = tmp_path / "graphs.yaml"
    path.write_text(yaml.safe_dump(job))
    refused = CliRunner().invoke(app, ["perf", str(path)])
    assert refused.exit_code == 2 and "full recompute" in refused.output


def test_per_layer_graphs_drop_launches_but_not_a_dropless_layers_host_wait(tmp_path):
    """Drop-and-pad: no per-kernel launch floor and no sync; dropless: the sync stays, and
    the exports say its MoE layers run outside the graphs."""
    times = {}
    for routing in ("dropless", "token_drop"):
        job = deepcopy(JOB)
        job["performance"].update(precision="bf16", layer_cuda_graphs=True, routing=routing,
                                  pad_to_capacity=routing == "token_drop")
        path = tmp_path / f"{routing}.yaml"
        path.write_text(yaml.safe_dump(job))
        result = CliRunner().invoke(app, ["perf", str(path), "--json"])
        assert result.exit_code == 0, result.output
        terms = json.loads(result.output)["breakdown_s"]
        times[routing] = terms.get("moe_host_sync", 0.0), terms.get("dispatch_floor", 0.0)
        exported = CliRunner().invoke(app, ["export", str(path), "--to", "megatron"]).output
        assert "--cuda-graph-impl local" in exported
        assert ("dynamic shapes" in exported) is (routing == "dropless")
        # Megatron-Bridge's GPTModelProvider asserts the TE RNG tracker with any CUDA graph
        nemo = CliRunner().invoke(app, ["export", str(path), "--to", "nemo"]).output
        assert "cuda_graph_impl: local" in nemo and "use_te_rng_tracker: true" in nemo
        assert "te_rng_tracker: true" in nemo.split("rng:")[1]
    assert times["dropless"][0] > 0 and times["token_drop"] == (0.0, 0.0)


def test_an_unstated_split_places_61_layers_in_32_chunks(tmp_path):
    """Megatron-Bridge's DeepSeek-V3 and Kimi-K2 recipes run 61 layers on pp·vpp = 32
    chunks through a pipeline layout string; a job that leaves the split unstated is
    predicted, one that asks for mosaic's ceil split is refused (a chunk would be empty)."""
    job = deepcopy(JOB)
    job["model"] = {"layers": 61, "d_model": 1024, "ffn": 2816, "heads": 8, "kv_heads": 4,
                    "vocab": 50257, "moe": {"experts": 16, "top_k": 2, "expert_ffn": 704}}
    job["parallelism"] = {"tp": 1, "pp": 8, "vpp": 4, "ep": 1, "dp": 1, "sharding": "zero1"}
    job["batch"] = {"global_seqs": 64, "seq_len": 4096, "micro_seqs": 1}
    for split, code in (("unstated", 0), (True, 2)):
        job["performance"] = {"precision": "bf16", "uneven_stages": split}
        path = tmp_path / f"{split}.yaml"
        path.write_text(yaml.safe_dump(job))
        result = CliRunner().invoke(app, ["perf", str(path)])
        assert result.exit_code == code, result.output
