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
from mosaic.perf.workload import Dispatcher, Precision, Workload
from mosaic.plan import Envelope, SearchSpace, profile_geometries, resolve_system

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
