"""Transformer Engine's CuTe DSL fused grouped MLP (te.ops ForwardGroupedMLP_CuTeGEMMSwiGLU_MXFP8
and its backward, as Megatron-Core's TEGroupedMLP runs it under use_transformer_engine_op_fuser;
docs/evidence/fused_grouped_mlp.md): the routed experts' GLU activation and the MXFP8 casts of
FC2's input and of FC1's output gradient run in GEMM epilogues. Expected values by hand from
the byte counts: SwiGLU reads gate and up and writes one value (3 x 2 B per element of the
expert width), an FP8 cast reads bf16 and writes two 1-byte copies (4 B per element)."""

from dataclasses import replace

import pytest

from mosaic.arch import ladder_geometry
from mosaic.config.job_schema import job_from_document
from mosaic.errors import MosaicInputError
from mosaic.export.spec import spec_from_job, unexpressed
from mosaic.hardware import Cluster, get_system
from mosaic.perf.calibration import load_calibration
from mosaic.perf.kernels import memory_bound_time_s
from mosaic.perf.layer_costs import moe_ffn_parts
from mosaic.perf.machine import machine_for
from mosaic.perf.plan import single_plan
from mosaic.perf.shapes import expert_copies
from mosaic.perf.step_time import predict_step
from mosaic.perf.workload import Fp8Recipe, Workload

B200 = Cluster(system=get_system("DGX-B200"), n_nodes=1)
# no shared expert: its FC1/FC2 are separate TE Linears (Megatron-Core SharedExpertMLP),
# unfused either way
MOE = ladder_geometry(4, experts=64, top_k=4, split_factor=4)
MOE = replace(MOE, moe=replace(MOE.moe, shared_experts=0))
PLAN = single_plan(ep=8, dp=8)


def _workload(**settings) -> Workload:
    base = {"geometry": MOE, "global_batch": 64, "seq_len": 4096, "precision": "fp8",
            "fp8_recipe": Fp8Recipe.MXFP8, "stack": "megatron-bridge"}
    return Workload(**{**base, **settings})


def _machine():
    return machine_for(B200, "fp8", fp8_recipe=Fp8Recipe.MXFP8)


def test_the_fused_mlp_drops_the_expert_activation_kernel_and_two_casts():
    machine, workload = _machine(), _workload()
    fused_workload = replace(workload, fused_grouped_mlp=True)
    unfused, fused = (moe_ffn_parts(machine, w, PLAN) for w in (workload, fused_workload))
    copies = expert_copies(workload, PLAN)[0]
    assert copies == 4096 * 4  # one sequence per micro-batch, top-4, tp 1
    width, d = MOE.moe.expert_ffn, MOE.d_model
    bandwidth = machine.hbm_bw_bytes_per_s * 0.80  # elementwise_hbm_efficiency
    # SwiGLU on every routed copy: gate and up read, one value written, 2 B each
    assert (unfused.stream - fused.stream)[0] == pytest.approx(
        copies * width * 3 * 2 / bandwidth, rel=1e-12)
    assert fused.expert_activation[0] == pytest.approx(
        memory_bound_time_s(0.0, machine.hbm_bw_bytes_per_s))  # a launch, no bytes
    # forward: only the routed tokens into FC1 are cast (4 B per element); backward: only
    # the gradient into FC2's output
    assert fused.cast_forward[0] == pytest.approx(
        memory_bound_time_s(4 * copies * d, machine.hbm_bw_bytes_per_s), rel=1e-12)
    assert fused.cast_backward[0] == pytest.approx(fused.cast_forward[0], rel=1e-12)
    assert (unfused.cast_forward - fused.cast_forward)[0] == pytest.approx(
        memory_bound_time_s(4 * copies * width, machine.hbm_bw_bytes_per_s), rel=1e-12)
    assert (unfused.cast_backward - fused.cast_backward)[0] == pytest.approx(
        memory_bound_time_s(4 * copies * 2 * width, machine.hbm_bw_bytes_per_s), rel=1e-12)
    # the GEMMs themselves are the same
    assert fused.experts_up[0] == unfused.experts_up[0]
    assert fused.experts_down[0] == unfused.experts_down[0]


def test_expert_tensor_parallel_plans_run_unfused():
    """Megatron-Core's support check refuses the fused ops with expert TP (experts.py
    @ d98e8a64dd: "Tensor parallelism is not supported")."""
    machine = _machine()
    plans = single_plan(ep=4, etp=2, dp=8)
    on, off = (moe_ffn_parts(machine, _workload(fused_grouped_mlp=flag), plans)
               for flag in (True, False))
    assert on.stream[0] == off.stream[0]
    assert on.cast_forward[0] == off.cast_forward[0]


def test_a_fused_step_is_faster_by_element_wise_and_cast_time_only():
    machine, calibration = _machine(), load_calibration("default")
    off = predict_step(_workload(), PLAN, machine, calibration)
    on = predict_step(_workload(fused_grouped_mlp=True), PLAN, machine, calibration)
    assert on.step_time_s[0] < off.step_time_s[0]
    for term in ("compute_elementwise", "compute_quantise_cast", "compute_elementwise_extra"):
        assert on.breakdown_s[term][0] < off.breakdown_s[term][0]
    for term in ("compute_experts", "compute_attention_gemm", "compute_attention_core"):
        assert on.breakdown_s[term][0] == off.breakdown_s[term][0]


@pytest.mark.parametrize(("settings", "message"), [
    ({"precision": "bf16", "fp8_recipe": None}, "needs precision mxfp8"),
    ({"fp8_recipe": Fp8Recipe.CURRENT}, "needs precision mxfp8"),
    ({"geometry": ladder_geometry(4)}, "needs an MoE model"),
    ({"geometry": replace(MOE, activation="squared_relu", glu=False)}, "SwiGLU"),
    # Megatron-Core's op fuser takes SwiGLU and quick-GELU GLU, not GELU-gated experts
    # (experts.py _is_fused_impl_supported @ d98e8a64dd)
    ({"geometry": replace(MOE, activation="geglu")}, r"SwiGLU activation \(got geglu\)"),
    ({"stack": "torchtitan"}, "stacks that have it: megatron-bridge, megatron-core"),
    ({"stack": "paper-nemo"}, "op-fuser path"),
])
def test_the_fused_mlp_is_refused_where_it_cannot_run(settings, message):
    with pytest.raises(MosaicInputError, match=message):
        _workload(fused_grouped_mlp=True, **settings)


QWEN3_30B = {"layers": 48, "d_model": 2048, "heads": 32, "kv_heads": 4, "head_dim": 128,
             "ffn": 6144, "vocab": 151936,
             "moe": {"experts": 128, "top_k": 8, "expert_ffn": 768}}


def _job(model: dict, system: str = "GB200-NVL72", version: str = "26.06",
         **performance) -> tuple:
    job = job_from_document({
        "model": model, "batch": {"global_seqs": 64, "seq_len": 4096},
        "parallelism": {"ep": 8, "dp": 8},
        "performance": {"precision": "mxfp8", "stack": "megatron-bridge",
                        "stack_version": version, **performance},
        "hardware": {"system": system, "nodes": 2 if system == "GB200-NVL72" else 1}},
        "test")
    return job.workload, job.assumptions


def test_the_2606_mxfp8_recipes_fuse_the_grouped_mlp_with_the_graph_bundle():
    """Megatron-Bridge v0.5.0 (NeMo 26.06) presets set cutedsl_fused_grouped_mlp with the
    full-iteration bundle: Qwen3-30B on GB200 has it; on B200 the bundle (and the fusion)
    waits for 26.06.01; 26.04 has neither (recipes/megatron-bridge.yaml)."""
    gb200, notes = _job(QWEN3_30B)
    assert gb200.fused_grouped_mlp is True
    assert any("fused_grouped_mlp=True" in line for line in notes)
    assert _job(QWEN3_30B, system="DGX-B200")[0].fused_grouped_mlp is False
    assert _job(QWEN3_30B, system="DGX-B200", version="26.06.01")[0].fused_grouped_mlp is True
    assert _job(QWEN3_30B, version="26.04")[0].fused_grouped_mlp is False
    stated, _ = _job(QWEN3_30B, fused_grouped_mlp=False)
    assert stated.fused_grouped_mlp is False  # a stated setting keeps its own


def test_a_geglu_moe_model_keeps_the_rest_of_the_2606_bundle_but_runs_unfused():
    workload, notes = _job({**QWEN3_30B, "layers": 40, "activation": "geglu"})
    assert workload.fused_grouped_mlp is False
    assert workload.full_iteration_cuda_graph is True
    assert any("not applied" in line and "experts use geglu" in line for line in notes)


def test_an_envelope_refuses_the_fusion_without_mxfp8():
    from mosaic.plan.envelope import Envelope

    system = get_system("DGX-B200")
    Envelope(system=system, n_nodes=1, precision="fp8", fp8_recipe=Fp8Recipe.MXFP8,
             stack="megatron-bridge", fused_grouped_mlp=True)
    for precision, recipe in (("bf16", None), ("fp8", Fp8Recipe.CURRENT)):
        with pytest.raises(MosaicInputError, match="fused_grouped_mlp needs precision mxfp8"):
            Envelope(system=system, n_nodes=1, precision=precision, fp8_recipe=recipe,
                     stack="megatron-bridge", fused_grouped_mlp=True)


def test_a_run_record_stating_the_fusion_is_predicted_faster_than_without_it():
    """The Qwen3-30B-A3B GB200 card (extra set) states the fused MLP from its recipe: the
    same record with the field false predicts a slower step, by element-wise time only."""
    from importlib.resources import files

    import yaml

    from mosaic.config.job_schema import job_from_run_record
    from mosaic.config.run_records import run_record_from_raw
    from mosaic.evaluate.job import predict_job

    path = files("mosaic.evaluate") / "data" / "extra_runs.yaml"
    runs = yaml.safe_load(path.read_text())["runs"]
    raw = next(run for run in runs
               if run["id"] == "bcards-qwen3-30b-a3b-gb200-8-ep8-mxfp8-perf")
    assert raw["fused_grouped_mlp"] is True
    calibration = load_calibration("default")
    on, off = (predict_job(job_from_run_record(run_record_from_raw(
        {**raw, "fused_grouped_mlp": flag}, "test")), calibration).prediction
        for flag in (True, False))
    assert on.step_time_s[0] < off.step_time_s[0]
    assert on.breakdown_s["compute_experts"][0] == pytest.approx(
        off.breakdown_s["compute_experts"][0], rel=1e-6)


def test_the_setting_survives_a_job_document_round_trip():
    from mosaic.config.job_schema import job_document

    job = job_from_document({
        "model": QWEN3_30B, "batch": {"global_seqs": 64, "seq_len": 4096},
        "parallelism": {"ep": 8, "dp": 8},
        "performance": {"precision": "mxfp8", "stack": "megatron-bridge",
                        "fused_grouped_mlp": True, "fp8_dot_product_attention": True},
        "hardware": {"system": "DGX-B200", "nodes": 1}}, "test")
    document = job_document(job)
    assert document["performance"]["fused_grouped_mlp"] is True
    assert document["performance"]["fp8_dot_product_attention"] is True
    again = job_from_document(document, "round trip").workload
    assert again.fused_grouped_mlp and again.fp8_dot_product_attention


def test_gpt_oss_in_2606_and_a_non_glu_model_stay_unfused():
    """GPT-OSS's clamped GLU needs Transformer Engine 2.17 to fuse and 26.06 ships 2.16; an MoE
    model with squared-ReLU experts has no GLU for the kernel (the generic 26.06 entry would
    give it the fusion: not applied, with a note)."""
    gpt_oss = {"layers": 36, "d_model": 2880, "heads": 64, "kv_heads": 8, "head_dim": 64,
               "ffn": 2880, "vocab": 201088,
               "moe": {"experts": 128, "top_k": 4, "expert_ffn": 2880}}
    assert _job(gpt_oss)[0].fused_grouped_mlp is False
    relu = {**QWEN3_30B, "layers": 40, "activation": "squared_relu"}
    workload, notes = _job(relu)
    assert workload.fused_grouped_mlp is False
    assert workload.full_iteration_cuda_graph is True  # the rest of the bundle applies
    assert any("fused_grouped_mlp=True in the recipe, not applied" in line for line in notes)


def test_the_exports_write_the_op_fuser_and_say_the_environment_variable():
    """Megatron-LM exposes TransformerConfig fields as flags (megatron/training/
    argument_utils.py ArgumentGroupFactory): --use-transformer-engine-op-fuser and
    --moe-mlp-glu-interleave-size; Megatron-Bridge takes the same model fields. The TE switch
    is an environment variable, which the file can only name."""
    from mosaic.export.megatron import arguments
    from mosaic.export.nemo import render as render_nemo

    job = job_from_document({
        "model": QWEN3_30B, "batch": {"global_seqs": 64, "seq_len": 4096},
        "parallelism": {"ep": 8, "dp": 8},
        "performance": {"precision": "mxfp8", "stack": "megatron-bridge",
                        "fused_grouped_mlp": True},
        "hardware": {"system": "DGX-B200", "nodes": 1}}, "test")
    spec = spec_from_job(job, "test")
    assert spec.fused_grouped_mlp is True
    args, unsupported = arguments(spec)
    assert ("--use-transformer-engine-op-fuser", None) in args
    assert ("--moe-mlp-glu-interleave-size", "32") in args
    assert any("NVTE_CUTEDSL_FUSED_GROUPED_MLP=1" in line for line in unsupported)
    assert not any("fused_grouped_mlp True" in line for line in unsupported)
    nemo = render_nemo(spec).text
    assert "use_transformer_engine_op_fuser: true" in nemo
    assert "moe_mlp_glu_interleave_size: 32" in nemo
    unfused = spec_from_job(job_from_document({
        "model": QWEN3_30B, "batch": {"global_seqs": 64, "seq_len": 4096},
        "parallelism": {"ep": 8, "dp": 8},
        "performance": {"precision": "mxfp8", "stack": "megatron-bridge"},
        "hardware": {"system": "DGX-B200", "nodes": 1}}, "test"), "test")
    assert ("--use-transformer-engine-op-fuser", None) not in arguments(unfused)[0]
    assert unexpressed(unfused, set(), "Megatron-LM") == []


def test_explain_offers_the_fusion_where_it_can_run():
    """`mosaic explain`'s lever: the same plan predicted with only the setting changed; not
    offered under bf16, with expert TP, or once the job states it."""
    from mosaic.evaluate.diagnosis import rank_levers

    def levers(settings: dict, plan=PLAN) -> dict:
        workload = _workload(**settings)
        return {lever.name: lever for lever in rank_levers(
            workload, plan, _machine() if workload.precision == "fp8" else machine_for(
                B200, "bf16"), load_calibration("default"))}

    offered = levers({})["fused_grouped_mlp"]
    alone = predict_step(_workload(fused_grouped_mlp=True), PLAN, _machine(),
                         load_calibration("default"))
    assert offered.step_time_s == pytest.approx(float(alone.step_time_s[0]), rel=1e-12)
    assert offered.gain > 1.0 and offered.plan == PLAN.row(0)
    assert "fused_grouped_mlp" not in levers({"fused_grouped_mlp": True})
    assert "fused_grouped_mlp" not in levers({"precision": "bf16", "fp8_recipe": None})
    assert "fused_grouped_mlp" not in levers({}, single_plan(ep=4, etp=2, dp=8))
