"""The global batch as a decision variable (issue 10 §2): searched jointly with the layout,
never above the batch-size rule's bound, and the pick equals searching each fixed batch."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from typer.testing import CliRunner

from mosaic.cli.main import app
from mosaic.errors import MosaicInputError
from mosaic.plan import Envelope, SearchSpace, resolve_system, search
from mosaic.plan.batch import RULES, parse_batch_rule, parse_global_batch, search_batch

SPACE = SearchSpace(q=(4, 6, 8), experts=(16, 64), top_k=(2,), split_factor=(4,))
BATCHES = (256, 512, 1024, 2048, 4096)


@pytest.fixture(scope="module")
def four_nodes() -> Envelope:
    return Envelope(resolve_system("B200"), n_nodes=4, days=5.0)


def deepseek_bound_tokens(n_active: float, tokens: float) -> float:
    """DeepSeek LLM (arXiv:2401.02954) Eq. 1 by hand: B_opt = 0.2920·C^0.3271, C = 6·N·D."""
    return 0.2920 * (6.0 * n_active * tokens) ** 0.3271


def test_the_rules_by_hand():
    c = np.array([1e20, 1e22])
    np.testing.assert_allclose(RULES["deepseek"].bound_tokens(c, np.ones(2)),
                               [0.2920 * 1e20**0.3271, 0.2920 * 1e22**0.3271])
    # Kaplan Eq. 1.4 at L = 2 nats: 2e8 / 2^(1/0.21) = 7.37e6 tokens.
    assert RULES["kaplan"].bound_tokens(c, np.array([2.0, 2.0]))[0] == pytest.approx(
        2e8 / 2 ** (1 / 0.21))
    assert parse_batch_rule("tokens:1e6").bound_tokens(c, c)[1] == 1e6
    assert parse_global_batch("256:4096") == BATCHES
    assert parse_global_batch("512:1500") == (512, 1024)
    assert parse_global_batch("1024") == (1024,)
    for bad in ("4096:256", "x", "0", "auto:3", "3_2"):  # int_from_text: "3_2" is not 32
        with pytest.raises(MosaicInputError):
            parse_global_batch(bad)
    with pytest.raises(MosaicInputError, match="allowed values"):
        parse_batch_rule("mccandlish")


def test_batch_rule_tokens_take_the_count_suffixes_of_the_other_token_options():
    """tokens:4M is 4e6 tokens per step, as --unique-tokens 5T is 5e12 tokens."""
    c = np.array([1e20])
    assert parse_batch_rule("tokens:4M").bound_tokens(c, c)[0] == 4e6
    assert parse_batch_rule("tokens:4.2k").fixed_tokens == 4200.0
    with pytest.raises(MosaicInputError, match="tokens:N needs a number of tokens per step"):
        parse_batch_rule("tokens:lots")
    with pytest.raises(MosaicInputError):
        parse_batch_rule("tokens:0")


def test_chosen_batches_respect_the_bound_and_equal_fixed_batch_searches(
        four_nodes, law, calibration):
    result, choice = search_batch(four_nodes, SPACE, law, calibration, BATCHES,
                                  RULES["deepseek"], workers=1)
    fixed = {b: search(replace(four_nodes, global_batch=b), SPACE, law, calibration,
                       workers=1) for b in BATCHES}
    assert choice.candidates == BATCHES
    picked = set()
    for row in result.ranking:
        c = result.candidate(int(row))
        bound = deepseek_bound_tokens(c["n_active"], c["tokens"])
        assert c["batch_bound_tokens"] == pytest.approx(bound, rel=1e-12)
        assert c["global_batch"] * four_nodes.seq_len <= bound
        # By hand: every batch whose own tokens keep it under its own bound; most tokens
        # wins, ties (the TPP cap) go to the smaller batch.
        admissible = [(fixed[b].tokens[row], -b) for b in BATCHES
                      if fixed[b].feasible[row] and b * four_nodes.seq_len
                      <= deepseek_bound_tokens(fixed[b].grid.n_active[row],
                                               fixed[b].tokens[row])]
        tokens, minus_batch = max(admissible)
        assert c["global_batch"] == -minus_batch
        assert c["tokens"] == pytest.approx(tokens, rel=1e-12)
        assert c["loss"] == pytest.approx(fixed[-minus_batch].loss[row], rel=1e-12)
        picked.add(c["global_batch"])
    assert len(picked) > 1  # the fixture exercises both the cap tie and a larger batch
    # A larger batch the bound refuses would have bought throughput: it exists here.
    best = result.optimum_index
    over = [b for b in BATCHES if b > result.candidate(best)["global_batch"]
            and fixed[b].feasible[best]]
    assert over and max(fixed[b].throughput.tokens_per_s[best] for b in over) \
        > result.throughput.tokens_per_s[best]


def test_a_bound_below_every_batch_leaves_nothing_trainable(four_nodes, law, calibration):
    result, _ = search_batch(four_nodes, SPACE, law, calibration, (256, 512),
                             parse_batch_rule("tokens:1e5"), workers=1)
    assert result.optimum_index is None
    assert all("batch bound" in reason for reason in result.reasons)


def test_fixed_batch_is_the_default_and_unchanged(four_nodes, law, calibration):
    result = search(four_nodes, SPACE, law, calibration, workers=1)
    c = result.candidate(result.optimum_index)
    assert c["global_batch"] == 1024 and "batch_bound_tokens" not in c
    assert result.global_batch is None


def test_cli_reports_the_batch_and_its_bound():
    args = ["plan", "--q", "4,6", "--experts", "16", "--top-k", "2", "--split-factor", "4",
            "--nodes", "4", "--days", "5", "--global-batch", "256:1024", "--batch-rule",
            "kaplan", "--workers", "1", "--json"]
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 0, out.output
    document = json.loads(out.output)
    assert document["batch"]["mode"] == "search"
    assert document["batch"]["candidates"] == [256, 512, 1024]
    assert document["batch"]["rule"]["name"] == "kaplan"
    optimum = document["optimum"]
    assert optimum["global_batch"] in (256, 512, 1024)
    assert optimum["batch_bound_tokens"] == pytest.approx(
        2e8 / optimum["loss"] ** (1 / 0.21), rel=1e-12)
    assert document["envelope"]["global_batch"] == optimum["global_batch"]
    out = CliRunner().invoke(app, [*args[:-1], "--versus", "default"])
    assert out.exit_code == 2 and "fixed batch" in out.output
