"""`mosaic law predict | fit | optimum`: JSON payloads, law files, one-line errors."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from mosaic.cli.main import app
from mosaic.law import EPOCH_HUBER_FIT, ScalingLaw
from mosaic.plan import load_samples

from .test_law import table4_counts

runner = CliRunner()


def run_json(*args: str) -> dict:
    result = runner.invoke(app, ["law", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def write_runs(path, runs) -> None:
    columns = {"n_total": runs.n_total, "tokens": runs.tokens, "loss": runs.loss}
    if runs.n_active is not None:
        columns |= {"n_active": runs.n_active, "split_factor": runs.split_factor}
    pd.DataFrame(columns).to_csv(path, index=False)


def test_predict_table4():
    n_total, n_active = table4_counts()
    args = ["--n-total", str(n_total), "--sparsity", str(1 - n_active / n_total)]
    payload = run_json("predict", *args, "--tokens", "1.42e12", "--split-factor", "4")
    assert payload["loss"] == pytest.approx(1.3898, abs=5e-4)  # Table 4
    assert payload["n_total"] == n_total and payload["split_factor"] == 4.0
    human = runner.invoke(app, ["law", "predict", *args, "--tokens", "1.42e12",
                                "--split-factor", "4"])  # fmt: skip
    assert human.exit_code == 0 and "predicted loss" in human.stdout
    # a model card's active count instead of S (Table 4: 327.2B total, 14.5B active)
    by_active = run_json("predict", "--n-total", str(n_total), "--n-active", str(n_active),
                         "--tokens", "1.42e12", "--split-factor", "4")
    assert by_active["sparsity"] == pytest.approx(1 - n_active / n_total)
    assert by_active["loss"] == pytest.approx(payload["loss"])


def test_fit_saves_a_law_that_predict_and_optimum_accept(tmp_path, joint_runs_factory):
    runs, _ = joint_runs_factory(noise=0.005, seed=3)
    data = tmp_path / "runs.csv"
    write_runs(data, runs)
    law_file = tmp_path / "law.json"
    payload = run_json(
        "fit", str(data), "--form", "joint", "--starts", "256", "--refine", "2",
        "--bootstrap", "4", "--seed", "5", "--out", str(law_file),
        "--samples-out", str(tmp_path / "samples.json"),
    )  # fmt: skip
    assert set(payload["coefficients"]) == {"a", "b", "c", "j", "e", "alpha", "beta", "lambda",
                                            "delta", "gamma", "eta"}  # fmt: skip
    assert set(payload["intervals"]["eta"]) == {"percentile", "bca"}
    metrics = payload["metrics"]
    assert {"rmse", "r2", "heldout_rmse", "n_runs", "n_heldout", "objective"} <= set(metrics)
    assert (metrics["n_runs"], metrics["n_heldout"]) == (152, 16)
    law = ScalingLaw.load(law_file)
    assert dict(law.coefficients) == payload["coefficients"]
    assert law.provenance["metrics"] == metrics
    predicted = run_json("predict", "--n-total", "1e10", "--sparsity", "0.9", "--tokens", "1e10",
                         "--split-factor", "2", "--law", str(law_file))  # fmt: skip
    assert predicted["loss"] == pytest.approx(float(law.predict(1e10, 1e10, 0.9, 2.0)))
    assert run_json("optimum", "--compute", "1e21", "--law", str(law_file))["sparsity"] > 0
    # The bootstrap samples feed `mosaic plan --bootstrap-samples`.
    samples = load_samples(tmp_path / "samples.json")
    assert samples.log_coefs.shape == (4, 11)
    # and `law predict --bootstrap-samples` (a trial: no prediction interval from the CLI):
    # the 5th and 95th percentiles of the loss under each sample, by hand
    ranged = run_json("predict", "--n-total", "1e10", "--sparsity", "0.9", "--tokens", "1e10",
                      "--split-factor", "2", "--law", str(law_file), "--bootstrap-samples",
                      str(tmp_path / "samples.json"))
    by_sample = [float(ScalingLaw(law.form, dict(zip(law.form.params, np.exp(c), strict=True)))
                       .predict(1e10, 1e10, 0.9, 2.0)) for c in samples.log_coefs]
    interval = ranged["loss_interval"]
    assert (interval["level"], interval["samples"], interval["samples_left_out"]) == (0.9, 4, 0)
    assert interval["low"] == pytest.approx(np.percentile(by_sample, 5), rel=1e-9)
    assert interval["high"] == pytest.approx(np.percentile(by_sample, 95), rel=1e-9)
    # `law optimum --bootstrap-samples`: Eq. 16 solved again under each sample
    from mosaic.law.optimum import compute_optimum

    optimum = run_json("optimum", "--compute", "1e21", "--law", str(law_file),
                       "--bootstrap-samples", str(tmp_path / "samples.json"))
    losses = [compute_optimum(ScalingLaw(law.form, dict(zip(law.form.params, np.exp(c),
                                                            strict=True))), 1e21).loss
              for c in samples.log_coefs]
    assert optimum["intervals"]["samples"] == 4
    assert optimum["intervals"]["loss"] == pytest.approx(
        [np.percentile(losses, 5), np.percentile(losses, 95)], rel=1e-9)


def test_samples_of_another_fit_are_refused_in_the_law_commands_own_words(tmp_path):
    """`law optimum` and `law predict` share the planner's samples check, whose error spoke
    of "the plan's law" (a trial); the law they were given is the one named."""
    from mosaic.law.law import default_law
    from mosaic.plan import LawSamples, save_samples

    law = default_law()
    shifted = law.log_coefs + 0.001
    save_samples(LawSamples(law.form, shifted + np.zeros((4, 1)), shifted),
                 tmp_path / "other.json")
    for args in (["optimum", "--compute", "1e21"],
                 ["predict", "--n-total", "1e10", "--sparsity", "0.9", "--tokens", "1e10",
                  "--split-factor", "2"]):
        result = runner.invoke(app, ["law", *args, "--bootstrap-samples",
                                     str(tmp_path / "other.json")])
        assert result.exit_code == 2
        assert "another fit than the law in use (11 of 11" in result.output
        assert "plan" not in result.output.split("(`mosaic law fit")[0]


def test_fit_per_g_on_one_stratum(tmp_path, joint_runs_factory):
    runs, _ = joint_runs_factory(noise=0.0)
    data = tmp_path / "runs.csv"
    write_runs(data, runs)
    payload = run_json("fit", str(data), "--form", "per-g", "--split-factor", "8",
                       "--starts", "512", "--refine", "2", "--holdout", "0")  # fmt: skip
    assert payload["metrics"]["n_runs"] == 38
    assert payload["metrics"]["heldout_rmse"] is None  # nothing held out


def test_fit_reproduces_epoch_from_the_command_line(tmp_path, epoch_runs):
    data = tmp_path / "epoch.csv"
    write_runs(data, epoch_runs)
    parity = tmp_path / "parity.csv"
    payload = run_json(
        "fit", str(data), "--form", "chinchilla", "--huber-delta", "1e-3", "--holdout", "0",
        "--scan", "8", "--parity", str(parity),
    )  # fmt: skip
    for name, value in EPOCH_HUBER_FIT.items():
        assert payload["coefficients"][name] == pytest.approx(value, rel=2e-3)
        assert payload["identifiability"][name]["verdict"] == "identified"
    table = pd.read_csv(parity)
    assert list(table.columns) == ["observed", "predicted", "held_out", "split_factor"]
    assert len(table) == 240 and not table["held_out"].any()


def test_optimum_json():
    payload = run_json("optimum", "--compute", "1e22", "--split-factor", "4", "--profile", "5")
    assert payload["sparsity"] == 0.981 and payload["at_boundary"] is True
    assert payload["lr"] == pytest.approx(3.30 * 1e22**-0.199)
    assert 6 * payload["n_active"] * payload["tokens"] == pytest.approx(1e22)
    assert len(payload["profile"]) == 5
    assert np.all(np.diff([row["loss"] for row in payload["profile"]]) < 0)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["predict", "--tokens", "1e10"], "missing --n-total"),
        (["predict", "--n-total", "-5", "--tokens", "1e10", "--sparsity", "0.9",
          "--split-factor", "4"], "--n-total: got -5.0; allowed: a number in"),
        (["predict", "--n-total", "1e9", "--tokens", "1e10", "--sparsity", "0.9"],
         "needs the split factor: give --split-factor"),
        (["fit", "runs.xlsx"], "unknown extension '.xlsx'"),
        (["fit", "absent.csv"], "does not exist"),
        (["fit", "runs.csv", "--form", "cubic"], "form must be one of"),
        (["optimum", "--compute", "1e21", "--law", "absent.json"], "does not exist"),
        (["optimum", "--compute", "1e21", "--s-max", "1.5"], "0 <= s_min <= s_max < 1"),
        # flags that were dropped without a word, and a default named as if given
        (["predict", "--n-total", "1e10", "--tokens", "1e11", "--sparsity", "0.9",
          "--split-factor", "4", "--experts", "8"], "--experts shapes a ladder geometry"),
        (["fit", "runs.csv", "--starts", "1"], "--refine (32) exceeds --starts (1)"),
        (["predict", "--n-total", "1e10", "--n-active", "2e10", "--tokens", "1e11"],
         "--n-active must satisfy 0 < N_act <= N_tot"),
        (["predict", "--n-total", "1e10", "--n-active", "1e9", "--sparsity", "0.9",
          "--tokens", "1e11"], "give --sparsity or --n-active, not both"),
        (["predict", "--q", "12", "--n-active", "1e9", "--tokens", "1e11"],
         "or counts (--n-total with --sparsity or --n-active), not both"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_and_exit_2(tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs.csv").write_text("n_total,tokens,loss\n1e9,1e10,2.5\n")
    result = runner.invoke(app, ["law", *args])
    assert result.exit_code == 2
    # One message (rich may wrap it at the terminal width), no traceback.
    assert result.stderr.startswith("error: ") and result.stderr.count("error:") == 1
    assert message in " ".join(result.stderr.split())
    assert "Traceback" not in result.output


def test_predict_from_a_geometry_gives_table4_loss():
    """Table 4: q=12, E=96, K=2, G=4 at 1.42 T tokens reaches loss 1.3898 (± 0.0005)."""
    by_seed = run_json("predict", "--q", "12", "--experts", "96", "--top-k", "2",
                       "--split-factor", "4", "--tokens", "1.42e12")
    assert by_seed["loss"] == pytest.approx(1.3898, abs=5e-4)
    assert round(by_seed["sparsity"], 3) == 0.956
    examples = Path(__file__).resolve().parents[2] / "examples"
    by_file = run_json("predict", "--arch", str(examples / "q12_moe.yaml"), "--tokens", "1.42e12")
    assert by_file["loss"] == by_seed["loss"]
    contradiction = runner.invoke(app, ["law", "predict", "--arch", str(examples / "q12_moe.yaml"),
                                        "--tokens", "1e12", "--split-factor", "2"])
    assert contradiction.exit_code == 2 and "contradicts" in contradiction.output


def test_predict_a_ladder_rung_at_its_grid_geometry():
    """`--q 2` of the tiny ladder (head width 8, 2 KV heads) was built at the paper's width
    128: 977 M parameters for the rung's 3.8 M (a trial). `--ladder FILE` builds the rung as
    `mosaic ladder run` does, and the law reads that rung's N_tot and S."""
    from mosaic.arch import count_parameters
    from mosaic.train.ladder import load_grid

    grid = Path(__file__).resolve().parents[2] / "examples" / "ladder_tiny.yaml"
    rung = next(job for job in load_grid(grid) if job.name == "q2_E16_K1_G1_D2.05e05")
    counts = count_parameters(rung.config.geometry())
    payload = run_json("predict", "--q", "2", "--experts", "16", "--top-k", "1",
                       "--split-factor", "1", "--tokens", "204800", "--ladder", str(grid))
    assert payload["n_total"] == float(counts.n_total) < 4e6
    assert payload["sparsity"] == pytest.approx(float(counts.sparsity), rel=1e-12)
    paper = run_json("predict", "--q", "2", "--experts", "16", "--top-k", "1",
                     "--split-factor", "1", "--tokens", "204800")  # the default: width 128
    assert paper["n_total"] > 100 * payload["n_total"]
    unnamed = runner.invoke(app, ["law", "predict", "--ladder", str(grid), "--tokens", "1e5"])
    assert unnamed.exit_code == 2 and "name it with --q" in unnamed.stderr


def test_optimum_flags_an_eq17_rate_below_its_fitted_range():
    """Eq. 17 at C = 1e12 FLOPs is 1.35e-2, an extrapolation far below the smallest run it
    was fitted on (C = 1.8e18, where the trainer holds it); the optimum says so (a trial)."""
    import json

    from typer.testing import CliRunner

    from mosaic.cli.main import app
    from mosaic.law.optimum import peak_learning_rate

    runner = CliRunner()
    small = json.loads(runner.invoke(app, ["law", "optimum", "--compute", "1e12",
                                           "--json"]).stdout)
    assert small["lr_extrapolated"] and small["lr"] == pytest.approx(
        float(peak_learning_rate(1e12)))
    assert not json.loads(runner.invoke(app, ["law", "optimum", "--compute", "1e22",
                                              "--json"]).stdout)["lr_extrapolated"]
    table = runner.invoke(app, ["law", "optimum", "--compute", "1e12"]).stdout
    assert "extrapolated: Eq. 17 was fitted down to C = 1.8e+18" in table


def test_optimum_refuses_a_split_factor_the_law_has_no_term_for(tmp_path):
    rng = np.random.default_rng(0)
    n_total = np.exp(rng.uniform(np.log(1e8), np.log(1e10), 24))
    tokens = np.exp(rng.uniform(np.log(1e9), np.log(1e11), 24))
    loss = 1.7 + 400 / n_total**0.34 + 410 / tokens**0.28
    runs = tmp_path / "runs.csv"
    runs.write_text("n_total,tokens,loss\n" + "".join(
        f"{n:.6g},{d:.6g},{x:.6g}\n" for n, d, x in zip(n_total, tokens, loss, strict=True)))
    law = tmp_path / "chinchilla.json"
    fitted = runner.invoke(app, ["law", "fit", str(runs), "--form", "chinchilla",
                                 "--out", str(law), "--starts", "64", "--refine", "2"])
    assert fitted.exit_code == 0, fitted.output
    result = runner.invoke(app, ["law", "optimum", "--compute", "1e22", "--law", str(law),
                                 "--split-factor", "4"])
    assert result.exit_code == 2
    assert "the law (chinchilla) has no G term" in " ".join(result.stderr.split())


def _chinchilla_law(tmp_path) -> Path:
    """A Chinchilla-form law fitted to Hoffmann et al.'s published law, 24 runs."""
    rng = np.random.default_rng(0)
    n_total = np.exp(rng.uniform(np.log(1e8), np.log(1e10), 24))
    tokens = np.exp(rng.uniform(np.log(1e9), np.log(1e11), 24))
    loss = 1.69 + 406.4 / n_total**0.34 + 410.7 / tokens**0.28
    runs = tmp_path / "runs.csv"
    pd.DataFrame({"n_total": n_total, "tokens": tokens, "loss": loss}).to_csv(runs, index=False)
    law = tmp_path / "chinchilla.json"
    fitted = runner.invoke(app, ["law", "fit", str(runs), "--form", "chinchilla", "--holdout",
                                 "0", "--out", str(law), "--starts", "64", "--refine", "2"])
    assert fitted.exit_code == 0, fitted.output
    return law


def test_a_dense_law_is_treated_as_dense_everywhere(tmp_path):
    """A Chinchilla law (a trial): plan failed after its search with "sparsity must be 0",
    though no sparsity was given; optimum called S* = 0 "on the bound" and ignored --s-min,
    --s-max and --profile; and it said nothing of the held-out error its fit never
    measured, which plan did."""
    law = _chinchilla_law(tmp_path)
    planned = runner.invoke(app, ["plan", "--law", str(law)])
    assert planned.exit_code == 2
    assert "is a dense law, with no sparsity term" in " ".join(planned.output.split())
    from mosaic.errors import MosaicWarning

    with pytest.warns(MosaicWarning, match="its fit held no run out"):
        best = runner.invoke(app, ["law", "optimum", "--compute", "1e21", "--law", str(law),
                                   "--json"])
    assert best.exit_code == 0, best.output
    payload = json.loads(best.stdout)
    assert payload["sparsity"] == 0.0 and payload["at_boundary"] is False
    # Hoffmann et al.'s law at 1e21 FLOPs: C = 6 N D holds at the optimum
    assert 6 * payload["n_total"] * payload["tokens"] == pytest.approx(1e21, rel=1e-6)
    for option, value in (("--profile", "4"), ("--s-max", "0.9"), ("--s-min", "0.5")):
        refused = runner.invoke(app, ["law", "optimum", "--compute", "1e21", "--law",
                                      str(law), option, value])
        assert refused.exit_code == 2, option
        assert f"{option}: the law (chinchilla) is dense" in refused.output


def test_a_dense_laws_optimum_intervals_have_no_sparsity_row(tmp_path):
    """The table says S* "- (dense law)"; its interval rows said "S* [0.0000, 0.0000]" under
    it (a review). L*, N_tot*, N_act* and D* keep theirs: Eq. 16 solved under each sample."""
    law = _chinchilla_law(tmp_path)
    samples = tmp_path / "samples.json"
    fitted = runner.invoke(app, ["law", "fit", str(tmp_path / "runs.csv"), "--form",
                                 "chinchilla", "--holdout", "0", "--out", str(law),
                                 "--starts", "64", "--refine", "2", "--bootstrap", "4",
                                 "--samples-out", str(samples)])
    assert fitted.exit_code == 0, fitted.output
    shown = runner.invoke(app, ["law", "optimum", "--compute", "1e21", "--law", str(law),
                                "--bootstrap-samples", str(samples)])
    assert shown.exit_code == 0, shown.output
    rows = [" ".join(line.split()) for line in shown.stdout.splitlines()]
    assert any("sparsity S* │ - (dense law)" in row for row in rows)
    labels = [row.split(":")[1].split("│")[0].strip() for row in rows
              if "90% interval (4 samples):" in row]
    assert labels == ["L*", "N_tot*", "N_act*", "D*"]


def test_optimum_defaults_to_a_split_factor_the_law_was_fitted_on(tmp_path):
    """A law fitted on G 1-2 was asked at the paper's G = 4 by default and flagged its own
    default as extrapolation (a trial): the default is now the fitted G nearest to 4; the
    built-in law (no recorded range) keeps 4. A budget below 1e12 FLOPs, a tiny ladder's,
    is accepted."""
    from dataclasses import replace

    from mosaic.law import default_law

    base = default_law()
    narrow = replace(base, provenance={**base.provenance,
                                       "data_support": {"split_factor": [1.0, 2.0]}})
    narrow.save(tmp_path / "narrow.json")
    fitted = run_json("optimum", "--compute", "1e11", "--law", str(tmp_path / "narrow.json"))
    assert fitted["split_factor"] == 2.0
    assert run_json("optimum", "--compute", "1e22")["split_factor"] == 4.0


def test_a_fit_that_explains_nothing_is_flagged(tmp_path):
    """Losses that rise with N and D (no law of the form describes them): the fit exits 0
    with R^2 <= 0, which now says so instead of passing as a law to plan with (a trial)."""
    rows = [{"n_total": n, "sparsity": s, "tokens": d, "split_factor": 4,
             "loss": 1.0 + 0.1 * np.log10(n / 1e8) + 0.1 * np.log10(d / 1e9)}
            for n in (1e8, 1e9, 1e10) for s in (0.5, 0.9) for d in (1e9, 1e10, 1e11)]
    data = tmp_path / "anti.csv"
    pd.DataFrame(rows).to_csv(data, index=False)
    result = runner.invoke(app, ["law", "fit", str(data), "--holdout", "0", "--starts", "32",
                                 "--refine", "4"])
    assert result.exit_code == 0, result.output
    assert "the law explains none of the runs' loss variance" in result.output


def test_law_fit_falls_back_to_no_holdout_as_ladder_fit_does(tmp_path):
    """12 runs of one G for the joint form's 11 coefficients: holding 10% out leaves 11,
    too few, so without --holdout every run is fitted, with a warning (a trial: `ladder fit`
    did this and `law fit` refused the same runs); an explicit --holdout is still refused."""
    from dataclasses import replace

    from .conftest import make_joint_runs

    runs, _ = make_joint_runs(noise=0.005, seed=1, n_runs=12)
    runs = replace(runs, split_factor=np.full(12, 4.0))  # one G stratum, as a ladder's
    data = tmp_path / "runs.csv"
    write_runs(data, runs)
    fitted = runner.invoke(app, ["law", "fit", str(data), "--form", "joint", "--starts", "64",
                                 "--refine", "2", "--json"])
    assert fitted.exit_code == 0, fitted.output
    assert json.loads(fitted.stdout)["metrics"]["n_heldout"] == 0
    assert "would leave too few for the joint form" in fitted.stderr
    explicit = runner.invoke(app, ["law", "fit", str(data), "--form", "joint", "--holdout",
                                   "0.1", "--starts", "64", "--refine", "2"])
    assert explicit.exit_code == 2 and "leaves too little to fit" in explicit.output


def test_a_model_files_split_factor_below_one_names_the_model_not_a_flag(tmp_path):
    """ffn: 1 beside 256-wide experts is G = 1/256; the error blamed --split-factor, a flag
    the user never gave (a fuzz trial)."""
    model = tmp_path / "model.yaml"
    model.write_text("model:\n  layers: 8\n  d_model: 1024\n  heads: 8\n  ffn: 1\n"
                     "  moe: {experts: 16, top_k: 2, expert_ffn: 256}\n")
    result = runner.invoke(app, ["law", "predict", "--arch", str(model), "--tokens", "1e12"])
    assert result.exit_code == 2
    assert "the model's split factor G = ffn / moe.expert_ffn = 1 / 256" in result.output
    assert "--split-factor" not in result.output


def test_every_missing_column_is_named_at_once_with_the_renames_it_needs(tmp_path):
    """A table with params, active_params and granularity learnt the names one error at a
    time (a trial): one line names all three and which of its columns to rename."""
    path = tmp_path / "mine.csv"
    pd.DataFrame({"params": [6e8, 1.2e9], "active_params": [1.5e8, 3e8],
                  "tokens": [1.5e9, 3e9], "loss": [2.7, 2.5], "granularity": [4, 4]}
                 ).to_csv(path, index=False)
    result = runner.invoke(app, ["law", "fit", str(path)])
    assert result.exit_code == 2
    text = " ".join(result.output.split())
    assert ("form 'joint' needs column(s) ['n_total', 'n_active or sparsity', "
            "'split_factor']") in text
    assert "rename params -> n_total, active_params -> n_active, granularity -> split_factor" \
        in text


def test_a_table_written_twice_is_fitted_with_a_warning(tmp_path, epoch_runs):
    """Epoch's 240 runs written twice fitted as '480 / 0 runs' without a word (a trial):
    each copy is one more run to the bootstrap."""
    data = tmp_path / "twice.csv"
    write_runs(data, epoch_runs)
    frame = pd.read_csv(data)
    pd.concat([frame, frame]).to_csv(data, index=False)
    result = runner.invoke(app, ["law", "fit", str(data), "--form", "chinchilla",
                                 "--holdout", "0", "--starts", "8", "--refine", "1"])
    assert result.exit_code == 0, result.output
    assert "warning: 240 of 480 rows repeat another row exactly" in " ".join(
        result.output.split())


def test_a_dense_form_on_sparse_runs_says_it_drops_their_sparsity(tmp_path):
    """An MoE table fitted as chinchilla read n_total alone, silently (a trial)."""
    data = tmp_path / "moe.csv"
    n_total = np.geomspace(1e8, 1e10, 8)
    pd.DataFrame({"n_total": n_total, "n_active": n_total / 4,
                  "tokens": 20 * n_total, "loss": 2 + 400 / n_total ** 0.3}
                 ).to_csv(data, index=False)
    result = runner.invoke(app, ["law", "fit", str(data), "--form", "chinchilla",
                                 "--holdout", "0", "--starts", "8", "--refine", "1"])
    assert "warning: 8 of 8 runs are sparse (n_active below n_total); form 'chinchilla' " \
        "has no sparsity term" in " ".join(result.output.split())


def test_the_prefactor_of_an_unidentified_term_is_labelled_as_its_exponent(tmp_path):
    """Runs all at one token count: beta is 'not identified', and so is B of B/D^beta (a
    trial saw B's interval called 'replicates pile on one value')."""
    data = tmp_path / "one_d.csv"
    n_total = np.geomspace(1e8, 1e10, 10)
    pd.DataFrame({"n_total": n_total, "tokens": 1.3e11,
                  "loss": 1.8 + 400 / n_total ** 0.34}).to_csv(data, index=False)
    result = runner.invoke(app, ["law", "fit", str(data), "--form", "chinchilla",
                                 "--holdout", "0", "--starts", "16", "--refine", "2",
                                 "--bootstrap", "20", "--out", str(tmp_path / "law.json")],
                           terminal_width=200)
    assert result.exit_code == 0, result.output
    # the file is written, and the planning commands' refusal said beside it (a review)
    assert ("warning: `mosaic plan`, `sweep` and `law optimum` will refuse this law: each trades"
            in " ".join(result.output.split()))
    rows = {line.split("│")[1].strip(): line for line in result.output.splitlines()
            if line.startswith("│")}
    for name in ("B", "beta", "E"):  # (E trades with the constant B/D^beta)
        assert "n/a (not identified: no run varies D)" in rows[name], rows[name]
    assert "not identified" not in rows["alpha"]
    # 20 resamples leave no BCa interval at 95% (each tail under one replicate): said so
    assert "n/a (too few resamples: --bootstrap 40 or more)" in rows["alpha"], rows["alpha"]


def test_a_loss_far_under_the_others_is_named_by_row(tmp_path, epoch_runs):
    """A trial's loss typed as 1e-6 in one row moved the fitted exponents tenfold with only a
    generic bound warning."""
    data = tmp_path / "typo.csv"
    write_runs(data, epoch_runs)
    frame = pd.read_csv(data)
    frame.loc[24, "loss"] = 1e-6
    frame.to_csv(data, index=False)
    args = ["law", "fit", str(data), "--form", "chinchilla", "--holdout", "0", "--starts", "8",
            "--refine", "1"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "warning: row(s) 25 (1e-06) have a loss under a tenth of the table's median" in text
    write_runs(data, epoch_runs)
    assert "under a tenth" not in runner.invoke(app, args).output


def test_fit_refuses_one_bootstrap_resample_before_the_fit(tmp_path, monkeypatch):
    """`--bootstrap 1` was refused by bootstrap_fit only after the point fit (minutes on a
    ladder), with 'at least 2' beside the option's stated 0..100000."""
    import mosaic.law.validation as validation

    def no_fit(*args, **kwargs):
        raise AssertionError("the fit ran before the bootstrap option was checked")

    monkeypatch.setattr(validation, "fit_with_holdout", no_fit)
    data = tmp_path / "runs.csv"
    data.write_text("n_total,tokens,loss\n" + "".join(
        f"{n:g},{t:g},{2 + 1e3 / n ** 0.3 + 1e3 / t ** 0.3:.5f}\n"
        for n in (1e8, 1e9, 1e10) for t in (1e10, 1e11, 1e12)))
    result = runner.invoke(app, ["law", "fit", str(data), "--form", "chinchilla",
                                 "--bootstrap", "1", "--json"])
    assert result.exit_code == 2
    error = result.stderr.strip().splitlines()[-1]
    assert error.startswith("error: --bootstrap: got 1") and "2..100000" in error, error
