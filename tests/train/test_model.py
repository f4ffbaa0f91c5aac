"""The trainer's model: counts equal `mosaic arch`, Appendix A.1 init, dropless experts."""

import itertools
import math

import pytest

torch = pytest.importorskip("torch")

from mosaic.arch import Geometry, MoEConfig, count_parameters  # noqa: E402
from mosaic.train.config import LadderModel, RoutingConfig, ladder_rung_geometry  # noqa: E402
from mosaic.train.model import (  # noqa: E402
    INIT_STD,
    MoETransformer,
    count_model_parameters,
    grouped_mm_supported,
    residual_init_std,
)

LADDER_GRID = list(itertools.product((1, 2), (4, 8), (1, 2), (1, 2, 4)))


def _assert_counts_equal(geometry):
    model = MoETransformer(geometry)
    counted = count_model_parameters(model)
    expected = count_parameters(geometry)
    assert counted["n_total"] == expected.n_total
    assert counted["n_active"] == expected.n_active
    assert counted["n_embedding"] == expected.n_embedding
    every = sum(p.numel() for p in model.parameters())
    assert every == expected.n_total_with_embedding


@pytest.mark.parametrize(("q", "experts", "top_k", "split"), LADDER_GRID)
def test_counts_equal_mosaic_arch_over_a_ladder_grid(q, experts, top_k, split):
    rung = LadderModel(q=q, experts=experts, top_k=top_k, split_factor=split, head_dim=8,
                       kv_heads=2)
    _assert_counts_equal(ladder_rung_geometry(rung, vocab=97))


@pytest.mark.parametrize(
    "geometry",
    [
        Geometry(layers=3, d_model=32, heads=4, kv_heads=4, head_dim=8, ffn=48, vocab=50,
                 attention="mha"),  # dense MHA
        Geometry(layers=3, d_model=32, heads=4, kv_heads=2, head_dim=12, ffn=48, vocab=50,
                 gated_attention=True, norm="rmsnorm",
                 moe=MoEConfig(experts=6, top_k=3, expert_ffn=16, shared_experts=2,
                               shared_expert_ffn=24, dense_layers=1, moe_every=2)),
        Geometry(layers=2, d_model=16, heads=2, kv_heads=1, head_dim=8, ffn=40, vocab=64,
                 tied_embeddings=True,
                 moe=MoEConfig(experts=4, top_k=1, expert_ffn=10, shared_experts=0)),
    ],
    ids=["dense-mha", "gated-rms-moe-every-2", "tied-no-shared"],
)
def test_counts_equal_mosaic_arch_for_other_geometries(geometry):
    _assert_counts_equal(geometry)


def test_ladder_rung_at_paper_width_is_mosaic_ladder_geometry():
    from mosaic.arch import ladder_geometry

    rung = LadderModel(q=2, experts=16, top_k=2, split_factor=4)
    assert ladder_rung_geometry(rung, vocab=50257) == ladder_geometry(2, 16, 2, 4)


def test_initialisation_follows_appendix_a1():
    rung = LadderModel(q=2, experts=8, top_k=2, head_dim=32, kv_heads=8)
    geometry = ladder_rung_geometry(rung, vocab=512)
    model = MoETransformer(geometry)
    depth_std = residual_init_std(geometry.layers)
    assert depth_std == pytest.approx(0.006 / math.sqrt(16))
    moe = model.moe_layers[0]
    block = model.blocks[1]
    for tensor, std in [(model.embed.weight, INIT_STD), (model.lm_head.weight, INIT_STD),
                        (block.attn.q_proj.weight, INIT_STD), (moe.router.weight, INIT_STD),
                        (moe.routed.w1, INIT_STD), (moe.routed.w2, depth_std),
                        (block.attn.o_proj.weight, depth_std),
                        (model.blocks[0].ffn.w2.weight, depth_std),
                        (moe.shared[0].w2.weight, depth_std)]:
        assert float(tensor.detach().std()) == pytest.approx(std, rel=0.05)
        assert abs(float(tensor.detach().mean())) < std / 10
    assert torch.all(block.attn_norm.weight == 1) and torch.all(block.attn_norm.bias == 0)
    assert torch.all(moe.bias == 0)


def _tiny(compute="auto", routing=None, gated=False):
    torch.manual_seed(0)
    rung = LadderModel(q=1, experts=8, top_k=2, split_factor=2, head_dim=8, kv_heads=2,
                       gated_attention=gated)
    return MoETransformer(ladder_rung_geometry(rung, vocab=64), routing, compute)


def test_grouped_mm_and_per_expert_loop_agree():
    grouped, loop = _tiny("grouped_mm"), _tiny("loop")
    assert grouped_mm_supported(torch.device("cpu"), torch.float32, 32, 40)
    tokens = torch.randint(0, 64, (3, 16), generator=torch.Generator().manual_seed(1))
    outputs = []
    for model in (grouped, loop):
        for layer in model.moe_layers:
            layer.generator = torch.Generator().manual_seed(5)
        logits, _ = model(tokens)
        logits.square().mean().backward()
        outputs.append((logits, model.moe_layers[0].routed.w2.grad, model.embed.weight.grad))
    for a, b in zip(*outputs, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_moe_layer_is_dropless_gate_weighted_sum_plus_shared_expert():
    model = _tiny("grouped_mm", gated=True)
    layer = model.moe_layers[0]
    x = torch.randn(2, 8, 32, generator=torch.Generator().manual_seed(2))
    layer.generator = torch.Generator().manual_seed(9)
    out, aux = layer(x)
    layer.generator = torch.Generator().manual_seed(9)
    routed = layer.route(x.reshape(-1, 32))
    e = layer.routed
    expected = []
    for t, token in enumerate(x.reshape(-1, 32)):
        total = layer.shared[0](token)
        for k in range(2):
            i = int(routed.experts[t, k])
            h = torch.nn.functional.silu(e.w1[i] @ token) * (e.w3[i] @ token)
            total = total + routed.gates[t, k] * (e.w2[i] @ h)
        expected.append(total)
    torch.testing.assert_close(out.reshape(-1, 32), torch.stack(expected), rtol=1e-5,
                               atol=1e-6)
    assert int(aux.counts.sum()) == 16 * 2  # every (token, expert) pair computed


def test_softmax_baseline_model_runs_and_routes_by_softmax():
    model = _tiny(routing=RoutingConfig(kind="softmax_topk"))
    logits, aux = model(torch.randint(0, 64, (2, 8)))
    assert logits.shape == (2, 8, 64)
    assert len(aux) == 3 and all(float(a.balance_loss.detach()) >= 1.0 - 1e-5 for a in aux)


def test_causal_model_ignores_future_tokens():
    model = _tiny()
    tokens = torch.randint(0, 64, (1, 12), generator=torch.Generator().manual_seed(3))
    changed = tokens.clone()
    changed[0, 8:] = (changed[0, 8:] + 1) % 64
    for layer in model.moe_layers:
        layer.routing = RoutingConfig(tau=0.0)  # no noise: deterministic routing
    a, _ = model(tokens)
    b, _ = model(changed)
    torch.testing.assert_close(a[0, :8], b[0, :8])
