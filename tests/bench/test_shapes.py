"""What bench measures: the shapes mosaic.perf prices for a job (hand-checked on the
paper's Appendix E job), shapes files, presets, expert loads and group layouts."""

from dataclasses import replace
from pathlib import Path

import pytest

from mosaic.bench import collectives, gemm, grouped
from mosaic.bench.cases import BenchOptions
from mosaic.bench.shapes import TINY, shapes_from_file, shapes_from_model
from mosaic.config.job_schema import load_job
from mosaic.errors import MosaicInputError
from mosaic.evaluate.job import cluster_for

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module")
def paper_shapes():
    spec = load_job(EXAMPLES / "appendix_e.yaml", [])
    return shapes_from_model(spec.workload, spec.plan, cluster_for(spec), "paper")


def test_appendix_e_gemm_shapes(paper_shapes):
    # Appendix E: d=6144, 48 q heads + 8 kv heads of 128, tp=1, micro-batch 2 x 8192 tokens.
    shapes = {(s.m, s.n, s.k) for s in paper_shapes.gemm}
    tokens = 2 * 8192
    assert (tokens, 6144 + 2 * 8 * 128, 6144) in shapes  # fused QKV projection
    assert (tokens, 6144, 48 * 128) in shapes  # output projection
    assert (tokens, 257536, 6144) in shapes  # LM head (vocab 257536, tp=1)


def test_appendix_e_expert_and_attention_shapes(paper_shapes):
    # 128 experts over ep=8 -> 16 local; per-expert tile M = 16384 tokens * 8 * 3 / 128.
    grouped_shapes = {(s.groups, s.m_per_group, s.n, s.k) for s in paper_shapes.grouped}
    assert grouped_shapes == {(16, 3072, 2 * 3840, 6144), (16, 3072, 6144, 3840)}
    (attention,) = paper_shapes.attention
    assert (attention.batch, attention.heads, attention.kv_heads, attention.seq,
            attention.head_dim) == (2, 48, 8, 8192, 128)


def test_appendix_e_collectives(paper_shapes):
    uses = {(u.collective, u.group_size, u.message_bytes) for u in paper_shapes.collective_uses}
    # EP dispatch: 16384 tokens x top-3 x 6144 x 2 bytes per rank, pairwise over 8 ranks.
    assert ("all_to_all", 8, 16384 * 3 * 6144 * 2) in uses
    placements = {(u.group_size, u.ranks_per_domain) for u in paper_shapes.collective_uses
                  if u.collective == "all_to_all"}
    assert placements == {(8, 8)}  # the EP group of 8 fills one 8-GPU node


def test_job_placements_pick_the_layouts(paper_shapes):
    placements = sorted({(u.group_size, u.ranks_per_domain)
                         for u in paper_shapes.collective_uses})
    cases = collectives.build_cases(16, 8, 1024, 1024, ops=("all_reduce", "send_recv"),
                                    placements=placements)
    layouts = {(c.columns["group_size"], c.columns["stride"]) for c in cases}
    # on 2 nodes of 8: the EP group of 8 inside a node, pipeline pairs inside a node and
    # across nodes (one rank per node: stride 8); the 32-way DP groups do not fit
    assert layouts == {(8, 1), (2, 1), (2, 8)}


def test_stated_layouts_the_world_cannot_form_are_refused():
    """A group of n ranks at stride s needs n >= 2 and n*s dividing the world: on 2 ranks
    only (2, 1) exists. A trial's `--group-sizes 4` (or `--strides 2`) on 2 processes
    measured 0 cases and said nothing; `--strides 0` divided by zero."""
    assert {(c.columns["group_size"], c.columns["stride"])
            for c in collectives.build_cases(2, 2, 1024, 1024, group_sizes=(2,))} == {(2, 1)}
    for option, kwargs in (("--group-sizes 4", {"group_sizes": (4,)}),
                           ("--group-sizes 3", {"group_sizes": (2, 3)}),
                           ("--strides 2", {"strides": (2,)}),
                           ("--strides 0", {"strides": (0,)})):
        with pytest.raises(MosaicInputError, match=f"^{option}: no group layout of the 2"):
            collectives.build_cases(2, 2, 1024, 1024, **kwargs)
    with pytest.raises(MosaicInputError, match="at least 2 ranks"):
        collectives.build_cases(1, 1, 1024, 1024)  # one process: no group at all


def test_a_world_smaller_than_every_job_group_is_refused(paper_shapes):
    # the Appendix E job's groups hold 2 (pipeline pairs), 4, 8 (EP) and 32 (DP) ranks: on 4
    # ranks of one node the pairs are measured (docs/bench.md: "where the world can form them") ...
    placements = sorted({(u.group_size, u.ranks_per_domain)
                         for u in paper_shapes.collective_uses})
    cases = collectives.build_cases(4, 4, 1024, 1024, ops=("all_reduce",),
                                    placements=placements)
    assert {c.columns["group_size"] for c in cases} == {2}
    # ... and a job of 8-rank groups alone leaves nothing for 4 ranks: one line, not 0 cases
    with pytest.raises(MosaicInputError, match=r"the job's groups hold 8 ranks"):
        collectives.build_cases(4, 4, 1024, 1024, placements=[(8, 8)])


def test_the_job_groups_a_run_leaves_out_are_named(paper_shapes):
    from mosaic.bench.run import CollectiveOptions, _warn_unformed_job_groups
    from mosaic.errors import MosaicWarning

    placements = tuple(sorted({(u.group_size, u.ranks_per_domain)
                               for u in paper_shapes.collective_uses}))
    options = CollectiveOptions(placements=placements)
    cases = collectives.build_cases(4, 4, 1024, 1024, placements=placements)
    # pairs are measured; the 4-rank groups of one rank per node are not either (4 ranks on
    # one node of 4)
    with pytest.warns(MosaicWarning) as caught:
        _warn_unformed_job_groups(cases, options, 4)
    text = str(caught[0].message)
    # the pairs of one rank per domain are not formed either, and named; what runs instead
    # is said (a trial read "so none is measured" and then saw 138 pair cases run for
    # minutes on 2 ranks)
    assert text.startswith("the job's groups of 4, 8, 32 ranks and groups of 2 ranks with 1 "
                           "per domain cannot be laid out on the 4 ranks")
    assert "none is measured" not in text
    assert (f"the run measures only {len(cases)} cases on groups of 2 ranks with 2 per domain "
            "(as the job's), messages 1 KiB to 1 KiB" in text)


def test_groups_measured_unlike_the_job_places_them_are_named():
    """A job of 4-rank groups of one rank per node on 4 ranks of one node: the only 4-rank
    layout the world has (4 per domain) runs in their place, which the warning says; it said
    nothing, since the group size was formed."""
    from mosaic.bench.run import CollectiveOptions, _warn_unformed_job_groups
    from mosaic.errors import MosaicWarning

    options = CollectiveOptions(placements=((4, 1),))
    cases = collectives.build_cases(4, 4, 1024, 4096, ops=("all_reduce",),
                                    placements=options.placements)
    with pytest.warns(MosaicWarning, match=r"groups of 4 ranks with 1 per domain cannot be "
                      r".* measures only 3 cases on groups of 4 ranks with 4 per domain "
                      r"\(not as the job's\), messages 1 KiB to 4 KiB"):
        _warn_unformed_job_groups(cases, options, 4)


def test_pairs_only_ops_with_no_pair_layout_are_refused():
    """`--ops send_recv` measures pairs only: on a job of 4-rank groups there was nothing to
    measure, and the unformed-groups warning stopped the run with 'ValueError: min() arg is
    an empty sequence' (under torchrun on rank 0 alone). It is one line naming the op."""
    with pytest.raises(MosaicInputError, match=r"--ops send_recv measures groups of 2 ranks "
                                               r"only.*groups of 4 ranks"):
        collectives.build_cases(4, 4, 1024, 4096, ops=("send_recv",), placements=((4, 4),))


def test_groups_that_the_ops_do_not_measure_are_not_blamed_on_the_world(paper_shapes):
    """With `--ops send_recv` (pairs only) on 8 ranks of one node, the warning said the
    Appendix E job's groups of 4, 8 and 32 ranks "cannot be laid out" on them: they are
    left out by --ops, not by the world; only the pairs of 1 rank per domain are the
    world's (all 8 ranks share one domain)."""
    from mosaic.bench.run import CollectiveOptions, _warn_unformed_job_groups
    from mosaic.errors import MosaicWarning

    placements = tuple(sorted({(u.group_size, u.ranks_per_domain)
                               for u in paper_shapes.collective_uses}))
    options = CollectiveOptions(placements=placements, ops=("send_recv",))
    cases = collectives.build_cases(8, 8, 1024, 1024, ops=options.ops, placements=placements)
    with pytest.warns(MosaicWarning) as caught:
        _warn_unformed_job_groups(cases, options, 8)
    text = str(caught[0].message)
    assert text.startswith("the job's groups of 2 ranks with 1 per domain cannot be laid out "
                           "on the 8 ranks"), text


def test_backward_gemm_shapes_and_dedup():
    assert gemm.passes(10, 20, 30) == (("fwd", 10, 20, 30), ("dgrad", 10, 30, 20),
                                        ("wgrad", 30, 20, 10))
    cases = gemm.build_cases(TINY, BenchOptions(dtypes=("bf16",)))
    keys = [c.key for c in cases]
    assert len(keys) == len(set(keys))
    assert "bf16:128x64x64" in keys and "bf16:64x128x96" in keys  # dgrad of 64x96x128


def test_shapes_file_round_trip(tmp_path):
    path = tmp_path / "shapes.yaml"
    path.write_text("gemm:\n  - {m: 8, n: 16, k: 32}\npeak_sizes: [64]\n")
    shapes = shapes_from_file(path)
    assert [(s.m, s.n, s.k) for s in shapes.gemm] == [(8, 16, 32)] and shapes.peak_sizes == (64,)
    path.write_text("gemm:\n  - {m: 1e3, n: 1_024, k: 64}\n")  # whole numbers, grouped
    assert [(s.m, s.n) for s in shapes_from_file(path).gemm] == [(1000, 1024)]
    # a stream with and without its optional norm_tokens (a review: the first crashed)
    path.write_text("streams:\n  - {tokens: 64, d_model: 64, width: 96, vocab: 512}\n"
                    "  - {tokens: 64, d_model: 64, width: 96, vocab: 512, norm_tokens: 32}\n")
    plain, sharded = shapes_from_file(path).streams
    assert (plain.residual_tokens, sharded.residual_tokens) == (64, 32)


@pytest.mark.parametrize(("text", "match"), [
    ("gemm:\n  - {m: 0, n: 16, k: 32}\n", r"gemm\[0\]"),
    # a missing or misspelled size is named in the file's words, not GemmShape.__init__'s
    ("gemm:\n  - {m: 64, n: 64}\n", r"gemm\[0\]: missing k; fields: m, n, k$"),
    ("gemm:\n  - {m: 64, n: 64, kk: 8}\n", "missing k; unknown kk"),
    # '3_2' is text under the YAML rule, and int() would have read it as 32 (a review)
    ("gemm:\n  - {m: 3_2, n: 64, k: 64}\n", "m: '3_2' is not a whole number"),
    ("gemms: []\n", "unknown section"),
    # a file with no shapes planned zero cases without a word (a trial)
    ("gemm: []\n", "no shapes to measure"),
    # a scalar or a mapping where a list belongs ended in a TypeError (a fuzz trial)
    ("peak_sizes: 4096\n", "peak_sizes must be a list of integers >= 1, got 4096"),
    ("streams: ''\n", "streams must be a list of mappings of sizes, got ''"),
    ("gemm: {m: 64, n: 64, k: 64}\n", "gemm must be a list of mappings of sizes"),
])
def test_shapes_file_errors(tmp_path, text, match):
    path = tmp_path / "shapes.yaml"
    path.write_text(text)
    with pytest.raises(MosaicInputError, match=match):
        shapes_from_file(path)


def test_expert_loads_balanced_and_skewed():
    assert grouped.expert_loads(4, 10, "balanced", 1.0).tolist() == [10] * 4
    skewed = grouped.expert_loads(4, 10, "skewed", 1.0)
    assert skewed.sum() == 40 and skewed.min() >= 1
    # One token each, then the 36 left in Zipf(1) shares 1, 1/2, 1/3, 1/4 (sum 25/12):
    # 17.28, 8.64, 5.76, 4.32 -> floors 17, 8, 5, 4 and the 2 left to the largest
    # remainders (.76, .64) -> 17, 9, 6, 4; plus one each.
    assert skewed.tolist() == [18, 10, 7, 5]


def test_layouts_and_groups():
    assert collectives.group_ranks(collectives.Layout(2, 1), 8) == [[0, 1], [2, 3], [4, 5],
                                                                   [6, 7]]
    assert collectives.group_ranks(collectives.Layout(2, 4), 8) == [[0, 4], [1, 5], [2, 6],
                                                                   [3, 7]]
    layouts = collectives.layouts(world_size=8, local_size=4)
    assert collectives.Layout(2, 4) in layouts and collectives.Layout(8, 1) in layouts
    assert collectives.Layout(4, 4) not in layouts  # 16 ranks needed


def test_uneven_splits_sum_to_the_buffer():
    splits = collectives.uneven_splits(4, 1000)
    assert (splits.sum(axis=1) == 1000).all()
    assert len(set(splits[0].tolist())) > 1  # really uneven


def test_a_cpu_measures_a_cpu_sized_peak_sweep_and_optimizer():
    """A trial's 125k-parameter job took five minutes of CPU bench: the GPU peak sweep's
    16384³ fp32 GEMMs ran 34 s a call. On a CPU the sweep stops at 4096 and AdamW at 2^24
    parameters, said in a note; a GPU keeps the sizes, and a sweep wholly above the cap keeps
    its smallest size."""
    from mosaic.bench.shapes import GENERIC, sized_for_device

    cpu = sized_for_device(GENERIC, "cpu")
    assert cpu.peak_sizes == (2048, 4096) and cpu.optimizer_params == (1 << 24,)
    assert cpu.gemm == GENERIC.gemm
    assert "not measured: peak 8192, peak 12288, peak 16384, adamw 67,108,864 params" in (
        cpu.notes[-1])
    assert sized_for_device(GENERIC, "cuda") is GENERIC
    big = replace(GENERIC, peak_sizes=(8192, 16384), optimizer_params=(1 << 28,))
    assert sized_for_device(big, "cpu").peak_sizes == (8192,)
    assert sized_for_device(cpu, "cpu") is cpu  # nothing left to drop: no second note
    # a family that measures neither is told of neither (a trial read it under te-grouped)
    assert sized_for_device(GENERIC, "cpu", ("te_grouped",)).notes == GENERIC.notes
    (gemm_note,) = sized_for_device(GENERIC, "cpu", ("gemm",)).notes[len(GENERIC.notes):]
    assert gemm_note == ("on a CPU the peak sweep stops at 4096 (not measured: peak 8192, "
                         "peak 12288, peak 16384)")


def test_norms_are_timed_on_the_sequence_shard_perf_prices():
    """Appendix E at tp 2 with sequence parallelism: norms and residual adds run on a
    rank's sequence shard, 2 x 8192 / 2 = 8192 tokens (perf.shapes.sequence_shard_tokens;
    a review found bench timing them on all 16384), while the SwiGLU and the loss keep
    the micro-batch's 16384 tokens."""
    from mosaic.bench import streams

    spec = load_job(EXAMPLES / "appendix_e.yaml", ["parallelism.tp=2",
                                                   "parallelism.sequence_parallel=true"])
    (stream,) = shapes_from_model(spec.workload, spec.plan, cluster_for(spec), "tp2").streams
    assert (stream.tokens, stream.residual_tokens) == (16384, 8192)
    cases = {c.columns["op"]: c.columns["elements"]
             for c in streams.build_cases(replace(TINY, streams=(stream,)),
                                          BenchOptions(dtypes=("bf16",)))
             if c.columns.get("source") == "model"}
    assert cases["rmsnorm"] == cases["add"] == 8192 * 6144
    assert cases["swiglu"] == 16384 * stream.width


@pytest.mark.parametrize("source, said", [
    (["--preset", "tiny"], "--preset tiny reads no job file"),
    (["--shapes", str(EXAMPLES / "appendix_e.yaml")], "--shapes reads no job file"),
    ([], "no job file is read without --job"),
])
@pytest.mark.parametrize("family", ["gemm", "kernels", "collectives"])
def test_set_without_a_job_is_refused_not_dropped(tmp_path, family, source, said):
    """--set edits a job's fields; with the shapes of a preset or a shapes file it changed
    nothing, and `bench gemm --preset tiny --set parallelism.tp=3` listed the tiny shapes
    (exit 0). With --job the same --set is read (exit 0)."""
    from typer.testing import CliRunner

    from mosaic.cli.main import app

    if family == "collectives" and source[:1] == ["--shapes"]:
        pytest.skip("bench collectives takes no --shapes")
    runner = CliRunner()
    argv = ["bench", family, "--out", str(tmp_path / "o"), "--dry-run", "--no-progress"]
    refused = runner.invoke(app, [*argv, *source, "--set", "parallelism.tp=2"])
    assert refused.exit_code == 2, refused.output
    assert refused.output.strip() == (f"error: --set 'parallelism.tp=2': {said}, so --set "
                                      "would change nothing; allowed with --job FILE or "
                                      "--preset paper")
    read = runner.invoke(app, [*argv, "--job", str(EXAMPLES / "appendix_e.yaml"),
                               "--set", "parallelism.tp=2"])
    assert read.exit_code == 0, read.output
