"""The public scaling-law datasets as run tables `law fit` reads (`mosaic law convert`),
checked against what their sources state (../shared/research/data/*/SOURCE.txt)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from mosaic.cli.main import app
from mosaic.law import datasets
from mosaic.law.forms import get_form
from mosaic.law.law import ScalingLaw
from mosaic.law.rundata import load_run_data

from .conftest import EPOCH_CSV, REPO_ROOT

DATA = REPO_ROOT.parent / "shared/research/data"
CLARK_CSV = DATA / "clark2022-routing/curves.csv.gz"
MUENNIGHOFF_CSV = DATA / "muennighoff-datablations/datablations_parametric_fit_182runs.csv"
runner = CliRunner()


def _need(path):
    if not path.is_file():
        pytest.skip(f"public dataset not found at {path} (needs ../shared)")


def _huber_objective(runs, coefficients, delta=datasets.EPOCH_HUBER_DELTA):
    """Epoch's objective: summed Huber of log L_pred - log L_obs."""
    law = ScalingLaw(get_form("chinchilla"), dict(coefficients))
    residual = np.log(law.predict_runs(runs)) - np.log(runs.loss)
    small = np.abs(residual) <= delta
    return float(np.sum(np.where(small, 0.5 * residual**2,
                                 delta * (np.abs(residual) - 0.5 * delta))))


def test_epoch_table_and_its_fit_below_the_printed_estimates(epoch_runs):
    """240 rows (Epoch drop the 5 largest losses; 245 with --keep-all). The converged fit's
    summed Huber objective, 0.0010183, lies below the one at Besiroglu et al.'s printed
    estimates (E 1.8172, A 482.01, B 2085.43, alpha 0.3478, beta 0.3658): 0.0010228 by
    hand, the printed values being a rounded point of a flat valley, not its minimum."""
    table = datasets.epoch_chinchilla_table(EPOCH_CSV)
    assert len(table) == 240 and len(datasets.epoch_chinchilla_table(EPOCH_CSV, True)) == 245
    assert np.allclose(table["tokens"], epoch_runs.tokens)
    fitted = _huber_objective(epoch_runs, datasets.EPOCH_HUBER_FIT)
    printed = _huber_objective(epoch_runs, datasets.BESIROGLU_2024_PRINTED)
    assert fitted == pytest.approx(datasets.EPOCH_HUBER_OBJECTIVE, rel=3e-4)
    assert printed == pytest.approx(0.0010228, rel=1e-4) and printed > fitted


def test_clark_table_takes_each_runs_last_evaluation():
    """223 runs of ~130B tokens (SOURCE.txt: 250k steps x 256 x 2048, last evaluation at
    step 249000 for 221 runs); routers Dense, S-Base, RL-R, Hash; --router keeps one and
    the dense baselines."""
    _need(CLARK_CSV)
    table = datasets.clark_routing_table(CLARK_CSV)
    assert len(table) == 223
    assert int((table["tokens"] == 249_000 * 256 * 2048).sum()) == 221
    assert set(table["router_type"]) == set(datasets.CLARK_ROUTERS)
    # a dense run (of k-fold FLOPs or not) uses every parameter; a routed k = 1 run its
    # base model's (dense_parameter_count)
    dense = table[table["router_type"] == "Dense"]
    assert np.allclose(dense["n_active"], dense["n_total"]) and (dense["experts"] == 1).all()
    routed_k1 = table[(table["router_type"] != "Dense") & (table["top_k"] == 1)]
    assert (routed_k1["n_active"] < routed_k1["n_total"]).all()
    s_base = datasets.clark_routing_table(CLARK_CSV, router="S-Base")
    assert set(s_base["router_type"]) == {"Dense", "S-Base"}
    assert len(s_base) < len(table)


def test_clark_routed_top2_sees_its_base_and_one_more_expert_copy():
    """S-Base, 8 experts, k = 2 on the 25M base (27,279,360 parameters; 86,016,000 in all):
    a token sees the base plus one more copy of the expert block, (86.016M - 27.279M) / 7 =
    8.391M; that is the dense k = 2 run's whole model (35,672,064), which holds the base
    and exactly one such extra copy."""
    _need(CLARK_CSV)
    table = datasets.clark_routing_table(CLARK_CSV)
    dense_k2 = table[(table["router_type"] == "Dense") & (table["top_k"] == 2)
                     & np.isclose(table["n_total"], 35_672_064)]
    routed = table[(table["router_type"] == "S-Base") & (table["experts"] == 8)
                   & (table["top_k"] == 2) & np.isclose(table["n_total"], 86_016_000)]
    assert len(dense_k2) > 0 and len(routed) > 0
    per_copy = (86_016_000 - 27_279_360) / 7
    assert routed["n_active"].to_numpy() == pytest.approx(27_279_360 + per_copy)
    assert routed["n_active"].to_numpy() == pytest.approx(
        dense_k2["n_total"].to_numpy()[0], rel=1e-4)


def test_muennighoff_table_and_its_single_epoch_runs():
    """182 runs, 29 of them single-epoch (SOURCE.txt: D == U)."""
    _need(MUENNIGHOFF_CSV)
    table = datasets.muennighoff_table(MUENNIGHOFF_CSV)
    assert len(table) == 182 and int(datasets.repeats_data(table).sum()) == 153
    once = datasets.muennighoff_table(MUENNIGHOFF_CSV, single_epoch=True)
    assert len(once) == 29 and (once["tokens"] == once["unique_tokens"]).all()


def test_convert_writes_what_law_fit_reads_and_raw_files_get_a_hint(tmp_path):
    """A trial gave the published files to `law fit` as they are: each failed on missing
    columns or the .gz extension, with no way forward. Now the error says how to convert
    them, the converted table fits, and repeated data is named, not silently fitted."""
    _need(EPOCH_CSV)
    _need(MUENNIGHOFF_CSV)
    raw = runner.invoke(app, ["law", "fit", str(EPOCH_CSV)])
    assert raw.exit_code == 2
    assert "`mosaic law convert epoch FILE --out runs.csv`" in raw.output
    out = tmp_path / "epoch.csv"
    converted = runner.invoke(app, ["law", "convert", "epoch", str(EPOCH_CSV), "--out",
                                    str(out), "--json"])
    assert converted.exit_code == 0, converted.output
    assert json.loads(converted.stdout)["runs"] == 240
    assert load_run_data(out).n_runs == 240
    repeated = tmp_path / "muennighoff.csv"
    assert runner.invoke(app, ["law", "convert", "muennighoff", str(MUENNIGHOFF_CSV),
                               "--out", str(repeated)]).exit_code == 0
    fitted = runner.invoke(app, ["law", "fit", str(repeated), "--form", "chinchilla",
                                 "--starts", "64", "--refine", "4", "--json"])
    assert fitted.exit_code == 0, fitted.output
    assert "153 of 182 runs repeat their data" in fitted.stderr
    wrong = runner.invoke(app, ["law", "convert", "epoch", str(EPOCH_CSV), "--out",
                                str(tmp_path / "x.csv"), "--single-epoch"])
    assert wrong.exit_code == 2 and "applies to the muennighoff dataset" in wrong.output
    unknown = runner.invoke(app, ["law", "convert", "pile", str(EPOCH_CSV), "--out",
                                  str(tmp_path / "y.csv")])
    assert unknown.exit_code == 2 and "allowed: epoch, clark, muennighoff" in unknown.output


def test_a_bad_unique_tokens_cell_is_refused_and_an_empty_one_is_not_recorded(tmp_path):
    """A non-number or zero in unique_tokens crashed `law fit`'s repeated-data warning (a
    review), then was read as unknown, so that run got no warning (a trial: 'abc', -1):
    each is refused in one line naming its row, as the other count columns are; an empty
    cell is a run that did not record it, left out of the warning; the one real repeat
    (2e9 tokens of 1e9 unique: 2 epochs) is named."""
    rows = ["1e8,1e9,{cell},3.0\n", "2e8,2e9,1e9,2.9\n", "4e8,4e9,4e9,2.8\n",
            "8e8,8e9,8e9,2.7\n", "1.6e9,1.6e10,1.6e10,2.6\n", "3.2e9,3e10,3e10,2.5\n"]

    def fit(cell: str):
        table = tmp_path / "ut.csv"
        table.write_text("n_total,tokens,unique_tokens,loss\n" + rows[0].format(cell=cell)
                         + "".join(rows[1:]))
        return runner.invoke(app, ["law", "fit", str(table), "--form", "chinchilla",
                                   "--holdout", "0", "--starts", "64", "--refine", "2",
                                   "--json"])

    for cell, said in (("abc", "row 1: column 'unique_tokens' is 'abc', which is not a number"),
                       ("-1", "row 1: column 'unique_tokens' is -1; it must be a positive"),
                       ("0", "row 1: column 'unique_tokens' is 0; it must be a positive")):
        result = fit(cell)
        assert result.exit_code == 2, (cell, result.output)
        assert said in " ".join(result.output.split()), result.output
        assert len(result.output.strip().splitlines()) == 1
    result = fit("")
    assert result.exit_code == 0, result.output
    assert "1 of 6 runs repeat their data (up to 2.0 epochs)" in result.stderr


def test_convert_names_a_bad_cell_and_never_writes_nonsense(tmp_path):
    """A fuzz trial: a non-numeric cell and a file of two rows ended in tracebacks, and a
    size of 0 or a NaN loss were written on (tokens = inf). Each is one line naming the
    file, its line or row and column; nothing is written."""
    header = "x,y,color,Model Size,Training FLOP,hex_color,loss\n"
    def row(size: str = "1e9", loss: str = "2.5") -> str:
        return f"0,0,#fff,{size},1.2e20,#fff,{loss}\n"

    rows = [row(f"{n:.6g}", f"{2 + 1e9 / n:.6g}") for n in np.geomspace(1e8, 1e10, 8)]

    def convert(lines: list[str], *options: str) -> str:
        source, out = tmp_path / "epoch.csv", tmp_path / "out.csv"
        source.write_text(header + "".join(lines))
        result = runner.invoke(app, ["law", "convert", "epoch", str(source), "--out",
                                     str(out), *options])
        assert result.exit_code == 2 and not out.exists(), result.output
        return result.output

    assert "2 row(s); Epoch's analysis drops the 5 largest-loss rows" in convert(rows[:2])
    text = convert([*rows[:3], row(loss="abc"), *rows[4:]])
    assert "line 5, column 'loss': 'abc' is not a finite number" in text
    assert "line 2, column 'loss': 'nan' is not a finite number" in convert(
        [row(loss="nan"), *rows[1:]])
    text = convert([*rows[:5], row(size="0"), *rows[6:]], "--keep-all")
    assert "column 'n_total' is 0" in text
    assert "no rows in the Epoch Chinchilla CSV" in convert([])
