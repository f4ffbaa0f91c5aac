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


def _moe_job(sharding: str | None, *, ep: int, pp: int = 1) -> dict:
    parallelism = {"tp": 1, "pp": pp, "ep": ep} | ({} if sharding is None
                                                   else {"sharding": sharding})
    return {"model": {"layers": 4, "d_model": 1024, "heads": 8, "kv_heads": 8,
                      "head_dim": 128, "ffn": 1024, "vocab": 32000,
                      "moe": {"experts": 16, "top_k": 2, "expert_ffn": 512}},
            "batch": {"global_seqs": 64, "seq_len": 4096},
            "parallelism": parallelism,
            "performance": {"precision": "bf16", "stack": "nemo-automodel"},
            "hardware": {"system": "DGX-H100", "nodes": 2}}


def test_nemo_automodel_shards_an_unstated_job_with_fsdp2():
    """AutoModel's DistributedSetup.build defaults the strategy to fsdp2, which shards over
    every data rank (components/distributed/config.py l. 111 and mesh_utils.py
    _create_fsdp2_device_mesh @ 36044ad3d), not the schema's zero1."""
    spec = job_from_document(_moe_job(None, ep=4), "test")
    assert spec.plan.sharding[0] == Sharding.parse("fsdp")
    assert any(note.startswith("parallelism.sharding not stated: fsdp assumed "
                               "(nemo-automodel's default") for note in spec.assumptions)


@pytest.mark.parametrize(("sharding", "ep", "pp", "refused"), [
    ("zero1", 4, 1, True),   # Megatron-FSDP "optim": no expert parallelism
    ("zero2", 1, 2, True),   # Megatron-FSDP "optim_grads": no pipeline
    ("none", 4, 1, True),    # DDP and Megatron-FSDP "no_shard": no expert parallelism
    ("zero1", 1, 1, False),  # Megatron-FSDP zero_dp_strategy 1 at pp = ep = 1
    ("fsdp", 4, 2, False),   # FSDP2 takes both
    ("hsdp", 4, 1, False),
])
def test_nemo_automodel_runs_zero1_zero2_and_none_only_without_pp_and_ep(
        sharding, ep, pp, refused):
    """zero1, zero2 and none are AutoModel's megatron_fsdp (zero_dp_strategy 1, 2, 0) or
    ddp strategies, and _create_device_meshes refuses pipeline and expert parallelism under
    both (components/distributed/mesh_utils.py l. 85-99 @ 36044ad3d); an expert-parallel job
    shards with FSDP2 (a trial: perf costed zero1 at pp 16, ep 8 on this stack)."""
    from mosaic.errors import InvalidLayoutError
    from mosaic.evaluate.job import check_job_layout

    spec = job_from_document(_moe_job(sharding, ep=ep, pp=pp), "test")
    if refused:
        with pytest.raises(InvalidLayoutError,
                           match=rf"sharding {sharding} with pp={pp}, ep={ep}: "
                                 "nemo-automodel runs none, zero1, zero2 only with pp = ep = 1"):
            check_job_layout(spec)
    else:
        check_job_layout(spec)
    # torchtitan has no such rule (it offers no zero1/zero2 at all)
    assert get_stack("torchtitan").sharding_without_pp_ep == ()
