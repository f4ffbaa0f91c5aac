"""Uneven pipeline stages are split as the job's stack splits them (stack trait
``uneven_stage_split``): torchtitan v0.2.2's ``generate_llm_fqn_per_model_part``
(torchtitan/distributed/pipeline_parallel.py) gives each of the pp·vpp stages
floor(L / stages) blocks and the first L mod stages one more, where Megatron-Core's split as
mosaic states it (decoder_first/last_pipeline_num_layers, or the layout it writes) takes
chunks of ceil(L / stages) with the short one last."""

import numpy as np
import pytest

from mosaic.arch import Geometry
from mosaic.perf.constraints import plan_violations
from mosaic.perf.memory.peak import stage_memory_breakdown_bytes
from mosaic.perf.pipeline_layout import chunk_block_counts, leaves_empty_chunk
from mosaic.perf.plan import single_plan
from mosaic.perf.schedule import stage_layer_counts
from mosaic.perf.workload import Workload
from mosaic.stacks import get_stack


def _geometry(layers: int) -> Geometry:
    return Geometry(layers=layers, d_model=64, heads=4, kv_heads=2, head_dim=16, ffn=160,
                    vocab=1000, norm="rmsnorm")


def _workload(layers: int, stack: str, uneven: bool = True) -> Workload:
    return Workload(_geometry(layers), global_batch=64, seq_len=128, stack=stack,
                    uneven_pipeline_stages=uneven)


def _rank_blocks(workload: Workload, pp: int, vpp: int = 1) -> list[int]:
    plans = single_plan(pp=pp, vpp=vpp, dp=2)
    ranks = ("first", *range(1, pp - 1), "last")
    return [int(stage_layer_counts(workload.geometry, plans, rank, workload.stage_split)[0][0])
            for rank in ranks]


def test_the_stack_trait_names_each_split():
    assert get_stack("torchtitan").uneven_stage_split == "extra_first"
    assert get_stack("megatron-core").uneven_stage_split == "remainder_last"
    assert get_stack("megatron-bridge").uneven_stage_split == "remainder_last"  # inherited


def test_torchtitan_splits_30_blocks_on_pp_4_as_8_8_7_7():
    # generate_llm_fqn_per_model_part(4, 30, 0, 0): 30 // 4 = 7 a stage, 30 % 4 = 2 extra
    # layers to the first two stages
    torchtitan = _workload(30, "torchtitan")
    assert torchtitan.stage_split == "extra_first"
    assert chunk_block_counts(30, 4, "extra_first") == [8, 8, 7, 7]
    assert _rank_blocks(torchtitan, pp=4) == [8, 8, 7, 7]
    # Megatron keeps ceil(30/4) = 8 a chunk, the remainder last
    megatron = _workload(30, "megatron-core")
    assert megatron.stage_split == "remainder_last"
    assert _rank_blocks(megatron, pp=4) == [8, 8, 8, 6]


def test_interleaved_ranks_sum_their_stages():
    # 8 stages of 30 blocks: torchtitan 4,4,4,4,4,4,3,3 (rank r holds stages r and r + 4:
    # pipeline_module_split's looped _get_stage_indices), Megatron 4 x 7 then 2
    assert _rank_blocks(_workload(30, "torchtitan"), pp=4, vpp=2) == [8, 8, 7, 7]
    assert _rank_blocks(_workload(30, "megatron-core"), pp=4, vpp=2) == [8, 8, 8, 6]


def test_an_unstated_split_stays_full_at_both_ends():
    # a recorded split (uneven_stages unstated) is costed with full first and last chunks
    # whatever the stack
    assert _workload(30, "torchtitan", uneven=False).stage_split is None
    assert _rank_blocks(_workload(30, "torchtitan", uneven=False), pp=4) == [8, 8, 8, 8]


def test_the_last_stage_memory_holds_the_head_beside_torchtitans_block_count():
    # torchtitan's last stage of 30 blocks on pp 4 holds 7 blocks and the final norm and
    # head: every memory component equals the last stage of an even 28-block model (7 a
    # stage); under Megatron's split it holds 6, the last stage of 24 blocks
    plans = single_plan(pp=4, dp=2)
    for stack, even_layers in (("torchtitan", 28), ("megatron-core", 24)):
        uneven = stage_memory_breakdown_bytes(_workload(30, stack), plans, "last")
        even = stage_memory_breakdown_bytes(_workload(even_layers, stack, uneven=False),
                                            plans, "last")
        assert uneven.keys() == even.keys()
        for name in uneven:
            assert uneven[name][0] == pytest.approx(even[name][0]), (stack, name)
    # and the first stage (8 blocks and the embedding) is the same in both
    first = [stage_memory_breakdown_bytes(_workload(30, stack), plans, "first")
             for stack in ("torchtitan", "megatron-core")]
    assert first[0]["weights"][0] == pytest.approx(first[1]["weights"][0])


def test_a_chunk_without_blocks_follows_the_split():
    # 9 blocks on 6 stages: remainder-last chunks of 2 run out after 5 (2,2,2,2,1,0);
    # torchtitan gives 2,2,2,1,1,1, refusing only more stages than blocks
    assert chunk_block_counts(9, 6, "remainder_last") == [2, 2, 2, 2, 1, 0]
    assert chunk_block_counts(9, 6, "extra_first") == [2, 2, 2, 1, 1, 1]
    assert leaves_empty_chunk(9, 6, "remainder_last")
    assert not leaves_empty_chunk(9, 6, "extra_first")
    assert leaves_empty_chunk(np.array([6, 7]), 7, "extra_first").tolist() == [True, False]
    plans = single_plan(pp=2, vpp=3, dp=2)
    messages = {stack: [v.rule for v in plan_violations(_workload(9, stack), plans, 4)
                        if v.violated[0]]
                for stack in ("torchtitan", "megatron-core")}
    assert not any("without blocks" in rule for rule in messages["torchtitan"])
    assert any("without blocks" in rule for rule in messages["megatron-core"])


def test_nemo_automodel_splits_as_its_hf_pipeline_splitter():
    # generate_hf_model_fqn_per_model_part(28, 61) (nemo_automodel/components/distributed/
    # pipelining/functional.py @ 01926a5c4): 61 // 28 = 2 a stage, 61 % 28 = 5 extra blocks to
    # stages 0-4, no weight for the embedding or head. 28 stages are the DeepSeek-V3 benchmark
    # config's (pp 4, layers_per_stage 2: ceil(61/2) = 31 rounded down to 28, vpp 7); rank r
    # holds stages r, r + 4, ..., r + 24 (stage_ids_this_rank, style 'loop'): rank 0 has
    # stages 0 and 4 of 3 blocks, ranks 1-3 one stage of 3, so 16, 15, 15, 15
    assert get_stack("nemo-automodel").uneven_stage_split == "extra_first"
    automodel = _workload(61, "nemo-automodel")
    assert chunk_block_counts(61, 28, "extra_first") == [3] * 5 + [2] * 23
    assert _rank_blocks(automodel, pp=4, vpp=7) == [16, 15, 15, 15]
    # Megatron's chunks of ceil(61/28) = 3 run out after 21 stages (3 x 20, 1, then 7 empty)
    assert leaves_empty_chunk(61, 28, "remainder_last")
    plans = single_plan(pp=4, vpp=7, dp=2)
    assert not any("without blocks" in v.rule
                   for v in plan_violations(automodel, plans, 8) if v.violated[0])


def test_megatron_first_and_last_stage_sizes_give_a_split_only_with_even_middle_ranks():
    """Megatron-Core's num_layers_in_first/last_pipeline_stage fix the end ranks' blocks,
    share the rest equally over the middle ranks and split each rank's blocks evenly over
    its virtual stages (TransformerConfig 'Uneven PP' checks, transformer_block.
    get_num_layers_to_build @ d98e8a64dd). By hand: 61 on pp 4 by torchtitan is 16, 15, 15,
    15 (first 16, the middle share 45 / 3 = 15); 63 is 16, 16, 16, 15 (last 15); 62 is 16,
    16, 15, 15, whose middle ranks differ; Megatron's own 61 is 16, 16, 16, 13 (last 13);
    pp 2 leaves no middle rank: 31, 30 is first 31. Interleaved, 61 on pp 4 x vpp 2 by
    torchtitan is chunks 8, 8, 8, 8, 8, 7, 7, 7: rank 0 holds 8 and 8, rank 1 8 and 7, so
    no rank-wide count gives it."""
    from mosaic.perf.pipeline_layout import first_last_stage_layers

    def split(layers: int, pp: int, vpp: int, stack_split: str):
        return first_last_stage_layers(chunk_block_counts(layers, pp * vpp, stack_split), pp)

    assert chunk_block_counts(61, 4, "extra_first") == [16, 15, 15, 15]
    assert split(61, 4, 1, "extra_first") == (16, None)
    assert split(63, 4, 1, "extra_first") == (None, 15)
    assert split(62, 4, 1, "extra_first") is None
    assert split(61, 4, 1, "remainder_last") == (None, 13)
    assert split(61, 2, 1, "extra_first") == (31, None)
    assert chunk_block_counts(61, 8, "extra_first") == [8, 8, 8, 8, 8, 7, 7, 7]
    assert split(61, 4, 2, "extra_first") is None
    # a rank whose virtual stages hold equal chunks: rank totals 2·8 = 16 first, 2·7 = 14
    # in the middle, the last 2·6 = 12
    assert first_last_stage_layers([8, 7, 7, 6, 8, 7, 7, 6], 4) == (16, 12)
    assert first_last_stage_layers([4, 4, 4, 4], 4) is None  # even: nothing to set
