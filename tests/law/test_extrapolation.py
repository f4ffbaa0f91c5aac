"""Law extrapolation flags on crafted inputs: every input outside the fitted range, by how much."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from mosaic.cli.main import app
from mosaic.errors import MosaicInputError
from mosaic.law import default_law
from mosaic.law.extrapolation import (
    ExtrapolationFlag,
    data_support,
    extrapolation_document,
    extrapolation_flags,
    extrapolation_ratios,
)
from mosaic.law.fit import FitSettings, fit_law
from mosaic.law.forms import get_form
from mosaic.law.law import ScalingLaw
from mosaic.law.rundata import RunData

from .conftest import make_joint_runs

runner = CliRunner()
SUPPORT = {"n_total": [1e9, 1e10], "n_active": [1e8, 1e9], "tokens": [1e10, 1e11],
           "sparsity": [0.5, 0.9], "split_factor": [1, 4]}


def crafted_law(support=SUPPORT) -> ScalingLaw:
    base = default_law()
    provenance = {"source": "crafted for a test"}
    if support is not None:
        provenance["data_support"] = support
    return ScalingLaw(form=base.form, coefficients=base.coefficients, provenance=provenance)


def test_inside_the_range_has_no_flags():
    law = crafted_law()
    assert extrapolation_flags(law, n_total=1e9, n_active=1e9, tokens=5e10, sparsity=0.9,
                               split_factor=4) == []  # bounds are inside


def test_each_input_outside_gets_its_ratio():
    law = crafted_law()
    flags = {f.quantity: f for f in extrapolation_flags(
        law, n_total=1e11, n_active=1e7, tokens=2.5e9, sparsity=0.99, split_factor=8)}
    assert (flags["n_total"].direction, flags["n_total"].ratio) == ("above", pytest.approx(10))
    assert (flags["n_active"].direction, flags["n_active"].ratio) == ("below", pytest.approx(10))
    assert (flags["tokens"].direction, flags["tokens"].ratio) == ("below", pytest.approx(4))
    assert (flags["split_factor"].direction, flags["split_factor"].ratio) == \
        ("above", pytest.approx(2))
    # sparsity on the active fraction: 1 - 0.99 = 0.01 against 1 - 0.9 = 0.1 -> 10x
    assert (flags["sparsity"].direction, flags["sparsity"].ratio) == ("above", pytest.approx(10))
    assert "active fraction 1 - S is 10x below its range" in flags["sparsity"].message
    dense = extrapolation_flags(law, sparsity=0.0)[0]  # active fraction 1 vs at most 0.5
    assert (dense.direction, dense.ratio) == ("below", pytest.approx(2))


def test_vectorised_ratios_match_the_scalar_flags():
    law = crafted_law()
    n_total = np.array([5e8, 5e9, 3e10])
    ratios = extrapolation_ratios(law, n_total=n_total, sparsity=np.array([0.3, 0.7, 0.95]))
    np.testing.assert_allclose(ratios["n_total"], [2, 1, 3])
    np.testing.assert_allclose(ratios["sparsity"], [0.7 / 0.5, 1, 0.1 / 0.05])
    for i, value in enumerate(n_total):
        flags = extrapolation_flags(law, n_total=float(value))
        assert (flags[0].ratio if flags else 1.0) == pytest.approx(ratios["n_total"][i])


def test_a_law_without_a_range_says_so():
    law = crafted_law(support=None)
    assert data_support(law) is None and extrapolation_flags(law, n_total=1e20) == []
    assert extrapolation_document(law, [])["data_support"] is None


def test_builtin_law_carries_appendix_c_range():
    support = data_support(default_law())
    assert support["n_active"] == (0.104e9, 2.72e9) and support["tokens"] == (2.88e9, 56.38e9)


def test_fit_records_the_range_of_its_runs():
    runs, _ = make_joint_runs(noise=0.0, n_runs=40)
    result = fit_law(runs, get_form("joint"), FitSettings(starts=8, n_polished=1, seed=0))
    support = data_support(result.law)
    assert support["n_total"] == (runs.n_total.min(), runs.n_total.max())
    assert support["tokens"] == (runs.tokens.min(), runs.tokens.max())
    sparsity = 1 - runs.n_active / runs.n_total
    assert support["sparsity"] == pytest.approx((sparsity.min(), sparsity.max()))


def test_law_predict_and_optimum_flag_in_json_and_tables(tmp_path):
    path = tmp_path / "law.json"
    crafted_law().save(path)
    result = runner.invoke(app, ["law", "predict", "--law", str(path), "--n-total", "1e11",
                                 "--sparsity", "0.8", "--tokens", "5e10", "--split-factor", "2",
                                 "--json"])
    assert result.exit_code == 0, result.output
    block = json.loads(result.stdout)["extrapolation"]
    assert block["extrapolating"] and block["data_support"]["tokens"] == [1e10, 1e11]
    # n_total 10x above; n_active = 1e11 · 0.2 = 2e10 is 20x above; the rest inside
    assert {f["quantity"]: round(f["ratio"], 6) for f in block["flags"]} == \
        {"n_total": 10.0, "n_active": 20.0}
    table = runner.invoke(app, ["law", "predict", "--law", str(path), "--n-total", "5e9",
                                "--sparsity", "0.8", "--tokens", "5e12", "--split-factor", "2"])
    assert "EXTRAPOLATING" in table.stdout and "tokens 5e+12 is 50x above" in table.stdout
    optimum = runner.invoke(app, ["law", "optimum", "--compute", "1e24", "--json"])
    assert optimum.exit_code == 0, optimum.output
    doc = json.loads(optimum.stdout)
    flags = {f["quantity"]: f["ratio"] for f in doc["extrapolation"]["flags"]}
    assert flags["tokens"] == pytest.approx(doc["tokens"] / 56.38e9)
    inside = runner.invoke(app, ["law", "predict", "--n-total", "1e10", "--sparsity", "0.9",
                                 "--tokens", "2e10", "--split-factor", "2"])
    assert "none: every input is inside the fitted range" in inside.stdout


def test_a_value_just_outside_the_range_says_by_how_much():
    """0.4% above the range reads as a percentage, not '1x above'."""
    flag = ExtrapolationFlag(quantity="n_active", value=2.73e9, low=1e8, high=2.72e9,
                             direction="above", ratio=2.73e9 / 2.72e9)
    assert "is 0.37% above the fitted range" in flag.message
    near = ExtrapolationFlag(quantity="tokens", value=1.004e11, low=1e9, high=1e11,
                             direction="above", ratio=1.004)
    assert "is 0.4% above" in near.message  # (under 0.1% out, no flag: EDGE_TOLERANCE)


def test_a_rounding_past_the_edge_is_no_extrapolation():
    """A trial saw 'tokens_per_param ... is 0.018% below the fitted range' for a point on a
    fitted run's own value; past 0.1% it is flagged."""
    from mosaic.law.extrapolation import extrapolation_flags

    law = default_law()
    low, _ = law.provenance["data_support"]["tokens"]
    assert extrapolation_flags(law, tokens=low * (1 - 1.8e-4)) == []
    (flag,) = extrapolation_flags(law, tokens=low * 0.99)
    assert flag.direction == "below" and "1% below" in flag.message


def test_tokens_per_active_parameter_beyond_the_runs_is_flagged():
    """Table 4's own configuration (1.42 T tokens on 14.52 B active) trains 97.8 tokens per
    active parameter, beyond the paper's runs' 10.8-70 (Table 6); a fit records the ratio's
    range of its own runs, D / N_act, or D / N without active counts."""
    from mosaic.law import default_law
    from mosaic.law.extrapolation import extrapolation_flags, support_of_runs

    flags = {f.quantity: f for f in extrapolation_flags(
        default_law(), n_total=327.2e9, n_active=14.52e9, tokens=1.42e12, sparsity=0.9556,
        split_factor=4)}
    ratio = flags["tokens_per_param"]
    assert ratio.value == pytest.approx(1.42e12 / 14.52e9)
    assert ratio.ratio == pytest.approx(1.42e12 / 14.52e9 / 70)
    assert "tokens_per_param" not in {f.quantity for f in extrapolation_flags(
        default_law(), n_total=10e9, n_active=1e9, tokens=40e9, sparsity=0.9, split_factor=4)}
    support = support_of_runs(np.array([1e9, 2e9]), np.array([20e9, 100e9]),
                              n_active=np.array([1e8, 1e9]))
    assert support["tokens_per_param"] == [100.0, 200.0]
    dense = support_of_runs(np.array([1e9, 2e9]), np.array([20e9, 100e9]))
    assert dense["tokens_per_param"] == [20.0, 50.0]


def test_a_law_of_another_tokenizer_is_flagged_by_vocabulary():
    """A law fitted on byte-level runs (vocab 256) scores a 50,257-token grid in other units
    (a trial planned with one, unflagged): runs that record their vocabulary give the law a
    vocab range, and a model of another vocabulary is flagged; the same vocabulary is not."""
    runs, _ = make_joint_runs(noise=0.0, n_runs=40)
    runs = RunData(n_total=runs.n_total, tokens=runs.tokens, loss=runs.loss,
                   n_active=runs.n_active, split_factor=runs.split_factor,
                   extra={"vocab": np.full(runs.n_runs, 256.0)})
    law = fit_law(runs, get_form("joint"), FitSettings(starts=8, n_polished=1, seed=0)).law
    assert data_support(law)["vocab"] == (256.0, 256.0)
    (flag,) = extrapolation_flags(law, vocab=50257)
    assert flag.quantity == "vocab" and flag.ratio == pytest.approx(50257 / 256)
    assert flag.message == ("vocabulary 50,257 against the runs' 256: the law's loss is in "
                            "nats per token of their tokenizer, not comparable")
    assert extrapolation_flags(law, vocab=256) == []
    assert extrapolation_flags(crafted_law(), vocab=50257) == []  # no vocab recorded


def test_an_empty_vocab_column_reads_as_absent():
    """runs.csv of result files older than the column has it empty throughout."""
    import pandas as pd

    frame = pd.DataFrame({"n_total": [1e6, 2e6], "tokens": [1e8, 2e8], "loss": [3.0, 2.9],
                          "vocab": [None, None]})
    assert "vocab" not in RunData.from_frame(frame).extra


def test_a_ladder_resumed_across_the_vocab_column_still_fits_and_mixed_ones_do_not():
    """Rungs finished before the column have it empty (a review: the table was refused);
    the runs that record it give the law its vocabulary. Two vocabularies in one table are
    losses in two units: refused."""
    import pandas as pd

    frame = pd.DataFrame({"n_total": [1e6, 2e6, 4e6], "tokens": [1e8, 2e8, 4e8],
                          "loss": [3.0, 2.9, 2.8], "vocab": [None, 256, 256]})
    data = RunData.from_frame(frame)
    assert list(data.recorded_vocab) == [256.0]
    frame["vocab"] = [256, 50257, None]
    with pytest.raises(MosaicInputError, match=r"runs of 2 vocabularies \(256, 50257\)"):
        RunData.from_frame(frame)
