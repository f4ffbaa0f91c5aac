"""Hand-computed counts, FLOPs, breakdowns and validation of geometries."""

import numpy as np
import pytest

from mosaic.arch import (
    Geometry,
    MoEConfig,
    attention_flops_per_token,
    count_parameters,
    enumerate_ladder_grid,
    ladder_geometry,
    layer_breakdown,
    model_flops_per_token,
)
from mosaic.errors import MosaicInputError


def small_moe(**moe_overrides):
    moe = dict(experts=4, top_k=2, expert_ffn=8, shared_experts=1, dense_layers=1)
    moe.update(moe_overrides)
    return Geometry(
        layers=3,
        d_model=16,
        heads=4,
        kv_heads=2,
        head_dim=4,
        ffn=32,
        vocab=100,
        norm="rmsnorm",
        moe=MoEConfig(**moe),
    )


def test_hand_counted_small_moe():
    counts = count_parameters(small_moe())
    attention = 16 * 16 + 2 * 16 * 2 * 4 + 16 * 16  # Q, K+V (2 KV heads of 4), O
    norms = 2 * 16
    expert = 3 * 16 * 8
    dense_ffn = 3 * 16 * 32
    router = 4 * 16
    backbone = 3 * (attention + norms) + 16 + dense_ffn
    assert counts.n_total == backbone + 2 * (4 * expert + expert + router)
    assert counts.n_active == backbone + 2 * (2 * expert + expert + router)
    assert counts.n_total_with_embedding == counts.n_total + 2 * 100 * 16
    assert counts.routers == 2 * router


def test_tied_embeddings_count_once():
    tied = count_parameters(ladder_geometry(4)).n_embedding
    geometry = ladder_geometry(4)
    untied_vocab_d = geometry.vocab * geometry.d_model
    assert tied == 2 * untied_vocab_d
    from dataclasses import replace

    assert count_parameters(replace(geometry, tied_embeddings=True)).n_embedding == untied_vocab_d


def test_moe_every_other_layer_and_breakdown_sums():
    geometry = small_moe(dense_layers=0, moe_every=2)
    assert [geometry.is_moe_layer(i) for i in range(3)] == [True, False, True]
    rows = layer_breakdown(geometry)
    counts = count_parameters(geometry)
    assert sum(r.total for r in rows) + 16 == counts.n_total  # + final norm
    assert sum(r.active for r in rows) + 16 == counts.n_active


def test_model_flops_is_six_n_active():
    counts = count_parameters(ladder_geometry(8, 64, 2, 4))
    assert model_flops_per_token(counts) == 6 * counts.n_active


def test_attention_flops_hand_computed():
    geometry = ladder_geometry(4)  # 16 layers, 16 heads of 128
    seq = 2048
    # PaLM (Appendix B): full attention costs 12·L·H·Q·T per token for training.
    assert attention_flops_per_token(geometry, seq, causal=False) == 12 * 16 * 16 * 128 * seq
    causal = attention_flops_per_token(geometry, seq, causal=True)
    assert causal == pytest.approx(12 * 16 * 16 * 128 * (seq + 1) / 2)


def test_split_factor_and_dense_geometry():
    assert ladder_geometry(8, 128, 2, 4).split_factor == 4
    dense = count_parameters(ladder_geometry(8))
    assert dense.n_total == dense.n_active
    assert float(dense.sparsity) == 0.0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(heads=6, kv_heads=4), "must divide model.heads"),
        (dict(layers=-2), "model.layers must be a positive integer"),
        (dict(moe=MoEConfig(experts=2, top_k=2, expert_ffn=8, dense_layers=9)), "dense_layers"),
    ],
)
def test_invalid_geometries_name_the_field(kwargs, message):
    base = dict(layers=3, d_model=16, heads=4, kv_heads=2, head_dim=4, ffn=32)
    with pytest.raises(MosaicInputError, match=message):
        Geometry(**(base | kwargs))


def test_top_k_above_experts_rejected():
    with pytest.raises(MosaicInputError, match="top_k"):
        MoEConfig(experts=2, top_k=3, expert_ffn=8)


def test_grid_matches_scalar_path_and_guards():
    grid = enumerate_ladder_grid([4, 8], [4, 32, 128], [1, 2, 8], [1, 3, 4], s_min=0.7)
    assert len(grid) > 0
    assert (grid.top_k <= grid.experts).all()
    assert (grid.sparsity >= 0.7).all()
    assert set(np.unique(grid.split_factor)) <= {1, 4}  # G=3 does not divide d_ff=2.5·d
    for row in range(len(grid)):
        counts = count_parameters(grid.geometry(row))
        assert grid.n_total[row] == counts.n_total
        assert grid.n_active[row] == counts.n_active
        assert grid.sparsity[row] == pytest.approx(float(counts.sparsity), rel=1e-15)


def test_grid_row_count_by_hand():
    # q=4: d_ff=5120. E in {4, 8}, K in {2, 8}, G in {1, 4}; K<=E removes (E=4, K=8) twice.
    grid = enumerate_ladder_grid([4], [4, 8], [2, 8], [1, 4])
    assert len(grid) == 2 * 2 * 2 - 2


def test_empty_grid_axis_rejected():
    with pytest.raises(MosaicInputError, match="experts is empty"):
        enumerate_ladder_grid([4], [], [1], [1])


def test_an_odd_ladder_seed_shares_four_kv_heads_in_every_path():
    """q = 3 (the paper's sweep, Appendix C) has 12 query heads, which 8 KV heads do not
    divide: the ladder takes gcd(12, 8) = 4 KV heads, in the scalar geometry, the grid and the
    trainer's rung alike (the planner refused odd q with a message about model.kv_heads)."""
    from mosaic.arch.ladder import ladder_geometry

    geometry = ladder_geometry(3, 8, 1, 1)
    assert (geometry.heads, geometry.kv_heads) == (12, 4)
    grid = enumerate_ladder_grid([3, 7], [8], [1], [1])
    for row in range(len(grid)):
        assert grid.geometry(row).kv_heads == 4
        assert grid.n_total[row] == count_parameters(grid.geometry(row)).n_total


def test_attention_weight_tensors_follow_the_published_layouts():
    """GQA holds Q, K, V and output (4); DeepSeek-V3's MLA holds q down, q norm, q up, kv down,
    kv norm, kv up and output (7: modeling_deepseek DeepseekV3Attention's q_a_proj, q_a_layernorm,
    q_b_proj, kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj); without a query LoRA
    (DeepSeek-V2-Lite, Moonlight) one q_proj replaces the three query tensors (5)."""
    from mosaic.arch import MLAConfig
    from mosaic.arch.counts import attention_weight_tensors

    def mla(q_lora_rank):
        return Geometry(layers=2, d_model=64, heads=4, kv_heads=4, head_dim=16, ffn=128,
                        vocab=100, attention="mla", norm="rmsnorm",
                        mla=MLAConfig(kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8,
                                      v_head_dim=16, q_lora_rank=q_lora_rank))

    assert attention_weight_tensors(small_moe()) == 4
    assert attention_weight_tensors(mla(48)) == 7
    assert attention_weight_tensors(mla(None)) == 5
