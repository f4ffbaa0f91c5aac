"""FP8 on the routed experts alone (Workload.quantised_gemms routed_experts: torchtitan's
quantize.grouped_mm converters with fqns ["experts"], as the nebius/ml-cookbook DeepSeek-V3
recipe runs them): the routed experts' grouped GEMMs and their casts exactly as in an
all-FP8 job, every other GEMM exactly as in a bf16 job, with bf16 operands saved."""

from dataclasses import replace

import numpy as np
import pytest

from mosaic.arch import ladder_geometry
from mosaic.config.job_schema import job_document, job_from_document
from mosaic.errors import MosaicInputError
from mosaic.hardware import Cluster, get_system
from mosaic.perf.layer_costs import attention_times, moe_ffn_parts
from mosaic.perf.machine import machine_for
from mosaic.perf.memory import attention_activation_bytes, moe_block_activation_bytes
from mosaic.perf.plan import single_plan
from mosaic.perf.workload import Fp8Recipe, QuantisedGemms, Workload

B200 = Cluster(system=get_system("DGX-B200"), n_nodes=1)
MOE = ladder_geometry(4, experts=64, top_k=4, split_factor=4)  # one shared expert
PLAN = single_plan(ep=8, dp=8)
# a torchtitan MXFP8 job on one B200 node with the routed experts quantised alone
EXPERTS_ONLY_JOB = {"model": {"layers": 8, "d_model": 1024, "heads": 8, "ffn": 4096,
                              "moe": {"experts": 16, "top_k": 2, "expert_ffn": 1024}},
                    "batch": {"global_seqs": 64, "seq_len": 2048, "micro_seqs": 1},
                    "parallelism": {"ep": 8, "sharding": "fsdp"},
                    "performance": {"precision": "mxfp8", "stack": "torchtitan",
                                    "quantised_gemms": "routed_experts"},
                    "hardware": {"system": "DGX-B200", "nodes": 1}}


def _workload(**settings) -> Workload:
    base = {"geometry": MOE, "global_batch": 64, "seq_len": 4096, "precision": "fp8",
            "fp8_recipe": Fp8Recipe.MXFP8, "stack": "torchtitan"}
    return Workload(**{**base, **settings})


def test_the_experts_run_as_in_fp8_and_everything_else_as_in_bf16():
    fp8_machine = machine_for(B200, "fp8", fp8_recipe=Fp8Recipe.MXFP8)
    bf16_machine = machine_for(B200, "bf16")
    experts_only = _workload(quantised_gemms=QuantisedGemms.ROUTED_EXPERTS)
    every_gemm = _workload()
    bf16 = _workload(precision="bf16", fp8_recipe=None)
    moe, moe_fp8, moe_bf16 = (moe_ffn_parts(m, w, PLAN) for m, w in (
        (fp8_machine, experts_only), (fp8_machine, every_gemm), (bf16_machine, bf16)))
    assert moe.experts_up == pytest.approx(moe_fp8.experts_up, rel=1e-12)
    assert moe.experts_down == pytest.approx(moe_fp8.experts_down, rel=1e-12)
    assert moe.shared == pytest.approx(moe_bf16.shared, rel=1e-12)
    assert not np.allclose(moe.shared, moe_fp8.shared)  # the lanes differ on a B200
    # the casts: the routed experts' alone (the shared expert's stay out)
    assert moe_bf16.cast_forward[0] == 0 < moe.cast_forward[0] < moe_fp8.cast_forward[0]
    attention, attention_bf16 = (attention_times(m, w, PLAN) for m, w in (
        (fp8_machine, experts_only), (bf16_machine, bf16)))
    assert attention.gemm == pytest.approx(attention_bf16.gemm, rel=1e-12)
    assert attention.quantise_cast[0] == 0


def test_saved_gemm_inputs_are_fp8_for_the_experts_alone():
    experts_only = _workload(quantised_gemms=QuantisedGemms.ROUTED_EXPERTS)
    every_gemm, bf16 = _workload(), _workload(precision="bf16", fp8_recipe=None)
    assert experts_only.dense_gemm_element_bytes == 2.0 and every_gemm.gemm_element_bytes == 1
    assert (attention_activation_bytes(experts_only, PLAN)
            == attention_activation_bytes(bf16, PLAN)).all()
    # the routed experts' inputs and GLU outputs' GEMM-2 inputs in 1 B, the shared expert's
    # in 2 B: between the all-FP8 and the bf16 block
    moe = [moe_block_activation_bytes(w, PLAN)[0] for w in (every_gemm, experts_only, bf16)]
    assert moe[0] < moe[1] < moe[2]
    no_shared = replace(MOE, moe=replace(MOE.moe, shared_experts=0))
    assert (moe_block_activation_bytes(replace(experts_only, geometry=no_shared), PLAN)
            == moe_block_activation_bytes(replace(every_gemm, geometry=no_shared), PLAN)).all()


@pytest.mark.parametrize(("settings", "words"), [
    ({"precision": "bf16", "fp8_recipe": None}, "needs precision fp8 or mxfp8"),
    # torchtitan's NVFP4 converter quantises linears only, not the grouped experts
    ({"precision": "fp4", "fp8_recipe": None}, "needs precision fp8 or mxfp8 .got nvfp4"),
    ({"geometry": ladder_geometry(4)}, "needs an MoE model"),
    ({"fp8_param_gather": True, "fp8_recipe": Fp8Recipe.CURRENT},
     "fp8_param_gather with quantised_gemms routed_experts"),
    # Transformer Engine's autocast quantises every TE module: Megatron cannot split them
    ({"stack": "megatron-core"},
     "with stack megatron-core: it quantises every GEMM of its precision; stacks that "
     "quantise the routed experts alone: torchtitan"),
])
def test_contradictions_are_refused(settings, words):
    with pytest.raises(MosaicInputError, match=words):
        _workload(quantised_gemms="routed_experts", **settings)


def test_a_job_file_states_it_and_writes_it_back():
    spec = job_from_document(EXPERTS_ONLY_JOB, "job")
    assert spec.workload.quantised_gemms is QuantisedGemms.ROUTED_EXPERTS
    written = job_document(spec)
    assert written["performance"]["quantised_gemms"] == "routed_experts"
    assert job_from_document(written, "job").workload == spec.workload


def test_torchtitan_writes_the_expert_converter_alone_and_megatron_says_it_cannot():
    """torchtitan: --model.converters quantize.grouped_mm.mx with fqns experts, as the
    nebius/ml-cookbook recipe launches it; Megatron-Core quantises every GEMM under its FP8
    recipe, so its export names the setting as not expressed."""
    import tomllib

    from mosaic.export import export, spec_from_job

    spec = spec_from_job(job_from_document(EXPERTS_ONLY_JOB, "job"), "job.yaml")
    toml = tomllib.loads(export(spec, "torchtitan").text)
    assert toml["model"]["converters"] == ["quantize.grouped_mm.mx"]
    assert toml["quantize"]["grouped_mm"]["mx"] == {"recipe_name": "mxfp8", "fqns": ["experts"]}
    assert "linear" not in toml["quantize"]
    notes = export(spec, "megatron").unsupported
    assert any(note.startswith("performance.quantised_gemms routed_experts") for note in notes)

