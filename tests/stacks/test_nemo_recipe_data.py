"""Data properties of the NeMo 2.0 recipe file (src/mosaic/stacks/data/recipes/nemo.yaml).

Checks only what holds without the recipe loader: the file parses, uses the schema's keys
and values, names catalog GPUs and allowed precisions, cites a tag or commit per entry,
orders its releases, has no two same-kind entries that could match one run and disagree,
and its software pattern picks out the NeMo 2 run records but not the Megatron-Bridge or
AutoModel ones (docs/evidence/nemo2_recipes_by_release.md).
"""

from __future__ import annotations

import itertools
import re
import typing
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from mosaic.config.blocks import CrossEntropyName, MoePermuteName, RecomputeName
from mosaic.hardware.catalog import list_devices
from mosaic.stacks import known_stacks, stack_for_software

REPO = Path(__file__).resolve().parents[2]
RECIPES = REPO / "src" / "mosaic" / "stacks" / "data" / "recipes" / "nemo.yaml"
RECORD_FILES = (REPO.parent / "shared" / "calibration" / "published_runs.yaml",
                REPO / "src" / "mosaic" / "evaluate" / "data" / "extra_runs.yaml")

ENTRY_KEYS = {"label", "stack", "software_pattern", "since", "until", "model", "moe", "gpus",
              "generations", "precisions", "settings", "source"}
REQUIRED_KEYS = {"label", "stack", "since", "settings", "source"}
PRECISIONS = {"bf16", "fp16", "fp8", "fp8-cs", "fp8-blockwise", "mxfp8"}
GENERATIONS = {"ampere", "hopper", "blackwell"}
RECOMPUTE_MODULES = {"core_attn", "mla_up_proj", "layernorm", "moe_act", "mlp", "moe",
                     "shared_experts"}
# recipe_schema settings -> allowed values (a type, or the set of allowed strings)
SETTINGS: dict[str, Any] = {
    "dispatcher": {"alltoall", "deepep", "hybridep"},
    "ep_overlap": bool,
    "recompute": set(typing.get_args(RecomputeName)),
    "recompute_modules": list,
    "full_iteration_cuda_graph": bool,
    "tp_comm_overlap": bool,
    "grad_reduce_in_fp32": bool,
    "offloaded_activation_layers": int,
    "cross_entropy": set(typing.get_args(CrossEntropyName)),
    "fp8_param_gather": bool,
    "pad_to_capacity": bool,
    "dispatch_fp8": bool,
    "dp_comm_overlap": bool,
    "moe_permute": set(typing.get_args(MoePermuteName)),
    "recompute_block_fraction": float,
    "routing": {"balanced", "dropless", "token_drop", "unknown"},
}
RELEASE = re.compile(r"^\d{2}\.\d{2}$")
# a source names the repository at a tag (v2.3.0, v0.1.0rc4) or a commit hash
CITED_REVISION = re.compile(r"@ (v\d+\.\d+\.\d+\w*|[0-9a-f]{10,40})\b")
BRIDGE_SOFTWARE = "NeMo 25.09 container / Megatron-Bridge + Megatron-Core"


@cache
def _document() -> dict[str, Any]:
    return yaml.safe_load(RECIPES.read_text())


def _recipes() -> list[dict[str, Any]]:
    return _document()["recipes"]


def _ids(entries: list[dict[str, Any]]) -> list[str]:
    return [entry["label"] for entry in entries]


def _release(text: str) -> tuple[int, int]:
    yy, mm = text.split(".")
    return int(yy), int(mm)


def _record_software() -> list[str]:
    """The software text of every run record in the files present (the shared file is
    optional; the shipped extra records always are)."""
    texts = []
    for path in RECORD_FILES:
        if path.exists():
            texts += [run.get("software") or "" for run in yaml.safe_load(path.read_text())["runs"]]
    return texts


def test_file_parses_with_schema_header() -> None:
    doc = _document()
    assert set(doc) == {"schema_version", "description", "recipes"}
    assert doc["schema_version"] == 1
    assert len(doc["description"].split()) > 20
    assert len(doc["recipes"]) > 0


@pytest.mark.parametrize("entry", _recipes(), ids=_ids(_recipes()))
def test_entry_keys_and_values(entry: dict[str, Any]) -> None:
    assert REQUIRED_KEYS <= set(entry) <= ENTRY_KEYS
    assert entry["stack"] in known_stacks()
    re.compile(entry["software_pattern"])
    assert RELEASE.match(entry["since"]) and RELEASE.match(entry["until"])
    assert _release(entry["since"]) <= _release(entry["until"])
    assert set(entry.get("gpus", [])) <= set(list_devices())
    assert set(entry.get("generations", [])) <= GENERATIONS
    assert set(entry.get("precisions", [])) <= PRECISIONS
    if "model" in entry:
        assert "moe" not in entry  # the schema allows moe only without a model signature
        model = entry["model"]
        assert set(model) == {"layers", "d_model", "experts"}
        assert all(isinstance(v, int) and v >= 0 for v in model.values())
        assert model["layers"] > 0 and model["d_model"] > 0
    settings = entry["settings"]
    assert settings and set(settings) <= set(SETTINGS)
    for key, value in settings.items():
        allowed = SETTINGS[key]
        if isinstance(allowed, set):
            assert value in allowed, (key, value)
        else:
            assert type(value) is allowed, (key, value)
    assert set(settings.get("recompute_modules", [])) <= RECOMPUTE_MODULES
    if "recompute_block_fraction" in settings:
        assert 0 < settings["recompute_block_fraction"] <= 1
    assert CITED_REVISION.search(entry["source"]), entry["source"]


def test_labels_are_unique() -> None:
    labels = _ids(_recipes())
    assert len(labels) == len(set(labels))


def _may_overlap(a: list[str] | None, b: list[str] | None) -> bool:
    return a is None or b is None or bool(set(a) & set(b))


def test_no_two_same_kind_entries_disagree() -> None:
    """Entries that could match one run (same stack and model signature or both generic,
    overlapping releases, GPUs and precisions) must not give a setting two values."""
    clashes = []
    for a, b in itertools.combinations(_recipes(), 2):
        if a["stack"] != b["stack"] or a.get("model") != b.get("model"):
            continue
        if "moe" in a and "moe" in b and a["moe"] != b["moe"]:
            continue
        if max(_release(a["since"]), _release(b["since"])) > \
                min(_release(a["until"]), _release(b["until"])):
            continue
        if not (_may_overlap(a.get("gpus"), b.get("gpus"))
                and _may_overlap(a.get("precisions"), b.get("precisions"))):
            continue
        clashes += [(a["label"], b["label"], key) for key in set(a["settings"]) & set(b["settings"])
                    if a["settings"][key] != b["settings"][key]]
    assert clashes == []


def test_stack_is_the_one_nemo_records_load_as() -> None:
    assert {entry["stack"] for entry in _recipes()} == {stack_for_software("NeMo 25.04").name}
    assert stack_for_software(BRIDGE_SOFTWARE).name != "megatron-core"


def test_software_pattern_picks_nemo2_records_only() -> None:
    patterns = {entry["software_pattern"] for entry in _recipes()}
    assert len(patterns) == 1
    pattern = re.compile(patterns.pop(), re.IGNORECASE)
    for text in ("NeMo 24.12", "NeMo 25.02", "NeMo 25.04", "NeMo 25.07", "NeMo 25.09",
                 "NeMo 25.04.01 container"):
        assert pattern.search(text), text
    for text in (BRIDGE_SOFTWARE, "NeMo 25.11 container / Megatron-Bridge + Megatron-Core",
                 "NeMo AutoModel main (PyTorch FSDP2 + EP), TE + DeepEP",
                 "Megatron-LM (megatron-core core_v0.6.0), TE, flash-attention 2"):
        assert not pattern.search(text), text
    software = _record_software()
    nemo2 = [s for s in software if re.match(r"NeMo 2[45]\.\d\d$", s)]
    bridge = [s for s in software if "Bridge" in s]
    if not nemo2:  # the NeMo 2 records are the shared published runs only
        pytest.skip("no NeMo 2 run records: ../shared/calibration/published_runs.yaml absent")
    assert all(pattern.search(s) for s in nemo2)
    assert not any(pattern.search(s) for s in bridge)
