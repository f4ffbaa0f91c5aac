"""Stated pipeline layouts (Megatron-Core --pipeline-model-parallel-layout) and MTP modules:
the grammar and its rules, the blocks each rank holds, and what the MTP module costs in time
and memory (hand counts against Megatron-Core's placement)."""

from dataclasses import replace

import numpy as np
import pytest

from mosaic.arch import AttentionKind, Geometry, MLAConfig, MoEConfig, count_parameters
from mosaic.errors import MosaicInputError
from mosaic.hardware import Cluster, get_system
from mosaic.perf.calibration import default_calibration
from mosaic.perf.constraints import plan_violations
from mosaic.perf.layer_costs import gemm_s
from mosaic.perf.machine import machine_for
from mosaic.perf.memory import logits_bytes, stage_parameters
from mosaic.perf.pipeline_layout import expand_layout, parse_pipeline_layout
from mosaic.perf.plan import concatenate_plans, single_plan
from mosaic.perf.schedule import n_microbatches, stage_layer_counts
from mosaic.perf.shapes import tokens_per_rank
from mosaic.perf.step_time import _vocab_stage_times, predict_step
from mosaic.perf.workload import Workload

# DeepSeek-V3's shape (report Table/config.json): 61 blocks, the first 3 dense, one MTP module
DSV3 = Geometry(layers=61, d_model=7168, heads=128, kv_heads=128, head_dim=128, ffn=18432,
                vocab=129280, attention=AttentionKind.MLA,
                mla=MLAConfig(q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128,
                            qk_rope_head_dim=64, v_head_dim=128),
                moe=MoEConfig(experts=256, top_k=8, expert_ffn=2048, shared_experts=1,
                            shared_expert_ffn=2048, dense_layers=3),
                mtp_layers=1)
BRIDGE_PP16 = "Et*4|(t*4|)*14tmL"  # Megatron-Bridge deepseek_v3.py layout_map[(16, 1)]
MACHINE = machine_for(Cluster(system=get_system("DGX-H100"), n_nodes=32), "bf16")
BARE = replace(default_calibration(), stack_overhead={}, chi_a2a=0.0, chi_pp=0.0,
               chi_overlap=0.0, elementwise_traffic_factor=1.0)


def test_the_grammar_unrolls_as_megatron_core_documents_it():
    # PipelineParallelLayerLayout.parse_str_to_list's docstring example
    chunks = expand_layout("Ettt|(tt|)*29,m|L")
    assert chunks == ("Ettt", *["tt"] * 29, "m", "L")
    assert expand_layout(BRIDGE_PP16) == ("Etttt", *["tttt"] * 14, "tmL")
    with pytest.raises(MosaicInputError, match="unknown symbol"):
        expand_layout("Et|x|L")


@pytest.mark.parametrize("text, pp, vpp, match", [
    ("Et*4|(t*4|)*14tmL", 16, None, None),
    ("Et*4|(t*4|)*14tmL", 8, None, None),  # 16 chunks: vpp 2
    ("Et*4|(t*4|)*14tmL", 16, 2, "pp·vpp = 16·2"),
    ("Et*4|(t*4|)*14tmL", 6, None, "not a multiple of pp=6"),
    ("Et*4|(t*4|)*14tL", 16, None, "places 0 MTP modules"),
    ("Et*4|(t*4|)*13tmL|t", 16, None, "end with the loss"),
    ("Et*3|(t*4|)*14tmL", 16, None, "places 60 transformer blocks"),
    ("Et*4|(t*4|)*13t*3m|ttL", 16, None, "after every block"),
])
def test_layouts_are_checked_as_megatron_core_checks_them(text, pp, vpp, match):
    if match is None:
        layout = parse_pipeline_layout(text, pp, vpp, DSV3.layers, DSV3.mtp_layers)
        assert layout.pp * layout.vpp == 16
    else:
        with pytest.raises(MosaicInputError, match=match):
            parse_pipeline_layout(text, pp, vpp, DSV3.layers, DSV3.mtp_layers)


def test_an_mtp_module_must_sit_in_its_ranks_last_virtual_stage():
    # pp=2, vpp=2: chunk 1 (rank 1's first virtual stage) may not hold the MTP module
    with pytest.raises(MosaicInputError, match="before its last virtual stage"):
        parse_pipeline_layout("Et*30|t*31m|L|", 2, 2, 61, 1)


def test_each_rank_holds_its_chunks_blocks():
    # "Et|(tt|)*30mL" on pp=8, vpp=4 (Megatron-Bridge's H100 DeepSeek-V3 layout): rank r runs
    # chunks r, r+8, r+16, r+24, and chunk c >= 1 holds blocks 2c-1 and 2c. Rank 0: blocks 0,
    # 15-16, 31-32, 47-48 (7; block 0 dense, 6 MoE); rank 1: 1-2, 17-18, 33-34, 49-50 (8;
    # blocks 1 and 2 dense, 6 MoE); rank 7: 13-14, 29-30, 45-46 and the last chunk (m, L): 6
    # MoE blocks and the MTP module, which counts as one more MoE block.
    layout = parse_pipeline_layout("Et|(tt|)*30mL", 8, 4, 61, 1)
    plans = concatenate_plans([single_plan(pp=8, vpp=4, dp=4, ep=32),
                         single_plan(pp=8, vpp=1, dp=4, ep=32)])
    got = {stage: tuple(int(v[0]) for v in stage_layer_counts(DSV3, plans, stage, None, False,
                                                               (layout,)))
           for stage in ("first", "middle", "last")}
    assert got == {"first": (7, 6), "middle": (8, 6), "last": (7, 7)}
    # a plan of another vpp splits the default way: a full chunk of ceil(61/8) = 8 MoE
    # blocks on the last rank, and the MTP module there (Megatron-Core's placement without a
    # layout): (blocks, MoE blocks) = (9, 9)
    assert [int(v[1]) for v in stage_layer_counts(DSV3, plans, "last", None, False, (layout,))
            ] == [9, 9]


def test_a_layout_lifts_the_even_split_rule_for_its_own_pipeline_shape():
    layout = parse_pipeline_layout(BRIDGE_PP16, 16, 1, 61, 1)
    workload = Workload(geometry=DSV3, global_batch=2048, seq_len=4096,
                        pipeline_layouts=(layout,))
    plans = concatenate_plans([single_plan(pp=16, vpp=1, dp=16, ep=8),
                         single_plan(pp=16, vpp=2, dp=16, ep=8)])
    split = [v for v in plan_violations(workload, plans, 256) if "must divide layers" in v.rule]
    assert [bool(x) for x in split[0].violated] == [False, True]


def test_the_workload_refuses_a_layout_of_another_model():
    layout = parse_pipeline_layout(BRIDGE_PP16, 16, 1, 61, 1)
    with pytest.raises(MosaicInputError, match="places a different number"):
        Workload(geometry=replace(DSV3, mtp_layers=0), global_batch=2048, seq_len=4096,
                 pipeline_layouts=(layout,))


def test_the_mtp_module_costs_its_block_projection_and_loss_by_hand():
    # One stage (pp = 1): the MTP module adds one MoE block per micro-batch, and to the
    # vocabulary work its embedding lookup, its 2d -> d projection (three GEMMs) and a second
    # LM head and loss (Megatron-Core MultiTokenPredictionLayer, process_mtp_loss).
    plan = single_plan(dp=64, ep=64)
    with_mtp = Workload(geometry=DSV3, global_batch=512, seq_len=4096)
    without = replace(with_mtp, geometry=replace(DSV3, mtp_layers=0))
    t_first, t_last, t_mtp = (float(t[0]) for t in _vocab_stage_times(MACHINE, with_mtp, plan))
    t_first0, t_last0, t_mtp0 = (float(t[0]) for t in _vocab_stage_times(MACHINE, without, plan))
    assert (t_first, t_mtp0) == (t_first0, 0.0)
    assert t_last == pytest.approx(2 * t_last0)
    tokens = tokens_per_rank(with_mtp, plan)
    projection = float(gemm_s(MACHINE, with_mtp, tokens, 7168, 2 * 7168)[0])
    assert t_mtp == pytest.approx(t_first + 3 * projection)
    a, b = (predict_step(w, plan, MACHINE, BARE) for w in (with_mtp, without))
    n_mb = float(n_microbatches(with_mtp, plan)[0])
    vocab = a.analytic_breakdown_s["vocab_stage"][0] - b.analytic_breakdown_s["vocab_stage"][0]
    assert vocab == pytest.approx(n_mb * (t_last0 + t_mtp))
    experts = a.analytic_breakdown_s["compute_experts"][0] / b.analytic_breakdown_s[
        "compute_experts"][0]
    assert experts == pytest.approx(59 / 58)  # 58 MoE blocks + the MTP module's


def test_the_recipe_layout_moves_the_loss_and_mtp_off_the_pacing_rank():
    # pp=16 without a layout: every rank 4 blocks (ceil 61/16), the last also the MTP module
    # and both losses; with Bridge's layout the last rank holds one block besides them.
    plan = single_plan(pp=16, vpp=1, dp=16, ep=8)
    default = Workload(geometry=DSV3, global_batch=2048, seq_len=4096)
    laid = replace(default, pipeline_layouts=(parse_pipeline_layout(BRIDGE_PP16, 16, 1, 61, 1),))
    slow, fast = (predict_step(w, plan, MACHINE, BARE).step_time_s[0] for w in (default, laid))
    assert fast < slow


def test_mtp_memory_on_the_last_rank_by_hand():
    # tp = ep = 1, pp = 2: the last rank holds the MTP module (a block like the last one, the
    # 2d x d projection, three norms) and, for it, a copy of the input embedding (GPTModel
    # builds one where mtp_process); its logits and loss buffers double.
    plan = single_plan(pp=2, dp=4)
    counts = count_parameters(DSV3)
    last = stage_parameters(DSV3, plan, "last").total[0]
    last0 = stage_parameters(replace(DSV3, mtp_layers=0), plan, "last").total[0]
    assert last - last0 == int(counts.mtp) + 129280 * 7168
    first = stage_parameters(DSV3, plan, "first").total[0]
    assert first == stage_parameters(replace(DSV3, mtp_layers=0), plan, "first").total[0]
    workload = Workload(geometry=DSV3, global_batch=64, seq_len=4096)
    without = replace(workload, geometry=replace(DSV3, mtp_layers=0))
    assert logits_bytes(workload, plan, "last")[0] == 2 * logits_bytes(without, plan, "last")[0]
    assert np.all(logits_bytes(workload, plan, "first") == 0)


def test_a_search_splits_each_pipeline_shape_by_its_own_layout():
    # Megatron-Bridge's map gives pp=16 and pp=8 layouts of their own; pp=4 (vpp 1) has one
    # too, pp=2 none. Scoring the shapes together equals scoring each with its own layout.
    texts = {(16, 1): BRIDGE_PP16, (8, 1): "Et*8|(t*8|)*6t*5mL"}
    layouts = tuple(parse_pipeline_layout(t, pp, vpp, 61, 1) for (pp, vpp), t in texts.items())
    workload = Workload(geometry=DSV3, global_batch=2048, seq_len=4096, pipeline_layouts=layouts)
    shapes = [single_plan(pp=16, dp=16, ep=8), single_plan(pp=8, dp=32, ep=8),
              single_plan(pp=2, dp=128, ep=8)]
    together = predict_step(workload, concatenate_plans(shapes), MACHINE, BARE)
    for index, plan in enumerate(shapes):
        own = tuple(layout for layout in layouts if layout.pp == int(plan.pp[0]))
        alone = predict_step(replace(workload, pipeline_layouts=own), plan, MACHINE, BARE)
        assert together.step_time_s[index] == pytest.approx(alone.step_time_s[0], rel=1e-12)
        assert together.memory_bytes[index] == pytest.approx(alone.memory_bytes[0], rel=1e-12)
    with pytest.raises(MosaicInputError, match="more than one for a pipeline shape"):
        replace(workload, pipeline_layouts=(layouts[0], layouts[0]))


def test_the_balanced_layout_counts_embedding_loss_and_mtp_as_slots():
    from mosaic.perf.pipeline_layout import balanced_layout

    # 61 blocks + E + m + L = 64 slots over 32 chunks: two each, MTP and loss together last
    # -- Megatron-Bridge's own H100 DeepSeek-V3 layout
    assert expand_layout(balanced_layout(61, 1, 8, 4)) == expand_layout("Et|(tt|)*30mL")
    # 94 + 2 slots over 96 chunks: one each (the embedding and the loss alone)
    chunks = expand_layout(balanced_layout(94, 0, 32, 3))
    assert (chunks[0], chunks[-1], len(chunks)) == ("E", "L", 96)
    assert all(chunk == "t" for chunk in chunks[1:-1])
    # 48 + 2 over 16: two chunks of four slots, the ends of three
    assert [len(c) for c in expand_layout(balanced_layout(48, 0, 16, 1))] == (
        [3, 4, 4] + [3] * 13)


@pytest.mark.parametrize("layers", [1, 3, 7, 48, 61, 94])
@pytest.mark.parametrize("mtp", [0, 1, 3])
def test_the_balanced_layout_passes_megatron_cores_checks_for_any_shape(layers, mtp):
    from mosaic.perf.pipeline_layout import balanced_layout

    for pp, vpp in ((1, 1), (2, 1), (3, 2), (8, 1), (8, 4), (16, 1), (32, 3)):
        if pp * vpp <= layers + 2 + mtp:
            layout = parse_pipeline_layout(balanced_layout(layers, mtp, pp, vpp), pp, vpp,
                                           layers, mtp)
            sizes = [len(chunk) for chunk in layout.chunks[:-1]] or [0]
            assert max(sizes) - min(sizes) <= 1  # as even as whole slots allow


def test_a_balanced_search_gives_every_pipeline_shape_its_layout():
    from mosaic.perf.layouts import (
        LayoutLimits,
        candidate_plans,
        check_rules,
        with_balanced_layouts,
    )

    workload = Workload(geometry=DSV3, global_batch=2048, seq_len=4096)
    searched = with_balanced_layouts(workload, 256, LayoutLimits(vpp=(1, 2)))
    shapes = {(layout.pp, layout.vpp) for layout in searched.pipeline_layouts}
    # every pp dividing 256 (64 = 63 slots' worth of chunks is too many for vpp 2, not for 1)
    assert {(pp, 1) for pp in (2, 4, 8, 16, 32, 64)} <= shapes
    assert (64, 2) not in shapes and (32, 2) in shapes
    # every pipelined plan that passes the rules is split by one of them
    plans = candidate_plans(searched, 256, 8, LayoutLimits(vpp=(1, 2)))
    plans = plans.take(np.flatnonzero(check_rules(searched, plans, 256).valid))
    laid = plans.pp > 1
    assert set(zip(plans.pp[laid].tolist(), plans.vpp[laid].tolist(), strict=True)) <= shapes
    # a stated layout keeps its shape
    own = parse_pipeline_layout(BRIDGE_PP16, 16, 1, 61, 1)
    kept = with_balanced_layouts(replace(workload, pipeline_layouts=(own,)), 256,
                                 LayoutLimits())
    assert own in kept.pipeline_layouts


def test_an_uneven_job_is_split_by_its_remainder_last_layout(tmp_path):
    """uneven_stages true on 61 blocks over pp 8: chunks of ceil(61/8) = 8, the remainder of
    5 last with the MTP module and the loss; the job is predicted as the job stating that
    layout (the same time and memory) and costed rank by rank: the LM head and the MTP
    module ride in the short last stage's slack, which the chunk rule charged on top of a
    full stage."""
    from mosaic.config.job_schema import load_job
    from mosaic.evaluate.job import predict_job
    from mosaic.perf.pipeline_layout import remainder_last_layout

    assert remainder_last_layout(61, 1, 8, 1) == "Et*8|(t*8|)*6t*5mL"
    assert remainder_last_layout(30, 0, 4, 2) == "Et*4|(t*4|)*6ttL"
    job = _uneven_job(tmp_path)
    uneven = predict_job(load_job(job), default_calibration())
    stated = predict_job(load_job(job, ["performance.uneven_stages=false",
                                        "parallelism.pipeline_layout=Et*8|(t*8|)*6t*5mL"]),
                         default_calibration())
    assert float(uneven.prediction.step_time_s[0]) == pytest.approx(
        float(stated.prediction.step_time_s[0]), rel=1e-12)
    assert float(uneven.prediction.memory_bytes[0]) == pytest.approx(
        float(stated.prediction.memory_bytes[0]), rel=1e-12)
    # the chunk rule it replaces: the vocabulary work on top of a full 8-block stage
    chunk_rule = predict_job(load_job(job), default_calibration())
    chunk_workload = replace(chunk_rule.spec.workload, pipeline_layouts=())
    full = predict_step(chunk_workload, chunk_rule.spec.plan, chunk_rule.machine,
                        default_calibration())
    assert float(full.step_time_s[0]) > float(uneven.prediction.step_time_s[0])


def _uneven_job(tmp_path, **performance):
    import yaml

    model = {"layers": 61, "d_model": 7168, "heads": 128, "ffn": 18432, "vocab": 129280,
             "attention": "mla", "mtp_layers": 1,
             "mla": {"q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
                     "qk_rope_head_dim": 64, "v_head_dim": 128},
             "moe": {"experts": 256, "top_k": 8, "expert_ffn": 2048, "shared_experts": 1,
                     "shared_expert_ffn": 2048, "dense_layers": 3}}
    job = tmp_path / "uneven.yaml"
    job.write_text(yaml.safe_dump({
        "model": model, "parallelism": {"tp": 1, "pp": 8, "ep": 32, "sharding": "zero1"},
        "batch": {"global_seqs": 4096, "micro_seqs": 1, "seq_len": 4096},
        "performance": {"precision": "bf16", "checkpointing": "selective",
                        "uneven_stages": True, **performance},
        "hardware": {"system": "DGX-B200", "nodes": 32}}))
    return job


def test_uneven_levers_and_exports_cost_as_perf_does(tmp_path):
    """An uneven_stages job: explain's pipeline levers equal `perf --set` of the same change
    (each shape split remainder last), the balanced layout is still a lever, the job file
    it exports stays editable (the derived split is not written as a stated layout), and a
    torchtitan export does not call the derived layout unexpressed."""
    import yaml

    from mosaic.cli.export_cmd import load_export_spec
    from mosaic.config.job_schema import job_document, load_job
    from mosaic.evaluate.diagnosis import rank_levers
    from mosaic.evaluate.job import predict_job
    from mosaic.export import export

    job = _uneven_job(tmp_path)
    calibration = default_calibration()
    result = predict_job(load_job(job), calibration)
    levers = {lever.name: lever for lever in rank_levers(
        result.spec.workload, result.spec.plan, result.machine, calibration)}
    for name, change in (("vpp_2", "parallelism.vpp=2"), ("pp_halve", "parallelism.pp=4")):
        alone = predict_job(load_job(job, [change]), calibration)
        assert levers[name].step_time_s == pytest.approx(
            float(alone.prediction.step_time_s[0]), rel=1e-12), name
    assert "balanced_pipeline_layout" in levers
    document = job_document(load_job(job))
    assert "pipeline_layout" not in document["parallelism"]
    assert document["performance"]["uneven_stages"] is True
    edited = tmp_path / "edited.yaml"
    edited.write_text(yaml.safe_dump(document))
    assert load_job(edited, ["parallelism.pp=4"]).plan.row(0)["pp"] == 4
    spec = load_export_spec(job, [], None)
    assert spec.pipeline_layout_derived
    titan = export(spec, "torchtitan")
    assert not any("pipeline_layout" in note for note in titan.unsupported)


def test_remainder_layouts_only_where_megatron_places_them(tmp_path):
    """A layouts search of an uneven job splits every uneven shape remainder last, but not a
    shape whose last chunk would be empty (61 blocks in 32 chunks of 2), nor a torchtitan
    job (its own rule), whose --balanced-pipeline is refused."""
    from mosaic.config.job_schema import load_job
    from mosaic.perf.layouts import LayoutLimits, with_searched_remainder_last_layouts
    from mosaic.perf.pipeline_layout import layout_for

    workload = load_job(_uneven_job(tmp_path)).workload
    searched = with_searched_remainder_last_layouts(workload, 256, LayoutLimits(vpp=(1, 4)))
    assert layout_for(searched.pipeline_layouts, 4, 1).derived
    assert layout_for(searched.pipeline_layouts, 8, 4) is None  # 32 chunks of 2: one empty
    titan = load_job(_uneven_job(tmp_path, stack="torchtitan")).workload
    assert with_searched_remainder_last_layouts(titan, 256, LayoutLimits()).pipeline_layouts == ()
    from mosaic.perf.layouts import with_balanced_layouts

    with pytest.raises(MosaicInputError, match="torchtitan does not take"):
        with_balanced_layouts(titan, 256, LayoutLimits())


def test_written_layouts_group_equal_chunks_and_unroll_to_the_same_chunks():
    """A 64-chunk balanced layout was written chunk by chunk, 200 characters wide (a trial's
    explain table ran 420 columns); equal neighbours are now one (chunk|)*n group, which
    Megatron-Core's grammar (and expand_layout) unrolls to the same chunks."""
    from mosaic.perf.pipeline_layout import _join_chunks, balanced_layout, expand_layout

    assert balanced_layout(61, 1, 8, 4) == "Et|(tt|)*30mL"  # Megatron-Bridge's DeepSeek-V3
    assert balanced_layout(64, 0, 16, 4) == "E|tt|tt|(t|)*60L"
    for chunks in (["a"], ["a", "a"], ["a", "a", "a", "a", "b"], ["b", "a", "a", "a"],
                   ["E", "t", "t", "t", "t", "L"]):
        assert expand_layout(_join_chunks(chunks).replace("a", "t").replace("b", "E")) == \
            tuple(c.replace("a", "t").replace("b", "E") for c in chunks)
