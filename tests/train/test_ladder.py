"""The ladder: grid parsing, runs.csv accepted by `mosaic law fit`, the law file for plan."""

import csv
import json
import warnings

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from mosaic.arch import count_parameters
from mosaic.errors import MosaicInputError, MosaicWarning
from mosaic.law.law import ScalingLaw
from mosaic.law.rundata import load_run_data
from mosaic.train.ladder import load_grid

from .conftest import CORPUS, REPO

RECIPE = {
    "data": {"path": str(CORPUS)},
    "routing": {"mu_b": 1e-2},
    "optim": {"warmup_tokens": 256, "lr": 1e-2},
    "run": {"seq_len": 32, "global_batch_seqs": 8, "micro_batch_seqs": 8,
            "checkpoint_every": 2, "cpu_threads": 1},
}


def _grid(tmp_path, ladder):
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump({"recipe": RECIPE, "ladder": ladder}))
    return path


def _app():
    from mosaic.cli.main import app

    return app


def test_grid_expands_the_admissible_product(tmp_path):
    path = _grid(tmp_path, {"head_dim": 8, "kv_heads": 2, "q": [1], "experts": [2, 4],
                            "top_k": [1, 4], "split_factor": [1, 3], "tokens": [512]})
    jobs = load_grid(path)
    # K=4 > E=2 is dropped; G=3 does not divide d_ff=80 and is dropped.
    assert sorted(j.name for j in jobs) == ["q1_E2_K1_G1_D512", "q1_E4_K1_G1_D512",
                                            "q1_E4_K4_G1_D512"]
    assert all(j.config.run.tokens == 512 for j in jobs)
    halved = load_grid(path, scale=0.5)
    assert all(j.config.run.tokens == 256 for j in halved)
    assert all(j.config.geometry().head_dim == 8 for j in halved)  # at least 8 wide
    # as many checkpoints a rung as at full scale (the recipe's every 2 steps, halved)
    assert all(j.config.run.checkpoint_every == 1 for j in halved)
    assert all(j.config.run.checkpoint_every == 2 for j in jobs)
    with pytest.raises(MosaicInputError, match="scale"):
        load_grid(path, scale=2)


def test_two_budgets_that_round_to_one_rung_name_are_refused(tmp_path):
    """Rungs are named with their budget to three digits: 512 and 512.4 tokens were both
    q1_E4_K1_G1_D512, and the second replaced the first without a word."""
    path = _grid(tmp_path, {"head_dim": 8, "kv_heads": 2, "q": [1], "experts": [4],
                            "top_k": [1], "split_factor": [1], "tokens": [512, 512.4]})
    with pytest.raises(MosaicInputError, match="both be named q1_E4_K1_G1_D512"):
        load_grid(path)
    same = _grid(tmp_path, {"head_dim": 8, "kv_heads": 2, "q": [1], "experts": [4],
                            "top_k": [1], "split_factor": [1], "tokens": [512],
                            "runs": [{"q": 1, "experts": 4, "top_k": 1, "split_factor": 1,
                                      "tokens": 512}]})
    assert [job.name for job in load_grid(same)] == ["q1_E4_K1_G1_D512"]  # one rung twice


def test_a_stated_rung_that_cannot_be_built_is_refused_not_skipped(tmp_path):
    """A runs: entry with K > E was dropped without a word (a trial); the grid's product
    still skips its inadmissible points, which nobody asked for one by one."""
    base = {"head_dim": 8, "kv_heads": 2, "q": [1], "experts": [4], "top_k": [1],
            "split_factor": [1], "tokens": [512]}
    bad = _grid(tmp_path, {**base, "runs": [{"q": 1, "experts": 2, "top_k": 4,
                                             "split_factor": 1, "tokens": 512}]})
    with pytest.raises(MosaicInputError, match=r"ladder.runs\[0\]: top_k \(4\) must not "
                       r"exceed experts \(2\)"):
        load_grid(bad)
    uneven = _grid(tmp_path, {**base, "runs": [{"q": 1, "experts": 4, "top_k": 1,
                                                "split_factor": 3, "tokens": 512}]})
    with pytest.raises(MosaicInputError, match="split factor"):
        load_grid(uneven)
    assert len(load_grid(_grid(tmp_path, {**base, "top_k": [1, 8]}))) == 1  # K=8 > E=4 skipped


def test_a_grid_value_that_gives_no_rung_is_named(tmp_path):
    """split_factor [1, 3] on q = 1 rungs (d = 4·8 = 32, d_ff = 2.5·32 = 80, not a multiple
    of 3) lost every G = 3 point without a word, 8 of a trial's 19 rungs; a value that some
    points keep (K = 4 with E = 4, though not with E = 2) is the grid's ordinary pruning."""
    base = {"head_dim": 8, "kv_heads": 2, "q": [1], "experts": [4], "top_k": [1],
            "split_factor": [1], "tokens": [512]}
    with pytest.warns(MosaicWarning, match=r"ladder.split_factor 3 \(G not dividing d_ff\)"):
        jobs = load_grid(_grid(tmp_path, {**base, "split_factor": [1, 3]}))
    assert [job.name for job in jobs] == ["q1_E4_K1_G1_D512"]
    with pytest.warns(MosaicWarning, match=r"ladder.top_k 8 \(K > E\)"):
        load_grid(_grid(tmp_path, {**base, "top_k": [1, 8]}))
    with warnings.catch_warnings():
        warnings.simplefilter("error", MosaicWarning)
        jobs = load_grid(_grid(tmp_path, {**base, "experts": [2, 4], "top_k": [1, 4]}))
    assert sorted(job.name for job in jobs) == ["q1_E2_K1_G1_D512", "q1_E4_K1_G1_D512",
                                                "q1_E4_K4_G1_D512"]
    # a stated run with G = 3 (q = 3: d_ff = 2.5·96 = 240, a multiple of 3) is a G = 3 rung:
    # the value gives one, so it is not warned of (a review)
    stated = {"q": 3, "experts": 4, "top_k": 1, "split_factor": 3, "tokens": 512}
    with warnings.catch_warnings():
        warnings.simplefilter("error", MosaicWarning)
        jobs = load_grid(_grid(tmp_path, {**base, "split_factor": [1, 3], "runs": [stated]}))
    assert sorted(job.name for job in jobs) == ["q1_E4_K1_G1_D512", "q3_E4_K1_G3_D512"]


def test_paper_width_grid_uses_the_arch_ladder(tmp_path):
    from mosaic.arch import ladder_geometry

    path = _grid(tmp_path, {"q": [2], "experts": [16], "top_k": [2], "split_factor": [4],
                            "tokens": [1e9]})
    (job,) = load_grid(path)
    geometry = job.config.geometry()
    expected = ladder_geometry(2, 16, 2, 4, vocab=256)
    assert count_parameters(geometry).n_total == count_parameters(expected).n_total


def test_ladder_run_writes_a_csv_law_fit_reads_and_fit_writes_a_law(tmp_path):
    pytest.importorskip("torch")
    grid = _grid(tmp_path, {"head_dim": 8, "kv_heads": 2, "q": [1], "experts": [4, 8],
                            "top_k": [1, 2], "split_factor": [1], "tokens": [512, 768]})
    runner = CliRunner()
    out = tmp_path / "ladder"
    done = runner.invoke(_app(), ["ladder", "run", str(grid), "--out", str(out)])
    assert done.exit_code == 0, done.output
    runs = load_run_data(out / "runs.csv")
    assert runs.n_runs == 8  # Chinchilla's 5 coefficients need at least 6 (joint: 12)
    rows = list(csv.DictReader((out / "runs.csv").open()))
    for row in rows:
        result = json.loads((out / "runs" / row["name"] / "result.json").read_text())
        assert float(row["loss"]) == result["smoothed_loss"]
        assert int(row["n_total"]) == result["n_total"]
        assert float(row["tokens"]) in (2 * 8 * 32, 3 * 8 * 32)  # whole steps
    # Law fit reads it exactly as `mosaic law fit` does.
    law_fit = runner.invoke(_app(), ["law", "fit", str(out / "runs.csv"), "--holdout", "0",
                                     "--form", "chinchilla", "--starts", "64", "--refine",
                                     "2", "--json"])
    assert law_fit.exit_code == 0, law_fit.output
    # A second run skips finished rungs and rewrites the same CSV.
    before = (out / "runs.csv").read_text()
    again = runner.invoke(_app(), ["ladder", "run", str(grid), "--out", str(out),
                                   "--only", rows[0]["name"]])
    assert again.exit_code == 0 and "skipped" in again.output
    assert (out / "runs.csv").read_text() == before
    # Two or three steps at mu_b 1e-2 leave most routers herded (docs/train.md): each row
    # carries its starved experts per layer, and the fit keeps them only when asked to.
    assert all(0 <= float(row["starved_experts"]) < 8 for row in rows)
    law_path = tmp_path / "law.json"
    fit = runner.invoke(_app(), ["ladder", "fit", str(out), "--out", str(law_path),
                                 "--form", "chinchilla", "--holdout", "0", "--starts", "64",
                                 "--refine", "2", "--keep-unbalanced"])
    assert fit.exit_code == 0, fit.output
    law = ScalingLaw.load(law_path)
    assert law.form.name == "chinchilla"
    assert law.coefficients == json.loads(law_fit.stdout)["coefficients"]  # same fitter
    support = law.provenance["data_support"]  # extrapolation flags in law predict / plan
    assert support["tokens"] == [2 * 8 * 32, 3 * 8 * 32]
    observed = runs.loss
    predicted = law.predict_runs(runs)
    assert abs(predicted - observed).max() < 0.5


def test_ladder_list_and_errors(tmp_path):
    grid = _grid(tmp_path, {"head_dim": 8, "kv_heads": 2, "q": [1], "experts": [4],
                            "top_k": [2], "tokens": [512]})
    runner = CliRunner()
    listed = runner.invoke(_app(), ["ladder", "run", str(grid), "--out", str(tmp_path / "o"),
                                    "--list", "--json"])
    assert listed.exit_code == 0
    assert json.loads(listed.output)["rungs"][0]["name"] == "q1_E4_K2_G1_D512"
    wrong = runner.invoke(_app(), ["ladder", "run", str(grid), "--out", str(tmp_path / "o"),
                                   "--only", "nope"])
    assert wrong.exit_code == 2 and "not a rung" in wrong.output
    bad = _grid(tmp_path, {"q": [1], "experts": [4], "top_k": [2], "tokens": [512],
                           "colour": "red"})
    failed = runner.invoke(_app(), ["ladder", "run", str(bad), "--out", str(tmp_path / "o")])
    assert failed.exit_code == 2 and "colour" in failed.output


def test_tiny_example_grid_parses():
    jobs = load_grid(REPO / "examples" / "ladder_tiny.yaml")
    assert len(jobs) >= 12
    assert {j.config.geometry().split_factor for j in jobs} == {1.0, 2.0}
    # 100 steps per rung (200 for three): shorter runs stay in the unigram phase, where the
    # routers collapse (docs/train.md, "Router collapse").
    assert {j.config.total_steps for j in jobs} == {100, 200}


def test_mosaic_train_command(tmp_path):
    pytest.importorskip("torch")
    from .conftest import tiny_job

    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(tiny_job(run={"tokens": 3 * 8 * 32})))
    runner = CliRunner()
    stopped = runner.invoke(_app(), ["train", str(job), "--out", str(tmp_path / "r"),
                                     "--stop-after", "2", "--json"])
    assert stopped.exit_code == 0, stopped.output
    assert json.loads(stopped.output)["complete"] is False
    done = runner.invoke(_app(), ["train", str(job), "--out", str(tmp_path / "r")])
    assert done.exit_code == 0 and "finished" in done.output and "step      2" in done.output
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(tiny_job(routing={"rho": 0})))
    failed = runner.invoke(_app(), ["train", str(bad), "--out", str(tmp_path / "b")])
    assert failed.exit_code == 2 and "routing.rho" in failed.output
    for steps in ("0", "-3"):
        none = runner.invoke(_app(), ["train", str(job), "--out", str(tmp_path / "z"),
                                      "--stop-after", steps])
        assert none.exit_code == 2 and f"--stop-after: got {steps}" in none.output


def test_gpu_example_job_parses():
    from mosaic.train.config import load_train_config

    config = load_train_config(REPO / "examples" / "train_q4_h200.yaml")
    counts = count_parameters(config.geometry())
    assert config.total_steps == 20
    assert round(counts.n_active / 1e9, 3) == 0.824


def test_tokens_per_active_param_budgets(tmp_path):
    path = _grid(tmp_path, {"head_dim": 8, "kv_heads": 2, "q": [1], "experts": [4],
                            "top_k": [1, 2], "tokens_per_active_param": [0.05]})
    jobs = load_grid(path)
    assert sorted(j.name for j in jobs) == ["q1_E4_K1_G1_T0.05", "q1_E4_K2_G1_T0.05"]
    for job in jobs:
        n_active = count_parameters(job.config.geometry()).n_active
        assert job.config.run.tokens == pytest.approx(0.05 * n_active)
    # --scale shortens a TPP rung by the scale and by its smaller N_act (narrower heads):
    # checkpoint_every shortens by the same step ratio (a review)
    (tmp_path / "big").mkdir()
    path = _grid(tmp_path / "big", {"head_dim": 16, "kv_heads": 2, "q": [1], "experts": [4],
                                    "top_k": [1], "tokens_per_active_param": [2.0]})
    (full,), (half,) = load_grid(path), load_grid(path, scale=0.5)
    ratio = half.config.run.tokens / full.config.run.tokens
    assert ratio < 0.5  # the scale and the narrower rung
    assert half.config.run.checkpoint_every == max(1, round(2 * ratio))


def test_paper_shaped_example_grid_parses():
    jobs = load_grid(REPO / "examples" / "ladder_paper.yaml")
    sparsity = [float(count_parameters(j.config.geometry()).sparsity) for j in jobs]
    assert len(jobs) == 72 and min(sparsity) >= 0.5
    assert {j.config.geometry().layers for j in jobs} == {8, 12, 16}


def _runs_csv_with_starved(tmp_path, starved):
    # Losses on an exact Chinchilla surface L = 1.5 + 400/N^0.34 + 410/D^0.28, so every fit
    # recovers it; one column per rung of the router-health statistic.
    rows = []
    for i, (n, d) in enumerate([(n, d) for n in (1e6, 3e6, 1e7) for d in (1e8, 3e8, 1e9)]):
        loss = 1.5 + 400 / n ** 0.34 + 410 / d ** 0.28
        rows.append({"name": f"r{i}", "n_total": n, "tokens": d, "loss": loss,
                     "starved_experts": starved.get(i, 0.0)})
    path = tmp_path / "runs.csv"
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def test_ladder_fit_leaves_out_rungs_with_unbalanced_routers(tmp_path):
    # r4 ended with 3 starved experts per layer (its router collapsed); r5 with 0.5 (under
    # the limit of one per layer): only r4 is left out, and the warning names it.
    path = _runs_csv_with_starved(tmp_path, {4: 3.0, 5: 0.5})
    runner = CliRunner()
    args = ["ladder", "fit", str(path), "--out", str(tmp_path / "law.json"), "--form",
            "chinchilla", "--holdout", "0", "--starts", "64", "--refine", "2", "--json"]
    left_out = runner.invoke(_app(), args)
    assert left_out.exit_code == 0, left_out.output
    payload = json.loads(left_out.stdout)
    assert payload["unbalanced_rungs_left_out"] == ["r4"]
    assert payload["metrics"]["n_runs"] == 8
    assert "r4" in left_out.stderr and "--keep-unbalanced" in left_out.stderr
    law = ScalingLaw.load(tmp_path / "law.json")
    assert law.provenance["unbalanced_rungs_left_out"] == ["r4"]
    kept = runner.invoke(_app(), [*args, "--keep-unbalanced"])
    assert kept.exit_code == 0, kept.output
    assert json.loads(kept.stdout)["metrics"]["n_runs"] == 9
    every = _runs_csv_with_starved(tmp_path, dict.fromkeys(range(9), 2.0))
    refused = runner.invoke(_app(), ["ladder", "fit", str(every), "--out",
                                     str(tmp_path / "x.json")])
    assert refused.exit_code == 2 and "every rung" in refused.output


def test_a_refused_fit_prints_its_one_error_line_and_no_warning_before_it(tmp_path):
    """A trial's `ladder fit --form per-g` of a two-G ladder printed the unbalanced-rungs
    warning and "fitted all 12 with none held out", then refused the fit (two G for a form
    without a G term); `law fit` printed the first warning too. A refused fit gets its one
    error line (the CLI contract); the rungs left out as unbalanced are named in it where
    they are why too few runs remain."""
    path = _runs_csv_with_starved(tmp_path, {4: 3.0})
    rows = path.read_text().splitlines()
    two_g = tmp_path / "two_g.csv"  # G = 1 and 2 alternating, 9 rungs
    two_g.write_text("\n".join([rows[0] + ",split_factor"]
                               + [f"{row},{1 + i % 2}" for i, row in enumerate(rows[1:])])
                     + "\n")
    runner = CliRunner()
    for command in (["ladder", "fit", str(two_g), "--out", str(tmp_path / "l.json")],
                    ["law", "fit", str(two_g)]):
        result = runner.invoke(_app(), [*command, "--form", "chinchilla"])
        assert result.exit_code == 2
        assert result.stderr.splitlines() == [
            "error: form 'chinchilla' has no split-factor term, so it fits one G at a time; "
            "the data has G in [1.0, 2.0]: fit the rows of one G (--split-factor G, or a runs "
            "file holding one split_factor) or use --form joint"]
    # 5 of 9 rungs unbalanced: 4 remain for chinchilla's 5 coefficients
    starved = _runs_csv_with_starved(tmp_path, dict.fromkeys(range(5), 2.0))
    result = runner.invoke(_app(), ["ladder", "fit", str(starved), "--out",
                                    str(tmp_path / "l.json"), "--form", "chinchilla"])
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: ") and "4 distinct run(s)" in line
    assert ("(5 rung(s) with unbalanced routers left out: r0, r1, r2, ...; --keep-unbalanced "
            "fits them)") in line


def test_ladder_fit_holds_nothing_out_where_the_default_holdout_leaves_too_few(tmp_path):
    """The tiny ladder with one more unbalanced rung than usual kept 13 runs: holding out 2
    left 11 for the joint form's 11 coefficients and the documented `ladder fit` failed (a
    trial). Without --holdout the fit now takes every run and says so; a stated --holdout
    is kept and still refused. Here: 6 healthy runs for the chinchilla form's 5."""
    path = _runs_csv_with_starved(tmp_path, {0: 3.0, 4: 3.0, 8: 3.0})
    runner = CliRunner()
    args = ["ladder", "fit", str(path), "--out", str(tmp_path / "law.json"), "--form",
            "chinchilla", "--starts", "64", "--refine", "2", "--json"]
    result = runner.invoke(_app(), args)
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["metrics"]["n_runs"] == 6 and payload["metrics"]["n_heldout"] == 0
    assert "fitted all 6 with none held out" in result.stderr
    assert ScalingLaw.load(tmp_path / "law.json").provenance["settings"]["holdout"] == 0.0
    stated = runner.invoke(_app(), [*args, "--holdout", "0.1"])
    assert stated.exit_code == 2 and "leaves too little to fit" in stated.output


def test_a_rung_finished_under_another_recipe_is_refused_not_reused(tmp_path):
    """A trial changed the recipe's lr and reran into the same folder: the ladder reprinted
    the old losses as the new grid's. Now the rung is refused, naming what differs; a rung
    of another grid in the folder is named and stays out of runs.csv, which the other grid
    replaces only once it is moved aside (a trial's --scale run had cut it to one row)."""
    pytest.importorskip("torch")
    axes = {"head_dim": 8, "kv_heads": 2, "q": [1], "experts": [4], "top_k": [1],
            "split_factor": [1], "tokens": [512]}
    grid = _grid(tmp_path, axes)
    out = tmp_path / "ladder"
    runner = CliRunner()
    assert runner.invoke(_app(), ["ladder", "run", str(grid), "--out", str(out)]).exit_code == 0
    changed = tmp_path / "changed.yaml"
    changed.write_text(yaml.safe_dump({"recipe": {**RECIPE, "optim": {"warmup_tokens": 256,
                                                                      "lr": 5e-3}},
                                       "ladder": axes}))
    refused = runner.invoke(_app(), ["ladder", "run", str(changed), "--out", str(out)])
    assert refused.exit_code == 2
    assert "rung q1_E4_K1_G1_D512" in refused.output and "optim.lr differ" in refused.output
    other = _grid(tmp_path, {**axes, "tokens": [768]})
    kept = runner.invoke(_app(), ["ladder", "run", str(other), "--out", str(out)])
    assert kept.exit_code == 2 and "lists 1 rung(s) this grid" in kept.output
    assert "q1_E4_K1_G1_D512" in kept.output and not (out / "runs" / "q1_E4_K1_G1_D768"
                                                      ).exists()
    (out / "runs.csv").rename(tmp_path / "first_runs.csv")
    moved = runner.invoke(_app(), ["ladder", "run", str(other), "--out", str(out), "--json"])
    assert moved.exit_code == 0, moved.output
    assert "q1_E4_K1_G1_D512" in moved.stderr and "not in this grid" in moved.stderr
    document = json.loads(moved.stdout)  # numbers as numbers, the other grid's rungs named
    assert document["other_grid_rungs"] == ["q1_E4_K1_G1_D512"]
    assert isinstance(document["runs"][0]["n_total"], int)
    names = [row["name"] for row in csv.DictReader((out / "runs.csv").open())]
    assert names == ["q1_E4_K1_G1_D768"]


def test_a_rung_whose_warmup_exceeds_its_steps_is_named_when_the_grid_is_read(tmp_path):
    """Before, `--list` showed the rung as fine and `run` failed when it reached it, after
    the rungs before it had trained, without naming it."""
    grid = tmp_path / "grid.yaml"  # a warm-up of 2 steps: longer than the 1-step rung
    grid.write_text(yaml.safe_dump({
        "recipe": {**RECIPE, "optim": {"warmup_tokens": 512, "lr": 1e-2}},
        "ladder": {"head_dim": 8, "kv_heads": 2, "q": [1], "experts": [4], "top_k": [1],
                   "tokens": [4096, 256]}}))
    listed = CliRunner().invoke(_app(), ["ladder", "run", str(grid), "--out",
                                         str(tmp_path / "o"), "--list"])
    assert listed.exit_code == 2
    assert "rung q=1 E=4 K=1 G=1" in listed.output and "warmup_tokens" in listed.output


def test_a_ladder_rerun_from_another_directory_skips_its_finished_rungs(tmp_path, monkeypatch):
    """The data path relative to the grid file is made absolute: run as g/grid.yaml from one
    directory and as grid.yaml from inside g, the rung is the same job (a review found the
    second run refused, data.path 'g/corpus.txt' against 'corpus.txt')."""
    pytest.importorskip("torch")
    folder = tmp_path / "g"
    folder.mkdir()
    (folder / "corpus.txt").write_bytes(CORPUS.read_bytes())
    recipe = {**RECIPE, "data": {"path": "corpus.txt"}}
    (folder / "grid.yaml").write_text(yaml.safe_dump({"recipe": recipe, "ladder": {
        "head_dim": 8, "kv_heads": 2, "q": [1], "experts": [4], "top_k": [1],
        "tokens": [512]}}))
    out = tmp_path / "ladder"
    runner = CliRunner()
    monkeypatch.chdir(tmp_path)
    first = runner.invoke(_app(), ["ladder", "run", "g/grid.yaml", "--out", str(out)])
    assert first.exit_code == 0, first.output
    monkeypatch.chdir(folder)
    again = runner.invoke(_app(), ["ladder", "run", "grid.yaml", "--out", str(out)])
    assert again.exit_code == 0, again.output
    assert "done earlier, skipped" in again.output


def test_a_ladder_folder_copied_elsewhere_keeps_its_finished_rungs(tmp_path, monkeypatch):
    """The job's data path is absolute, so a copy of the grid, data and ladder folder (another
    machine, mount or project copy) named other paths; data files now compare by name (a
    re-check found every finished rung refused after a copy)."""
    import shutil

    pytest.importorskip("torch")
    first = tmp_path / "a"
    first.mkdir()
    (first / "corpus.txt").write_bytes(CORPUS.read_bytes())
    (first / "grid.yaml").write_text(yaml.safe_dump({
        "recipe": {**RECIPE, "data": {"path": "corpus.txt"}},
        "ladder": {"head_dim": 8, "kv_heads": 2, "q": [1], "experts": [4], "top_k": [1],
                   "tokens": [512]}}))
    runner = CliRunner()
    monkeypatch.chdir(first)
    assert runner.invoke(_app(), ["ladder", "run", "grid.yaml", "--out", "L"]).exit_code == 0
    copy = tmp_path / "b"
    shutil.copytree(first, copy)
    monkeypatch.chdir(copy)
    again = runner.invoke(_app(), ["ladder", "run", "grid.yaml", "--out", "L"])
    assert again.exit_code == 0, again.output
    assert "done earlier, skipped" in again.output


def test_an_unstated_kv_head_count_is_not_warned_about_under_scale():
    """--scale 0.5 on the paper's grid: q = 3 has 12 heads and the default 8 KV heads take
    the gcd, 4, as the ladder's rule says; the warning for a stated kv_heads fired for the
    default (a review)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        jobs = load_grid(REPO / "examples" / "ladder_paper.yaml", scale=0.5)
    assert {j.config.geometry().kv_heads for j in jobs if j.config.ladder.q == 3} == {4}


def test_the_trainers_warnings_print_as_mosaics_own_words(tmp_path):
    """They were UserWarnings, which the CLI prints as another library's: 'warning:
    UserWarning: ... (config.py:80)'; mosaic's own warnings are its words alone."""
    import subprocess
    import sys

    grid = _grid(tmp_path, {"head_dim": 8, "kv_heads": 3, "q": [1], "experts": [4],
                            "top_k": [1], "split_factor": [1], "tokens": [512]})
    result = subprocess.run([sys.executable, "-c", "from mosaic.cli.main import main; main()",
                             "ladder", "run", str(grid), "--out", str(tmp_path / "o"),
                             "--list"], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    line = next(row for row in result.stderr.splitlines() if "kv_heads" in row)
    assert line.startswith("warning: ladder.kv_heads 3 does not divide the 4 query heads")
    assert "UserWarning" not in line and ".py:" not in line


def test_train_is_quiet_under_either_quiet(tmp_path):
    """`mosaic train job --quiet` (its own flag) and the root `--quiet` both drop the
    per-step lines; the root flag typed after the subcommand is hoisted to the root, so
    train must honour it (a review found step lines printed after the hoist)."""
    pytest.importorskip("torch")
    from mosaic.cli.main import hoist_global_flags

    from .conftest import tiny_job

    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(tiny_job(run={"tokens": 2 * 8 * 32})))
    runner = CliRunner()
    argv = hoist_global_flags(["train", str(job), "--out", str(tmp_path / "q"), "--quiet"])
    quiet = runner.invoke(_app(), argv)
    assert quiet.exit_code == 0, quiet.output
    assert "step      0" not in quiet.output and "finished" in quiet.output


def test_a_rung_that_fails_is_named_even_when_quiet(tmp_path):
    """A diverging rung said only 'training diverged at step 1' under --quiet, which hides the
    progress line naming the rung (a trial)."""
    pytest.importorskip("torch")
    recipe = {**RECIPE, "optim": {**RECIPE["optim"], "lr": 1e30}}
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump({"recipe": recipe, "ladder": {
        "head_dim": 8, "kv_heads": 2, "q": [1], "experts": [4], "top_k": [1],
        "split_factor": [1], "tokens": [512]}}))
    result = CliRunner().invoke(_app(), ["--quiet", "ladder", "run", str(grid), "--out",
                                         str(tmp_path / "out")])
    assert result.exit_code == 2
    assert "rung q1_E4_K1_G1" in result.output and "training diverged" in result.output


def test_a_rung_with_a_damaged_checkpoint_does_not_stop_the_others(tmp_path):
    """One rung's unreadable checkpoint stopped the whole ladder (a trial): the other rungs
    train, runs.csv holds them, and the error at the end names the damaged rung."""
    pytest.importorskip("torch")
    grid = _grid(tmp_path, {"head_dim": 8, "kv_heads": 2, "q": [1], "experts": [4, 8],
                            "top_k": [1], "split_factor": [1], "tokens": [512]})
    out = tmp_path / "ladder"
    names = [job.name for job in load_grid(grid)]
    damaged = out / "runs" / names[0] / "checkpoint.pt"
    damaged.parent.mkdir(parents=True)
    damaged.write_bytes(b"not a checkpoint")
    result = CliRunner().invoke(_app(), ["ladder", "run", str(grid), "--out", str(out)])
    assert result.exit_code == 2
    assert "1 of 2 rungs failed" in result.output and f"rung {names[0]}" in result.output
    assert "not a readable mosaic checkpoint" in result.output
    rows = list(csv.DictReader((out / "runs.csv").open()))
    assert [row["name"] for row in rows] == [names[1]]


def test_a_training_warning_prints_when_training_begins_not_at_the_end(tmp_path):
    """Warnings were held until the command ended, so a long run's 'reads its data N times'
    came hours late (a trial); the first progress line releases them."""
    import os
    import subprocess
    import sys

    pytest.importorskip("torch")
    from .conftest import tiny_job

    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(tiny_job(run={"tokens": 56 * 8 * 32})))  # 4.3 epochs
    result = subprocess.run(
        [sys.executable, "-c", "from mosaic.cli.main import main; main()", "train", str(job),
         "--out", str(tmp_path / "o")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, check=False, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert result.returncode == 0, result.stdout
    lines = result.stdout.splitlines()
    warning = next(i for i, line in enumerate(lines) if "reads its data" in line)
    first_step = next(i for i, line in enumerate(lines) if line.startswith("step "))
    assert lines[warning].startswith("warning: the run reads its data 4.3 times")
    assert warning < first_step


def test_ladder_fit_bootstraps_samples_that_go_with_its_own_law(tmp_path):
    """A ladder's law had no samples of its own fit (a trial paired it with samples of a
    `law fit` on more runs, which the planner took): `ladder fit --bootstrap N
    --samples-out` writes them, recording the estimate, and the planner's check accepts them
    with this law only."""
    from dataclasses import replace

    from mosaic.errors import MosaicInputError
    from mosaic.plan.uncertainty import check_samples_describe, load_samples

    path = _runs_csv_with_starved(tmp_path, {4: 3.0})
    runner = CliRunner()
    args = ["ladder", "fit", str(path), "--out", str(tmp_path / "law.json"), "--form",
            "chinchilla", "--holdout", "0", "--starts", "64", "--refine", "2",
            "--bootstrap", "12", "--samples-out", str(tmp_path / "samples.json"), "--json"]
    result = runner.invoke(_app(), args)
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert set(payload["intervals"]) == {"E", "A", "B", "alpha", "beta"}
    samples = load_samples(tmp_path / "samples.json")
    law = ScalingLaw.load(tmp_path / "law.json")
    assert samples.log_coefs.shape == (12, 5)
    assert np.allclose(samples.estimate, law.log_coefs, rtol=0, atol=1e-9)
    # the law file keeps the intervals it printed, as `law fit --out` does (a trial)
    assert law.provenance["intervals"] == payload["intervals"]
    assert law.provenance["samples_file"] == str(tmp_path / "samples.json")
    assert law.provenance["bootstrap"]["resamples"] == 12
    check_samples_describe(samples, law, "--bootstrap-samples")  # no error
    other = replace(law, coefficients={**law.coefficients, "A": law.coefficients["A"] * 1.5})
    with pytest.raises(MosaicInputError, match="bootstrapped around another fit"):
        check_samples_describe(samples, other, "--bootstrap-samples")
    needs = runner.invoke(_app(), ["ladder", "fit", str(path), "--out",
                                   str(tmp_path / "x.json"), "--samples-out",
                                   str(tmp_path / "y.json")])
    assert needs.exit_code == 2 and "--samples-out needs --bootstrap" in needs.output


def test_a_fit_refused_for_too_few_rows_names_the_rungs_left_out_of_runs_csv(tmp_path):
    """A trial's `ladder run --scale 0.5 --only ...` into a finished ladder's folder rewrote
    runs.csv with 3 of its 19 rungs; the fit then refused with no word of why. The error
    names the finished rungs the CSV lacks and how to list them again."""
    path = _runs_csv_with_starved(tmp_path, {})
    rows = path.read_text().splitlines()
    path.write_text("\n".join(rows[:4]) + "\n")  # 3 rungs left in runs.csv
    for i in range(9):  # 9 finished rungs under runs/
        (tmp_path / "runs" / f"r{i}").mkdir(parents=True)
        (tmp_path / "runs" / f"r{i}" / "result.json").write_text("{}")
    result = CliRunner().invoke(_app(), ["ladder", "fit", str(tmp_path), "--out",
                                         str(tmp_path / "law.json"), "--form", "chinchilla"])
    assert result.exit_code == 2
    assert "holds 9 finished rungs, 6 of them not in runs.csv" in result.output
    assert "re-run the full grid's command" in result.output


def test_a_collected_runs_csv_beside_train_runs_is_not_blamed_on_another_grid(tmp_path):
    """docs/train.md trains into runs/a and gathers runs with `ladder collect ... --out
    runs.csv`: a trial's collected table (runs of another folder) beside its own runs/ of
    finished train runs read, on a refused fit, as 'a --scale run wrote its own grid's'.
    The hint is for a ladder's table, whose rows are all rungs under its runs/."""
    path = _runs_csv_with_starved(tmp_path, {})
    rows = path.read_text().splitlines()
    path.write_text("\n".join(rows[:4]) + "\n")  # r0..r2, collected from elsewhere
    for name in ("a", "b"):  # the user's own `mosaic train --out runs/NAME` runs
        (tmp_path / "runs" / name).mkdir(parents=True)
        (tmp_path / "runs" / name / "result.json").write_text("{}")
    result = CliRunner().invoke(_app(), ["ladder", "fit", str(path), "--out",
                                         str(tmp_path / "law.json"), "--form", "chinchilla"])
    assert result.exit_code == 2 and "distinct run(s)" in result.output
    assert "--scale or --only" not in result.output


def test_rungs_left_out_as_unbalanced_are_not_blamed_on_another_grid(tmp_path):
    """A review: 6 of 9 listed rungs starved (left out of the fit) read as 'a --scale run
    wrote its own grid's'; the hint is only for finished rungs runs.csv does not list."""
    _runs_csv_with_starved(tmp_path, {i: 3.0 for i in range(6)})
    for i in range(9):
        (tmp_path / "runs" / f"r{i}").mkdir(parents=True)
        (tmp_path / "runs" / f"r{i}" / "result.json").write_text("{}")
    result = CliRunner().invoke(_app(), ["ladder", "fit", str(tmp_path), "--out",
                                         str(tmp_path / "law.json"), "--form", "chinchilla"])
    assert result.exit_code == 2 and "distinct run(s)" in result.output
    assert "--scale or --only" not in result.output


def test_ladder_fit_warns_when_the_smoothed_loss_lags_more_than_the_fit_error(tmp_path):
    """On short rungs the bias-corrected EMA the law is fitted to still carries the earlier,
    higher losses (a trial: +0.04 to +0.055 nats over the last step on 200-step rungs,
    against an RMSE of 0.02): the fit says so. On the exact surface the RMSE is ~0."""
    import pandas as pd

    path = _runs_csv_with_starved(tmp_path, {})
    frame = pd.read_csv(path)
    args = ["ladder", "fit", str(path), "--out", str(tmp_path / "law.json"), "--form",
            "chinchilla", "--holdout", "0", "--starts", "64", "--refine", "2", "--json"]
    frame.assign(final_loss=frame["loss"]).to_csv(path, index=False)
    level = CliRunner().invoke(_app(), args)
    assert level.exit_code == 0 and "lag the rungs' last-step losses" not in level.stderr
    frame.assign(final_loss=frame["loss"] - 0.05).to_csv(path, index=False)
    lagging = CliRunner().invoke(_app(), args)
    assert lagging.exit_code == 0, lagging.output
    assert "lag the rungs' last-step losses by +0.050 nats" in lagging.stderr
    assert "+0.050" in json.loads(lagging.stdout)["smoothing_lag"]
    # the rungs of one token budget alone lagging (their median over all rows is 0): they
    # pin the D term all the same (a later trial's three short rungs went unwarned)
    short = frame["tokens"] == 1e8
    frame.assign(final_loss=frame["loss"] - 0.05 * short).to_csv(path, index=False)
    few = CliRunner().invoke(_app(), args)
    assert few.exit_code == 0, few.output
    assert ("by +0.050 nats (median of the rungs of 1e+08 tokens; up to +0.050)"
            in few.stderr) and "at token budget(s) 1e+08:" in few.stderr


@pytest.mark.parametrize(("recipe_change", "ladder_change", "message"), [
    # a fuzz trial: each ended in an internal error or listed absurd rungs
    ({"run": None}, {}, "recipe.run must be a mapping"),
    ({"data": {"path": {"file": "x.txt"}}}, {}, "recipe: data.path: expected a file path"),
    ({}, {"q": [1, 10**41]}, r"ladder.q.1: Input should be less than or equal to 819"),
    ({}, {"experts": [4, 2**21]}, "ladder.experts.1: Input should be less than or equal to"),
    ({}, {"tokens": [1e40]},
     "ladder.tokens.0: Input should be less than or equal to 1000000000000000000"),
    ({"run": {**RECIPE["run"], "global_batch_seqs": 10**40}}, {},
     "run.global_batch_seqs: Input should be less than or equal to 16777216"),
    # a trial's recipe budget was dropped without a word: each rung's is the ladder's
    ({"run": {**RECIPE["run"], "tokens": 5000}}, {},
     r"recipe.run.tokens: the ladder sets each rung's tokens"),
])
def test_grid_out_of_shape_or_range_is_one_line(tmp_path, recipe_change, ladder_change,
                                                 message):
    path = tmp_path / "grid.yaml"
    ladder = {"head_dim": 8, "kv_heads": 2, "q": [1], "experts": [4], "top_k": [1],
              "split_factor": [1], "tokens": [512]} | ladder_change
    path.write_text(yaml.safe_dump({"recipe": RECIPE | recipe_change, "ladder": ladder}))
    with pytest.raises(MosaicInputError, match=message):
        load_grid(path)


def test_a_missing_corpus_is_one_error_before_any_rung(tmp_path):
    """A grid whose data.path is missing failed each of its rungs in turn (a fuzz trial:
    19 failures); it is refused once, before any rung trains."""
    grid = yaml.safe_load(_grid(tmp_path, {"head_dim": 8, "kv_heads": 2, "q": [1],
                                           "experts": [2, 4], "top_k": [1],
                                           "split_factor": [1], "tokens": [512]}).read_text())
    grid["recipe"]["data"]["path"] = str(tmp_path / "missing.txt")
    path = tmp_path / "missing_grid.yaml"
    path.write_text(yaml.safe_dump(grid))
    result = CliRunner().invoke(_app(), ["ladder", "run", str(path), "--out",
                                         str(tmp_path / "out")])
    assert result.exit_code == 2
    assert result.output.count("does not exist or is not a file") == 1
    assert not list((tmp_path / "out").glob("runs/*"))


def test_ladder_fit_reports_the_fits_progress_as_law_fit_does(tmp_path, monkeypatch):
    """A trial's `ladder fit --bootstrap 50` was silent for 17-86 s during the main fit,
    whose progress `mosaic law fit` reports."""
    import mosaic.cli.progress as progress

    monkeypatch.setattr(progress, "FIRST_LINE_S", 0.0)
    path = _runs_csv_with_starved(tmp_path, {})
    result = CliRunner().invoke(_app(), ["ladder", "fit", str(path), "--out",
                                         str(tmp_path / "law.json"), "--form", "chinchilla",
                                         "--holdout", "0", "--starts", "8", "--refine", "1"])
    assert result.exit_code == 0, result.output
    assert "progress: law fit (screened blocks, refined starts)" in result.stderr


def test_a_rung_failure_and_a_missing_corpus_name_the_grid_file(tmp_path):
    """With several grids a user could not tell which one failed: the errors met once a
    ladder runs (a rung's token ids beyond data.vocab; a missing corpus, found before the
    first rung) start with the grid file and name the recipe field."""
    pytest.importorskip("torch")
    from mosaic.train.data import write_token_file

    write_token_file(np.arange(2000) % 1000, tmp_path / "ids.bin", "uint16")
    ladder = {"head_dim": 8, "kv_heads": 2, "q": [1], "experts": [4], "top_k": [1],
              "split_factor": [1], "tokens": [512]}
    recipe = {**RECIPE, "data": {"path": "ids.bin", "format": "uint16", "vocab": 500}}
    grid = tmp_path / "second_grid.yaml"
    grid.write_text(yaml.safe_dump({"recipe": recipe, "ladder": ladder}))
    result = CliRunner().invoke(_app(), ["-q", "ladder", "run", str(grid), "--out",
                                         str(tmp_path / "a")])
    assert result.exit_code == 2
    assert result.output.startswith(f"error: {grid}: rung q1_E4_K1_G1_D512: data: token id")
    recipe["data"]["path"] = "missing.bin"
    grid.write_text(yaml.safe_dump({"recipe": recipe, "ladder": ladder}))
    result = CliRunner().invoke(_app(), ["ladder", "run", str(grid), "--out",
                                         str(tmp_path / "b")])
    assert result.exit_code == 2
    assert result.output.startswith(f"error: {grid}: recipe.data.path '{tmp_path}/missing.bin'")


def test_a_batch_of_partial_micro_batches_is_refused_when_the_grid_is_read(tmp_path):
    """global_batch_seqs 6 in micro-batches of 4 failed every rung in turn once the ladder
    ran ('2 of 2 rungs failed (the others trained ...)'); 6 = 4·k has no whole k, so it is
    refused when the grid is read, as a job's own file is."""
    grid = tmp_path / "grid.yaml"
    recipe = {**RECIPE, "run": {**RECIPE["run"], "global_batch_seqs": 6,
                                "micro_batch_seqs": 4}}
    grid.write_text(yaml.safe_dump({"recipe": recipe, "ladder": {
        "head_dim": 8, "kv_heads": 2, "q": [1], "experts": [4, 8], "top_k": [1],
        "split_factor": [1], "tokens": [512]}}))
    with pytest.raises(MosaicInputError, match=r"run.global_batch_seqs 6 must be a multiple "
                                               r"of run.micro_batch_seqs 4"):
        load_grid(grid)
    recipe["run"]["global_batch_seqs"] = 8  # 2 micro-batches of 4
    grid.write_text(yaml.safe_dump({"recipe": recipe, "ladder": {
        "head_dim": 8, "kv_heads": 2, "q": [1], "experts": [4, 8], "top_k": [1],
        "split_factor": [1], "tokens": [512]}}))
    assert len(load_grid(grid)) == 2


def test_a_ladder_whose_every_rung_failed_does_not_say_the_others_trained(tmp_path):
    pytest.importorskip("torch")
    recipe = {**RECIPE, "optim": {**RECIPE["optim"], "lr": 1e30}}  # every rung diverges
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump({"recipe": recipe, "ladder": {
        "head_dim": 8, "kv_heads": 2, "q": [1], "experts": [4, 8], "top_k": [1],
        "split_factor": [1], "tokens": [512]}}))
    result = CliRunner().invoke(_app(), ["-q", "ladder", "run", str(grid), "--out",
                                         str(tmp_path / "out")])
    assert result.exit_code == 2
    assert "2 of 2 rungs failed (none trained;" in result.output
    assert "the others trained" not in result.output


def test_a_grid_given_to_train_and_a_job_given_to_ladder_are_named_as_such(tmp_path):
    """Both files hold a `ladder:` block, so the mix-up is easy; `train` on the tiny grid
    listed nine unknown fields and invalid integers, `ladder run` on a job eight, naming
    neither tool."""
    from .conftest import tiny_job

    runner = CliRunner()
    grid = REPO / "examples" / "ladder_tiny.yaml"
    train = runner.invoke(_app(), ["train", str(grid), "--out", str(tmp_path / "a")])
    assert train.exit_code == 2
    assert train.output.startswith(f"error: {grid}: a ladder grid (blocks recipe and ladder: "
                                   "`mosaic ladder run`), not a `mosaic train` job")
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(tiny_job()))
    ladder = runner.invoke(_app(), ["ladder", "run", str(job), "--out", str(tmp_path / "b"),
                                    "--list"])
    assert ladder.exit_code == 2
    assert ladder.output.startswith(f"error: {job}: a `mosaic train` job")
    assert "not a ladder grid" in ladder.output and "unknown field" not in ladder.output


def test_sigterm_during_a_rung_stops_the_ladder_and_keeps_the_finished_rungs(
        tmp_path, monkeypatch, capsys):
    """One SIGTERM (Slurm's scancel or time limit) inside the second of three rungs stops
    `mosaic ladder run` with status 130 and its resume line: the third rung does not start,
    the first keeps its result and its runs.csv row, and the second keeps a checkpoint of
    the steps it finished before the signal (step 1: its step 0), which a rerun resumes."""
    import os
    import signal
    import sys

    pytest.importorskip("torch")
    from mosaic.cli.main import main
    from mosaic.train.trainer import Trainer

    grid = _grid(tmp_path, {"head_dim": 8, "kv_heads": 2, "q": [1], "experts": [4, 8, 16],
                            "top_k": [1], "split_factor": [1], "tokens": [768]})
    out = tmp_path / "ladder"
    names = [job.name for job in load_grid(grid)]
    assert len(names) == 3
    micro_batch = Trainer._micro_batch

    def signalled_in_step_1_of_the_second_rung(self, micro):
        if self.out_dir.name == names[1] and self.step == 1:
            os.kill(os.getpid(), signal.SIGTERM)
        return micro_batch(self, micro)

    monkeypatch.setattr(Trainer, "_micro_batch", signalled_in_step_1_of_the_second_rung)
    monkeypatch.setattr(sys, "argv", ["mosaic", "ladder", "run", str(grid), "--out", str(out)])
    handler = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit) as stopped:
        main()
    assert stopped.value.code == 130
    assert signal.getsignal(signal.SIGTERM) is handler
    err = capsys.readouterr().err
    assert "error: interrupted; resume with: mosaic ladder run" in err
    assert not (out / "runs" / names[2]).exists()  # the next rung never started
    assert (out / "runs" / names[0] / "result.json").exists()
    assert [row["name"] for row in csv.DictReader((out / "runs.csv").open())] == [names[0]]
    import torch

    second = out / "runs" / names[1]
    assert torch.load(second / "checkpoint.pt", weights_only=False)["step"] == 1
    assert not (second / "result.json").exists()
    monkeypatch.setattr(Trainer, "_micro_batch", micro_batch)
    result = CliRunner().invoke(_app(), ["ladder", "run", str(grid), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert len(list(csv.DictReader((out / "runs.csv").open()))) == 3
