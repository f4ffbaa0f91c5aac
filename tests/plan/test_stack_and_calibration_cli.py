"""Plans and predictions name the stack and calibration they assume; --versus compares."""

import json

import pytest
from typer.testing import CliRunner

from mosaic.cli.main import app
from mosaic.errors import MosaicNote

runner = CliRunner()
SMALL = ["--nodes", "1", "--days", "2", "--q", "4", "--experts", "8,16", "--top-k", "1,2",
         "--split-factor", "1,4", "--s-min", "0.5", "--workers", "1"]


def run_json(*args: str) -> dict:
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_plan_names_the_profile_and_uses_its_stack_unless_told_otherwise() -> None:
    paper = run_json("plan", *SMALL, "--calibration", "paper-p6b200")
    assert paper["calibration"]["name"] == "paper-p6b200"
    assert paper["envelope"]["stack"] == "paper-nemo"
    # The paper's stack offers Megatron's distributed optimizer and no interleaving.
    assert all(c["plan"]["sharding"] == "zero1" and c["plan"]["vpp"] == 1
               for c in paper["candidates"])
    modern = run_json("plan", *SMALL)
    assert (modern["calibration"]["name"], modern["envelope"]["stack"]) == (
        "default", "megatron-core")
    chosen = run_json("plan", *SMALL, "--calibration", "paper-p6b200", "--stack", "torchtitan")
    assert chosen["envelope"]["stack"] == "torchtitan"


def test_versus_plans_the_envelope_under_both_calibrations() -> None:
    document = run_json("plan", *SMALL, "--calibration", "paper-p6b200", "--versus", "default")
    first, second = document["versus"]["plans"]
    assert (first["calibration"], first["stack"]) == ("paper-p6b200", "paper-nemo")
    assert (second["calibration"], second["stack"]) == ("default", "megatron-core")
    assert first["optimum"] == {k: v for k, v in document["optimum"].items()
                                if k not in ("extrapolation", "coverage", "coverage_summary")}
    # The tiny grid's models are smaller than the paper profile's calibration runs.
    outside = {o["dimension"] for o in document["optimum"]["coverage"]["outside"]}
    assert "n_total" in outside
    # The paper's stack pays its measured host floor: it cannot be faster at its optimum.
    assert first["optimum"]["mfu"] < second["optimum"]["mfu"]
    # besides the stacks' costs, the envelopes differ in headroom and allowed layouts, and
    # the line says so (a reviewer's trial: it named the overheads only)
    why = document["versus"]["why"]
    assert "usable memory 100% against 90% of HBM" in why
    assert "sharding modes zero1 against any" in why
    # and where a profile plans outside the runs it was fitted to (a trial: the B200-only
    # paper profile planned H100 envelopes with no word about it)
    assert {o["dimension"] for o in first["outside_calibration"]} == outside
    assert "paper-p6b200's figures are extrapolated here (" in why and "n_total=" in why


def test_a_stack_typo_is_one_line_naming_the_known_stacks() -> None:
    result = runner.invoke(app, ["plan", *SMALL, "--stack", "torchtitn"])
    assert result.exit_code == 2
    assert "torchtitn" in result.output and "torchtitan" in result.output


def test_perf_names_stack_and_calibration() -> None:
    document = run_json("perf", "examples/appendix_e.yaml", "--calibration", "paper-p6b200",
                        "--set", "parallelism.stack=paper-nemo")
    assert (document["stack"], document["calibration"]) == ("paper-nemo", "paper-p6b200")


def test_plan_flags_law_inputs_outside_the_fitted_range() -> None:
    document = run_json("plan", *SMALL)
    extrapolation = document["optimum"]["extrapolation"]
    high = extrapolation["data_support"]["tokens"][1]
    tokens = document["optimum"]["tokens"]
    assert tokens > high  # a 1-node, 2-day plan of a small model trains past the law's data
    (flag,) = [f for f in extrapolation["flags"] if f["quantity"] == "tokens"]
    assert flag["direction"] == "above"
    assert flag["ratio"] == pytest.approx(tokens / high)


def test_versus_plans_each_stack_under_its_own_memory_headroom() -> None:
    """--versus default after the paper profile plans the modern stack at 90% of HBM, as a
    plain `mosaic plan` does (it kept the paper stack's whole device); a headroom the user
    gives holds for both sides."""
    from dataclasses import replace

    from mosaic.cli.plan_cmd import versus_envelope
    from mosaic.perf.calibration import load_calibration
    from mosaic.perf.headroom import memory_headroom
    from mosaic.plan.inputs import build_inputs

    def envelope(fraction):
        return build_inputs(gpu="B200", system=None, nodes=4, gpus_per_node=None, days=2,
                            goodput=None, mtbf_gpu_hours=None, checkpoint_s=None,
                            restart_s=0.0, global_batch=256, seq_len=2048,
                            memory_fraction=fraction, q="4", experts="8", top_k="1",
                            split_factor="1", tpp="40:150", s_min=0.5,
                            stack="paper-nemo")[0]

    default = load_calibration("default")
    paper = envelope(None)
    assert paper.usable_memory_fraction == 1.0
    other = versus_envelope(paper, default)
    assert (other.stack, other.usable_memory_fraction) == ("megatron-core", 0.9)
    given = envelope(0.8)
    assert versus_envelope(given, default).usable_memory_fraction == 0.8
    assert replace(paper, headroom=memory_headroom(None, "megatron-core")
                   ).usable_memory_fraction == 0.9


def test_stack_version_gives_every_candidate_the_release_recipes() -> None:
    """Megatron-Bridge from NeMo 26.06 runs MXFP8 MoE on Blackwell as one CUDA graph per step
    with EP overlap (docs/stacks.md): the envelope says so, the same grid plans faster than
    under 25.11, and --versus plans the other stack without them."""
    bridge = [*SMALL, "--gpu", "B200", "--stack", "megatron-bridge", "--precision", "mxfp8"]
    modern = run_json("plan", *bridge, "--stack-version", "26.06")
    older = run_json("plan", *bridge, "--stack-version", "25.11")
    assert modern["envelope"]["stack_version"] == "26.06"
    assert (modern["envelope"]["ep_overlap"],
            modern["envelope"]["full_iteration_cuda_graph"]) == (True, True)
    assert (older["envelope"]["ep_overlap"],
            older["envelope"]["full_iteration_cuda_graph"]) == (False, False)
    assert modern["envelope"]["precision"] == "fp8"  # MXFP8 is costed on the fp8 lane
    # the 26.06 bundle's fused grouped MLP (docs/evidence/fused_grouped_mlp.md)
    assert modern["envelope"].get("fused_grouped_mlp") is True
    assert "fused_grouped_mlp" not in older["envelope"]
    assert modern["optimum"]["tokens_per_s"] > older["optimum"]["tokens_per_s"]
    versus = run_json("plan", *bridge, "--stack-version", "26.06", "--versus", "paper-p6b200")
    assert versus["versus"]["plans"][1]["stack"] == "paper-nemo"
    # each stack's own default dispatcher (Bridge's HybridEP on Blackwell was planned on the
    # paper's stack, which runs the all-to-all only, Appendix F.3; then refused)
    assert modern["optimum"]["parallelism"]["dispatcher"] == "hybridep"
    assert versus["versus"]["plans"][1]["optimum"]["parallelism"]["dispatcher"] == "alltoall"
    bad = runner.invoke(app, ["plan", *bridge, "--stack-version", "26.6"])
    assert bad.exit_code == 2 and "expected a release YY.MM" in bad.output


def test_an_unknown_versus_calibration_is_rejected_before_the_search(monkeypatch):
    import mosaic.cli.plan_cmd as plan_cmd

    def no_search(*args, **kwargs):
        raise AssertionError("the search ran before --versus was checked")

    monkeypatch.setattr(plan_cmd, "search", no_search)
    result = runner.invoke(app, ["plan", *SMALL, "--versus", "no-such-profile"])
    assert result.exit_code == 2
    assert "calibration 'no-such-profile'" in result.output


def test_plan_precision_names_every_accepted_value_and_records_the_fp8_recipe() -> None:
    bad = runner.invoke(app, ["plan", "--precision", "blah"])
    assert bad.exit_code == 2 and "mxfp8" in bad.output and "fp8-cs" in bad.output
    result = runner.invoke(app, ["plan", "--precision", "fp8-cs", "--gpu", "B200", "--nodes",
                                 "2", "--q", "8", "--experts", "8", "--top-k", "1",
                                 "--split-factor", "1", "--json"])
    assert result.exit_code == 0, result.output
    envelope = json.loads(result.output)["envelope"]
    # fp8-cs is Transformer Engine's current scaling (mosaic.perf.workload.FP8_RECIPES)
    assert (envelope["precision"], envelope["fp8_recipe"]) == ("fp8", "current")


def test_plan_names_the_release_recipe_settings_its_candidates_do_not_take() -> None:
    """Megatron-Bridge's 25.11-26.06 MoE recipes reduce gradients in bf16, gather MXFP8
    parameters and force-balance the experts (recipes/megatron-bridge.yaml); a plan grid
    carries the workload-wide settings (dispatcher, EP overlap, CUDA graph, parameter
    gathers, gradient-reduce dtype, loss) to every candidate and names the rest (routing)."""
    with pytest.warns(MosaicNote, match="also set") as notes:
        result = runner.invoke(app, ["plan", "--gpu", "GB200", "--nodes", "16", "--q", "8",
                                     "--experts", "8", "--top-k", "1", "--split-factor", "1",
                                     "--stack", "megatron-bridge", "--stack-version", "26.06",
                                     "--precision", "mxfp8", "--json"])
    assert result.exit_code == 0, result.output
    note = next(str(n.message) for n in notes if "also set" in str(n.message))
    left_out = note.split("also set ")[1].split(" for every MoE model")[0]
    assert left_out == "routing"
    envelope = json.loads(result.stdout)["envelope"]
    assert envelope["grad_reduce_in_fp32"] is False
    assert envelope["fp8_param_gather"] is True
    assert envelope["cross_entropy"] == "te"
