"""A law is fitted only to more distinct runs than it has coefficients, by `mosaic law fit`
and `mosaic ladder fit` alike; repeated rows do not count."""

import pandas as pd
import pytest
from typer.testing import CliRunner

from mosaic.cli.main import app
from mosaic.errors import MosaicInputError
from mosaic.law.forms import get_form
from mosaic.law.rundata import RunData
from mosaic.law.validation import check_fittable, distinct_runs, fit_with_holdout

ROWS = [(1e8, 5e7, 1e9, 1, 3.2), (2e8, 5e7, 2e9, 1, 3.0)]


def _frame(copies: int) -> pd.DataFrame:
    return pd.DataFrame([row for row in ROWS for _ in range(copies)],
                        columns=["n_total", "n_active", "tokens", "split_factor", "loss"])


def test_repeated_rows_are_one_run():
    runs = RunData.from_frame(_frame(6), source="dup.csv")
    assert runs.n_runs == 12 and distinct_runs(runs) == 2
    joint = get_form("joint")  # 11 coefficients: 12 rows would pass a row count
    with pytest.raises(MosaicInputError, match=r"2 distinct run\(s\) \(12 rows, 10 repeating "
                                               r"another\) for the joint form's 11"):
        check_fittable(runs, joint)


def test_ladder_fit_refuses_what_law_fit_refuses(tmp_path):
    _frame(1).to_csv(tmp_path / "runs.csv", index=False)
    runner = CliRunner()
    for command in (["ladder", "fit", str(tmp_path), "--out", str(tmp_path / "law.json")],
                    ["law", "fit", str(tmp_path / "runs.csv")]):
        result = runner.invoke(app, command)
        assert result.exit_code == 2, result.output
        assert "2 distinct run(s) for the joint form's 11 coefficients" in result.output
    assert not (tmp_path / "law.json").exists()
    missing = runner.invoke(app, ["ladder", "fit", str(tmp_path / "nope"), "--out", "x.json"])
    assert missing.exit_code == 2 and "does not exist" in missing.output


def test_runs_that_all_share_one_loss_are_refused():
    frame = pd.DataFrame({"n_total": [1e8 * (i + 1) for i in range(12)],
                          "tokens": [1e10] * 12, "loss": [3.0] * 12})
    runs = RunData.from_frame(frame, source="flat.csv")
    with pytest.raises(MosaicInputError, match="every run has the same loss"):
        check_fittable(runs, get_form("chinchilla"))


def test_a_missing_column_is_named_before_the_run_count():
    """A misspelt split_factor column (ignored as unknown) leaves the joint form without
    its G: that is the error, not the number of runs (found by a new-user trial)."""
    frame = _frame(1).rename(columns={"split_factor": "split_fator"})
    runs = RunData.from_frame(frame, source="typo.csv")
    with pytest.raises(MosaicInputError, match=r"form 'joint' needs column\(s\) "
                                               r"\['split_factor'\]"):
        check_fittable(runs, get_form("joint"))


def test_the_fitted_runs_are_counted_after_the_holdout():
    """Twelve distinct runs pass the joint form's count, but a holdout of 0.5 fits six of
    them to 11 coefficients: refused (a trial got R^2 = -40 and exit 0)."""
    frame = pd.DataFrame({"n_total": [1e8 * (i + 1) for i in range(12)],
                          "sparsity": [0.5 + 0.03 * i for i in range(12)],
                          "tokens": [1e10 * (1 + i % 3) for i in range(12)],
                          "split_factor": [1] * 12,
                          "loss": [3.0 - 0.05 * i for i in range(12)]})
    runs = RunData.from_frame(frame, source="twelve.csv")
    joint = get_form("joint")
    check_fittable(runs, joint)
    with pytest.raises(MosaicInputError, match=r"holding out 6 of 12 runs \(holdout 0.5\) "
                                               r"leaves too little .*6 distinct run\(s\) for "
                                               r"the joint form's 11"):
        fit_with_holdout(runs, joint, holdout_fraction=0.5)


def test_ladder_fit_takes_one_split_factor_and_law_fit_names_unbalanced_rungs(tmp_path):
    """A two-G ladder: chinchilla (no G term) is refused without --split-factor and fits the
    one G it names; `law fit` on the same runs.csv fits every row but names the rung whose
    routers collapsed (a trial found both silent or refused)."""
    rows = [{"name": f"r{i}", "n_total": n, "n_active": n / 4, "tokens": d,
             "split_factor": g, "loss": 1.5 + 400 / n ** 0.34 + 410 / d ** 0.28,
             "starved_experts": 3.0 if i == 0 else 0.0}
            for i, (n, d, g) in enumerate((n, d, g) for g in (1, 2) for n in (1e6, 3e6, 1e7)
                                          for d in (1e8, 3e8, 1e9))]
    pd.DataFrame(rows).to_csv(tmp_path / "runs.csv", index=False)
    runner = CliRunner()
    base = ["ladder", "fit", str(tmp_path), "--out", str(tmp_path / "law.json"), "--form",
            "chinchilla", "--holdout", "0", "--starts", "64", "--refine", "2"]
    refused = runner.invoke(app, base)
    assert refused.exit_code == 2 and "split-factor" in refused.output
    one_g = runner.invoke(app, [*base, "--split-factor", "2", "--json"])
    assert one_g.exit_code == 0, one_g.output
    law_fit = runner.invoke(app, ["law", "fit", str(tmp_path / "runs.csv"), "--form",
                                  "chinchilla", "--split-factor", "1", "--holdout", "0",
                                  "--starts", "64", "--refine", "2"])
    assert law_fit.exit_code == 0, law_fit.output
    assert "1 rung(s)" in law_fit.stderr and "r0" in law_fit.stderr
    assert "`law fit` fits them anyway" in law_fit.stderr
    assert "- (nothing held out)" in law_fit.stdout and "nan" not in law_fit.stdout
    other_g = runner.invoke(app, ["law", "fit", str(tmp_path / "runs.csv"), "--form",
                                  "chinchilla", "--split-factor", "2", "--holdout", "0",
                                  "--starts", "64", "--refine", "2"])
    assert other_g.exit_code == 0 and "fits them anyway" not in other_g.stderr  # r0: G = 1
