"""Sequence parallelism on NeMo AutoModel (stack traits unstated_sequence_parallel and
ep_sequence_parallel): FSDP2Config.sequence_parallel defaults to False
(components/distributed/config.py l. 303 @ 36044ad3d), so a job that leaves it unstated runs
TP without it, not Megatron's tp > 1 default; with ep > 1 the MoE parallelizer refuses it,
"sequence_parallel=True is not supported by the custom MoE TP path yet"
(components/moe/parallelizer.py l. 233-237), so a stated one is refused for such a job."""

from dataclasses import replace

import pytest

from mosaic.config.job_schema import job_from_document
from mosaic.errors import InvalidLayoutError
from mosaic.evaluate.job import check_job_layout
from mosaic.perf.layouts import LayoutLimits, candidate_plans


def _job(stack: str, *, moe: bool, ep: int, sequence_parallel: bool | None = None) -> dict:
    parallelism = {"tp": 2, "pp": 1, "ep": ep, "sharding": "fsdp"}
    if sequence_parallel is not None:
        parallelism["sequence_parallel"] = sequence_parallel
    model = {"layers": 4, "d_model": 1024, "heads": 8, "kv_heads": 8, "head_dim": 128,
             "ffn": 1024, "vocab": 32000}
    if moe:
        model["moe"] = {"experts": 16, "top_k": 2, "expert_ffn": 512}
    return {"model": model, "batch": {"global_seqs": 64, "seq_len": 4096},
            "parallelism": parallelism,
            "performance": {"precision": "bf16", "stack": stack},
            "hardware": {"system": "DGX-H100", "nodes": 2}}


def test_an_unstated_sequence_parallel_follows_the_stack():
    automodel = job_from_document(_job("nemo-automodel", moe=True, ep=4), "test")
    assert not bool(automodel.plan.sequence_parallel[0])
    assert ("parallelism.sequence_parallel not stated: False assumed (nemo-automodel's "
            "default: off)") in automodel.assumptions
    check_job_layout(automodel)
    # Megatron-Core runs it with every tp > 1 (Korthikanti et al. 2022)
    megatron = job_from_document(_job("megatron-core", moe=True, ep=4), "test")
    assert bool(megatron.plan.sequence_parallel[0])


@pytest.mark.parametrize(("moe", "ep", "refused"), [
    (True, 4, True),    # the MoE parallelizer refuses it (ep > 1)
    (False, 1, False),  # a dense model's FSDP2 TP plan takes it (parallelizer.py SP plan)
])
def test_a_stated_sequence_parallel_is_refused_for_an_expert_parallel_moe(moe, ep, refused):
    spec = job_from_document(_job("nemo-automodel", moe=moe, ep=ep, sequence_parallel=True),
                             "test")
    assert bool(spec.plan.sequence_parallel[0])
    if refused:
        with pytest.raises(InvalidLayoutError, match="sequence_parallel on stack "
                           "nemo-automodel with tp=2 and ep=4: its MoE parallelizer"):
            check_job_layout(spec)
    else:
        check_job_layout(spec)
    # Megatron-Core runs the same MoE layout with sequence parallelism
    check_job_layout(job_from_document(_job("megatron-core", moe=moe, ep=ep,
                                            sequence_parallel=True), "test"))


def test_a_search_on_nemo_automodel_costs_tp_without_sequence_parallel():
    spec = job_from_document(_job("nemo-automodel", moe=True, ep=4), "test")
    limits = LayoutLimits(tp=(1, 2), pp=1, micro_batches=(1,), sharding=("fsdp",),
                          checkpointing=("none",))
    plans = candidate_plans(spec.workload, 16, 8, limits)
    assert 2 in plans.tp.tolist() and not plans.sequence_parallel.any()
    titan = candidate_plans(replace(spec.workload, stack="torchtitan"), 16, 8, limits)
    assert (titan.sequence_parallel == (titan.tp > 1)).all()


def _perf_with(tmp_path, document: dict, *overrides: str) -> str:
    import yaml
    from typer.testing import CliRunner

    from mosaic.cli.main import app

    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(document))
    result = CliRunner().invoke(app, ["perf", str(path),
                                      *[arg for o in overrides for arg in ("--set", o)]])
    assert result.exit_code == 2, result.output
    return " ".join(result.output.split())


def test_a_refused_sequence_parallel_blames_the_set_that_states_it(tmp_path):
    """Sequence parallelism refused on NeMo AutoModel's MoE path was blamed on whichever
    named degree came first among the --set overrides ('(from --set parallelism.ep=4)' for
    a stated '--set parallelism.sequence_parallel=true'): the setting the rule refuses is
    blamed, whatever the order of the overrides."""
    document = _job("nemo-automodel", moe=True, ep=2)
    document["parallelism"]["tp"] = 1
    for order in (1, -1):
        sets = ["parallelism.ep=4", "parallelism.tp=2", "parallelism.sequence_parallel=true"]
        output = _perf_with(tmp_path, document, *sets[::order])
        assert "sequence_parallel" in output and "nemo-automodel" in output, output
        assert output.endswith("(from --set parallelism.sequence_parallel=true)"), output


def test_a_refused_sequence_parallel_blames_the_stack_set_whose_trait_refuses_it(tmp_path):
    """A Megatron-Core job with sequence parallelism moved to NeMo AutoModel by --set is
    refused by the stack's trait (ep_sequence_parallel); the message blamed no --set."""
    document = _job("megatron-core", moe=True, ep=4, sequence_parallel=True)
    output = _perf_with(tmp_path, document, "performance.stack=nemo-automodel")
    assert output.endswith("(from --set performance.stack=nemo-automodel)"), output
    # the trigger among the degrees is blamed after the stack whose trait refuses it
    document["parallelism"]["tp"] = 1
    output = _perf_with(tmp_path, document, "parallelism.tp=2",
                        "performance.stack=nemo-automodel")
    assert output.endswith("(from --set performance.stack=nemo-automodel)"), output


@pytest.mark.parametrize(("sharding", "refused"), [
    ("zero1", True), ("zero2", True), ("none", True),  # Megatron-FSDP: no such option
    ("fsdp", False), ("hsdp", False),                  # FSDP2Config.sequence_parallel
])
def test_a_stated_sequence_parallel_is_refused_under_megatron_fsdp(sharding, refused):
    """NeMo AutoModel runs none, zero1 and zero2 as its megatron_fsdp strategy, whose
    MegatronFSDPConfig has no sequence_parallel (parse_distributed_section refuses the
    option: "Unknown options for strategy 'megatron_fsdp'") and whose manager builds the TP
    plan with sequence_parallel=False (megatron_fsdp.py @ 36044ad3d): a dense job stating it
    with tp > 1 under one of them was accepted and costed with sequence parallelism."""
    document = _job("nemo-automodel", moe=False, ep=1, sequence_parallel=True)
    document["parallelism"]["sharding"] = sharding
    spec = job_from_document(document, "test")
    assert bool(spec.plan.sequence_parallel[0])
    if refused:
        with pytest.raises(InvalidLayoutError, match=rf"sequence_parallel on stack "
                           rf"nemo-automodel with sharding {sharding} and tp=2: "):
            check_job_layout(spec)
    else:
        check_job_layout(spec)
    # off, or at tp 1 (nothing to shard: off, config.layout), the layout runs
    document["parallelism"]["sequence_parallel"] = False
    check_job_layout(job_from_document(document, "test"))
    # Megatron-Core's own distributed optimizer runs it
    document["parallelism"]["sequence_parallel"] = True
    document["performance"]["stack"] = "megatron-core"
    check_job_layout(job_from_document(document, "test"))
