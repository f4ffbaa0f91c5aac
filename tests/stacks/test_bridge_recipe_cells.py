"""Megatron-Bridge recipe cells resolved through the recipe loader (mosaic.config.recipes), each
against what the launcher at that tag really sets.

Expected values were read by hand in NVIDIA-NeMo/Megatron-Bridge at the tag of each container
(26.02 -> v0.3.0, 26.02.01 -> v0.3.1, 26.04 -> v0.4.0, 26.04.01 -> v0.4.2, 26.06 -> v0.5.0),
not from the data file."""

import pytest

from mosaic.config.recipes import RecipeQuery, recipe_settings

QWEN3_NEXT = {"layers": 96, "d_model": 2048, "experts": 512}
DEEPSEEK_V3 = {"layers": 61, "d_model": 7168, "experts": 256}
LLAMA3_8B = {"layers": 32, "d_model": 4096, "experts": 0}
GENERATION = {
    "H100-SXM-80GB": "hopper",
    "B200": "blackwell",
    "B300": "blackwell",
    "GB200": "blackwell",
    "GB300": "blackwell",
}
# Qwen3-Next-80B-A3B's recipe recomputes these (src/megatron/bridge/recipes/qwen/qwen3_next.py
# @ v0.3.0:265-267, @ v0.3.1:95-96)
QWEN3_NEXT_RECOMPUTED = ["layernorm", "moe", "moe_act"]


def _settings(release: str, gpu: str, precision: str, model: dict[str, int]) -> dict:
    """What the shipped recipes give a Bridge run of ``release`` ('26.02' or '26.02.01')."""
    year, month = (int(part) for part in release.split(".")[:2])
    query = RecipeQuery(
        stack="megatron-bridge",
        software=f"NeMo {release} container",
        release=(year, month),
        point_release=release.count(".") == 2,
        device_name=gpu,
        generation=GENERATION[gpu],
        precision=precision,
        moe=model["experts"] > 0,
        **model,
    )
    return recipe_settings(query)[0]


@pytest.mark.parametrize(
    ("release", "gpu", "precision"),
    [
        ("26.02", "H100-SXM-80GB", "bf16"),
        ("26.02.01", "H100-SXM-80GB", "fp8-cs"),
        ("26.02", "B200", "mxfp8"),
        ("26.02.01", "B200", "bf16"),
        ("26.02", "B300", "bf16"),
        ("26.02.01", "GB200", "mxfp8"),
        ("26.02.01", "GB300", "bf16"),
    ],
)
def test_qwen3_next_in_26_02_keeps_the_recipes_selective_recompute(release, gpu, precision):
    # v0.3.0/v0.3.1 set_qwen3_next_common_configs (qwen3_llm_pretrain.py:47-60) no longer sets
    # recompute_granularity None, and the presets name no recompute_modules
    settings = _settings(release, gpu, precision, QWEN3_NEXT)
    assert settings["recompute"] == "selective"
    assert settings["recompute_modules"] == QWEN3_NEXT_RECOMPUTED


def test_qwen3_next_in_25_11_and_26_04_recomputes_nothing():
    # v0.2.0 qwen3_llm_pretrain.py:53 and v0.4.0 set_qwen3_common_configs set
    # recompute_granularity None
    assert _settings("25.11", "GB200", "bf16", QWEN3_NEXT)["recompute"] == "none"
    assert _settings("26.04", "H100-SXM-80GB", "bf16", QWEN3_NEXT)["recompute"] == "none"


@pytest.mark.parametrize(
    ("release", "gpu", "dispatcher"),
    [
        ("26.02", "B200", "alltoall"),  # v0.3.0 passes no backend to the recipe
        ("26.02.01", "B200", "deepep"),  # v0.3.1 recipe default deepep, applied on 'NVIDIA B200'
        ("26.02.01", "GB200", "alltoall"),  # DeepEP skipped: not Hopper, not named B200/B300
        ("26.02.01", "H100-SXM-80GB", "alltoall"),  # the H100 function resets it to alltoall
    ],
)
def test_qwen3_next_dispatcher_in_26_02(release, gpu, dispatcher):
    precision = "fp8-cs" if gpu.startswith("H100") else "bf16"
    assert _settings(release, gpu, precision, QWEN3_NEXT)["dispatcher"] == dispatcher


def test_v2_preset_is_loaded_before_v1_and_backend_forced_from_26_04():
    # DeepSeek-V3 B200 MXFP8: v0.4.0 DEEPSEEK_V3_PRETRAIN_CONFIG_B200_FP8_MX_V2 names hybridep;
    # v0.4.2's names deepep with moe_a2a_overlap True and recompute_modules [mla_up_proj, mlp]
    first = _settings("26.04", "B200", "mxfp8", DEEPSEEK_V3)
    assert (first["dispatcher"], first.get("ep_overlap", False)) == ("hybridep", False)
    point = _settings("26.04.01", "B200", "mxfp8", DEEPSEEK_V3)
    assert (point["dispatcher"], point["ep_overlap"]) == ("deepep", True)
    assert point["recompute_modules"] == ["mla_up_proj", "mlp"]


@pytest.mark.parametrize("release", ["25.11", "26.02", "26.04.01", "26.06"])
def test_llama3_8b_h100_fp8_cs_recomputes_5_of_its_32_blocks_whole(release):
    # LLAMA3_8B_PRETRAIN_CONFIG_H100_FP8_CS_V1 recompute_num_layers=5 at PP 1
    # (llama3_workload_base_configs.py @ v0.3.0..v0.5.1; LLAMA3_8B_H100_FP8_CS_BASE_CONFIG @
    # v0.2.0) -> recompute_granularity full, recompute_method block (overrides.py
    # _set_recompute_overrides): the first 5 of the stage's 32 blocks
    settings = _settings(release, "H100-SXM-80GB", "fp8-cs", LLAMA3_8B)
    assert settings["recompute"] == "full"
    assert settings["recompute_block_fraction"] == pytest.approx(5 / 32)
    # the BF16 preset sets none (recompute off)
    assert _settings(release, "H100-SXM-80GB", "bf16", LLAMA3_8B)["recompute"] == "none"
