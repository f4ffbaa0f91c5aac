"""Data properties of the Megatron-Bridge recipe file that hold without the recipe loader.

The file's format is the lead's recipe schema (schema_version 1): the keys an entry and its
settings may carry, catalog GPU names, the allowed precisions, YY.MM releases with since <= until,
and a source that names the repository tag it was read from.
"""

from __future__ import annotations

import re
from importlib import resources

import pytest
import yaml

ENTRY_KEYS = {"label", "stack", "point_release", "since", "until", "model", "moe", "gpus",
              "generations", "precisions", "settings", "source"}
SETTING_KEYS = {"dispatcher", "ep_overlap", "recompute", "recompute_modules",
                "full_iteration_cuda_graph", "tp_comm_overlap", "grad_reduce_in_fp32",
                "offloaded_activation_layers", "cross_entropy", "fp8_param_gather",
                "pad_to_capacity", "dispatch_fp8", "dp_comm_overlap", "moe_permute",
                "recompute_block_fraction", "routing", "fp4_param_gather", "layer_cuda_graphs",
                "mtp_layers", "pipeline_layouts", "fused_grouped_mlp",
                "fp8_dot_product_attention"}
PRECISIONS = {"bf16", "fp16", "fp8", "fp8-cs", "fp8-blockwise", "mxfp8", "nvfp4"}
RECOMPUTE_MODULES = {"core_attn", "mla_up_proj", "layernorm", "moe_act", "mlp", "moe",
                     "shared_experts"}
BOOL_SETTINGS = {"ep_overlap", "full_iteration_cuda_graph", "tp_comm_overlap",
                 "grad_reduce_in_fp32", "fp8_param_gather", "pad_to_capacity", "dispatch_fp8",
                 "dp_comm_overlap", "fp4_param_gather", "layer_cuda_graphs"}
RELEASE = re.compile(r"^\d{2}\.\d{2}$")
# a Megatron-Bridge tag as the sources write it: '@ v0.3.1', '@ v0.1.0rc4', '@ v0.3.0..v0.5.1'
TAG = re.compile(r"@ v\d+\.\d+\.\d+(rc\d+)?\b")


def _data_file(*parts: str):
    return resources.files("mosaic").joinpath(*parts)


@pytest.fixture(scope="module")
def recipes() -> list[dict]:
    data = yaml.safe_load(_data_file("stacks", "data", "recipes", "megatron-bridge.yaml")
                          .read_text())
    assert data["schema_version"] == 1
    assert data["description"].strip()
    return data["recipes"]


@pytest.fixture(scope="module")
def device_names() -> set[str]:
    devices = yaml.safe_load(_data_file("hardware", "data", "devices.yaml").read_text())
    return {d["name"] for d in devices["devices"]}


def _release(text: str) -> tuple[int, int]:
    year, month = text.split(".")
    return int(year), int(month)


def test_entries_use_only_schema_keys(recipes):
    assert recipes, "the file holds no recipes"
    for entry in recipes:
        assert set(entry) <= ENTRY_KEYS, (entry["label"], set(entry) - ENTRY_KEYS)
        assert {"label", "stack", "since", "settings", "source"} <= set(entry), entry["label"]
        assert entry["stack"] == "megatron-bridge"
        assert set(entry["settings"]) <= SETTING_KEYS, entry["label"]
        assert entry["settings"], entry["label"]
        if "model" in entry:
            assert set(entry["model"]) == {"layers", "d_model", "experts"}, entry["label"]
            assert "moe" not in entry, "moe only narrows entries without a model"


def test_gpus_are_catalog_devices_and_precisions_allowed(recipes, device_names):
    for entry in recipes:
        assert set(entry.get("gpus", [])) <= device_names, entry["label"]
        assert set(entry.get("precisions", [])) <= PRECISIONS, entry["label"]
        assert set(entry.get("generations", [])) <= {"ampere", "hopper", "blackwell"}


def test_releases_are_ordered(recipes):
    for entry in recipes:
        assert RELEASE.match(entry["since"]), entry["label"]
        if "until" in entry:
            assert RELEASE.match(entry["until"]), entry["label"]
            assert _release(entry["since"]) <= _release(entry["until"]), entry["label"]


def test_every_source_names_a_tag(recipes):
    for entry in recipes:
        assert "NVIDIA-NeMo/Megatron-Bridge" in entry["source"], entry["label"]
        assert TAG.search(entry["source"]), entry["label"]


def test_setting_values_are_well_typed(recipes):
    for entry in recipes:
        settings = entry["settings"]
        for key in BOOL_SETTINGS & set(settings):
            assert isinstance(settings[key], bool), (entry["label"], key)
        assert settings.get("dispatcher", "alltoall") in {"alltoall", "deepep", "hybridep"}
        assert settings.get("recompute", "none") in {"none", "selective", "full"}
        assert set(settings.get("recompute_modules", [])) <= RECOMPUTE_MODULES, entry["label"]
        if "recompute_modules" in settings:
            assert settings["recompute"] == "selective", entry["label"]
        layers = settings.get("offloaded_activation_layers", 0)
        assert isinstance(layers, int) and layers >= 0
        if "model" in entry and layers:
            assert layers < entry["model"]["layers"], entry["label"]


def test_point_release_entries_split_one_release(recipes):
    """An entry keyed to a first container (26.04) or its point release (26.04.01) names one
    release, and the point release is one of the 26.02 / 26.04 / 26.06 containers that had
    one (v0.3.1, v0.4.2, v0.5.1)."""
    split = [entry for entry in recipes if "point_release" in entry]
    assert split
    for entry in split:
        assert entry["since"] == entry["until"] in ("26.02", "26.04", "26.06"), entry["label"]
        assert isinstance(entry["point_release"], bool), entry["label"]
