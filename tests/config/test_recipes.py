"""Stack performance recipes (mosaic.config.recipes): which entries match a run, the order
in which they apply, and the data errors they refuse. Expected values are read off the
entries by hand."""

import pytest

from mosaic.config.recipes import (
    RecipeQuery,
    check_recipes,
    parse_recipes,
    recipe_settings,
    recipes,
)
from mosaic.errors import MosaicInputError

QWEN3_30B = {"layers": 48, "d_model": 2048, "experts": 128}


def _table(*entries):
    base = {"stack": "megatron-bridge", "since": "25.11", "source": "a tag, a path"}
    return parse_recipes({"schema_version": 1, "description": "test", "recipes": [
        {"label": f"entry {i}", **base, **entry} for i, entry in enumerate(entries)]}, "test")


def _query(**changes):
    query = {"stack": "megatron-bridge", "software": "NeMo 26.02 container / Megatron-Bridge",
             "release": (26, 2), "device_name": "H100-SXM-80GB", "generation": "hopper",
             "precision": "bf16", "moe": True, "layers": 48, "d_model": 2048,
             "experts": 128}
    return RecipeQuery(**{**query, **changes})


def test_an_entry_matches_on_stack_release_model_gpu_and_precision():
    table = _table({"until": "26.02", "model": QWEN3_30B, "gpus": ["H100-SXM-80GB"],
                    "precisions": ["bf16", "fp8-cs"], "settings": {"ep_overlap": True}})
    assert recipe_settings(_query(), table)[0] == {"ep_overlap": True}
    for miss in ({"stack": "megatron-core"}, {"release": (25, 9)}, {"release": (26, 4)},
                 {"release": None}, {"layers": 94}, {"device_name": "B200"},
                 {"precision": "mxfp8"}):
        assert recipe_settings(_query(**miss), table)[0] == {}, miss


def test_generations_moe_and_software_pattern_narrow_an_entry():
    table = _table({"generations": ["blackwell"], "moe": True,
                    "software_pattern": "nemo", "settings": {"dispatcher": "hybridep"}})
    blackwell = {"device_name": "GB200", "generation": "blackwell"}
    assert recipe_settings(_query(**blackwell), table)[0] == {"dispatcher": "hybridep"}
    assert recipe_settings(_query(), table)[0] == {}  # hopper
    assert recipe_settings(_query(**blackwell, moe=False), table)[0] == {}
    assert recipe_settings(_query(**blackwell, software="Megatron-LM"), table)[0] == {}


def test_an_entry_for_the_model_overrides_one_for_every_model():
    table = _table({"settings": {"dispatcher": "deepep", "grad_reduce_in_fp32": False}},
                   {"model": QWEN3_30B, "settings": {"dispatcher": "alltoall"}})
    settings, matched = recipe_settings(_query(), table)
    assert settings == {"dispatcher": "alltoall", "grad_reduce_in_fp32": False}
    assert [r.label for r in matched] == ["entry 0", "entry 1"]
    # A grid search has no one geometry: only the entry for every model applies.
    assert recipe_settings(_query(layers=None, d_model=None, experts=None), table)[0] == {
        "dispatcher": "deepep", "grad_reduce_in_fp32": False}


def test_two_entries_of_one_kind_that_disagree_are_refused():
    clash = _table({"until": "26.02", "settings": {"ep_overlap": True}},
                   {"since": "26.02", "gpus": ["H100-SXM-80GB"],
                    "settings": {"ep_overlap": False}})
    with pytest.raises(MosaicInputError, match="ep_overlap"):
        check_recipes(clash)
    with pytest.raises(MosaicInputError, match="ep_overlap"):
        recipe_settings(_query(), clash)
    # Disjoint releases, GPUs (a generation read through the catalog) or precisions agree.
    for apart in ({"since": "26.04"}, {"generations": ["blackwell"]},
                  {"precisions": ["mxfp8"]}):
        check_recipes(_table({"until": "26.02", "gpus": ["H100-SXM-80GB"],
                              "precisions": ["bf16"], "settings": {"ep_overlap": True}},
                             {**apart, "settings": {"ep_overlap": False}}))


@pytest.mark.parametrize(("entry", "message"), [
    ({"stack": "megatron", "settings": {"ep_overlap": True}}, "known: "),
    ({"until": "25.09", "settings": {"ep_overlap": True}}, "before since"),
    ({"model": QWEN3_30B, "moe": True, "settings": {"ep_overlap": True}}, "moe narrows"),
    ({"gpus": ["B200"], "generations": ["blackwell"], "settings": {"ep_overlap": True}},
     "not both"),
    ({"settings": {}}, "at least one"),
    ({"settings": {"dispatcher": "nccl"}}, "dispatcher"),
    ({"settings": {"ep_overlap": True}, "since": "26.6"}, "since"),
    ({"settings": {"ep_overlap": True}, "software_pattern": "("}, "software_pattern"),
])
def test_bad_entries_get_one_line_naming_the_field(entry, message):
    with pytest.raises(MosaicInputError, match=message):
        _table(entry)


def test_the_shipped_recipes_load_and_agree():
    table = recipes()
    assert table and all(r.source for r in table)
    check_recipes(table)


def test_an_entry_without_since_holds_for_every_release_named_or_not():
    table = _table({"since": None, "settings": {"ep_overlap": True}})
    assert recipe_settings(_query(release=None), table)[0] == {"ep_overlap": True}
    assert recipe_settings(_query(release=(24, 1)), table)[0] == {"ep_overlap": True}
    with pytest.raises(MosaicInputError, match="until needs since"):
        _table({"since": None, "until": "26.02", "settings": {"ep_overlap": True}})


def test_entries_for_two_different_software_patterns_never_clash():
    """NeMo 2's and another product's recipes of one stack are different products."""
    check_recipes(_table({"software_pattern": "^NeMo", "settings": {"ep_overlap": True}},
                         {"software_pattern": "ModelZoo", "settings": {"ep_overlap": False}}))
    with pytest.raises(MosaicInputError, match="ep_overlap"):
        check_recipes(_table({"software_pattern": "^NeMo", "settings": {"ep_overlap": True}},
                             {"settings": {"ep_overlap": False}}))


def test_point_release_entries_split_one_release_and_never_clash():
    """Megatron-Bridge shipped point containers (26.04.01 = v0.4.2) that changed settings:
    an entry for the first container and one for its point release apply apart, and only
    within their one release."""
    table = _table({"since": "26.04", "until": "26.04", "point_release": False,
                    "settings": {"ep_overlap": False}},
                   {"since": "26.04", "until": "26.04", "point_release": True,
                    "settings": {"ep_overlap": True}})
    check_recipes(table)
    first = _query(software="nvcr.io/nvidia/nemo:26.04", release=(26, 4))
    point = _query(software="nvcr.io/nvidia/nemo:26.04.01", release=(26, 4),
                   point_release=True)
    assert recipe_settings(first, table)[0] == {"ep_overlap": False}
    assert recipe_settings(point, table)[0] == {"ep_overlap": True}
    with pytest.raises(MosaicInputError, match="ep_overlap"):
        check_recipes(_table({"since": "26.04", "until": "26.04", "point_release": True,
                              "settings": {"ep_overlap": True}},
                             {"since": "26.04", "settings": {"ep_overlap": False}}))
    with pytest.raises(MosaicInputError, match="point_release narrows one release"):
        _table({"since": "26.02", "until": "26.04", "point_release": True,
                "settings": {"ep_overlap": True}})
