"""The Megatron-MoE-ModelZoo recipe data (mosaic/stacks/data/recipes/megatron-moe-modelzoo.yaml):
it loads with every other shipped recipe file, its software pattern picks out zoo runs and no
record in the calibration files, and two entries resolve as the zoo's launch scripts say.

Expected values were read by hand from yanring/Megatron-MoE-ModelZoo @ e865051
(docs/evidence/megatron_moe_modelzoo_recipes.md), not from the data file."""

import re
from pathlib import Path

import pytest
import yaml

from mosaic.config.recipes import RecipeQuery, check_recipes, recipe_settings, recipes

REPO = Path(__file__).resolve().parents[2]
RECORD_FILES = (REPO.parent / "shared" / "calibration" / "published_runs.yaml",
                REPO.parent / "shared" / "calibration" / "paper_p6b200_sweeps.yaml",
                REPO / "src" / "mosaic" / "evaluate" / "data" / "extra_runs.yaml")
DEEPSEEK_V3 = {"layers": 61, "d_model": 7168, "experts": 256}
QWEN3_235B = {"layers": 94, "d_model": 4096, "experts": 128}
MIXTRAL_8X22B = {"layers": 56, "d_model": 6144, "experts": 8}
ZOO_TEXTS = (
    "Megatron-MoE-ModelZoo @ e865051 (Megatron-Core dev, TE, DeepEP)",
    "yanring/Megatron-MoE-ModelZoo best_practice scripts",
    "Megatron-Core MoE Model Zoo best-practice config",
    "Megatron MoE model-zoo, MCore 0.16, NGC PyTorch 25.12",
    "MoE-ModelZoo sbatch_benchmarking.sh",
)


def _zoo():
    return [r for r in recipes() if r.label.startswith("ModelZoo")]


def _query(software=ZOO_TEXTS[0], **changes):
    query = {"stack": "megatron-core", "software": software, "release": None,
             "device_name": "H100-SXM-80GB", "generation": "hopper",
             "precision": "fp8-blockwise", "moe": True, **DEEPSEEK_V3}
    return RecipeQuery(**{**query, **changes})


def _software_strings(node):
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "software" and isinstance(value, str):
                yield value
            else:
                yield from _software_strings(value)
    elif isinstance(node, list):
        for item in node:
            yield from _software_strings(item)


def test_the_file_loads_with_every_shipped_recipe_file():
    zoo = _zoo()
    assert len(zoo) >= 20
    assert {r.stack for r in zoo} == {"megatron-core"}
    assert all(r.since is None and r.until is None for r in zoo)  # not tied to releases
    assert all("e865051" in r.source for r in zoo)
    check_recipes(recipes())


def test_the_software_pattern_matches_zoo_texts_and_no_record():
    patterns = {r.software_pattern.pattern for r in _zoo()}
    assert len(patterns) == 1
    pattern = re.compile(patterns.pop(), re.IGNORECASE)
    for text in ZOO_TEXTS:
        assert pattern.search(text), text
    present = [path for path in RECORD_FILES if path.exists()]
    if not present:
        pytest.skip("no run-record file found (../shared/calibration is absent)")
    strings = [s for path in present for s in _software_strings(yaml.safe_load(path.read_text()))]
    assert len(strings) > 50
    assert [s for s in strings if pattern.search(s)] == []


def test_deepseek_v3_h100_fp8_resolves_as_the_h100_best_practice_command():
    # run_deepseek_v3_h100.sh: A2A_OVERLAP=1 ... PR=fp8 --recompute-modules mla_up_proj mlp, no
    # DISPATCHER (sbatch default deepep); PR=fp8 adds --fp8-param-gather, not --tp-comm-overlap;
    # DeepSeek-V3.yaml: --cross-entropy-fusion-impl native, --overlap-grad-reduce,
    # --moe-permute-fusion; --bf16 with fp32 main grads reduces in fp32.
    settings, matched = recipe_settings(_query())
    assert settings == {
        "dispatcher": "deepep", "ep_overlap": True, "recompute": "selective",
        "recompute_modules": ["mla_up_proj", "mlp"], "fp8_param_gather": True,
        "tp_comm_overlap": False, "cross_entropy": "fused", "dp_comm_overlap": True,
        "grad_reduce_in_fp32": True, "moe_permute": "te_fused",
        "full_iteration_cuda_graph": False, "pad_to_capacity": False, "dispatch_fp8": False}
    assert all(r.label.startswith("ModelZoo") for r in matched)
    # The same model on GB200 in MXFP8 (run_deepseek_v3_gb200.sh): HybridEP, no EP overlap,
    # recompute mlp only; partial TE graphs are not a whole-step graph.
    gb200 = recipe_settings(_query(device_name="GB200", generation="blackwell",
                                   precision="mxfp8"))[0]
    assert (gb200["dispatcher"], gb200["ep_overlap"], gb200["recompute_modules"],
            gb200["full_iteration_cuda_graph"]) == ("hybridep", False, ["mlp"], False)


def test_qwen3_235b_gb200_mxfp8_resolves_as_the_gb200_script():
    # run_gb200_235b.sh 'GB200 config, MXFP8': DISPATCHER=hybridep A2A_OVERLAP=1
    # --recompute-modules moe_act layernorm; Qwen3-235B-A22B.yaml: --cross-entropy-fusion-impl te.
    settings = recipe_settings(_query(device_name="GB200", generation="blackwell",
                                      precision="mxfp8", **QWEN3_235B))[0]
    assert {key: settings[key] for key in (
        "dispatcher", "ep_overlap", "recompute", "recompute_modules", "cross_entropy",
        "fp8_param_gather", "tp_comm_overlap")} == {
        "dispatcher": "hybridep", "ep_overlap": True, "recompute": "selective",
        "recompute_modules": ["moe_act", "layernorm"], "cross_entropy": "te",
        "fp8_param_gather": True, "tp_comm_overlap": False}
    # Its BF16 command: A2A_OVERLAP=0, no recompute; PR=bf16 adds --tp-comm-overlap.
    bf16 = recipe_settings(_query(device_name="GB200", generation="blackwell",
                                  precision="bf16", **QWEN3_235B))[0]
    assert (bf16["ep_overlap"], bf16["recompute"], bf16["tp_comm_overlap"]) == (
        False, "none", True)


def test_mixtral_8x22b_takes_the_all_to_all_dispatcher_its_script_names():
    settings = recipe_settings(_query(precision="bf16", **MIXTRAL_8X22B))[0]
    assert (settings["dispatcher"], settings["recompute"], settings["tp_comm_overlap"]) == (
        "alltoall", "none", True)


def test_other_megatron_core_runs_and_grid_searches():
    # A Megatron-LM run that is not a zoo run takes none of these entries.
    assert not any(r.label.startswith("ModelZoo") for r in recipe_settings(
        _query(software="Megatron-LM (megatron-core core_v0.6.0), TE"))[1])
    # A zoo run without one geometry (a plan search) takes only the entries for every model.
    settings, matched = recipe_settings(_query(layers=None, d_model=None, experts=None))
    assert all(r.model is None for r in matched)
    assert (settings["dispatcher"], settings["ep_overlap"]) == ("deepep", False)
    assert "recompute" not in settings
