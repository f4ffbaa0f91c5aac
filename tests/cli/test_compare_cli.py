"""`mosaic compare`: two fixture jobs and two plans side by side, with their input differences."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from mosaic.arch import count_parameters
from mosaic.cli.contract import json_problems
from mosaic.cli.main import app
from mosaic.config.job_schema import load_job
from mosaic.config.model_file import load_model_file
from mosaic.errors import MosaicWarning
from mosaic.law import default_law

ROOT = Path(__file__).resolve().parents[2]
JOB = ROOT / "examples" / "appendix_e.yaml"
EXTRA_RUNS = ROOT / "src" / "mosaic" / "evaluate" / "data" / "extra_runs.yaml"
runner = CliRunner()


def invoke_json(*args: str) -> dict:
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture
def job_b(tmp_path) -> Path:
    """The Appendix E job with pp 8 and micro-batch 1, written with canonical field names
    where the original uses the listing's aliases (gbs, seqlen): no difference there."""
    document = yaml.safe_load(JOB.read_text())
    data = document.pop("data")
    document["batch"] = {"global_seqs": data["gbs"], "seq_len": data["seqlen"],
                         "micro_seqs": 1}
    document["parallelism"]["pp"] = 8
    path = tmp_path / "job_b.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def test_a_default_one_file_writes_out_is_no_difference(tmp_path):
    """A field only one job states is compared with the other job's resolved value: the
    schema's defaults written out (mtp_layers 0, qk_norm false) differ from nothing, a flag
    turned on differs from the other side's resolved false."""
    document = yaml.safe_load(JOB.read_text())
    document["model"].update(mtp_layers=0, qk_norm=False)
    same = tmp_path / "same.yaml"
    same.write_text(yaml.safe_dump(document))
    assert invoke_json("compare", str(JOB), str(same))["input_differences"] == []
    document["model"]["qk_norm"] = True
    other = tmp_path / "qk_norm.yaml"
    other.write_text(yaml.safe_dump(document))
    assert invoke_json("compare", str(JOB), str(other))["input_differences"] == [
        {"field": "model.qk_norm", "a": False, "b": True, "a_stated": False, "b_stated": True}]
    shown = runner.invoke(app, ["compare", str(JOB), str(other)])
    assert "false (resolved)" in shown.stdout


def test_a_run_record_and_the_job_it_exports_do_not_differ(tmp_path):
    """A record compares in its job's canonical fields, so it and its `export --to yaml`
    (release and recipe settings written out) have no input difference and one prediction."""
    record = f"{EXTRA_RUNS}#bridge2511-qwen3-30b-a3b-gb300-8-fp8mx"
    exported = tmp_path / "job.yaml"
    result = runner.invoke(app, ["export", record, "--to", "yaml", "--out", str(exported)])
    assert result.exit_code == 0, result.output
    assert yaml.safe_load(exported.read_text())["performance"]["stack_version"] == "25.11"
    doc = invoke_json("compare", record, str(exported))
    assert doc["input_differences"] == []
    step = next(r for r in doc["summary"] if r["quantity"] == "step_time_s")
    assert step["a"] == step["b"]


def test_two_jobs(job_b):
    doc = invoke_json("compare", str(JOB), str(job_b), "--days", "10",
                      "--price-per-gpu-hour", "2.5", "--currency", "EUR")
    assert doc["input_differences"] == [
        {"field": "parallelism.pp", "a": 16, "b": 8},
        {"field": "batch.micro_seqs", "a": 2, "b": 1},
    ]
    summary = {row["quantity"]: row for row in doc["summary"]}
    for side, path in (("a", JOB), ("b", job_b)):
        perf = invoke_json("perf", str(path))
        assert summary["step_time_s"][side] == perf["step_time_s"]
        assert summary["mfu"][side] == perf["mfu"]
        # Eq. 25 with goodput 1: D = tokens/s x 10 days
        assert summary["tokens"][side] == pytest.approx(perf["tokens_per_s"] * 10 * 86_400)
        counts = count_parameters(load_job(path).workload.geometry)
        loss = default_law().predict(float(counts.n_total), summary["tokens"][side],
                                     float(counts.sparsity), 4.0)
        assert summary["loss"][side] == pytest.approx(float(loss))
        assert summary["cost"][side] == pytest.approx(512 * 10 * 24 * 2.5)
        terms = {r["term"]: r[side] for r in doc["breakdown_s"]}
        assert sum(terms.values()) == pytest.approx(perf["step_time_s"])
        memory = {r["part"]: r[side] for r in doc["memory_breakdown_bytes"]}
        assert memory == pytest.approx(perf["memory_breakdown_bytes"])
    assert summary["step_time_s"]["ratio_b_over_a"] == pytest.approx(
        summary["step_time_s"]["b"] / summary["step_time_s"]["a"])
    assert doc["a"]["law_extrapolation"]  # ~440 B total parameters: beyond Table 2's data
    table = runner.invoke(app, ["compare", str(JOB), str(job_b),
                                "--price-per-gpu-hour", "2.5", "--currency", "EUR"])
    assert table.exit_code == 0, table.output
    for text in ("Inputs that differ", "parallelism.pp", "Step-time breakdown (s)",
                 "Memory breakdown per GPU (GiB)", "EUR", "extrapolating"):
        assert text in table.stdout
    # both step times to the millisecond, as perf prints them (a trial: '11.7' by '8.832')
    step_line = next(line for line in table.stdout.splitlines() if "step time" in line)
    for side in ("a", "b"):
        assert f"{summary['step_time_s'][side]:.3f}" in step_line
    # the window and goodput the tokens rest on are said when the command line leaves them
    assert doc["assumed"] == ["goodput 1, every second of the window training (--goodput)"]
    assert summary["goodput"]["a"] == summary["goodput"]["b"] == 1.0
    said = " ".join(table.stdout.split())
    assert ("Assumed where not given: a training window of 20 days for a job without "
            "training.tokens (--days)") in said
    stated = invoke_json("compare", str(JOB), str(job_b), "--days", "10", "--goodput", "0.8")
    assert stated["assumed"] == []
    tokens = {row["quantity"]: row for row in stated["summary"]}["tokens"]["a"]
    assert tokens == pytest.approx(0.8 * summary["tokens"]["a"])  # Eq. 25: D scales with it


def test_model_replaces_both_jobs_model_as_perf_does(job_b):
    """--model puts one geometry in both jobs (their layouts still differ), predicted as
    `mosaic perf --model` predicts each, and listed among the inputs of neither as a
    difference."""
    model = str(ROOT / "examples" / "q12_moe.yaml")
    doc = invoke_json("compare", str(JOB), str(job_b), "--model", model)
    assert [d["field"] for d in doc["input_differences"]] == ["parallelism.pp",
                                                             "batch.micro_seqs"]
    summary = {row["quantity"]: row for row in doc["summary"]}
    for side, path in (("a", JOB), ("b", job_b)):
        perf = invoke_json("perf", str(path), "--model", model)
        assert summary["step_time_s"][side] == perf["step_time_s"]
    # both sides hold the q=12 geometry (Table 4's), not Appendix E's own
    q12 = count_parameters(load_model_file(Path(model)))
    assert summary["n_active"]["a"] == summary["n_active"]["b"] == float(q12.n_active)
    assert summary["n_active"]["a"] != float(
        count_parameters(load_job(JOB).workload.geometry).n_active)


def test_compare_says_which_job_does_not_fit(tmp_path):
    """pp 2 puts 24 of the 48 layers on a rank: over the usable 90% of a B200 (perf agrees)."""
    document = yaml.safe_load(JOB.read_text())
    document["parallelism"]["pp"] = 2
    oom = tmp_path / "oom.yaml"
    oom.write_text(yaml.safe_dump(document))
    perf = invoke_json("perf", str(oom))
    assert not perf["feasible"]
    doc = invoke_json("compare", str(oom), str(JOB))
    assert doc["a"]["feasible"] is False and doc["b"]["feasible"] is True
    usable = perf["usable_memory_fraction"] * perf["memory_capacity_gib"]
    assert doc["a"]["usable_memory_gib"] == pytest.approx(usable)
    assert doc["a"]["memory_fit"].endswith(f"({perf['overshoot_gib']:.2f} GiB over the "
                                           "usable 90%)")
    assert f"of {usable:.1f} usable (90% of" in doc["a"]["memory_fit"]
    assert doc["b"]["memory_fit"].endswith(", fits")
    table = runner.invoke(app, ["compare", str(oom), str(JOB)], terminal_width=200)
    assert table.exit_code == 0, table.output
    assert "A memory per GPU" in table.stdout and "OUT OF MEMORY" in table.stdout


@pytest.fixture(scope="module")
def plans(tmp_path_factory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("plans")
    paths = []
    for days in ("5", "10"):
        result = runner.invoke(app, ["plan", "--nodes", "8", "--days", days, "--q", "8,10",
                                     "--experts", "8,16", "--top-k", "1,2", "--split-factor",
                                     "1,2", "--price-per-gpu-hour", "3", "--json"])
        assert result.exit_code == 0, result.output
        paths.append(folder / f"plan_{days}.json")
        paths[-1].write_text(result.output)
    return paths[0], paths[1]


def test_two_plans(plans):
    a_path, b_path = plans
    doc = invoke_json("compare", str(a_path), str(b_path))  # each plan's own USD price
    fields = {d["field"]: (d["a"], d["b"]) for d in doc["input_differences"]}
    assert fields["envelope.days"] == (5.0, 10.0)
    assert doc["assumed"] == []  # a plan carries its own window and goodput
    assert fields["envelope.gpu_hours"] == (5 * 24 * 64, 10 * 24 * 64)
    assert not any(f.startswith("search_space") for f in fields)
    summary = {row["quantity"]: row for row in doc["summary"]}
    plan_a = json.loads(a_path.read_text())
    assert summary["loss"]["a"] == plan_a["optimum"]["loss"]
    assert summary["tokens"]["a"] == plan_a["optimum"]["tokens"]
    assert summary["cost"]["b"] == pytest.approx(10 * 24 * 64 * 3)
    assert summary["goodput"]["a"] == plan_a["envelope"]["goodput"]["goodput"]
    assert summary["loss"]["b"] <= summary["loss"]["a"]  # twice the window, no worse a loss
    headroom = plan_a["envelope"]["memory_headroom"]
    assert summary["usable_memory_gib"]["a"] == pytest.approx(
        headroom["usable_memory_bytes"] / 2**30)
    assert doc["a"]["memory_fit"].endswith(", fits")
    # HFU counts recompute and attention on top of MFU's 6·N_act·D
    assert summary["hfu"]["a"] == plan_a["optimum_step"]["hfu"] >= summary["mfu"]["a"]
    # the price each cost rests on, and the chosen models (a trial saw neither)
    assert summary["price_per_gpu_hour"]["a"] == 3.0
    table = runner.invoke(app, ["compare", str(a_path), str(b_path)]).stdout
    said = " ".join(table.split())
    assert "price per GPU-hour │ 3 USD │ 3 USD" in said
    o = plan_a["optimum"]
    assert (f"A model │ q={o['q']} ({o['layers']} layers, d={o['d_model']}), E={o['experts']} "
            f"K={o['top_k']} G={o['split_factor']:g}, S = {o['sparsity']:.4f}") in said
    # input values print as numbers, not Python floats' long forms
    assert "envelope.days │ 5 │ 10" in said and "envelope.days │ 5.0" not in said


def test_two_plans_carry_what_each_said_of_itself(plans):
    """A trial compared two plans and saw neither the winner's extrapolated layout nor the
    other's memory interval past usable memory, nor that --price-per-gpu-hour had replaced
    the plans' prices, nor that the loss gap lay inside both loss intervals."""
    a_path, b_path = plans
    doc = invoke_json("compare", str(a_path), str(b_path))
    plan_a = json.loads(a_path.read_text())
    coverage = plan_a["optimum"]["coverage"]
    said = ([f"outside the calibrated envelope: {o['dimension']}" for o in coverage["outside"]]
            + (coverage["note"].split("; ") if coverage["note"] else []))
    assert said and all(any(c.startswith(s.split(":")[0]) for c in doc["a"]["caveats"])
                        for s in said)
    (candidate,) = [c for c in plan_a["uncertainty_candidates"]
                    if all(c[k] == plan_a["optimum"][k]
                           for k in ("q", "experts", "top_k", "split_factor"))]
    assert doc["a"]["loss_interval"] == candidate["loss_interval"]
    assert doc["a"]["replaced_price_per_gpu_hour"] is None  # its own price kept
    text = " ".join(runner.invoke(app, ["compare", str(a_path), str(b_path),
                                        "--price-per-gpu-hour", "5"]).stdout.split())
    assert "--price-per-gpu-hour replaces A's own 3 and B's own 3 USD per GPU-hour" in text
    assert "What each prediction said of itself" in text
    low_a, high_a = doc["a"]["loss_interval"]
    gap = abs(doc["b"]["loss"] - doc["a"]["loss"])
    assert f"loss gap {gap:.4f} nats; 90% loss intervals {high_a - low_a:.4f} (A)" in text


def test_the_loss_gap_says_what_its_intervals_drew(plans, tmp_path):
    """A plan made without --bootstrap-samples takes the law's coefficients as exact
    (docs/plan.md): its loss interval holds the throughput's spread alone, zero wide at the
    tokens-per-parameter cap. A review compared two such plans and read "0.0000 (A) and
    0.0000 (B) wide: the intervals do not overlap", as if the law told them apart."""
    a_path, b_path = plans
    plan_a = json.loads(a_path.read_text())
    assert [s.split(":")[0] for s in plan_a["uncertainty"]["sources"]] == [
        "performance", "not the law's"]
    doc = invoke_json("compare", str(a_path), str(b_path))
    assert doc["a"]["loss_interval_draws"] == doc["b"]["loss_interval_draws"] == "throughput"
    text = " ".join(runner.invoke(app, ["compare", str(a_path), str(b_path)]).stdout.split())
    assert ("wide, over the throughput uncertainty (the law's coefficients taken as exact in "
            "A and B: plan with --bootstrap-samples to include them):") in text
    # a plan whose intervals drew the law's samples too is named as such
    plan_a["uncertainty"]["sources"][1:] = []
    plan_a["uncertainty"]["sources"].insert(0, "law: 40 coefficient samples")
    with_law = tmp_path / "with_law.json"
    with_law.write_text(json.dumps(plan_a))
    text = " ".join(runner.invoke(app, ["compare", str(with_law), str(b_path)]).stdout.split())
    assert ("over the law and throughput (A) and throughput (B) uncertainty (the law's "
            "coefficients taken as exact in B:") in text


def test_job_with_plan_is_one_line_error(plans):
    result = runner.invoke(app, ["compare", str(JOB), str(plans[0])])
    assert result.exit_code == 2
    assert "compare two jobs (YAML or JSON) or two plans" in result.output
    # the way out: the plan's pick as a job file (a trial compared PLAN.json with its export)
    text = " ".join(result.output.split())
    assert f"mosaic export {plans[0]} --to yaml --out job.yaml" in text


def test_a_job_written_as_json_compares_as_a_job(tmp_path):
    """perf and export read a job written as JSON; compare refused it as 'not a plan
    document' (a fuzz trial)."""
    as_json = tmp_path / "job.json"
    as_json.write_text(json.dumps(yaml.safe_load(JOB.read_text())))
    result = runner.invoke(app, ["compare", str(as_json), str(JOB), "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["a"]["step_time_s"] == document["b"]["step_time_s"]


@pytest.mark.parametrize("option", [["--days", "5"], ["--goodput", "0.9"],
                                    ["--calibration", "default"],
                                    # a plan carries its own profile: not one per side either
                                    ["--calibration", "default,paper-p6b200"],
                                    ["--model", str(ROOT / "examples" / "q12_moe.yaml")]])
def test_job_options_with_two_plans_are_refused_not_ignored(plans, option):
    result = runner.invoke(app, ["compare", str(plans[0]), str(plans[1]), *option])
    assert result.exit_code == 2, result.output
    assert f"{option[0]} set the jobs' side of a comparison" in result.output


def test_a_hybrid_model_has_no_loss_and_says_why_once():
    """The paper's law describes transformers: a hybrid side gets no loss, the reason in
    loss_note, and no extrapolation flags that would repeat it."""
    doc = invoke_json("compare", str(ROOT / "examples" / "nemotron_3_nano_b200.yaml"),
                      str(JOB))
    assert doc["a"]["loss"] is None and "hybrid SSM/attention" in doc["a"]["loss_note"]
    assert doc["a"]["law_extrapolation"] == []
    assert doc["b"]["loss"] is not None and "loss_note" not in doc["b"]


def test_a_plan_whose_tokens_hit_the_tpp_cap_is_marked(plans, tmp_path):
    """A q=4 model over 30 days on 64 GPUs reaches the tokens-per-parameter cap: its D is
    tpp_max x N_act, not tokens/s x T x goodput, and compare says so (found by a new-user
    trial: the capped D sat under the formula's label)."""
    capped = tmp_path / "capped.json"
    result = runner.invoke(app, ["plan", "--nodes", "8", "--days", "30", "--q", "4",
                                 "--experts", "8", "--top-k", "1", "--split-factor", "1",
                                 "--json"])
    assert result.exit_code == 0, result.output
    capped.write_text(result.output)
    optimum = json.loads(result.output)["optimum"]
    assert optimum["tpp_capped"]
    doc = invoke_json("compare", str(plans[0]), str(capped))
    assert doc["b"]["tokens_capped"] and not doc["a"]["tokens_capped"]
    table = runner.invoke(app, ["compare", str(plans[0]), str(capped)])
    assert "(capped)" in table.stdout and "tokens-per-parameter cap" in table.stdout


def test_a_job_that_does_not_fit_has_its_tokens_and_loss_marked(tmp_path):
    """The Appendix E job without its pipeline (pp 1) needs far more than a B200 holds: its
    tokens and loss are marked (no fit) with a line saying what they mean (found by a new-user
    trial: they were shown as if the job ran)."""
    document = yaml.safe_load(JOB.read_text())
    document["parallelism"]["pp"] = 1
    unpipelined = tmp_path / "pp1.yaml"
    unpipelined.write_text(yaml.safe_dump(document))
    doc = invoke_json("compare", str(JOB), str(unpipelined))
    assert doc["a"]["feasible"] and not doc["b"]["feasible"]
    table = runner.invoke(app, ["compare", str(JOB), str(unpipelined)])
    rows = {line.split("│")[1].strip(): line for line in table.stdout.splitlines()
            if line.count("│") >= 4}
    assert "(no fit)" in rows["loss (law)"] and rows["loss (law)"].count("(no fit)") == 1
    assert "(no fit)" not in rows["GPU-hours"]
    assert "does not fit its GPUs' usable memory" in table.stdout



def test_a_currency_without_a_price_is_refused_not_a_relabelled_usd_cost(plans):
    """Each plan carries its own price in USD: --currency EUR alone labelled that USD cost
    EUR (found by a new-user trial); with a price it names that price's currency."""
    alone = runner.invoke(app, ["compare", str(plans[0]), str(plans[1]), "--currency", "EUR"])
    assert alone.exit_code == 2 and "give both" in alone.output
    doc = invoke_json("compare", str(plans[0]), str(plans[1]), "--currency", "EUR",
                      "--price-per-gpu-hour", "2")
    assert doc["currency"] == "EUR"
    assert {row["quantity"]: row for row in doc["summary"]}["cost"]["a"] == pytest.approx(
        5 * 24 * 64 * 2)


def test_a_job_that_states_its_tokens_is_compared_at_them(tmp_path):
    """An exported plan states training.tokens; compare ignored them and put the job at a
    20-day window (another D, another loss) while perf used them (a trial). The stated D
    is used and the window is the time its steps take: steps x step time / goodput."""
    document = yaml.safe_load(JOB.read_text())
    document["training"] = {"tokens": 1.0e12}
    stated = tmp_path / "stated.yaml"
    stated.write_text(yaml.safe_dump(document))
    compared = invoke_json("compare", str(stated), str(JOB), "--goodput", "0.9")
    a, b = compared["a"], compared["b"]
    assert a["tokens_stated"] and not b["tokens_stated"]
    assert a["tokens"] == 1.0e12
    steps = -(-1.0e12 // (8192 * 8192))  # whole steps of gbs 8192 x seq 8192
    assert a["days"] == pytest.approx(steps * a["step_time_s"] / 86_400 / 0.9, rel=1e-9)
    assert a["loss"] == pytest.approx(float(default_law().predict(
        a["n_total"], 1.0e12, 1 - a["n_active"] / a["n_total"],
        load_job(JOB).workload.geometry.split_factor)), rel=1e-9)
    assert b["days"] == 20.0 and any("20 days" in text for text in compared["assumed"])
    result = runner.invoke(app, ["compare", str(stated), str(stated)])
    assert result.exit_code == 0, result.output
    assert "(stated): the job's training.tokens" in result.stdout
    assert "20 days" not in result.stdout  # no window was assumed for either


def test_input_differences_print_as_many_digits_as_tell_them_apart():
    """Two values that differ past the sixth digit printed alike in the table of what
    differs (a review)."""
    from mosaic.report.comparison import input_text as _input_text

    row = {"field": "training.tokens", "a": 1.0e11, "b": 1.0000004e11}
    assert (_input_text(row, "a"), _input_text(row, "b")) == ("1e+11", "1.0000004e+11")
    assert _input_text({"field": "envelope.days", "a": 5.0, "b": 10.0}, "b") == "10"


@pytest.mark.parametrize("damage, message", [
    (lambda doc: [], "no 'optimum'"),
    (lambda doc: doc | {"optimum": [doc["optimum"]]}, "'optimum' is a list"),
    (lambda doc: doc | {"optimum": doc["optimum"] | {"loss": "x"}},
     "optimum.loss is 'x'"),
    (lambda doc: doc | {"optimum": doc["optimum"] | {"experts": "many"}}, "not a well-formed"),
    # a later fuzz trial: a negative step, a NaN loss and a negative window were compared
    (lambda doc: doc | {"optimum": doc["optimum"] | {"step_time_s": -6.0}},
     "optimum.step_time_s is -6.0; a `mosaic plan --json` document holds a finite"),
    (lambda doc: doc | {"optimum": doc["optimum"] | {"loss": float("nan")}}, "optimum.loss is nan"),
    (lambda doc: doc | {"envelope": doc["envelope"] | {"days": -20.0}}, "envelope.days is -20.0"),
    # a hand-edited train_days of 0 costed that side at 0 GPU-hours (a review); a window of
    # 0 days was shown beside the window's GPU-hours
    (lambda doc: doc | {"optimum": doc["optimum"] | {"train_days": 0}},
     "optimum.train_days is 0; a `mosaic plan --json` document holds a finite, positive"),
    (lambda doc: doc | {"optimum": doc["optimum"] | {"train_days": float("inf")}},
     "optimum.train_days is inf; a `mosaic plan --json` document holds a finite, positive"),
    (lambda doc: doc | {"envelope": doc["envelope"] | {"days": 0.0}},
     "envelope.days is 0.0; a `mosaic plan --json` document holds a finite, positive"),
    # a hand-edited window of 0 GPU-hours was shown beside the side's priced cost
    (lambda doc: doc | {"envelope": doc["envelope"] | {"gpu_hours": 0}},
     "envelope.gpu_hours is 0; a `mosaic plan --json` document holds a finite, positive"),
    (lambda doc: doc | {"envelope": doc["envelope"] | {"gpu_hours": float("inf")}},
     "envelope.gpu_hours is inf; a `mosaic plan --json` document holds a finite, positive"),
    (lambda doc: doc | {"optimum": doc["optimum"] | {"experts": 0}},
     "damaged.json: moe.experts must be a positive integer"),
    # a later fuzz trial: nodes "12" was listed as a difference, both costed on 256 GPUs
    (lambda doc: doc | {"envelope": doc["envelope"] | {"nodes": "12"}},
     "envelope.nodes is '12'; a `mosaic plan --json` document holds a whole number"),
    (lambda doc: doc | {"envelope": doc["envelope"] | {"nodes": doc["envelope"]["nodes"] + 1}},
     "x gpus_per_node 8 is not its n_devices"),
    # a later fuzz trial: a block of the wrong type or a text price ended in a traceback
    (lambda doc: doc | {"assumptions": doc["assumptions"] | {"law": 0.5}},
     "'assumptions.law' is a float; a `mosaic plan --json` document holds a mapping there"),
    (lambda doc: doc | {"optimum": doc["optimum"] | {"extrapolation": 7}},
     "'optimum.extrapolation' is a int"),
    (lambda doc: doc | {"optimum": doc["optimum"] | {"coverage": {"outside": -1}}},
     "'optimum.coverage.outside' is a int; a `mosaic plan --json` document holds a list"),
    (lambda doc: doc | {"uncertainty_candidates": [1]},
     "'uncertainty_candidates' holds a non-mapping entry"),
    (lambda doc: doc | {"uncertainty_candidates": [{"loss_interval": "ab", **{
        k: doc["optimum"][k] for k in ("q", "experts", "top_k", "split_factor")}}]},
     "loss_interval is 'ab'; a `mosaic plan --json` document holds two finite numbers"),
    # a 400-digit term of the optimum's step was echoed into the comparison (a fuzz trial)
    (lambda doc: doc | {"optimum_step": doc["optimum_step"] | {"breakdown_s": {"dp": 10**400}}},
     "optimum_step.breakdown_s.dp is a huge integer; a `mosaic plan --json` document holds"),
    (lambda doc: doc | {"price_usd_per_gpu_hour": "abc"},
     "price_usd_per_gpu_hour is 'abc'; a `mosaic plan --json` document holds a finite"),
    # a 400-digit search-space bound was listed among the inputs that differ (a fuzz trial)
    (lambda doc: doc | {"search_space": doc["search_space"] | {"s_min": 10**400}},
     "search_space.s_min is a huge integer; a `mosaic plan --json` document holds a finite"),
    # plan documents mutated field by field: a usable share 'abc' was repeated by the
    # device's bytes (MemoryError), -1 gave a negative usable memory, and a goodput above 1
    # and a loss or MFU beyond any run were compared as given
    (lambda doc: doc | {"envelope": doc["envelope"] | {"memory_headroom": doc["envelope"][
        "memory_headroom"] | {"usable_memory_fraction": "abc"}}},
     "envelope.memory_headroom.usable_memory_fraction: got 'abc'; allowed: a number in (0, 1]"),
    (lambda doc: doc | {"envelope": doc["envelope"] | {"memory_headroom": doc["envelope"][
        "memory_headroom"] | {"usable_memory_fraction": -1}}},
     "usable_memory_fraction: got -1; allowed: a number in (0, 1]"),
    (lambda doc: doc | {"envelope": doc["envelope"] | {"goodput": doc["envelope"][
        "goodput"] | {"goodput": 1.5}}},
     "envelope.goodput.goodput: got 1.5; allowed: a number in (0, 1]"),
    (lambda doc: doc | {"optimum": doc["optimum"] | {"loss": 1e30}},
     "optimum.loss: got 1e+30; allowed: a number in 0..50"),
    (lambda doc: doc | {"optimum": doc["optimum"] | {"mfu": 7.0}},
     "optimum.mfu: got 7.0; allowed: a number in (0, 6]"),
])
def test_a_damaged_plan_is_refused_in_one_line(plans, tmp_path, damage, message):
    """compare crashed ("internal error") on a list, a list optimum or a string loss, and
    printed E=many (a fuzz trial); it now makes export's checks."""
    damaged = tmp_path / "damaged.json"
    damaged.write_text(json.dumps(damage(json.loads(plans[0].read_text()))))
    result = runner.invoke(app, ["compare", str(plans[0]), str(damaged)])
    assert result.exit_code == 2 and message in result.output, result.output


def test_a_plans_goodput_travels_with_its_exported_job(tmp_path):
    """A Young-Daly plan's goodput (0.95 here) was dropped by `export --to yaml`, so compare
    and perf gave its job a window 5% shorter and 5% fewer GPU-hours than the plan (a
    trial): training.goodput now carries it, and the job's window is the plan's."""
    plan = runner.invoke(app, ["plan", "--nodes", "8", "--days", "5", "--q", "8",
                               "--experts", "16", "--top-k", "1", "--split-factor", "2",
                               "--mtbf-gpu-hours", "2000", "--checkpoint-s", "120",
                               "--restart-s", "600", "--json"])
    assert plan.exit_code == 0, plan.output
    plan_doc = json.loads(plan.stdout)
    goodput = plan_doc["envelope"]["goodput"]["goodput"]
    assert 0.9 < goodput < 1.0
    (tmp_path / "plan.json").write_text(plan.stdout)
    job = tmp_path / "job.yaml"
    exported = runner.invoke(app, ["export", str(tmp_path / "plan.json"), "--to", "yaml",
                                   "--out", str(job)])
    assert exported.exit_code == 0, exported.output
    assert yaml.safe_load(job.read_text())["training"]["goodput"] == pytest.approx(goodput)
    doc = invoke_json("compare", str(job), str(job))
    summary = {row["quantity"]: row for row in doc["summary"]}
    assert summary["goodput"]["a"] == pytest.approx(goodput)
    assert summary["days"]["a"] == pytest.approx(plan_doc["optimum"]["train_days"], rel=1e-3)
    assert not any("--goodput" in text for text in doc["assumed"])


def test_a_plans_runner_up_can_be_compared_and_exported(plans, tmp_path):
    """`compare` and `export` took only a plan's optimum, so "why not the runner-up?" needed
    a hand-written job (a trial): PLAN.json#N names the rank-N candidate (1 the optimum)."""
    path = plans[0]
    plan = json.loads(path.read_text())
    runner_up = plan["candidates"][1]
    doc = invoke_json("compare", str(path), f"{path}#2")
    summary = {row["quantity"]: row for row in doc["summary"]}
    assert summary["loss"]["a"] == plan["optimum"]["loss"]
    assert summary["loss"]["b"] == runner_up["loss"] >= plan["optimum"]["loss"]
    # the runner-up carries its own law extrapolation flags (the optimum's alone did)
    flags = [f["message"] for f in runner_up["extrapolation"]["flags"]]
    assert flags and doc["b"]["law_extrapolation"] == flags
    assert doc["a"]["law_extrapolation"] != flags
    # the inputs that differ are the two candidates' geometry (and layout) fields, the only
    # inputs two candidates of one plan do not share (a trial read "(none)")
    differing = {row["field"]: (row["a"], row["b"]) for row in doc["input_differences"]}
    for axis in ("q", "experts", "top_k", "split_factor"):
        if plan["optimum"][axis] != runner_up[axis]:
            assert differing[f"geometry.{axis}"] == (plan["optimum"][axis], runner_up[axis])
    assert differing and all(f.startswith(("geometry.", "layout.")) for f in differing)
    exported = runner.invoke(app, ["export", f"{path}#2", "--to", "yaml", "--out",
                                   str(tmp_path / "runner_up.yaml")])
    assert exported.exit_code == 0, exported.output
    job = yaml.safe_load((tmp_path / "runner_up.yaml").read_text())
    assert job["model"]["moe"]["experts"] == runner_up["experts"]
    assert invoke_json("compare", str(path), f"{path}#1")["summary"] == invoke_json(
        "compare", str(path), str(path))["summary"]
    bad = runner.invoke(app, ["compare", str(path), f"{path}#0"])
    assert bad.exit_code == 2 and "must be a candidate's rank" in bad.output


def test_a_ranked_candidate_has_no_breakdowns_and_says_so(plans):
    """A plan file holds its optimum's breakdowns only: comparing with #2 printed the
    runner-up's every term as 0 (a review); the breakdowns are left out, with how to get
    them, and a superscript digit is no rank."""
    path = plans[0]
    doc = invoke_json("compare", str(path), f"{path}#2")
    assert doc["breakdown_s"] == [] and doc["memory_breakdown_bytes"] == []
    # its null HFU says why (the CLI contract: no bare null where a number belongs)
    assert doc["b"]["hfu"] is None and "no HFU" in doc["b"]["hfu_note"]
    assert not json_problems(doc) and "hfu_note" not in doc["a"]
    table = runner.invoke(app, ["compare", str(path), f"{path}#2"])
    assert table.exit_code == 0 and "a plan file holds its optimum's only" in table.output
    # an optimum without HFU (a plan written before plans recorded it) is no candidate
    older = json.loads(path.read_text())
    del older["optimum_step"]["hfu"]
    old_path = path.with_name("older_plan.json")
    old_path.write_text(json.dumps(older))
    note = invoke_json("compare", str(path), str(old_path))["b"]["hfu_note"]
    assert "written before" in note and "candidate" not in note
    odd = runner.invoke(app, ["compare", str(path), f"{path}#²"])
    assert odd.exit_code == 2 and "must be a candidate's rank" in odd.output


def test_a_plan_missing_a_figure_is_refused_or_its_null_says_why(plans):
    """A hand-edited plan without one of its optimum's figures gave a bare null (the CLI
    contract asks a reason beside each), and one without its optimum step's memory
    breakdown a TypeError: a figure every plan writes for each candidate (loss, step time,
    ...) and a half step breakdown are refused in one line; an envelope field a plan may
    lack (days, goodput, the memory headroom) leaves its figure null with a note naming it."""
    path = plans[0]
    document = json.loads(path.read_text())

    def edited(block: str, field: str) -> Path:
        changed = json.loads(json.dumps(document))
        del changed[block][field]
        out = path.with_name(f"no_{block}_{field}.json")
        out.write_text(json.dumps(changed))
        return out

    for block, field in (("optimum", "loss"), ("optimum", "step_time_s"),
                         ("optimum_step", "memory_breakdown_bytes"),
                         ("optimum_step", "breakdown_s")):
        result = runner.invoke(app, ["compare", str(path), str(edited(block, field)),
                                     "--json"])
        assert result.exit_code == 2, (field, result.output)
        assert result.output.strip().endswith(
            f"{block} has no field {field!r}; expected the output of `mosaic plan --json`")
        assert len(result.output.strip().splitlines()) == 1
    for field, key, named in (("days", "days", "envelope.days"),
                              ("goodput", "goodput", "envelope.goodput.goodput"),
                              ("memory_headroom", "usable_memory_gib",
                               "envelope.memory_headroom.usable_memory_fraction")):
        doc = invoke_json("compare", str(path), str(edited("envelope", field)))
        assert doc["b"][key] is None and named in doc["b"][f"{key}_note"]
        assert f"{key}_note" not in doc["a"] and doc["a"][key] is not None
        # each note sits beside its own null only: the other side's figures are checked too
        assert not json_problems({k: v for k, v in doc["b"].items()
                                  if k not in {f"{key}_note", key}})


def test_a_stated_goodput_without_tokens_sets_the_jobs_window(tmp_path):
    """training.goodput without training.tokens was ignored for the --goodput default of 1
    (a review); the job's own goodput counts, and it survives export --to yaml."""
    document = yaml.safe_load((ROOT / "examples" / "fsdp_moe_comm_bound.yaml").read_text())
    document["training"] = {"goodput": 0.9}
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(document))
    doc = invoke_json("compare", str(job), str(job))
    summary = {row["quantity"]: row for row in doc["summary"]}
    assert summary["goodput"]["a"] == 0.9
    assert not any("--goodput" in text for text in doc["assumed"])
    exported = runner.invoke(app, ["export", str(job), "--to", "yaml", "--out",
                                   str(tmp_path / "again.yaml")])
    assert exported.exit_code == 0, exported.output
    assert yaml.safe_load((tmp_path / "again.yaml").read_text())["training"] == {"goodput": 0.9}


def test_a_law_files_caveats_are_repeated_when_comparing_with_it(tmp_path):
    """Every command that takes --law repeats its fit's caveats; `compare` did not (review)."""
    from dataclasses import replace

    shaky = replace(default_law(), provenance={"metrics": {"n_heldout": 0}})
    law_path = tmp_path / "shaky.json"
    shaky.save(law_path)
    with pytest.warns(MosaicWarning, match="held no run out"):
        result = runner.invoke(app, ["compare", str(JOB), str(JOB), "--law", str(law_path)])
    assert result.exit_code == 0, result.output


def test_two_run_records_show_their_measurements_beside_the_prediction():
    """A trial compared two of its runs and found no measured column: the measured step
    time and tokens/s per GPU (the step's tokens over the measured step, per GPU) now sit
    under the predicted ones, with their B / A."""
    from mosaic.config.run_records import load_run_records

    examples = ROOT / "examples" / "runs_example.yaml"
    records = load_run_records(examples).records[:2]
    doc = invoke_json("compare", f"{examples}#{records[0].id}", f"{examples}#{records[1].id}")
    rows = {row["quantity"]: row for row in doc["summary"]}
    for side, record in zip(("a", "b"), records, strict=True):
        step = record.measured_step_time_s
        tokens = record.workload.global_batch * record.workload.seq_len
        assert rows["measured_step_time_s"][side] == step
        assert rows["measured_tokens_per_s_per_gpu"][side] == pytest.approx(
            tokens / step / record.n_devices)
    quantities = [row["quantity"] for row in doc["summary"]]
    assert quantities.index("measured_step_time_s") == quantities.index(
        "tokens_per_s_per_gpu") + 1
    jobs = invoke_json("compare", str(ROOT / "examples" / "appendix_e.yaml"),
                       str(ROOT / "examples" / "appendix_e.yaml"))
    assert "measured_step_time_s" not in [row["quantity"] for row in jobs["summary"]]


def test_each_side_names_the_profile_and_memory_scale_it_was_predicted_with(tmp_path):
    """A trial found compare's JSON silent about the profile a team passed."""
    import dataclasses

    from mosaic.perf.calibration import default_calibration

    scaled = dataclasses.replace(default_calibration(), name="acme", memory_scale=1.2)
    profile = tmp_path / "acme.yaml"
    profile.write_text(yaml.safe_dump(scaled.to_document()))
    doc = invoke_json("compare", str(JOB), str(JOB), "--calibration", str(profile))
    assert (doc["a"]["calibration"], doc["a"]["memory_scale"]) == ("acme", 1.2)
    plain = invoke_json("compare", str(JOB), str(JOB))
    assert (plain["b"]["calibration"], plain["b"]["memory_scale"]) == ("default", 1.0)
    assert doc["a"]["memory_gib"] > plain["a"]["memory_gib"]


def test_two_jobs_on_two_gpu_kinds_take_a_price_each(job_b):
    """One price for both sides costed a B200 job at an H100 price (a lead's trial): 'A,B'
    prices each side; a third value, a zero or text is refused in one line."""
    a = str(JOB)
    doc = invoke_json("compare", a, str(job_b), "--price-per-gpu-hour", "2.5,5")
    summary = {row["quantity"]: row for row in doc["summary"]}
    assert (summary["price_per_gpu_hour"]["a"], summary["price_per_gpu_hour"]["b"]) == (2.5, 5)
    assert summary["cost"]["b"] == pytest.approx(summary["gpu_hours"]["b"] * 5)
    for bad in ("1,2,3", "2.5,0", "cheap", "2.5,,5"):
        result = runner.invoke(app, ["compare", a, str(job_b), "--price-per-gpu-hour", bad])
        assert result.exit_code == 2 and "must be one positive number, or two" in result.output


def test_the_cost_per_token_row_is_price_x_gpus_x_step_over_tokens_per_step(job_b):
    """A lead asked which of two jobs trains a token cheaper: the cost row is each window's
    (1.600x for an H100 and a B200 job at 2.5 and 4 USD, 1.046x per token in the trial), so
    the comparison carries the cost per million tokens, checked here against the perf
    step: price x GPUs x step time / 3600 / tokens per step."""
    doc = invoke_json("compare", str(JOB), str(job_b), "--price-per-gpu-hour", "2.5,5",
                      "--goodput", "0.8")
    summary = {row["quantity"]: row for row in doc["summary"]}
    tokens_per_step = 8192 * 8192  # appendix_e.yaml's gbs x seqlen, both sides
    for side, path, price in (("a", JOB, 2.5), ("b", job_b, 5.0)):
        perf = invoke_json("perf", str(path))
        expected = (price * perf["hardware"]["devices"] * perf["step_time_s"] / 3600
                    / tokens_per_step / 0.8 * 1e6)  # the goodput's idle time is paid for
        assert summary["cost_per_million_tokens"][side] == pytest.approx(expected, rel=1e-9)
    row = summary["cost_per_million_tokens"]
    assert row["ratio_b_over_a"] == pytest.approx(row["b"] / row["a"])
    text = " ".join(runner.invoke(app, ["compare", str(JOB), str(job_b),
                                        "--price-per-gpu-hour", "2.5,5"]).stdout.split())
    assert "cost per million tokens" in text
    # unpriced, the null says why (the JSON contract; a fuzz trial found it bare)
    unpriced = invoke_json("compare", str(JOB), str(job_b))
    for side in ("a", "b"):
        assert unpriced[side]["cost_per_million_tokens"] is None
        assert "--price-per-gpu-hour" in unpriced[side]["cost_per_million_tokens_reason"]


def test_a_plan_side_says_what_its_search_lost_and_what_a_candidate_lacks():
    """A plan whose GPU count the batch does not divide lost geometries to the layout rules,
    and a ranked candidate (#N) has no coverage assessment: both said among the side's
    caveats (a trial compared a B200 plan that lost 727 of 1,092 geometries with a GB300
    plan, and a runner-up whose empty caveats read cleaner than the optimum's)."""
    from mosaic.cli.compare_cmd import _plan_caveats

    document = {"envelope": {"n_devices": 768, "global_batch": 1024},
                "counts": {"geometries": 1092},
                "infeasible_summary": {"no layout satisfies the divisibility rules": 727}}
    caveats = _plan_caveats(document, {"coverage": {}})
    assert caveats == ["727 of 1092 geometries had no layout: no layout satisfies the "
                       "divisibility rules; 768 GPUs and a global batch of 1024 sequences "
                       "share only the factor 256, so tp·pp·cp must be a multiple of 3: a GPU "
                       "count dividing the batch, or a batch sharing its factors, leaves more "
                       "layouts"]
    candidate = _plan_caveats({"envelope": {}}, {})
    assert candidate == ["calibration coverage not assessed: a plan assesses its optimum only "
                         "(`mosaic export PLAN.json#N --to yaml` and `mosaic perf` assess a "
                         "candidate)"]


def test_an_option_neither_job_reads_is_refused(tmp_path, job_b):
    """Two exported plans state training.tokens: `--days 10` changed nothing and the
    30-day window stood without a word (a trial). One job without them reads it."""
    stated = []
    for name, source in (("a.yaml", JOB), ("b.yaml", job_b)):
        document = yaml.safe_load(source.read_text())
        document["training"] = {"tokens": 1e12}
        (tmp_path / name).write_text(yaml.safe_dump(document))
        stated.append(str(tmp_path / name))
    result = runner.invoke(app, ["compare", *stated, "--days", "10"])
    assert result.exit_code == 2
    assert "neither job reads --days (both state training.tokens" in " ".join(
        result.output.split())
    assert runner.invoke(app, ["compare", stated[0], str(job_b), "--days", "10"]
                         ).exit_code == 0


def test_a_plan_on_repeated_data_shows_the_tokens_its_loss_counted(plans, tmp_path):
    """Raw D stood beside a loss the law had scored on D' (a trial): the effective tokens
    and epochs get their own rows where a side planned with --unique-tokens."""
    document = json.loads(Path(plans[1]).read_text())
    tokens = document["optimum"]["tokens"]
    document["search_space"]["unique_tokens"] = tokens / 8
    document["optimum"] |= {"epochs": 8.0, "effective_tokens": 0.8 * tokens}
    repeated = tmp_path / "repeated.json"
    repeated.write_text(json.dumps(document))
    doc = invoke_json("compare", str(plans[0]), str(repeated))
    rows = {row["quantity"]: row for row in doc["summary"]}
    assert rows["effective_tokens"]["b"] == pytest.approx(0.8 * tokens)
    assert rows["effective_tokens"]["a"] is None and rows["epochs"]["b"] == 8.0
    table = " ".join(runner.invoke(app, ["compare", str(plans[0]), str(repeated)],
                                   terminal_width=200).stdout.split())
    assert "effective tokens D' the law sees (repeated data)" in table
    plain = invoke_json("compare", str(plans[0]), str(plans[1]))
    assert "effective_tokens" not in {row["quantity"] for row in plain["summary"]}


def test_a_goodput_difference_shows_what_each_side_ran_with(tmp_path):
    """A job stating training.goodput 0.8 against one that does not, under --goodput 0.5:
    B trains at 0.5 (Eq. 25's goodput, as its tokens show), so the row is 0.8 against
    0.5 from --goodput, not "-" (a review); without the option B runs at the default 1;
    with --goodput 0.8 both run at 0.8, no difference."""
    document = yaml.safe_load(JOB.read_text())
    document["training"] = {"goodput": 0.8}
    stated = tmp_path / "stated.yaml"
    stated.write_text(yaml.safe_dump(document))
    doc = invoke_json("compare", str(stated), str(JOB), "--goodput", "0.5")
    summary = {row["quantity"]: row for row in doc["summary"]}
    assert (summary["goodput"]["a"], summary["goodput"]["b"]) == (0.8, 0.5)
    row = next(d for d in doc["input_differences"] if d["field"] == "training.goodput")
    assert (row["a"], row["b"], row["a_stated"], row["b_stated"]) == (0.8, 0.5, True, False)
    assert row["b_from"] == "--goodput" and "a_from" not in row
    result = runner.invoke(app, ["compare", str(stated), str(JOB), "--goodput", "0.5"])
    assert result.exit_code == 0, result.output
    assert "0.5 (--goodput)" in result.output
    default = invoke_json("compare", str(JOB), str(stated))
    row = next(d for d in default["input_differences"] if d["field"] == "training.goodput")
    assert (row["a"], row["b"], row["a_from"]) == (1.0, 0.8, "--goodput default")
    same = invoke_json("compare", str(stated), str(JOB), "--goodput", "0.8")
    assert not any(d["field"] == "training.goodput" for d in same["input_differences"])


@pytest.fixture(scope="module")
def early_plan(tmp_path_factory) -> Path:
    """A priced plan whose run stops early: a q=4 model over 30 days on 64 GPUs reaches its
    tokens-per-parameter cap long before the window ends."""
    path = tmp_path_factory.mktemp("early") / "early.json"
    result = runner.invoke(app, ["plan", "--nodes", "8", "--days", "30", "--q", "4",
                                 "--experts", "8", "--top-k", "1", "--split-factor", "1",
                                 "--price-per-gpu-hour", "3", "--json"])
    assert result.exit_code == 0, result.output
    path.write_text(result.output)
    return path


def test_a_plan_whose_run_stops_early_is_costed_as_the_plan_costs_it(plans, early_plan):
    """compare costed a plan at its whole window (its envelope's GPU-hours x price), where
    plan costs the days the run trains (a 1 M USD budget plan whose run stops after 5.6 of
    65.1 days: plan said 86,420, compare 1,000,000)."""
    plan = json.loads(early_plan.read_text())
    assert plan["train_days"] < plan["envelope"]["days"]  # the run stops early
    doc = invoke_json("compare", str(plans[0]), str(early_plan))
    summary = {row["quantity"]: row for row in doc["summary"]}
    assert summary["gpu_hours"]["b"] == pytest.approx(plan["gpu_hours"])
    assert summary["cost"]["b"] == pytest.approx(plan["cost_usd"])
    assert summary["cost"]["b"] < plan["window_cost_usd"]
    assert doc["b"]["train_days"] == pytest.approx(plan["train_days"])
    assert doc["a"]["train_days"] == 5.0 and "window_gpu_hours" not in doc["a"]
    # another price costs the same days
    repriced = invoke_json("compare", str(plans[0]), str(early_plan),
                           "--price-per-gpu-hour", "2")
    cost = {row["quantity"]: row for row in repriced["summary"]}["cost"]["b"]
    assert cost == pytest.approx(plan["gpu_hours"] * 2)
    table = " ".join(runner.invoke(app, ["compare", str(plans[0]), str(early_plan)],
                                   terminal_width=200).stdout.split())
    assert (f"B's GPU-hours and cost count the {plan['train_days']:.3g} days its run trains"
            in table)
    assert f"{plan['window_cost_usd']:,.0f} USD" in table


def test_a_plan_file_older_than_its_training_days_is_costed_at_its_window_with_a_note(
        plans, early_plan, tmp_path):
    """A plan written before plans recorded the days their run trains still compares: at
    its whole window, saying so."""
    plan = json.loads(early_plan.read_text())
    for key in ("train_days", "window_gpu_hours", "window_cost_usd"):
        plan.pop(key)
    for candidate in (plan["optimum"], *plan["candidates"]):
        candidate.pop("train_days")
    older = tmp_path / "older.json"
    older.write_text(json.dumps(plan))
    doc = invoke_json("compare", str(plans[0]), str(older))
    summary = {row["quantity"]: row for row in doc["summary"]}
    assert summary["gpu_hours"]["b"] == pytest.approx(plan["envelope"]["gpu_hours"])
    assert summary["cost"]["b"] == pytest.approx(plan["envelope"]["gpu_hours"] * 3)
    assert "written before plans recorded the days the run trains" in doc["b"]["cost_note"]
    assert "cost_note" not in doc["a"]
    assert json_problems(doc) == []
    table = runner.invoke(app, ["compare", str(plans[0]), str(older)], terminal_width=200)
    assert "B's GPU-hours and cost: this plan file was written before" in " ".join(
        table.stdout.split())


def test_an_equal_price_in_another_currency_replaces_the_plans_usd_figures(plans, tmp_path):
    """A plan states its price and its window's cost (a dollar budget's, exactly) in USD:
    compare reused both where the price given was the same number in --currency EUR, so
    the budget's USD figure stood as the EUR window cost and no note said the plan's own
    price was replaced."""
    result = runner.invoke(app, ["plan", "--nodes", "8", "--budget-usd", "1000000",
                                 "--price-per-gpu-hour", "3.7", "--q", "4", "--experts", "8",
                                 "--top-k", "1", "--split-factor", "1", "--json"])
    assert result.exit_code == 0, result.output
    budget = tmp_path / "budget.json"
    budget.write_text(result.output)
    plan = json.loads(result.output)
    priced = plan["envelope"]["gpu_hours"] * 3.7  # the window's cost at the price given
    assert plan["train_days"] < plan["envelope"]["days"]  # the window's cost is shown
    assert plan["window_cost_usd"] != priced  # the budget, not the round trip's
    args = ("compare", str(plans[0]), str(budget), "--price-per-gpu-hour", "3.7")
    usd = invoke_json(*args, "--currency", "USD")
    assert usd["b"]["window_cost"] == plan["window_cost_usd"]
    assert usd["b"]["replaced_price_per_gpu_hour"] is None
    eur = invoke_json(*args, "--currency", "EUR")
    assert eur["b"]["window_cost"] == priced
    assert eur["b"]["replaced_price_per_gpu_hour"] == plan["price_usd_per_gpu_hour"]
    table = runner.invoke(app, [*args, "--currency", "EUR"], terminal_width=200)
    assert "replaces A's own 3 and B's own 3.7 USD per GPU-hour" in " ".join(
        table.stdout.split())


def test_a_plan_side_prints_an_outside_value_as_the_plan_does():
    """A plan's optimum outside the calibrated model size showed its n_total as Python's
    long float in compare ('n_total 1032848424960.0 not in 1.208e+09..1.007e+12', a trial),
    where the plan, perf and layouts print 1.033e+12."""
    from mosaic.cli.compare_cmd import _plan_caveats
    from mosaic.perf.coverage import shown_dimension_value

    outside = {"dimension": "n_total", "value": 1032848424960.0,
               "calibrated": "1.208e+09..1.007e+12", "ratio": 1.026}
    (caveat,) = _plan_caveats({"envelope": {}}, {"coverage": {"outside": [outside]}})
    assert caveat == (f"outside the calibrated envelope: n_total "
                      f"{shown_dimension_value(1032848424960.0)} not in 1.208e+09..1.007e+12")
    assert "1032848424960" not in caveat
    (degree,) = _plan_caveats({"envelope": {}}, {"coverage": {"outside": [
        {"dimension": "ep", "value": 128, "calibrated": "8..64", "ratio": 2.0}]}})
    assert degree == "outside the calibrated envelope: ep 128 not in 8..64"


def test_recipe_settings_neither_job_states_are_listed_where_they_differ(tmp_path):
    # a lead's trial: the same DeepSeek-V3 job on DGX-H100 and DGX-B200 under one release
    # listed only hardware.system, though the B200 recipe also overlapped the DP collectives
    # and recomputed fewer modules (perf shows both in its assumptions)
    from mosaic.report.comparison import input_differences

    stated = {"hardware.system": "DGX-H100"}
    other = {"hardware.system": "DGX-B200"}
    a_resolved = {**stated, "performance.dp_comm_overlap": False, "parallelism.dp": 32,
                  "performance.recompute_modules": ["mla_up_proj", "mlp"]}
    b_resolved = {**other, "performance.dp_comm_overlap": True, "parallelism.dp": 64,
                  "performance.recompute_modules": ["mla_up_proj", "mlp"]}
    rows = input_differences(stated, other, a_resolved, b_resolved)
    assert [row["field"] for row in rows] == ["hardware.system", "performance.dp_comm_overlap"]
    assert rows[1] == {"field": "performance.dp_comm_overlap", "a": False, "b": True,
                       "a_stated": False, "b_stated": False}


def test_a_long_or_nested_plan_input_is_named_by_its_size_not_printed(plans, tmp_path):
    """A fuzz trial's plan held a 254 MB nested list under search_space: compare --json
    printed it twice over, 1.5 GB. A long or nested list among a plan's inputs is listed as
    'a list of N items (not shown)'; short flat lists stay whole."""
    a_path, _ = plans
    document = json.loads(a_path.read_text())
    document["search_space"]["extra"] = [[0] * 3] * 5
    document["search_space"]["long"] = list(range(100))
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(document))
    doc = invoke_json("compare", str(a_path), str(edited))
    fields = {d["field"]: (d["a"], d["b"]) for d in doc["input_differences"]}
    assert fields["search_space.extra"][1] == "a list of 5 items (not shown)"
    assert fields["search_space.long"][1] == "a list of 100 items (not shown)"
    assert fields["search_space.extra"][0] is None  # absent on A: no list to summarise
