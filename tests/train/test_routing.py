"""Algorithm 1 (Appendix A.3), the Eq. 19 controller, z-loss (Eq. 23) and balance losses."""

import math

import pytest

torch = pytest.importorskip("torch")

from mosaic.train.routing import (  # noqa: E402
    gumbel_noise,
    load_balancing_loss,
    load_statistics,
    proposal_size,
    route_lflb_gumbel,
    route_softmax_topk,
    sequence_aux_loss,
    update_bias,
    z_loss,
)


def _inputs(tokens=256, d=16, experts=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(tokens, d, generator=g)
    weight = torch.randn(experts, d, generator=g)
    return hidden, weight


def _route(hidden, weight, bias, top_k, seed=1, **kw):
    return route_lflb_gumbel(hidden, weight, bias, top_k,
                             generator=torch.Generator().manual_seed(seed), **kw)


@pytest.mark.parametrize(("experts", "top_k", "rho"), [(16, 2, 3), (16, 4, 12), (8, 1, 2)])
def test_k_distinct_experts_inside_a_proposal_of_size_min_rho_k_e(experts, top_k, rho):
    hidden, weight = _inputs(experts=experts)
    bias = torch.randn(experts) * 0.3
    out = _route(hidden, weight, bias, top_k, tau=0.5, rho=rho)
    m = min(rho * top_k, experts)
    assert proposal_size(top_k, experts, rho) == m
    assert out.proposal.shape == (hidden.shape[0], m)
    assert out.experts.shape == (hidden.shape[0], top_k)
    for row, proposal in zip(out.experts.tolist(), out.proposal.tolist(), strict=True):
        assert len(set(row)) == top_k
        assert set(row) <= set(proposal)
        assert len(set(proposal)) == m
    assert torch.equal(out.counts, torch.bincount(out.experts.flatten(), minlength=experts))
    assert int(out.counts.sum()) == hidden.shape[0] * top_k


def test_gates_are_clean_scores_renormalised_over_the_selection():
    hidden, weight = _inputs()
    out = _route(hidden, weight, torch.randn(16) * 0.2, 4, tau=0.3)
    clean = torch.sigmoid(hidden @ (weight / weight.norm(dim=1, keepdim=True)).t())
    picked = clean.gather(1, out.experts)
    torch.testing.assert_close(out.gates, picked / picked.sum(1, keepdim=True))
    torch.testing.assert_close(out.gates.sum(1), torch.ones(hidden.shape[0]))
    torch.testing.assert_close(out.scores, clean)


def test_router_rows_are_normalised_to_c_r():
    hidden, weight = _inputs()
    scaled = _route(hidden, weight * torch.linspace(0.1, 9, 16)[:, None], torch.zeros(16), 2)
    plain = _route(hidden, weight, torch.zeros(16), 2)
    assert torch.equal(scaled.experts, plain.experts)  # row norms cannot matter
    twice = _route(hidden, weight, torch.zeros(16), 2, router_norm=2.0)
    torch.testing.assert_close(twice.logits, 2 * plain.logits)


def test_centred_noise_has_zero_mean_per_expert_and_drives_the_proposal():
    hidden, weight = _inputs(tokens=64)
    noise = gumbel_noise((64, 16), torch.Generator().manual_seed(7), torch.device("cpu"))
    assert abs(float(noise.mean()) - 0.5772) < 0.1  # Euler-Mascheroni: E[Gumbel(0,1)]
    centred = noise - noise.mean(0, keepdim=True)
    assert float(centred.mean(0).abs().max()) < 1e-6
    tau, top_k, rho = 0.05, 2, 3
    out = _route(hidden, weight, torch.zeros(16), top_k, seed=7, tau=tau, rho=rho)
    logits = hidden @ (weight / weight.norm(dim=1, keepdim=True)).t()
    expected = torch.topk(torch.nn.functional.logsigmoid(logits) + tau * centred, 6).indices
    assert torch.equal(out.proposal, expected)


def test_bias_changes_selection_but_not_the_gate_formula():
    hidden, weight = _inputs()
    no_bias = _route(hidden, weight, torch.zeros(16), 2, rho=12)  # M = E: proposal is all
    bias = torch.zeros(16)
    bias[5] = 10.0
    biased = _route(hidden, weight, bias, 2, rho=12)
    assert (biased.experts == 5).any(dim=1).all()  # the bias wins a slot for every token
    assert not torch.equal(no_bias.experts, biased.experts)
    clean = biased.scores.gather(1, biased.experts)
    torch.testing.assert_close(biased.gates, clean / clean.sum(1, keepdim=True))
    torch.testing.assert_close(biased.scores, no_bias.scores)  # scores exclude the bias
    shifted = _route(hidden, weight, torch.full((16,), 3.0), 2, rho=12)
    assert torch.equal(shifted.experts, no_bias.experts)  # only relative bias matters


def test_bias_acts_only_inside_the_proposal():
    hidden, weight = _inputs()
    bias = torch.zeros(16)
    bias[0] = 100.0
    out = _route(hidden, weight, bias, 1, tau=0.0, rho=2)  # proposal: clean top-2
    clean_top2 = torch.topk(out.scores, 2).indices
    has_zero = (clean_top2 == 0).any(1)
    assert torch.equal(out.experts[:, 0] == 0, has_zero)
    assert has_zero.any() and not has_zero.all()


def test_gumbel_max_selection_probability_matches_eq_22():
    # Uncentred, M = K = 1: P(b over a) = sigmoid(log(s'_b / s'_a) / tau) (Appendix A.3).
    tokens = 40000
    weight = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    hidden = torch.tensor([[0.4, -0.2]]).repeat(tokens, 1)
    tau = 0.5
    out = _route(hidden, weight, torch.zeros(2), 1, tau=tau, rho=1, center_noise=False)
    s = torch.sigmoid(torch.tensor([0.4, -0.2]))
    expected = 1 / (1 + math.exp(-math.log(float(s[1] / s[0])) / tau))
    observed = float((out.experts[:, 0] == 1).float().mean())
    assert abs(observed - expected) < 4 * math.sqrt(expected * (1 - expected) / tokens)


def test_tau_zero_is_deterministic_clean_top_m_then_biased_top_k():
    hidden, weight = _inputs()
    a = _route(hidden, weight, torch.zeros(16), 2, seed=1, tau=0.0)
    b = _route(hidden, weight, torch.zeros(16), 2, seed=2, tau=0.0)
    assert torch.equal(a.experts, b.experts)
    assert torch.equal(a.experts.sort(1).values, torch.topk(a.scores, 2).indices.sort(1).values)


def test_controller_update_matches_eq_19_by_hand():
    bias = torch.zeros(2)
    update_bias(bias, torch.tensor([3, 1]), mu_b=1e-3, eps=1e-4)
    # n̄ = 2, violation (-1, +1), RMS sqrt(1 + 1e-4): expert 0 down, expert 1 up.
    step = 1e-3 / math.sqrt(1 + 1e-4)
    torch.testing.assert_close(bias, torch.tensor([-step, step]))
    bias = torch.tensor([0.5, 0.5, 0.5])
    update_bias(bias, torch.tensor([2, 2, 2]), mu_b=1e-3, eps=1e-4)
    torch.testing.assert_close(bias, torch.zeros(3))  # balanced: no change, then re-centred


def test_controller_drives_a_skewed_router_to_balance():
    d, experts, top_k, tokens = 16, 8, 2, 512
    g = torch.Generator().manual_seed(3)
    direction = torch.randn(d, generator=g)
    direction /= direction.norm()
    weight = torch.randn(experts, d, generator=g)
    weight[:2] += 6 * direction  # experts 0 and 1 align with the data's mean
    bias = torch.zeros(experts)

    def load(step):
        hidden = torch.randn(tokens, d, generator=torch.Generator().manual_seed(100 + step))
        hidden += 2 * direction
        out = route_lflb_gumbel(hidden, weight, bias, top_k,
                                generator=torch.Generator().manual_seed(step))
        return out.counts

    before = load_statistics(load(0))["load_max_over_mean"]
    for step in range(600):
        update_bias(bias, load(step), mu_b=1e-3, eps=1e-4)  # the paper's defaults
    after = [load_statistics(load(1000 + s))["load_max_over_mean"] for s in range(5)]
    assert before > 2.5
    assert max(after) < 1.25
    assert abs(float(bias.mean())) < 1e-6  # re-centred


def test_z_loss_by_hand():
    logits = torch.tensor([[0.0, math.log(3.0)], [0.0, 0.0]])
    expected = (math.log(4.0) ** 2 + math.log(2.0) ** 2) / 2
    assert float(z_loss(logits)) == pytest.approx(expected, rel=1e-6)


def test_sequence_aux_loss_by_hand():
    scores = torch.tensor([[0.8, 0.2], [0.6, 0.6]])
    # One sequence of 2 tokens, E = 2, K = 1; normalised scores (0.8, 0.2), (0.5, 0.5):
    # P = (0.65, 0.35). Balanced picks: f = (1, 1) -> 1.0; both to expert 0: f = (2, 0) -> 1.3.
    balanced = sequence_aux_loss(scores, torch.tensor([[0], [1]]), 2, seq_len=2)
    skewed = sequence_aux_loss(scores, torch.tensor([[0], [0]]), 2, seq_len=2)
    assert float(balanced) == pytest.approx(1.0)
    assert float(skewed) == pytest.approx(1.3)
    # Two sequences are averaged.
    both = sequence_aux_loss(scores.repeat(2, 1), torch.tensor([[0], [1], [0], [0]]), 2, 2)
    assert float(both) == pytest.approx(1.15)


def test_softmax_baseline_and_switch_loss():
    hidden, weight = _inputs(experts=4)
    out = route_softmax_topk(hidden, weight, 2)
    probs = torch.softmax(hidden @ weight.t(), dim=-1)
    assert torch.equal(out.experts, torch.topk(probs, 2).indices)
    torch.testing.assert_close(out.gates.sum(1), torch.ones(hidden.shape[0]))
    uniform = torch.full((8, 4), 0.25)
    assert float(load_balancing_loss(uniform, torch.tensor([4, 4, 4, 4]), 2)) == pytest.approx(1)
    # All tokens to expert 0 with its probability 1: E·f_0·P_0 = 4·1·1.
    onehot = torch.zeros(8, 4)
    onehot[:, 0] = 1
    assert float(load_balancing_loss(onehot, torch.tensor([8, 0, 0, 0]), 1)) == pytest.approx(4)


def test_load_statistics():
    stats = load_statistics(torch.tensor([10, 10, 0, 20]))
    assert stats == {"load_max_over_mean": 2.0, "empty_experts": 1, "starved_experts": 1}
