"""--precision and --dispatcher reach every candidate of a plan (issue 10 §2)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from mosaic.cli.main import app
from mosaic.perf.layouts import LayoutLimits, enumerate_plans
from mosaic.perf.machine import machine_for
from mosaic.perf.step_time import predict_step
from mosaic.perf.workload import Dispatcher, Precision, QuantisedGemms, Workload
from mosaic.plan import Envelope, SearchSpace, profile_geometries, resolve_system
from mosaic.plan.search import candidate_workload

# EP over 32 GPUs spans four 8-GPU nodes, so the dispatcher matters.
CROSS_NODE_EP = LayoutLimits(tp=(1,), pp=(1,), cp=(1,), ep=(32,), micro_batches=(1,),
                             vpp=(1,), sharding=("zero1",), checkpointing=("none",))


def test_each_candidate_is_timed_with_the_envelopes_precision_and_dispatcher(calibration):
    base = Envelope(resolve_system("B200"), n_nodes=4, days=5.0)
    grid = SearchSpace(q=(4,), experts=(64,), top_k=(4,), split_factor=(4,)).enumerate()
    rates = {}
    for precision, dispatcher in ((Precision.BF16, Dispatcher.ALLTOALL),
                                  (Precision.BF16, Dispatcher.DEEPEP),
                                  (Precision.FP8, Dispatcher.ALLTOALL)):
        envelope = replace(base, precision=precision, dispatcher=dispatcher)
        table = profile_geometries(envelope, grid, calibration, CROSS_NODE_EP, workers=1)
        # The single-plan path with the same settings gives the same rate.
        workload = Workload(grid.geometry(0), envelope.global_batch, envelope.seq_len,
                            precision=precision, stack=envelope.stack, dispatcher=dispatcher)
        machine = machine_for(envelope.cluster, precision, envelope.usable_memory_fraction)
        plans = enumerate_plans(workload, machine.n_devices,
                                machine.interconnect.scale_up_domain_gpus, CROSS_NODE_EP)
        assert len(plans) == 1
        alone = predict_step(workload, plans, machine, calibration).tokens_per_s[0]
        assert table.tokens_per_s[0] == pytest.approx(alone, rel=1e-12)
        rates[(precision, dispatcher)] = alone
    # DeepEP sends one copy per remote node instead of one per token copy: faster here;
    # fp8 GEMMs run on the faster lane: faster too.
    plain = rates[(Precision.BF16, Dispatcher.ALLTOALL)]
    assert rates[(Precision.BF16, Dispatcher.DEEPEP)] > plain
    assert rates[(Precision.FP8, Dispatcher.ALLTOALL)] > plain


def test_the_reports_breakdown_uses_the_candidates_stack_and_dispatcher(tmp_path):
    """The HTML/JSON breakdown of the optimum is re-derived from the same workload the
    search timed (plan.search.candidate_workload), so a torchtitan + DeepEP plan reports
    its own step time, not a megatron-core + all-to-all one."""
    args = ["plan", "--q", "4", "--experts", "16,64", "--top-k", "2", "--split-factor", "4",
            "--nodes", "2", "--days", "2", "--stack", "torchtitan", "--dispatcher", "deepep",
            "--workers", "1", "--json", "--html", str(tmp_path / "plan.html")]
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 0, out.output
    document = json.loads(out.stdout)
    assert document["envelope"]["stack"] == "torchtitan"
    assert document["envelope"]["dispatcher"] == "deepep"
    optimum, step = document["optimum"], document["optimum_step"]
    assert step["step_time_s"] == pytest.approx(optimum["step_time_s"], rel=1e-12)
    assert step["memory_bytes"] == pytest.approx(optimum["memory_bytes"], rel=1e-12)


def test_a_plan_quantising_the_routed_experts_alone_times_each_candidate_as_such_a_job(
        calibration):
    """--quantised-gemms routed_experts reaches every candidate: its rate is the single-plan
    rate of the same workload, between the bf16 plan's and the all-MXFP8 plan's (only the
    experts' GEMMs move to the faster lane)."""
    base = Envelope(resolve_system("B200"), n_nodes=4, days=5.0, stack="torchtitan")
    grid = SearchSpace(q=(4,), experts=(64,), top_k=(4,), split_factor=(4,)).enumerate()
    limits = replace(CROSS_NODE_EP, sharding=("fsdp",))
    rates = {}
    for name, settings in (("bf16", {}),
                           ("experts", {"precision": Precision.FP8, "fp8_recipe": "mxfp8",
                                        "quantised_gemms": "routed_experts"}),
                           ("all", {"precision": Precision.FP8, "fp8_recipe": "mxfp8"})):
        envelope = replace(base, **settings)
        table = profile_geometries(envelope, grid, calibration, limits, workers=1)
        workload = candidate_workload(envelope, grid, 0)
        machine = machine_for(envelope.cluster, envelope.precision,
                              envelope.usable_memory_fraction,
                              fp8_recipe=envelope.fp8_recipe)
        plans = enumerate_plans(workload, machine.n_devices,
                                machine.interconnect.scale_up_domain_gpus, limits)
        alone = predict_step(workload, plans, machine, calibration).tokens_per_s[0]
        assert table.tokens_per_s[0] == pytest.approx(alone, rel=1e-12)
        rates[name] = alone
    assert candidate_workload(replace(base, **{"precision": Precision.FP8,
                                               "quantised_gemms": "routed_experts"}),
                              grid, 0).quantised_gemms is QuantisedGemms.ROUTED_EXPERTS
    assert rates["bf16"] < rates["experts"] < rates["all"]


def test_quantising_the_experts_alone_is_refused_at_bf16_before_the_search():
    out = CliRunner().invoke(app, ["plan", "--q", "4", "--quantised-gemms", "routed_experts",
                                   "--stack", "torchtitan"])
    assert out.exit_code != 0
    assert "quantised_gemms routed_experts needs precision fp8 or mxfp8 (got bf16)" \
        in out.output
    out = CliRunner().invoke(app, ["plan", "--q", "4", "--precision", "mxfp8", "--gpu",
                                   "B200", "--quantised-gemms", "experts"])
    assert out.exit_code != 0
    assert "--quantised-gemms" in out.output and "routed_experts" in out.output
    out = CliRunner().invoke(app, ["plan", "--q", "4", "--precision", "mxfp8", "--gpu",
                                   "B200", "--quantised-gemms", "routed_experts"])
    assert out.exit_code != 0
    assert "with stack megatron-core" in out.output


def test_a_plan_of_the_experts_alone_exports_that_setting(tmp_path):
    args = ["plan", "--q", "4", "--experts", "64", "--top-k", "4", "--split-factor", "4",
            "--nodes", "2", "--days", "2", "--stack", "torchtitan", "--precision", "mxfp8",
            "--quantised-gemms", "routed_experts", "--workers", "1", "--json"]
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 0, out.output
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(out.stdout)
    assert json.loads(out.stdout)["envelope"]["quantised_gemms"] == "routed_experts"
    job = CliRunner().invoke(app, ["export", str(plan_file), "--to", "yaml"])
    assert job.exit_code == 0, job.output
    assert "quantised_gemms: routed_experts" in job.stdout
    toml = CliRunner().invoke(app, ["export", str(plan_file), "--to", "torchtitan"])
    assert toml.exit_code == 0, toml.output
    assert 'converters = ["quantize.grouped_mm.mx"]' in toml.stdout


def test_every_candidate_trains_with_the_envelopes_optimizer():
    """A plan costed every candidate with AdamW's fp32 state whatever the team trains with
    (the studio planned a Muon job so, a review). The envelope's optimizer reaches each
    candidate: with bf16 AdamW moments (DeepSeek-V3 report arXiv:2412.19437 Sec. 3.3.3) the
    moments take 2 B each of fp32's 4, so exactly half the memory, and the fp32 master
    weights are unchanged; Muon keeps one 4 B momentum buffer where Adam keeps two
    (Jordan et al. 2024), AdamW's 8 B only on the embedding and LM head."""
    from mosaic.perf.memory import memory_breakdown_bytes
    from mosaic.perf.plan import single_plan
    from mosaic.perf.workload import OptimizerDtype, OptimizerKind

    base = Envelope(resolve_system("B200"), n_nodes=1, days=5.0)
    grid = SearchSpace(q=(4,), experts=(16,), top_k=(2,), split_factor=(1,)).enumerate()
    plan = single_plan(dp=8, ep=8)

    def memory(**settings):
        workload = candidate_workload(replace(base, **settings), grid, 0)
        return workload, memory_breakdown_bytes(workload, plan)

    adamw, adamw_memory = memory()
    assert (adamw.optimizer, adamw.optimizer_dtype) == (OptimizerKind.ADAMW,
                                                        OptimizerDtype.FP32)
    moments, moments_memory = memory(optimizer_dtype="bf16_moments")
    assert moments.optimizer_dtype is OptimizerDtype.BF16_MOMENTS
    assert moments_memory["optimizer_states"][0] == pytest.approx(
        adamw_memory["optimizer_states"][0] / 2, rel=1e-12)
    assert moments_memory["master_weights"][0] == adamw_memory["master_weights"][0]
    muon, muon_memory = memory(optimizer="muon")
    assert muon.optimizer is OptimizerKind.MUON
    assert (adamw_memory["optimizer_states"][0] / 2 < muon_memory["optimizer_states"][0]
            < adamw_memory["optimizer_states"][0])
    envelope = replace(base, optimizer="muon", optimizer_dtype="bf16")
    assert (envelope.to_dict()["optimizer"], envelope.to_dict()["optimizer_dtype"]) == (
        "muon", "bf16")


def test_plan_takes_the_optimizer_and_its_export_keeps_it(tmp_path):
    """`mosaic plan --optimizer/--optimizer-dtype` state every candidate's optimizer in the
    document's envelope, and the optimum exported as a job trains with it (the export wrote
    adamw for every plan); a misspelt one is one line naming the allowed values."""
    from mosaic.export.spec import spec_from_plan_document

    args = ["plan", "--q", "4", "--experts", "16", "--top-k", "2", "--split-factor", "1",
            "--nodes", "1", "--days", "2", "--workers", "1", "--json"]
    out = CliRunner().invoke(app, [*args, "--optimizer", "muon", "--optimizer-dtype",
                                   "bf16_moments"])
    assert out.exit_code == 0, out.output
    document = json.loads(out.stdout)
    assert document["envelope"]["optimizer"] == "muon"
    assert document["envelope"]["optimizer_dtype"] == "bf16_moments"
    spec = spec_from_plan_document(document, "plan.json")
    assert (spec.optimizer, spec.optimizer_dtype) == ("muon", "bf16_moments")
    assert spec.job["optimizer"] == {"kind": "muon"}
    assert spec.job["performance"]["optimizer_dtype"] == "bf16_moments"
    table = CliRunner().invoke(app, [a for a in args if a != "--json"]
                               + ["--optimizer", "muon", "--optimizer-dtype", "bf16_moments"])
    assert table.exit_code == 0, table.output
    assert "muon, bf16_moments state" in table.output
    bad = CliRunner().invoke(app, [*args, "--optimizer", "adamx"])
    assert bad.exit_code == 2
    assert "--optimizer 'adamx': allowed values are adam, adamw, muon, sgd" in bad.output
