"""Router load balance in training (issue: the tiny ladder's routers collapsed to one
expert, load max/mean 15.98 of a possible E/K = 16, 14 of 16 experts empty).

Cause: with no optim.lr the trainer took Eq. 17 far below the compute range it was fitted
on (C_model = 1.7e10 FLOPs here, the paper's smallest run is 1.8e18): 0.03. At that rate the
residual stream turns token-independent within a few steps, every token reaches the router
with the same hidden state, and the one bias per expert of Eq. 18 can only move the whole
batch from expert to expert (Eq. 19); on this synthetic job the old default gave a mean
max/mean load of 14.7 over the last 10 steps.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from mosaic.train.config import train_config_from_mapping  # noqa: E402
from mosaic.train.routing import route_lflb_gumbel, route_softmax_topk  # noqa: E402
from mosaic.train.schedule import (  # noqa: E402
    EQ17_MIN_C_MODEL_FLOPS,
    default_peak_lr,
    eq17_peak_lr,
)
from mosaic.train.trainer import Trainer  # noqa: E402

EXPERTS, TOP_K, STEPS = 16, 1, 40


def _job() -> dict:
    # q = 1 rung at head width 8 (4 blocks, 3 MoE layers), E = 16, K = 1, synthetic
    # tokens, the paper's routing defaults (tau 0.01, rho 12, mu_b 1e-3, z 1e-4, seq 1e-3)
    # and no optim.lr: the trainer's default learning rate.
    return {
        "ladder": {"q": 1, "experts": EXPERTS, "top_k": TOP_K, "head_dim": 8, "kv_heads": 2},
        "data": {"format": "synthetic", "vocab": 256},
        "optim": {"warmup_tokens": 4096},
        "run": {"tokens": STEPS * 1024, "seq_len": 64, "global_batch_seqs": 16,
                "micro_batch_seqs": 16, "cpu_threads": 1, "seed": 3},
    }


def test_load_stays_balanced_over_training(tmp_path):
    trainer = Trainer(train_config_from_mapping(_job(), "test"), tmp_path)
    ratios, empty, common = [], [], []
    for _ in range(STEPS):
        router = trainer.train_step()["router"]
        ratios.append(router["load_max_over_mean"])
        empty.append(router["empty_experts"])
        common.append(router["input_common"])
    last = slice(STEPS - 10, STEPS)
    # At random initialisation 1024 tokens over 16 experts give max/mean ~3-4; a collapsed
    # router gives E/K = 16 with 15 empty experts (the 15.98 and 14).
    assert np.mean(ratios[last]) < 4.0, ratios[last]
    assert np.max(ratios[last]) < 6.0, ratios[last]
    assert np.mean(empty[last]) <= 1.0, empty[last]
    assert all(0.0 <= c <= 1.0 for row in common for c in row)  # reported per layer


def test_common_mode_fraction_by_hand():
    from mosaic.train.model import common_mode_fraction

    row = torch.tensor([[3.0, 4.0]])
    assert float(common_mode_fraction(row.repeat(5, 1))) == pytest.approx(1.0)
    assert float(common_mode_fraction(torch.cat([row, -row]))) == pytest.approx(0.0)
    # h = (1, 0) and (1, 2): mean (1, 1), |mean|^2 = 2, mean |h|^2 = (1 + 5) / 2 = 3.
    assert float(common_mode_fraction(torch.tensor([[1.0, 0.0], [1.0, 2.0]]))) == (
        pytest.approx(2 / 3))


def test_default_lr_is_eq17_inside_its_fitted_range_only():
    assert pytest.approx(1.797e18, rel=1e-3) == EQ17_MIN_C_MODEL_FLOPS
    lr, source = default_peak_lr(1e8, 1e10)  # C = 6e18: inside
    assert (lr, source) == (eq17_peak_lr(1e8, 1e10), "Eq. 17")
    lr, source = default_peak_lr(1e5, 3e4)  # C = 1.8e10: a tiny ladder rung
    assert lr == pytest.approx(3.30 * 1.797e18 ** -0.199, rel=1e-3)  # 7.7e-4
    assert lr == pytest.approx(7.7e-4, rel=0.01)
    assert eq17_peak_lr(1e5, 3e4) > 35 * lr and "optim.lr" in source  # 0.030 vs 7.7e-4


@pytest.mark.parametrize("route", ["lflb", "softmax"])
def test_router_is_fp32_under_bf16_autocast(route):
    generator = torch.Generator().manual_seed(0)
    hidden = torch.randn(64, 32, generator=generator)
    weight = torch.randn(8, 32, generator=generator)

    def run():
        if route == "softmax":
            return route_softmax_topk(hidden, weight, 2)
        return route_lflb_gumbel(hidden, weight, torch.zeros(8), 2,
                                 generator=torch.Generator().manual_seed(1))

    reference = run()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed = run()
    assert mixed.logits.dtype == torch.float32
    assert torch.equal(mixed.logits, reference.logits)  # not rounded to bf16
    assert torch.equal(mixed.experts, reference.experts)


@pytest.mark.parametrize(("lr", "unbalanced"), [(None, False), (0.03, True)])
def test_result_records_starved_experts_of_the_final_steps(tmp_path, lr, unbalanced):
    # The collapse, reproduced: the old Eq. 17 rate 0.03 on this job herds each
    # batch onto one expert (starving E - K = 15 per layer); the default rate keeps the
    # load near even. result.json carries the mean starved count per MoE layer over the
    # last 10% of steps (paper App. C.2's definition), which the ladder flags at >= 1.
    from mosaic.train.router_health import is_unbalanced

    job = _job()
    if lr is not None:
        job["optim"]["lr"] = lr
    result = Trainer(train_config_from_mapping(job, "test"), tmp_path).run()
    assert result.starved_experts is not None and 0 <= result.starved_experts <= EXPERTS - 1
    assert is_unbalanced(result.starved_experts) is unbalanced, result.starved_experts
