"""`mosaic stacks list|show`: the stack registry and its recipes, as a user reads them."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from mosaic.cli.main import app
from mosaic.config.recipes import recipes
from mosaic.stacks import known_stacks

runner = CliRunner()


def test_list_names_every_known_stack_with_its_recipe_count():
    result = runner.invoke(app, ["stacks", "list", "--json"])
    assert result.exit_code == 0, result.output
    stacks = {d["name"]: d for d in json.loads(result.output)["stacks"]}
    assert set(stacks) == set(known_stacks())
    for name, document in stacks.items():
        assert len(document["recipes"]) == sum(r.stack == name for r in recipes())


def test_show_gives_traits_with_their_source_and_filters_recipes_by_release():
    result = runner.invoke(app, ["stacks", "show", "megatron-bridge", "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert document["micro_batch_default"] == "one" and document["source"]
    assert all(r["source"] and r["stack"] == "megatron-bridge" for r in document["recipes"])
    # Megatron-Bridge's MoE recipes run a full-iteration CUDA graph only from NeMo 26.06
    # (v0.5.0; docs/evidence/megatron_bridge_recipes_by_release.md).
    def moe_graphs(recipes_):
        return [r for r in recipes_ if r["settings"].get("full_iteration_cuda_graph")
                and (r["moe"] or (r["model"] or {}).get("experts", 0) > 0)]

    assert moe_graphs(document["recipes"])
    assert all(r["since"] >= "26.06" for r in moe_graphs(document["recipes"]))
    older = json.loads(runner.invoke(app, ["stacks", "show", "megatron-bridge", "--release",
                                           "25.11", "--json"]).output)
    assert older["recipes"] and not moe_graphs(older["recipes"])


def test_a_misspelt_stack_or_release_is_one_line_with_exit_2():
    result = runner.invoke(app, ["stacks", "show", "megatron-brige"])
    assert result.exit_code == 2
    assert "did you mean 'megatron-bridge'" in result.output and "Traceback" not in result.output
    bad = runner.invoke(app, ["stacks", "show", "megatron-bridge", "--release", "26"])
    assert bad.exit_code == 2 and "expected a release YY.MM with a month 01-12" in bad.output


def test_a_gpu_alias_resolves_and_an_unknown_gpu_or_precision_is_refused():
    def count(*options):
        result = runner.invoke(app, ["stacks", "show", "megatron-bridge", "--release", "26.04",
                                     *options, "--json"])
        assert result.exit_code == 0, result.output
        return len(json.loads(result.output)["recipes"])

    # MI300X has no Megatron-Bridge recipe of its own: only the entries for every GPU
    assert count("--gpu", "H100") == count("--gpu", "H100-SXM-80GB") > count("--gpu", "MI300X")
    for bad in (["--gpu", "H1000"], ["--precision", "MXFP8"]):
        result = runner.invoke(app, ["stacks", "show", "megatron-bridge", *bad])
        assert result.exit_code == 2 and "Traceback" not in result.output


def test_the_gpu_filter_reads_a_recipe_filed_by_generation_through_the_catalog():
    """The Megatron-MoE-ModelZoo entries filed under ``generations: [hopper]`` (four) apply
    to an H100 (named by a catalog alias) and not to an A100."""
    def by_generation(gpu):
        result = runner.invoke(app, ["stacks", "show", "megatron-core", "--gpu", gpu, "--json"])
        assert result.exit_code == 0, result.output
        return [r["label"] for r in json.loads(result.output)["recipes"] if r["generations"]]

    assert len(by_generation("h100 sxm5")) == 4
    assert by_generation("A100-SXM-80GB") == []
    typo = runner.invoke(app, ["stacks", "show", "megatron-core", "--gpu", "H10"])
    assert typo.exit_code == 2 and "did you mean 'H100-SXM-80GB'" in typo.output


def test_a_point_release_filters_the_entries_that_tell_it_from_its_first_container():
    """26.04 (v0.4.0) and 26.04.01 (v0.4.2) differ for NVFP4 on B300; fp4 names nvfp4."""
    def labels(release):
        result = runner.invoke(app, ["stacks", "show", "megatron-bridge", "--release", release,
                                     "--precision", "fp4", "--gpu", "B300", "--json"])
        assert result.exit_code == 0, result.output
        return {r["label"]: r["point_release"] for r in json.loads(result.output)["recipes"]}

    first, point = labels("26.04"), labels("26.04.01")
    assert False in first.values() and True not in first.values()
    assert True in point.values() and False not in point.values()
    bad = runner.invoke(app, ["stacks", "show", "megatron-bridge", "--release", "26.04.1"])
    assert bad.exit_code == 2 and "point release YY.MM.0N" in bad.output
