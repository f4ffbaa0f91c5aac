"""parallelism.pipeline_layout in job files and run records, the Megatron-Bridge DeepSeek-V3
recipes' layouts and MTP module, and the launch configs that carry a layout. Expected
layouts read by hand in NVIDIA-NeMo/Megatron-Bridge src/megatron/bridge/recipes/deepseek/
deepseek_v3.py @ v0.2.0 (layout_map: (16, 1) -> embedding + 4 blocks, 14 x 4 blocks, 1
block + MTP + loss; (8, 1) -> embedding + 8, 6 x 8, 5 + MTP + loss) and the H100 benchmark's
"Et|(tt|)*30mL" (scripts/performance/configs/deepseek/deepseek_llm_pretrain.py)."""

from copy import deepcopy
from typing import Any

import pytest

from mosaic.config.job_schema import job_document, job_from_document
from mosaic.errors import MosaicInputError
from mosaic.evaluate.job import predict_job
from mosaic.export.megatron import arguments as megatron_arguments
from mosaic.export.nemo import overrides as nemo_overrides
from mosaic.export.spec import spec_from_job
from mosaic.perf.calibration import default_calibration
from mosaic.perf.pipeline_layout import layout_for

DSV3_MODEL = {
    "name": "DeepSeek-V3", "layers": 61, "d_model": 7168, "heads": 128, "kv_heads": 128,
    "ffn": 18432, "vocab": 129280, "tied_embeddings": False, "attention": "mla",
    "norm": "rmsnorm",
    "mla": {"q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
            "qk_rope_head_dim": 64, "v_head_dim": 128},
    "moe": {"experts": 256, "top_k": 8, "expert_ffn": 2048, "shared_experts": 1,
            "shared_expert_ffn": 2048, "dense_layers": 3},
}


def _job(pp: int = 16, vpp: int | None = 1, system: str = "DGX-B200", nodes: int = 32,
         ep: int = 8, model: dict[str, Any] | None = None, **parallelism: Any) -> dict[str, Any]:
    return {
        "model": deepcopy(model or DSV3_MODEL),
        "parallelism": {"tp": 1, "pp": pp, "ep": ep, **({} if vpp is None else {"vpp": vpp}),
                        **parallelism},
        "batch": {"global_seqs": 2048, "micro_seqs": 1, "seq_len": 4096},
        "performance": {"stack": "megatron-bridge", "stack_version": "25.11",
                        "precision": "mxfp8"},
        "hardware": {"system": system, "nodes": nodes},
    }


def _layout(spec) -> str | None:
    """The text of the stated layout that splits the job's own plan."""
    layout = layout_for(spec.workload.pipeline_layouts, int(spec.plan.pp[0]),
                        int(spec.plan.vpp[0]))
    return None if layout is None else layout.text


def test_the_bridge_recipe_gives_deepseek_v3_its_layout_and_mtp_module():
    spec = job_from_document(_job(), "job")
    assert spec.workload.geometry.mtp_layers == 1  # recipe default, the model block is silent
    assert _layout(spec) == "Et*4|(t*4|)*14tmL"
    assert any("pipeline_layout=Et*4|(t*4|)*14tmL" in note for note in spec.assumptions)
    assert not any(note.startswith("model.mtp_layers not stated") for note in spec.assumptions)
    eight = job_from_document(_job(pp=8, nodes=32, ep=8), "job")
    assert _layout(eight) == "Et*8|(t*8|)*6t*5mL"
    hopper = job_from_document(_job(pp=8, vpp=4, system="DGX-H100", nodes=128, ep=64,
                                    tp=2) | {"performance": {
        "stack": "megatron-bridge", "stack_version": "25.11", "precision": "bf16"}}, "job")
    assert _layout(hopper) == "Et|(tt|)*30mL"


def test_deepseek_v3_at_8x4_and_2x4_on_blackwell_gets_a_recipe_layout():
    """Megatron-Core refuses 61 blocks on pp 8 without a layout (transformer_block.py
    get_num_layers_to_build: num_layers % pp == 0), so the 25.11 DGX-GB200 FP8-MX table row
    at pp 8, vpp 4 ran one; the recipes' only DeepSeek-V3 8x4 layout is the H100 benchmark's
    (the split mosaic assumed before put the LM head on a full last stage, 1.9 s a step)."""
    for release in ("25.11", "26.02"):
        job = _job(pp=8, vpp=4, system="GB200-NVL72", nodes=64, ep=32,
                   model=DSV3_MODEL | {"mtp_layers": 0})
        job["performance"]["stack_version"] = release
        assert _layout(job_from_document(job, "job")) == "Et|(tt|)*30L", release
        # pp 2 x vpp 4 (the 25.11 GB300 rows): 61 blocks on pp 2 need a layout too, and the
        # recipes' layout_map gives one per chunk count: 8 chunks, as (8, 1) and (4, 2)
        job["parallelism"].update(pp=2, vpp=4)
        assert _layout(job_from_document(job, "job")) == "Et*8|(t*8|)*6t*5L", release


def test_a_model_without_mtp_gets_the_layout_without_it():
    spec = job_from_document(_job(model=DSV3_MODEL | {"mtp_layers": 0}), "job")
    assert spec.workload.geometry.mtp_layers == 0
    assert _layout(spec) == "Et*4|(t*4|)*14tL"


def test_a_pipeline_shape_outside_the_recipe_map_keeps_the_even_split():
    spec = job_from_document(_job(pp=2, vpp=None, nodes=32, ep=8), "job")
    assert _layout(spec) is None


def test_a_stated_layout_wins_and_sets_vpp():
    text = "Et*2|(t*4|)*14t*3mL|"  # 17 chunks is not a multiple of pp=16
    with pytest.raises(MosaicInputError, match="17 chunks is not a multiple of pp=16"):
        job_from_document(_job(vpp=None, pipeline_layout=text), "job")
    own = "Et*5|(t*4|)*14mL"  # 16 chunks, 5 + 56 = 61 blocks
    spec = job_from_document(_job(pp=8, vpp=None, pipeline_layout=own), "job")
    assert (int(spec.plan.vpp[0]), _layout(spec)) == (2, own)
    assert any("from the pipeline layout's 16 chunks" in note for note in spec.assumptions)
    with pytest.raises(MosaicInputError, match="places 60 transformer blocks"):
        job_from_document(_job(pipeline_layout="Et*4|(t*4|)*14mL"), "job")
    with pytest.raises(MosaicInputError, match="drop vocab_in_pipeline_split"):
        job_from_document(_job(pipeline_layout=own, vocab_in_pipeline_split=True), "job")


def test_the_layout_survives_the_written_job_and_the_launch_configs():
    spec = job_from_document(_job(), "job")
    document = job_document(spec)
    assert document["parallelism"]["pipeline_layout"] == "Et*4|(t*4|)*14tmL"
    again = job_from_document(document, "written job")
    calibration = default_calibration()
    first, second = (predict_job(s, calibration).prediction.step_time_s[0]
                     for s in (spec, again))
    assert first == pytest.approx(second)
    export = spec_from_job(spec, "job")
    args = dict(megatron_arguments(export)[0])
    assert args["--pipeline-model-parallel-layout"] == "Et*4|(t*4|)*14tmL"
    assert "--num-virtual-stages-per-pipeline-rank" not in args  # Megatron allows one of them
    assert args["--mtp-num-layers"] == "1"
    model = nemo_overrides(export)[0]["model"]
    assert model["pipeline_model_parallel_layout"] == "Et*4|(t*4|)*14tmL"


def test_the_deepseek_v3_example_runs_the_h100_benchmark_layout():
    from pathlib import Path

    from mosaic.config.job_schema import load_job

    example = Path(__file__).resolve().parents[2] / "examples" / "deepseek_v3_h100.yaml"
    spec = load_job(example)
    assert _layout(spec) == "Et|(tt|)*30mL"
    assert spec.workload.geometry.mtp_layers == 1
    eight = load_job(example, ["parallelism.vpp=1"])
    assert _layout(eight) == "Et*8|(t*8|)*6t*5mL"
