"""`mosaic plan`'s message when nothing is trainable: each reason with its count, and a
broken divisibility rule quoted next to the divisibility count (not the memory one)."""

from types import SimpleNamespace

from mosaic.plan.envelope import TABLE3_LAYOUT_LIMITS
from mosaic.plan.goodput import ConstantGoodput
from mosaic.report.plan_report import untrainable_message


def _result(reasons: list[str]) -> SimpleNamespace:
    rows = [{"reason": reason} for reason in reasons]
    return SimpleNamespace(
        infeasible=lambda: rows,
        envelope=SimpleNamespace(n_nodes=18, days=10.0, n_devices=72, global_batch=1024,
                                 dollar_budget=None, goodput=ConstantGoodput(1.0)),
        throughput=SimpleNamespace(limits=TABLE3_LAYOUT_LIMITS))


def test_the_divisibility_example_sits_with_the_divisibility_count():
    message = untrainable_message(_result([
        "no layout satisfies the divisibility rules (e.g. tp=3 must divide heads=32)",
        "no layout satisfies the divisibility rules (e.g. pp=9 must divide layers=16)",
        "out of memory on every layout",
    ]))
    assert ("2 geometries: no layout satisfies the divisibility rules (e.g. tp=3 must divide "
            "heads=32); 1 geometry: no layout fits device memory)") in message
    assert message.startswith("no geometry of the grid is trainable on 18 nodes in 10 days")
    assert "--global-batch" in message and "--memory-fraction" in message


def test_a_batch_the_gpus_cannot_divide_gets_a_nearby_multiple():
    # one GB200 NVL72 rack: 72 = 2^3·3^2 GPUs, the default batch 1024 = 2^10
    message = untrainable_message(_result(
        ["no layout satisfies the divisibility rules (e.g. pp=9 must divide layers=16)"]))
    assert "--global-batch 1008, a multiple of the 72 GPUs; 1024 shares only 8 with it" in message


def test_a_model_flops_pick_without_a_layout_says_so():
    """An 8-GPU H200 box: the model-FLOPs pick (q=8, E=512) has no layout that fits, so it
    delivers nothing; the table read 'no (0 FLOP)' and an unexplained '-' loss gap."""
    from mosaic.report.plan_report import loss_gap_text, pick_deliverable_text

    none = {"prescription_feasible": False, "deliverable_flops": 0.0}
    assert pick_deliverable_text(none, 8e22) == "no: none of its layouts fits this cluster"
    assert loss_gap_text(None, none) == "- (the pick cannot train on this cluster)"
    enough = {"prescription_feasible": True, "deliverable_flops": 9.24e22}
    assert loss_gap_text(0.0266, enough) == "+0.0266"


def test_the_model_flops_row_says_what_the_window_delivers_and_what_the_pick_needs():
    """'yes: the window delivers 1.26e+23 of its 9.51e+22 FLOP' read as a contradiction (a
    trial): each figure is named, the delivered FLOP and the C_model the pick needs."""
    from mosaic.report.plan_report import pick_deliverable_text

    short = {"prescription_feasible": False, "deliverable_flops": 4.2e20}
    assert pick_deliverable_text(short, 8e22) == (
        "no: the window delivers 4.2e+20 FLOP on this pick, short of the 8e+22 FLOP "
        "(C_model) it needs")
    enough = {"prescription_feasible": True, "deliverable_flops": 1.26e23}
    text = pick_deliverable_text(enough, 9.51e22)
    assert text == ("yes: the window delivers 1.26e+23 FLOP on this pick, at least the "
                    "9.51e+22 FLOP (C_model) it needs")
    assert "of its" not in text


def test_the_levers_of_several_reasons_are_listed_once():
    """'add nodes or days, or lower --tpp; add nodes or allow more memory' said add nodes
    twice (a trial)."""
    message = untrainable_message(_result([
        "the window delivers 2.1e+10 tokens, below tpp_min·N_act = 4.0e+10",
        "out of memory on every layout",
    ]))
    assert message.endswith(
        "; add nodes, add days, lower --tpp, search smaller models (--q, --max-total-params) "
        "or allow more memory (--memory-fraction)")


def test_the_grid_template_names_the_vocabulary_and_fixed_blocks():
    """A trial found the ladder's 50,257-token vocabulary only in an export header."""
    from mosaic.report.plan_report import grid_template_text

    ladder = grid_template_text({"q": [8, 10]})
    assert "vocabulary 50,257 (GPT-2 BPE), 1 shared expert, 1 dense first block" in ladder
    assert "--backbone" in ladder
    backbone = {"backbone": {"vocab": 151936, "moe": {"shared_experts": 0, "dense_layers": 0}}}
    assert grid_template_text(backbone) == (
        "variants of the --backbone model: vocabulary 151,936, 0 shared expert(s), 0 dense "
        "block(s)")


def test_a_batch_far_too_small_for_the_cluster_is_told_fewer_nodes_not_a_huge_batch():
    """100,000 8-GPU nodes and a 1024-sequence batch: the advice was --global-batch 800000
    (1.6 B tokens a step; a trial followed it and trained in no time). Beyond 4x the batch,
    the advice is the most nodes whose GPUs divide it: 128 nodes, 1024 GPUs."""
    result = _result(["no layout satisfies the divisibility rules (e.g. dp·micro_batch="
                      "800000·1 must divide global_batch=1024)"])
    result.envelope = SimpleNamespace(n_nodes=100_000, days=20.0, n_devices=800_000,
                                      global_batch=1024, dollar_budget=None,
                                      goodput=ConstantGoodput(1.0),
                                      system=SimpleNamespace(gpus_per_node=8))
    message = untrainable_message(result)
    assert "--global-batch 800000" not in message
    assert "e.g. --nodes 128, whose 1024 GPUs divide it" in message


def test_a_window_too_short_names_the_closest_geometry_and_its_shortfall():
    """A team's fixed model (DeepSeek-V3 on 32 H100 nodes for 21 days) read only 'window too
    short for tpp_min·N_act tokens': nothing said it gets a quarter of what it needs, not
    nine tenths. The closest geometry (the most of its need) is named with its tokens."""
    rows = [
        {"q": 0, "layers": 61, "d_model": 7168, "experts": 256, "top_k": 8, "split_factor": 9,
         "reason": "window delivers D* = 3.37e+11 tokens < 40·N_act = 1.43e+12",
         "budget_tokens": 3.37e11, "min_tokens": 1.43e12},
        {"q": 0, "layers": 32, "d_model": 7168, "experts": 256, "top_k": 8, "split_factor": 9,
         "reason": "window delivers D* = 6.5e+11 tokens < 40·N_act = 7.5e+11",
         "budget_tokens": 6.5e11, "min_tokens": 7.5e11},
    ]
    result = _result([])
    result.infeasible = lambda: rows
    message = untrainable_message(result)
    assert ("2 geometries: window too short for tpp_min·N_act tokens (closest: L=32 d=7168 "
            "E=256 K=8 G=9, whose best layout gets 6.5e+11 tokens in the window, 0.87x the "
            "7.5e+11 (tpp_min·N_act) it needs)") in message
