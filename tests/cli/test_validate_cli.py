"""`mosaic validate` and `mosaic calibrate` on the shipped example records."""

import copy
import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from mosaic.cli.main import app
from mosaic.perf.calibration import load_calibration

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
runner = CliRunner()


def test_validate_json_keys_and_oom_rule():
    result = runner.invoke(app, ["validate", str(EXAMPLES / "runs_example.yaml"), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert {"runs", "aggregate"} <= set(doc)
    for row in doc["runs"]:
        assert {"id", "predicted_tokens_per_s_per_gpu", "measured_tokens_per_s_per_gpu",
                "error"} <= set(row)
        if row["error"] is not None:
            expected = row["predicted_tokens_per_s_per_gpu"] / row[
                "measured_tokens_per_s_per_gpu"] - 1
            assert abs(row["error"] - expected) < 1e-12
    aggregate = doc["aggregate"]
    assert {"mape", "median_abs_error", "max_abs_error", "spearman"} <= set(aggregate)
    # The example's constructed OOM run (an 8B model under plain DDP on 80 GB GPUs) is
    # predicted infeasible, which counts as correct.
    assert aggregate["oom_runs"] == 1 and aggregate["oom_correct"] == 1
    # each run's assumptions, as its record loads them (a trial saw them only one run at a
    # time through `perf RUNS#ID`)
    from mosaic.config.run_records import load_run_records

    records = {r.id: r for r in load_run_records(EXAMPLES / "runs_example.yaml").records}
    for row in doc["runs"]:
        assert row["assumptions"] == list(records[row["id"]].assumptions)
    assert any(row["assumptions"] for row in doc["runs"])


def test_the_table_output_lists_the_assumptions_by_how_many_runs_they_cover():
    runs = EXAMPLES / "runs_example.yaml"
    rows = json.loads(runner.invoke(app, ["validate", str(runs), "--json"]).stdout)["runs"]
    text = runner.invoke(app, ["-q", "validate", str(runs)]).stdout
    distinct = {a for row in rows for a in row["assumptions"]}
    assert f"Assumptions made for the runs ({len(distinct)} distinct" in text
    # the example's four records all leave the optimizer out: one line, counted once
    assert all("optimizer not recorded: AdamW assumed" in row["assumptions"] for row in rows)
    assert text.count("optimizer not recorded") == 1
    assert f"[{len(rows)} runs] optimizer not recorded: AdamW assumed" in text
    # each line shown names its runs: a count, or the one run's id
    by_id = {row["id"]: row["assumptions"] for row in rows}
    shown = [line[3:].split("] ", 1) for line in text.splitlines() if line.startswith("  [")]
    assert len(shown) == min(len(distinct), 10)
    for who, assumption in shown:
        covered = [run for run, made in by_id.items() if assumption in made]
        assert who == (covered[0] if len(covered) == 1 else f"{len(covered)} runs")


def test_calibrate_writes_a_loadable_file(tmp_path):
    out = tmp_path / "calib.yaml"
    result = runner.invoke(app, ["calibrate", str(EXAMPLES / "runs_example.yaml"),
                                 "--out", str(out), "--cv", "none", "--json"])
    assert result.exit_code == 0, result.output
    calibration = load_calibration(out)
    assert "runs_example.yaml" in calibration.provenance
    again = runner.invoke(app, ["validate", str(EXAMPLES / "runs_example.yaml"),
                                "--calibration", str(out), "--json"])
    assert again.exit_code == 0


def test_calibrate_gives_the_refits_error_on_its_own_runs_and_warns_when_worse(tmp_path):
    """What the refit did to the runs it was fitted on, beside the start's: each figure is
    the MAPE `mosaic validate` scores for the same runs under that profile (the full
    prediction, not the fit's closed form). A trial's 5-run refit took its own runs from
    11.3% to 12.6%, which neither the table nor a warning said; runs_example's 3 runs go
    from 5.8% to 8.4%."""
    runs, out = str(EXAMPLES / "runs_example.yaml"), tmp_path / "mine.yaml"
    result = runner.invoke(app, ["calibrate", runs, "--out", str(out), "--cv", "none",
                                 "--json"])
    assert result.exit_code == 0, result.output
    in_sample = json.loads(result.stdout)["in_sample"]

    def validated_mape(*calibration: str) -> float:
        scored = runner.invoke(app, ["validate", runs, *calibration, "--json"])
        return json.loads(scored.stdout)["aggregate"]["mape"]

    fitted, started = validated_mape("--calibration", str(out)), validated_mape()
    assert in_sample["fitted"]["mape"] == pytest.approx(fitted, rel=1e-3)
    assert (in_sample["starting"]["name"], in_sample["starting"]["mape"]) == (
        "default", pytest.approx(started, rel=1e-3))
    assert fitted > started
    assert (f"warning: the refit predicts the runs it was fitted on worse ({fitted:.1%} MAPE, "
            f"in-sample) than 'default' as it was ({started:.1%})") in result.stderr
    text = runner.invoke(app, ["calibrate", runs, "--out", str(out), "--cv", "none"])
    row = next(line for line in text.stdout.splitlines()
               if "of the refit on these runs (in-sample)" in line)
    assert f"{fitted:.1%} /" in row


def test_bad_cv_option_and_missing_file_are_one_line(tmp_path):
    bad = runner.invoke(app, ["calibrate", str(EXAMPLES / "runs_example.yaml"), "--out",
                              str(tmp_path / "x.yaml"), "--cv", "nope"])
    assert bad.exit_code == 2 and "allowed values are source, group, run, none" in bad.output
    missing = runner.invoke(app, ["validate", str(tmp_path / "absent.yaml")])
    assert missing.exit_code == 2 and "absent.yaml" in missing.output


def test_exclude_leaves_runs_out_of_report_and_fit(tmp_path):
    runs = str(EXAMPLES / "runs_example.yaml")
    dropped = "example-bridge-qwen3-30b-a3b-b200-8-mxfp8"
    full = json.loads(runner.invoke(app, ["validate", runs, "--json"]).output)
    result = runner.invoke(app, ["validate", runs, "--exclude", dropped, "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["excluded"] == [dropped]
    assert {r["id"] for r in doc["runs"]} == {r["id"] for r in full["runs"]} - {dropped}
    out = tmp_path / "calib.yaml"
    fitted = runner.invoke(app, ["calibrate", runs, "--out", str(out), "--cv", "none",
                                 "--exclude", dropped, "--json"])
    assert fitted.exit_code == 0, fitted.output
    assert json.loads(fitted.stdout)["n_runs"] == 2  # 4 records, one OOM, one excluded
    assert dropped in load_calibration(out).provenance
    unknown = runner.invoke(app, ["validate", runs, "--exclude", "no-such-run"])
    assert unknown.exit_code == 2 and "no-such-run" in unknown.output


def test_a_file_without_usable_records_is_an_error_not_an_empty_report(tmp_path):
    from typer.testing import CliRunner

    from mosaic.cli.main import app

    path = tmp_path / "runs.yaml"
    path.write_text("runs: []\n")
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 2
    assert "no usable run record" in result.output


def test_a_file_of_broken_records_names_each_records_reason(tmp_path):
    """With no usable record left, the error gives the reason of each skipped record (the
    first three, then a count), not the first alone (a trial fixed them one run at a time)."""
    import yaml

    document = yaml.safe_load((EXAMPLES / "runs_example.yaml").read_text())
    published = document["runs"][0]
    broken = [dict(published, id=f"broken-{i}", num_gpus=8 * (i + 2)) for i in range(4)]
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump({**document, "runs": broken}))
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
    for i in range(3):
        assert f"run 'broken-{i}'" in result.output
    assert "broken-3" not in result.output and "and 1 more" in result.output


def test_rank_agreement_within_one_software_release_is_reported_apart(tmp_path):
    import copy

    import yaml

    document = yaml.safe_load((EXAMPLES / "runs_example.yaml").read_text())
    base = document["runs"][0]  # a dense FSDP job on one 8-GPU host
    runs = []
    for release in ("trainer v1", "trainer v2"):
        for micro in (1, 2, 4):
            run = copy.deepcopy(base)
            run["id"] = f"{release[-2:]}-mb{micro}"
            run["software"] = f"torchtitan {release}"
            run["batch"] = {**run["batch"], "global_seqs": 32, "micro_seqs": micro}
            runs.append(run)
    path = tmp_path / "runs.yaml"

    def aggregate(measured: dict[str, float]) -> dict:
        for run in runs:
            tokens_per_s = measured[run["id"]]
            step_s = 32 * run["batch"]["seq_len"] / (tokens_per_s * run["num_gpus"])
            run["measured"] = {"tokens_per_s_per_gpu": tokens_per_s, "step_time_s": step_s,
                               "consistent": True}
        path.write_text(yaml.safe_dump({**document, "runs": runs}))
        result = runner.invoke(app, ["validate", str(path), "--json"])
        assert result.exit_code == 0, result.output
        return json.loads(result.output)

    first = aggregate({run["id"]: 1000.0 for run in runs})
    predicted = {row["id"]: row["predicted_tokens_per_s_per_gpu"] for row in first["runs"]}
    # Measured in the predicted order within each release; release v2 is 3x faster overall
    # (a software upgrade), which no layout model is asked to rank.
    order = sorted(predicted, key=predicted.get)
    measured = {run_id: (order.index(run_id) + 1) * (3.0 if run_id.startswith("v2") else 1.0)
                for run_id in predicted}
    stats = aggregate(measured)["aggregate"]
    assert stats["spearman_same_software"] == 1.0
    assert stats["spearman"] < 1.0


def test_a_trained_run_predicted_infeasible_is_named(tmp_path):
    """The constructed DDP Llama-3.1-8B record (8.0e9 parameters unsharded: 16 GB of bf16
    weights, 16 GB of gradients, 64 GB of fp32 Adam moments, 32 GB of fp32 master weights
    per GPU, over an H100's 80 GB by hand) marked as having trained: validate names it on
    the 'trained runs predicted infeasible' line."""
    import yaml

    document = yaml.safe_load((EXAMPLES / "runs_example.yaml").read_text())
    run = next(r for r in document["runs"] if r["id"].endswith("ddp-oom"))
    run.update(id="trained-but-too-big", measured={"tokens_per_s_per_gpu": 1000.0,
                                                   "step_time_s": 65.536, "oom": False})
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump({**document, "runs": [run]}))
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 0, result.output
    line = next(row for row in result.output.splitlines() if "trained runs predicted" in row)
    assert "1: trained-but-too-big" in line


def test_the_table_output_says_why_each_record_was_skipped(tmp_path):
    # a user's record with a typo must not vanish behind "--json lists the reason"
    import yaml

    document = yaml.safe_load((EXAMPLES / "runs_example.yaml").read_text())
    broken = dict(document["runs"][0], id="no-gpu-count")
    del broken["num_gpus"]
    document["runs"] = [document["runs"][0], broken]
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump(document))
    result = runner.invoke(app, ["-q", "validate", str(path)])
    assert result.exit_code == 0, result.output
    # on stderr as a warning, naming --strict (a trial missed it below the tables)
    assert "warning: 1 record(s) skipped, not scored (--strict fails on them):" in result.stderr
    assert "no-gpu-count:" in result.stderr and "num_gpus" in result.stderr


def _torchtitan_record_with(tmp_path, run_id: str, tokens_per_s_per_gpu: float,
                            step_time_s: float) -> Path:
    import yaml

    document = yaml.safe_load((EXAMPLES / "runs_example.yaml").read_text())
    run = dict(document["runs"][0], id=run_id)
    run["measured"] = dict(run["measured"], tokens_per_s_per_gpu=tokens_per_s_per_gpu,
                           step_time_s=step_time_s)
    path = tmp_path / f"{run_id}.yaml"
    path.write_text(yaml.safe_dump({**document, "runs": [document["runs"][0], run]}))
    return path


def test_a_unit_slip_is_flagged_not_silently_scored(tmp_path):
    """The torchtitan Llama-3.1-8B record (16 x 8192 tokens a step on 8 GPUs, published
    5,762 tokens/s per GPU) entered with its step time in milliseconds (2843.5 'seconds',
    hence 5.762 tokens/s) is named as a likely unit slip; the published record is not."""
    path = _torchtitan_record_with(tmp_path, "step-time-in-ms", 5.762, 2843.5)
    result = runner.invoke(app, ["-q", "validate", str(path)])
    assert result.exit_code == 0, result.output
    assert "1 run(s) look mis-entered" in result.output
    line = next(row for row in result.output.splitlines() if "step-time-in-ms:" in row)
    assert "below the prediction" in line and "milliseconds" in line
    html = tmp_path / "report.html"
    flagged = json.loads(runner.invoke(app, ["validate", str(path), "--json", "--html",
                                             str(html)]).stdout)
    assert [r["id"] for r in flagged["aggregate"]["implausible_measurements"]] == [
        "step-time-in-ms"]
    page = html.read_text()
    assert 'id="implausible-table"' in page and "step-time-in-ms" in page
    # the headline again without it: the published run's own error alone (a trial's MAPE
    # read 11,314% with two unit slips in the file)
    good = next(r for r in flagged["runs"] if r["id"] != "step-time-in-ms")
    assert flagged["aggregate"]["mape_without_implausible"] == pytest.approx(abs(good["error"]))
    assert flagged["aggregate"]["mape"] > 100 * flagged["aggregate"]["mape_without_implausible"]
    assert "MAPE without the runs whose tokens/s looks mis-entered" in page


def test_a_cluster_total_given_per_gpu_is_flagged_by_its_impossible_mfu(tmp_path):
    """The same record with the 8-GPU total (46,096 tokens/s) given per GPU. By hand:
    Llama-3.1-8B has 6.98e9 non-embedding parameters, 6 x 6.98e9 = 41.9 GFLOP a token, plus causal
    attention 6 x 32 layers x 4096 x 8192 = 6.4 GFLOP a token at 8192 tokens: 48.3 GFLOP
    x 46,096 tokens/s = 2.23 PFLOP/s per GPU, 251% of the 500 W H100's 886.8 TFLOP/s bf16
    peak (the catalog's estimate for that part)."""
    path = _torchtitan_record_with(tmp_path, "cluster-total", 46096.0, 0.35544)
    doc = json.loads(runner.invoke(app, ["validate", str(path), "--json"]).stdout)
    (entry,) = doc["aggregate"]["implausible_measurements"]
    assert entry["id"] == "cluster-total" and "MFU" in entry["reason"]
    mfu_percent = int(entry["reason"].split(" implies ")[1].split("%")[0])
    assert 245 <= mfu_percent <= 257


def test_calibrate_names_a_mis_entered_run_as_validate_does(tmp_path):
    """calibrate fitted the 251%-MFU record without a word while validate flagged it (a
    trial); it now gives the same reasons, and reports its constants on bounds and how the
    starting calibration did on the same runs."""
    path = _torchtitan_record_with(tmp_path, "cluster-total", 46096.0, 0.35544)
    result = runner.invoke(app, ["calibrate", str(path), "--out", str(tmp_path / "c.yaml"),
                                 "--cv", "none", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    validated = json.loads(runner.invoke(app, ["validate", str(path), "--json"]).stdout)
    assert doc["implausible_measurements"] == validated["aggregate"][
        "implausible_measurements"]
    assert "1 run(s) look mis-entered" in result.stderr
    # the 251%-MFU run is left out of the fit (it fitted every constant towards an
    # impossible step, a second trial), and one run is too few for more than the stack
    # multiplier
    assert doc["left_out_implausible"] == ["cluster-total"] and doc["n_runs"] == 1
    assert doc["fitted"] == ["stack_overhead"] and doc["auto_reduced"]
    assert "fitted stack_overhead only" in result.stderr
    assert "cluster-total (implausible)" in load_calibration(tmp_path / "c.yaml").provenance
    every = runner.invoke(app, ["calibrate", str(path), "--out", str(tmp_path / "all.yaml"),
                                "--cv", "none", "--fit", "all", "--json"])
    assert every.exit_code == 0, every.output
    assert json.loads(every.stdout)["n_fitted_constants"] > 1 and "too few runs" in every.stderr


def test_a_small_fit_keeps_the_shared_constants_of_its_base(tmp_path):
    """Fewer than two runs per free parameter: --fit auto fits the stack multiplier only, so
    the shared element-wise factor stays the base's (a trial's one-run fit moved it from
    3.84 to 1.00, and the other runs' error rose from 9.7% to 13.7%); --fit names pick
    constants, and a bad name is one line."""
    out = tmp_path / "c.yaml"
    runs = str(EXAMPLES / "runs_example.yaml")
    result = runner.invoke(app, ["calibrate", runs, "--out", str(out), "--cv", "none",
                                 "--fit", "auto", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    base = load_calibration("default")
    fitted = load_calibration(out)
    assert doc["n_runs"] == 3 and doc["auto_reduced"]  # the example's 3 runs
    assert fitted.elementwise_traffic_factor == base.elementwise_traffic_factor
    assert fitted.attention_multiplier("torchtitan") == base.attention_multiplier(
        "torchtitan")
    assert fitted.fitted_constants == base.fitted_constants  # a later refit may fit all
    named = runner.invoke(app, ["calibrate", runs, "--out", str(tmp_path / "n.yaml"),
                                "--cv", "none", "--fit", "stack_overhead,chi_a2a", "--json"])
    assert json.loads(named.stdout)["fitted"] == ["stack_overhead", "chi_a2a"]
    bad = runner.invoke(app, ["calibrate", runs, "--out", str(tmp_path / "b.yaml"),
                              "--fit", "stack"])
    assert bad.exit_code == 2 and "allowed are auto, all" in bad.output


def test_a_record_whose_step_time_disagrees_is_used_at_its_tokens_per_s(tmp_path):
    """measured.consistent false with the step time in milliseconds: validate scored the
    tokens/s while calibrate fitted the 2843.5 s step (a trial). Every command now takes
    the step the tokens/s implies: 16 x 8192 tokens / (5,762 tokens/s x 8 GPUs) = 2.8435 s."""
    import yaml

    path = _torchtitan_record_with(tmp_path, "step-in-ms", 5762.0, 2843.5)
    document = yaml.safe_load(path.read_text())
    document["runs"][1]["measured"]["consistent"] = False
    path.write_text(yaml.safe_dump(document))
    from mosaic.config.run_records import load_run_records

    record = next(r for r in load_run_records(path).records if r.id == "step-in-ms")
    tokens = record.workload.global_batch * record.workload.seq_len
    assert record.measured_step_time_s == pytest.approx(tokens / (5762.0 * 8))
    assert any("stated 2843.5 s" in note for note in record.assumptions)
    assert "disagree by" in record.measurement_disagreement
    # validate says which records it scored on their tokens/s alone (a trial)
    shown = runner.invoke(app, ["validate", str(path)])
    assert "note: 1 record(s) state measured.consistent: false" in shown.output
    assert "step-in-ms" in shown.output.split("measured.consistent: false")[1]
    doc = json.loads(runner.invoke(app, ["validate", str(path), "--json"]).stdout)
    (entry,) = doc["aggregate"]["stated_inconsistent"]
    assert entry["id"] == "step-in-ms" and "stated 2843.5 s" in entry["reason"]
    result = runner.invoke(app, ["calibrate", str(path), "--out", str(tmp_path / "c.yaml"),
                                 "--cv", "none", "--json"])
    assert json.loads(result.stdout)["implausible_measurements"] == []
    # explain says so beside the measured step it explains (a trial saw no word of it)
    explained = runner.invoke(app, ["explain", f"{path}#step-in-ms"], terminal_width=240)
    assert explained.exit_code == 0, explained.output
    assert "(stated 2843.5 s)" in explained.output


def test_a_memory_figure_above_the_device_is_flagged(tmp_path):
    """Memory given in bytes (or MiB) as GiB was scored as given and no check looked at it
    (a trial): a figure above the device's memory is named. The example's torchtitan record
    runs on 500 W H100s of 95.0 GiB (catalog); 5% over that is tolerated for rounding."""
    import yaml

    path = _torchtitan_record_with(tmp_path, "memory-in-mib", 5762.0, 2.8435)
    document = yaml.safe_load(path.read_text())
    document["runs"][1]["measured"]["memory_gib"] = 73216.0  # MiB
    document["runs"][0]["measured"]["memory_gib"] = 99.0  # within the 5% of 95.0 GiB
    path.write_text(yaml.safe_dump(document))
    doc = json.loads(runner.invoke(app, ["validate", str(path), "--json"]).stdout)
    (entry,) = doc["aggregate"]["implausible_measurements"]
    assert entry["id"] == "memory-in-mib"
    assert "73,216 GiB per GPU is more than the device's 95.0 GiB" in entry["reason"]
    # its tokens/s is fine: the MAPE without mis-entered throughputs is not offered (it
    # had dropped runs flagged for memory alone; a review)
    assert doc["aggregate"]["mape_without_implausible"] is None
    # calibrate names it too, in the same words (it checked throughput only; a review)
    result = runner.invoke(app, ["calibrate", str(path), "--out", str(tmp_path / "c.yaml"),
                                 "--cv", "none", "--json"])
    assert json.loads(result.stdout)["implausible_measurements"] == [entry]


def test_a_profile_of_few_runs_borrows_the_base_residuals_and_says_so(tmp_path):
    """Three held-out runs give no 5%/95% quantiles of their own (MIN_SCOPE_RUNS = 10):
    the profile keeps its base's (the built-in 'default') rather than losing every
    interval, and each interval names where its residuals come from (a trial)."""
    from mosaic.perf.calibration import load_calibration as load
    from mosaic.perf.coverage import MIN_SCOPE_RUNS

    out = tmp_path / "own.yaml"
    result = runner.invoke(app, ["calibrate", str(EXAMPLES / "runs_example.yaml"),
                                 "--out", str(out), "--cv", "group", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["n_runs"] < MIN_SCOPE_RUNS
    assert report["tokens_per_s_residuals_borrowed_from"] == "default"
    assert "keeps the tokens/s residuals of profile default (measured" in result.stderr
    own, base = load(out).coverage, load("default").coverage
    assert own.tokens_per_s_ratio == base.tokens_per_s_ratio
    assert own.tokens_per_s_ratio_from == "default"
    assert own.source.startswith("3 runs of runs_example.yaml")  # its envelope is its own
    perf = json.loads(runner.invoke(app, ["perf", str(EXAMPLES / "appendix_e.yaml"),
                                          "--calibration", str(out), "--json"]).stdout)
    scope = perf["coverage"]["intervals"]["tokens_per_s"]["residual_scope"]
    assert scope == "moe of profile 'default', borrowed"
    # memory too: fewer than 10 runs report it, and the near-OOM warning rides on it
    assert report["memory_residuals_borrowed_from"] == "default"
    assert own.memory_ratio == base.memory_ratio and own.memory_ratio_from == "default"
    memory = perf["coverage"]["intervals"]["memory_gib"]["residual_scope"]
    assert memory.endswith("of profile 'default', borrowed")


def test_residuals_of_another_interval_level_are_not_borrowed():
    """A base profile whose quantiles are of another level (a hand-edited file) would show
    its 80% band as this profile's 90% one: nothing is borrowed then."""
    from dataclasses import replace

    from mosaic.evaluate.coverage_fit import with_borrowed_residuals
    from mosaic.perf.calibration import load_calibration as load

    base = load("default")
    none_of_its_own = replace(base.coverage, tokens_per_s_ratio=())
    assert with_borrowed_residuals(none_of_its_own, base).tokens_per_s_ratio
    other_level = replace(base, coverage=replace(base.coverage, level=0.8))
    assert with_borrowed_residuals(none_of_its_own, other_level) == none_of_its_own


def test_calibrate_names_the_records_it_cannot_read_and_strict_fails_on_them(tmp_path):
    """A record with a misspelt field left the fit without a word, where `validate` named
    it (a trial): `calibrate` says so on stderr, lists it in --json and the provenance, and
    --strict refuses to fit without it."""
    document = yaml.safe_load((EXAMPLES / "runs_example.yaml").read_text())
    typo = document["runs"][0]
    typo["parallelism"]["ep_size"] = 8
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump(document))
    args = ["calibrate", str(path), "--out", str(tmp_path / "c.yaml"), "--cv", "none"]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert [entry["id"] for entry in report["skipped"]] == [typo["id"]]
    assert "ep_size" in report["skipped"][0]["reason"]
    assert "1 unreadable record(s) skipped" in report["calibration"]["provenance"]
    assert "1 record(s) skipped, not in the fit" in result.stderr
    assert typo["id"] in result.stderr
    strict = runner.invoke(app, [*args, "--strict"])
    assert strict.exit_code == 2 and "--strict: 1 record(s) skipped" in strict.output


def test_a_profile_keeps_its_bases_constants_for_stacks_its_runs_lack(tmp_path):
    """Calibrating on one cluster's runs replaced every stack's multiplier with that fit's
    'default' (a trial: torchtitan predictions moved 13% on a profile that saw no torchtitan
    run): stacks and routing regimes the runs lack keep the base profile's values."""
    from mosaic.perf.calibration import load_calibration as load

    out = tmp_path / "own.yaml"
    result = runner.invoke(app, ["calibrate", str(EXAMPLES / "runs_example.yaml"),
                                 "--out", str(out), "--cv", "none"])
    assert result.exit_code == 0, result.output
    own, base = load(out), load("default")
    report_stacks = {"torchtitan", "megatron-bridge", "megatron-core"}
    unseen = sorted(set(base.stack_overhead) - report_stacks - {"default"})
    assert unseen, "the base profile should know stacks the example runs lack"
    for stack in unseen:
        assert own.stack_overhead[stack] == base.stack_overhead[stack], stack
    assert "kept for the ones the runs lack" in own.sources["stack_overhead"]


def test_perf_of_a_record_names_both_errors_as_validate_does():
    """`validate` gave a run +25.0% (tokens/s) and `perf RUNS#ID` -20.0% (step time): both
    right, read as a contradiction (a trial). perf now names each, and its tokens/s error is
    validate's."""
    run_id = "example-torchtitan-llama3.1-8b-h100-8-fsdp"
    perf = runner.invoke(app, ["perf", f"{EXAMPLES / 'runs_example.yaml'}#{run_id}"],
                         env={"COLUMNS": "400"})
    assert perf.exit_code == 0, perf.output
    document = json.loads(runner.invoke(app, ["validate", str(EXAMPLES / "runs_example.yaml"),
                                              "--json"]).stdout)
    row = next(r for r in document["runs"] if r["id"] == run_id)
    text = " ".join(perf.stdout.split())
    assert "predicted step time -" in text
    assert f"tokens/s {row['error']:+.1%} as `validate` reports it" in text


def test_runs_of_one_source_are_cross_validated_leaving_one_run_out(tmp_path):
    """A team's runs share an id prefix (all 'example-...' here), so --cv source, the
    default, gave one group and an error (a trial); the fit now leaves one run out instead
    and says so, as --cv run does by request."""
    runs = str(EXAMPLES / "runs_example.yaml")
    result = runner.invoke(app, ["calibrate", runs, "--out", str(tmp_path / "c.yaml"),
                                 "--json"])
    assert result.exit_code == 0, result.output
    assert "note: --cv source puts every run in one group ('example')" in result.stderr
    doc = json.loads(result.stdout)
    assert doc["cross_validation"]["grouping"] == "run"
    explicit = runner.invoke(app, ["calibrate", runs, "--out", str(tmp_path / "r.yaml"),
                                   "--cv", "run", "--json"])
    assert explicit.exit_code == 0, explicit.output
    assert "one group" not in explicit.stderr
    assert json.loads(explicit.stdout)["cross_validation"] == doc["cross_validation"]


def test_one_run_is_fitted_without_cross_validation_and_says_so(tmp_path):
    """One measured run was refused with advice to name runs by source, which cannot help
    one run (a trial): it is fitted as --cv none fits it, with a note."""
    document = yaml.safe_load((EXAMPLES / "runs_example.yaml").read_text())
    document["runs"] = document["runs"][:1]
    one = tmp_path / "one.yaml"
    one.write_text(yaml.safe_dump(document))
    result = runner.invoke(app, ["calibrate", str(one), "--out", str(tmp_path / "c.yaml"),
                                 "--json"])
    assert result.exit_code == 0, result.output
    assert "note: one run cannot be cross-validated" in result.stderr
    doc = json.loads(result.stdout)
    assert doc["cross_validated"] is False and "cross_validation" not in doc


def test_calibrate_shows_what_it_moved_and_labels_what_it_kept(tmp_path):
    out = tmp_path / "c.yaml"
    result = runner.invoke(app, ["calibrate", str(EXAMPLES / "runs_example.yaml"),
                                 "--out", str(out), "--cv", "none"], terminal_width=200)
    assert result.exit_code == 0, result.output
    base = load_calibration("default")
    fitted = load_calibration(out)
    moved = fitted.stack_multiplier("torchtitan")
    assert moved != base.stack_multiplier("torchtitan")  # the auto fit frees only this
    assert (f"{base.stack_multiplier('torchtitan'):.6g} -> {moved:.6g}") in result.stdout
    # a constant the auto fit did not free keeps its value and says so in the file
    assert fitted.chi_a2a == base.chi_a2a
    assert fitted.sources["chi_a2a"].startswith("kept from 'default' (not freed by this fit)")


def test_a_node_total_given_per_gpu_is_flagged_below_the_peak(tmp_path):
    """Qwen3-30B-A3B on one DGX-B200 (the example's record, 9,299 tokens/s per GPU measured)
    entered with the node's 4x tokens/s (a 4-GPU node's total, or 4 steps' worth): its MFU
    stays under the peak, so only the ratio can say so (a trial's 8x slip at 7x the
    prediction passed the former 10x and pulled the fit)."""
    import yaml

    document = yaml.safe_load((EXAMPLES / "runs_example.yaml").read_text())
    run = next(r for r in document["runs"] if "qwen3" in r["id"])
    run["measured"]["tokens_per_s_per_gpu"] *= 4
    run["measured"]["step_time_s"] /= 4
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump(document))
    doc = json.loads(runner.invoke(app, ["validate", str(path), "--json"]).stdout)
    (entry,) = doc["aggregate"]["implausible_measurements"]
    assert entry["id"] == run["id"]
    assert "above the prediction" in entry["reason"] and "per node" in entry["reason"]
    assert "MFU" not in entry["reason"]


def test_a_software_typo_is_named_not_silently_costed_generic(tmp_path):
    """`software: Megatorn-LM 0.12` recognised no stack and moved a trial's prediction by 6%
    with no word from validate; the record is now named (text and --json)."""
    import yaml

    path = _torchtitan_record_with(tmp_path, "typo", 5762.0, 2.8435)
    document = yaml.safe_load(path.read_text())
    document["runs"][1].pop("stack", None)
    document["runs"][1]["software"] = "Megatorn-LM 0.12"
    path.write_text(yaml.safe_dump(document))
    shown = runner.invoke(app, ["validate", str(path)])
    assert shown.exit_code == 0, shown.output
    note = shown.output.split("record(s) name software no known stack")[1]
    assert "typo ('Megatorn-LM 0.12')" in note
    doc = json.loads(runner.invoke(app, ["validate", str(path), "--json"]).stdout)
    assert doc["aggregate"]["unrecognised_software"] == [
        {"id": "typo", "software": "Megatorn-LM 0.12"}]
    # a record that states `stack: other` chose the generic stack: not named (a review)
    document["runs"][1]["stack"] = "other"
    path.write_text(yaml.safe_dump(document))
    doc = json.loads(runner.invoke(app, ["validate", str(path), "--json"]).stdout)
    assert doc["aggregate"]["unrecognised_software"] == []


def test_scores_on_the_runs_a_profile_was_fitted_on_are_called_in_sample(tmp_path):
    """A trial validated its runs with the profile it had just fitted on them and quoted the
    MAPE as the model's: the profile now records its fitted runs and validate counts them."""
    runs = str(EXAMPLES / "runs_example.yaml")
    profile = tmp_path / "mine.yaml"
    fitted = runner.invoke(app, ["calibrate", runs, "--out", str(profile), "--cv", "none"])
    assert fitted.exit_code == 0, fitted.output
    import yaml

    fitted_runs = yaml.safe_load(profile.read_text())["coverage"]["fitted_runs"]
    assert fitted_runs and all(run_id.startswith("example-") for run_id in fitted_runs)
    mine = json.loads(runner.invoke(app, ["validate", runs, "--calibration", str(profile),
                                          "--json"]).stdout)
    assert mine["aggregate"]["in_sample_runs"] == len(fitted_runs)
    shown = runner.invoke(app, ["validate", runs, "--calibration", str(profile)])
    assert f"note: {len(fitted_runs)} of these runs are runs calibration 'mine'" in shown.output
    default = json.loads(runner.invoke(app, ["validate", runs, "--json"]).stdout)
    assert default["aggregate"]["in_sample_runs"] == 0


def test_calibrate_cross_validates_runs_without_a_moe_run(tmp_path):
    """A cross-validated fit on dense runs alone stopped with an internal error writing its
    MoE figure (a trial's torchtitan runs); the provenance gives the overall figure only."""
    document = yaml.safe_load((EXAMPLES / "runs_example.yaml").read_text())
    dense = next(r for r in document["runs"]
                 if r["id"] == "example-torchtitan-llama3.1-8b-h100-8-fsdp")
    runs = []
    for index, scale in enumerate((1.0, 0.9, 1.1)):
        run = copy.deepcopy(dense)
        run["id"] = f"dense-{index}"
        run["measured"]["tokens_per_s_per_gpu"] *= scale
        run["measured"].pop("step_time_s", None)
        runs.append(run)
    path = tmp_path / "dense.yaml"
    path.write_text(yaml.safe_dump({"runs": runs}, sort_keys=False))
    out = tmp_path / "calib.yaml"
    result = runner.invoke(app, ["calibrate", str(path), "--out", str(out), "--cv", "run",
                                 "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["cross_validation"]["moe_mape"] is None
    provenance = load_calibration(out).provenance
    assert f"tokens/s MAPE {report['cross_validation']['mape']:.1%}" in provenance
    assert "MoE" not in provenance.split("cross-validated")[1]


def test_calibrates_memory_table_counts_runs_over_the_headroom_before_and_after(tmp_path):
    """The memory-scale row for trained runs over the planning headroom gives its count at
    the starting scale beside the fitted one, as its other rows do (a trial read a lone
    number); the starting count is the runs validate puts over the headroom."""
    extra = Path(__file__).resolve().parents[2] / "src/mosaic/evaluate/data/extra_runs.yaml"
    document = yaml.safe_load(extra.read_text())
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump({"runs": document["runs"][:60]}, sort_keys=False))
    validated = json.loads(runner.invoke(app, ["validate", str(path), "--json"]).stdout)
    over_before = validated["aggregate"]["trained_runs_over_planning_headroom_ids"]
    assert over_before  # the first 60 records hold runs the headroom refuses
    result = runner.invoke(app, ["calibrate", str(path), "--out", str(tmp_path / "c.yaml"),
                                 "--cv", "none", "--fit-memory", "--json"])
    assert result.exit_code == 0, result.output
    fit = json.loads(result.stdout)["memory_scale"]
    assert fit["trained_over_headroom_before"] == len(over_before)
    text = runner.invoke(app, ["calibrate", str(path), "--out", str(tmp_path / "c.yaml"),
                               "--cv", "none", "--fit-memory"]).output
    row = next(line for line in text.splitlines() if "over the planning headroom" in line)
    assert f"{len(over_before)} -> {len(fit['trained_over_headroom'])}" in row


@pytest.mark.parametrize("calibration", ["paper-p6b200", "default"])
def test_validate_counts_runs_outside_the_calibrations_envelope_as_perf_places_each(
        calibration):
    """validate names how many runs lie outside its calibration's envelope, and in which
    dimensions (a trial scored H100 runs against paper-p6b200, fitted on B200 runs, without
    a word); each run's verdict is the one `mosaic perf RUNS.yaml#ID` gives it."""
    runs = EXAMPLES / "runs_example.yaml"
    result = runner.invoke(app, ["validate", str(runs), "--calibration", calibration,
                                 "--json"])
    assert result.exit_code == 0, result.output
    tally = json.loads(result.stdout)["outside_calibration_envelope"]
    expected: dict[str, int] = {}
    outside_ids = []
    for run in yaml.safe_load(runs.read_text())["runs"]:
        perf = runner.invoke(app, ["perf", f"{runs}#{run['id']}", "--calibration",
                                   calibration, "--json"])
        outside = json.loads(perf.stdout)["coverage"]["outside"]
        if outside:
            outside_ids.append(run["id"])
        for entry in outside:
            expected[entry["dimension"]] = expected.get(entry["dimension"], 0) + 1
    assert tally["runs"] == 4 and tally["ids"] == outside_ids
    assert tally["runs_outside"] == len(outside_ids) and tally["by_dimension"] == expected
    if calibration == "paper-p6b200":  # fitted on B200 NeMo MoE runs only
        assert tally["runs_outside"] == 4 and expected["stack"] == 4
    text = runner.invoke(app, ["validate", str(runs), "--calibration", calibration]).output
    assert (f"note: {len(outside_ids)} of 4 run(s)" in text) == bool(outside_ids)


TORCHTITAN_RUN = "example-torchtitan-llama3.1-8b-h100-8-fsdp"  # the example's one torchtitan run


def _calibrate_json(tmp_path: Path, *options: str) -> tuple[dict, str]:
    """`mosaic calibrate` on the example runs, left out one run at a time: its report and
    stderr."""
    result = runner.invoke(app, ["calibrate", str(EXAMPLES / "runs_example.yaml"), "--cv",
                                 "run", "--json", *options])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout), result.stderr


def test_cross_validation_scores_a_lone_stack_as_the_written_profile_predicts_it(tmp_path):
    """A trial's only torchtitan run was scored held out with the fold's shared multiplier
    while the profile written from the same other runs keeps the base's torchtitan value:
    its held-out error is now what `validate --calibration` gives that run under the profile
    `calibrate --exclude` writes without it (the base, default, was fitted on other runs)."""
    report, _ = _calibrate_json(tmp_path, "--out", str(tmp_path / "all.yaml"))
    held_out = report["cross_validation"]
    without = tmp_path / "without.yaml"
    _calibrate_json(tmp_path, "--exclude", TORCHTITAN_RUN, "--out", str(without))
    assert load_calibration(str(without)).stack_multiplier("torchtitan") == \
        load_calibration("default").stack_multiplier("torchtitan")  # kept, not fitted
    validated = json.loads(runner.invoke(app, ["validate", str(EXAMPLES / "runs_example.yaml"),
                                               "--calibration", str(without), "--json"]).stdout)
    error = next(row["error"] for row in validated["runs"] if row["id"] == TORCHTITAN_RUN)
    assert held_out["per_group_mape"][TORCHTITAN_RUN] == pytest.approx(abs(error), rel=1e-4)
    assert held_out["base_fitted_runs_recorded"] and TORCHTITAN_RUN in held_out[
        "base_values_kept_for"]


def test_cross_validation_over_a_base_fitted_on_the_runs_stays_strict(tmp_path):
    """A base fitted on the held-out runs (or one whose file does not say what it was fitted
    on) lends no fold its values, and calibrate says why."""
    fitted = tmp_path / "fitted.yaml"
    _calibrate_json(tmp_path, "--out", str(fitted))
    report, stderr = _calibrate_json(tmp_path, "--base", str(fitted), "--out",
                                     str(tmp_path / "again.yaml"))
    assert report["cross_validation"]["base_values_kept_for"] == []
    assert "'fitted' was fitted on runs of 3 held-out group(s)" in stderr
    document = yaml.safe_load(fitted.read_text())
    del document["coverage"]["fitted_runs"]
    older = tmp_path / "older.yaml"
    older.write_text(yaml.safe_dump(document))
    report, stderr = _calibrate_json(tmp_path, "--base", str(older), "--out",
                                     str(tmp_path / "again2.yaml"))
    held_out = report["cross_validation"]
    assert not held_out["base_fitted_runs_recorded"] and held_out["base_values_kept_for"] == []
    assert "does not record the runs it was fitted on" in stderr


def test_validate_table_shows_a_trained_record_without_throughput(tmp_path):
    # measured.trained (a shipped preset, no throughput): the table prints it, marked trained
    run = copy.deepcopy(yaml.safe_load((EXAMPLES / "runs_example.yaml").read_text())["runs"][0])
    run["measured"] = {"tokens_per_s_per_gpu": None, "step_time_s": None, "trained": True}
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump({"runs": [run]}))
    result = runner.invoke(app, ["-q", "validate", str(path)])
    assert result.exit_code == 0, result.output
    row = next(line for line in result.stdout.splitlines() if run["id"] in line)
    assert "trained" in row


def _example_runs_file(tmp_path: Path, name: str, run_ids: set[str]) -> Path:
    """The example runs file holding only ``run_ids``."""
    document = yaml.safe_load((EXAMPLES / "runs_example.yaml").read_text())
    document["runs"] = [run for run in document["runs"] if run["id"] in run_ids]
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def test_cross_validation_over_a_profile_that_kept_values_fitted_on_the_held_out_runs(tmp_path):
    """P1 fitted on runs A, P2 refitted over P1 on runs B keeps P1's values for what B lacks
    (A's torchtitan multiplier): a cross-validation over P2 holding out A's runs would score
    them in-sample under those values. P2 records them (coverage.inherited_runs), and the
    folds drop P2's values, as for a base fitted on the held-out runs."""
    runs_a = {TORCHTITAN_RUN, "example-bridge-qwen3-30b-a3b-b200-8-mxfp8"}
    file_a = _example_runs_file(tmp_path, "a", runs_a)
    file_b = _example_runs_file(tmp_path, "b", {"example-bridge-deepseekv3-gb200-256-bf16"})
    p1, p2 = tmp_path / "p1.yaml", tmp_path / "p2.yaml"
    for runs, base, out in ((file_a, "default", p1), (file_b, str(p1), p2)):
        result = runner.invoke(app, ["calibrate", str(runs), "--base", base, "--cv", "none",
                                     "--out", str(out)])
        assert result.exit_code == 0, result.output
    coverage = yaml.safe_load(p2.read_text())["coverage"]
    assert runs_a.isdisjoint(coverage["fitted_runs"])
    assert runs_a <= set(coverage["inherited_runs"])  # P1's own, kept by P2
    assert load_calibration(str(p2)).stack_multiplier("torchtitan") == \
        load_calibration(str(p1)).stack_multiplier("torchtitan")  # the kept value
    result = runner.invoke(app, ["calibrate", str(file_a), "--base", str(p2), "--cv", "run",
                                 "--json", "--out", str(tmp_path / "p3.yaml")])
    assert result.exit_code == 0, result.output
    held_out = json.loads(result.stdout)["cross_validation"]
    assert held_out["base_values_kept_for"] == []
    assert held_out["base_fitted_runs_recorded"] and held_out["base_inherited_runs_recorded"]
    assert "'p2' was fitted on runs of 2 held-out group(s)" in result.stderr
    # validate under P2 calls A's scores in-sample too: P2's kept values were fitted on them
    shown = json.loads(runner.invoke(app, ["validate", str(file_a), "--calibration", str(p2),
                                           "--json"]).stdout)
    assert shown["aggregate"]["in_sample_runs"] == len(runs_a)
    # and says why: P2 itself was not fitted on them (its note said it was)
    result = runner.invoke(app, ["-q", "validate", str(file_a), "--calibration", str(p2)])
    assert result.exit_code == 0, result.output
    assert "runs calibration 'p2' was fitted on:" not in result.stderr
    assert ("2 of these runs are runs that calibration 'p2', or the profile it kept values "
            "from, was fitted on") in " ".join(result.stderr.split())
