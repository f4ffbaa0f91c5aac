"""A job that leaves data-parallel sharding unstated runs its stack's default (trait
unstated_sharding): torchtitan and levanter shard the weights over every data rank unless
told otherwise (torchtitan's data_parallel_shard_degree = -1; levanter's fsdp_axis over the
data axis) and offer no ZeRO-1; the Megatron-based stacks keep the schema's zero1 (a trial:
a torchtitan job without sharding was refused for a zero1 it never stated)."""

import pytest
import yaml

from mosaic.config.job_schema import job_from_document
from mosaic.errors import MosaicInputError
from mosaic.perf.plan import Sharding
from mosaic.stacks.registry import _Entry, get_stack


def _llama_job(stack: str, sharding: str | None = None) -> dict:
    parallelism = {"tp": 1, "pp": 1} | ({} if sharding is None else {"sharding": sharding})
    return {"model": {"layers": 32, "d_model": 4096, "heads": 32, "kv_heads": 8,
                      "ffn": 14336, "vocab": 128256},
            "parallelism": parallelism,
            "batch": {"global_seqs": 64, "micro_seqs": 2, "seq_len": 8192},
            "performance": {"stack": stack},
            "hardware": {"system": "DGX-H100", "nodes": 1}}


@pytest.mark.parametrize("stack", ["torchtitan", "levanter"])
def test_fsdp_stacks_shard_an_unstated_job_fully(stack):
    spec = job_from_document(_llama_job(stack), "test")
    assert spec.plan.sharding[0] == Sharding.parse("fsdp")
    assert any(note.startswith("parallelism.sharding not stated: fsdp assumed "
                               f"({stack}'s default") for note in spec.assumptions)
    assert "zero1" not in (get_stack(stack).layout_sharding or ())


@pytest.mark.parametrize("stack", ["megatron-core", "megatron-bridge"])
def test_megatron_stacks_keep_zero1(stack):
    spec = job_from_document(_llama_job(stack), "test")
    assert spec.plan.sharding[0] == Sharding.parse("zero1")
    assert "parallelism.sharding not stated: zero1 assumed" in spec.assumptions


def test_a_stated_sharding_wins_and_a_refused_one_is_still_refused():
    spec = job_from_document(_llama_job("torchtitan", "none"), "test")
    assert spec.plan.sharding[0] == Sharding.parse("none")
    with pytest.raises(MosaicInputError, match="offers only none, fsdp, hsdp"):
        from mosaic.evaluate.job import check_job_layout

        check_job_layout(job_from_document(_llama_job("torchtitan", "zero1"), "test"))


def test_a_default_the_stack_does_not_offer_is_refused_by_the_registry():
    from importlib import resources

    from mosaic.stacks.registry import with_inherited_traits

    text = resources.files("mosaic.stacks").joinpath("data", "stacks.yaml").read_text()
    entry = with_inherited_traits(yaml.safe_load(text)["stacks"])["torchtitan"]
    assert _Entry.model_validate(entry).unstated_sharding == "fsdp"
    with pytest.raises(ValueError, match="unstated_sharding zero1 is not among"):
        _Entry.model_validate({**entry, "unstated_sharding": "zero1"})
