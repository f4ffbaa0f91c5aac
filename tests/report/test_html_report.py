"""The HTML report: documents, pages and the CLI (`--html`, `mosaic report`), no browser."""

from __future__ import annotations

import json
import math
import re
from html import escape as html_escape
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from mosaic.cli.main import app
from mosaic.law import default_law
from mosaic.report.html import KINDS, detect_kind, render_report
from mosaic.report.html.breakdown import (
    BAR_NAME_LINE_CHARS,
    TERM_GROUPS,
    bar_names,
    grouped_seconds,
    layout_label,
    memory_breakdown_figure,
    step_breakdown_figure,
)
from mosaic.report.html.documents import scatter_sample

pytest.importorskip("plotly")

runner = CliRunner()
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TINY_PLAN = ["--q", "8,10", "--experts", "8,16", "--top-k", "1,2", "--split-factor", "1,2",
             "--nodes", "4", "--days", "10", "--workers", "1"]


def invoke(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.fixture(scope="module")
def plan_files(tmp_path_factory) -> tuple[dict, Path]:
    """`mosaic plan --json --html`: the JSON document and the page written with it."""
    folder = tmp_path_factory.mktemp("plan")
    html = folder / "plan.html"
    document = json.loads(invoke("plan", *TINY_PLAN, "--json", "--html", str(html)))
    (folder / "plan.json").write_text(json.dumps(document))
    return document, html


def test_plan_json_carries_the_report_blocks(plan_files):
    document, _ = plan_files
    assert {"sparsity_frontier", "optimum_step", "assumptions"} <= set(document)
    assert detect_kind(document) == "plan"
    law = document["assumptions"]["law"]
    assert law["form"] == default_law().form.name
    assert law["coefficients"] == pytest.approx(dict(default_law().coefficients))


def test_optimum_breakdown_is_the_chosen_layout(plan_files):
    """The breakdown re-derived for the report belongs to the planner's layout: same plan,
    and its terms sum to the step time the planner ranked with."""
    document, _ = plan_files
    optimum, step = document["optimum"], document["optimum_step"]
    assert {k: step["plan"][k] for k in optimum["plan"]} == optimum["plan"]
    assert sum(step["breakdown_s"].values()) == pytest.approx(optimum["step_time_s"], rel=1e-9)
    assert step["step_time_s"] == pytest.approx(optimum["step_time_s"], rel=1e-12)
    assert step["memory_bytes"] == pytest.approx(optimum["memory_bytes"], rel=1e-12)
    assert sum(step["memory_breakdown_bytes"].values()) == pytest.approx(step["memory_bytes"])
    assert step["memory_bytes"] <= step["capacity_bytes"]


def test_frontier_model_flops_points_follow_the_law(plan_files):
    """Each red point of the Fig. 1 view is the law at D = C_model / (6 N_act) (Sec. 6), and
    S_feas_max is the largest S whose point the window delivers (Eq. 3)."""
    document, _ = plan_files
    frontier = document["sparsity_frontier"]
    comparison = document["model_flops_comparison"]
    assert frontier["split_factor"] == comparison["split_factor"]
    law = default_law()
    geometry = comparison["model_flops_geometry"]
    n_total = geometry["n_active"] / (1 - geometry["sparsity"])
    tokens = frontier["c_model_flops"] / (6 * geometry["n_active"])
    expected = float(law.predict(n_total, tokens, geometry["sparsity"], geometry["split_factor"]))
    assert min(frontier["model_flops_loss"]) == pytest.approx(expected, rel=1e-9)
    delivered = [s for s, ok in zip(frontier["model_flops_sparsity"],
                                    frontier["delivers_c_model"], strict=True) if ok]
    assert comparison["s_feas_max"] >= max(delivered) - 1e-12


def test_plan_page_is_self_contained(plan_files):
    document, html_path = plan_files
    html = html_path.read_text()
    assert html.startswith("<!DOCTYPE html>")
    # plotly.js inlined, nothing fetched from elsewhere
    assert "Plotly" in html and len(html) > 3_000_000
    assert "<script src=" not in html and '<link rel="stylesheet" href=' not in html
    markup = re.sub(r"<script>.*?</script>", "", html, flags=re.S)  # code, not markup
    assert not re.search(r"""(src|href)=["']https?://""", markup)
    for anchor in ("frontier", "candidates", "layout", "uncertainty", "cost", "assumptions"):
        assert f'id="{anchor}"' in html
    for figure in ("fig-frontier", "fig-candidates", "fig-step", "fig-memory"):
        assert f'data-figure="{figure}"' in html
    # the candidates table has one row per trainable geometry, optimum first
    table = html[html.index('id="candidates-table"'):]
    table = table[:table.index("</table>")]
    assert table.count("<tr") == len(document["candidates"]) + 1
    assert 'class="highlight"' in table


def test_plan_page_states_the_stack_and_memory_in_gib(plan_files):
    """The assumptions name the stack the CLI planned on and give memory in GiB, as the
    CLI does (a trial found '85 GB HBM' beside GiB figures, and no stack at all)."""
    document, html_path = plan_files
    html = html_path.read_text()
    envelope = document["envelope"]
    hbm_gib = envelope["hbm_bytes_per_device"] / 2**30
    usable_gib = envelope["memory_headroom"]["usable_memory_bytes"] / 2**30
    assert f"{hbm_gib:.1f} GiB HBM" in html and f"{usable_gib:.1f} GiB per GPU" in html
    assert " GB HBM" not in html and " GB per GPU" not in html
    assert (f'<td class="text">{envelope["stack"]}, MoE dispatcher {envelope["dispatcher"]}'
            in html)
    # and the network the plan was costed on, from the catalog (a trial)
    assert envelope["network"].startswith("NVLink domain of 8 GPUs")
    assert f'<td class="text">{envelope["network"]}</td>' in html


def test_plan_page_says_where_the_law_extrapolates(plan_files):
    """The CLI and compare named the optimum's law inputs outside the fitted range; the
    report page, the one for readers who do not run the CLI, said nothing (a trial)."""
    document, html_path = plan_files
    flags = document["optimum"]["extrapolation"]["flags"]
    assert flags  # this small cluster's optimum trains past the law's token range
    html = html_path.read_text()
    for flag in flags:
        assert flag["message"] in html


def test_report_command_redraws_the_same_page(plan_files, tmp_path):
    """`mosaic report plan.json` draws exactly the page `mosaic plan --html` wrote."""
    _, html_path = plan_files
    out = tmp_path / "again.html"
    invoke("report", str(html_path.with_suffix(".json")), "--out", str(out))
    assert out.read_bytes() == html_path.read_bytes()


def test_perf_layouts_validate_sweep_pages(tmp_path):
    job = str(EXAMPLES / "appendix_e.yaml")
    invoke("perf", job, "--html", str(tmp_path / "perf.html"))
    invoke("layouts", job, "--devices", "64", "--top", "5", "--html",
           str(tmp_path / "layouts.html"))
    invoke("validate", str(EXAMPLES / "runs_example.yaml"), "--html",
           str(tmp_path / "validate.html"))
    invoke("sweep", "days", "--values", "5,10", *TINY_PLAN[:-6], "--nodes", "4",
           "--workers", "1", "--html", str(tmp_path / "sweep.html"))
    expected = {"perf": ["fig-step", "fig-memory"],
                "layouts": ["fig-step", "fig-memory", "fig-scatter"],
                "validate": ["fig-parity"], "sweep": ["fig-sweep"]}
    for kind, figures in expected.items():
        html = (tmp_path / f"{kind}.html").read_text()
        assert f"mosaic {kind}" in html
        for figure in figures:
            assert f'data-figure="{figure}"' in html, (kind, figure)
    # the layouts table's yellow first row is said (it was a colour without a word)
    layouts = (tmp_path / "layouts.html").read_text()
    table = layouts[layouts.index('id="table"'):layouts.index('id="layouts-table"')]
    assert 'class="highlight"' in layouts and "is highlighted" in table
    # the HTML summary has every row the terminal table has (it had lost the infeasible,
    # headroom, median/max and same-release rows; a trial), and errors keep their sign
    from mosaic.report.validation_summary import accuracy_rows

    validate = (tmp_path / "validate.html").read_text()
    document = json.loads(invoke("validate", str(EXAMPLES / "runs_example.yaml"), "--json"))
    for label, _ in accuracy_rows(document["aggregate"], len(document["skipped"])):
        assert html_escape(label) in validate, label
    signed = [f"{run['error']:+.1%}" for run in document["runs"] if run["error"] is not None]
    assert signed and all(f">{text}<" in validate for text in signed), signed
    # flags in a reader's words, not Python's (a trial read 'OOM run False')
    assert ">yes<" in validate and ">False<" not in validate and ">True<" not in validate
    layouts = (tmp_path / "layouts.html").read_text()
    assert "Why the other layouts are infeasible" in layouts and "must divide" in layouts
    # the rule as the CLI words it, not its template cut at the first slot ('pp·vpp=')
    assert "pp·vpp must divide layers=48" in layouts and "<td>pp·vpp=</td>" not in layouts
    # the GPU count and the node count, each as such (8-GPU p6-b200 nodes)
    assert "64 GPUs: 8 × p6-b200.48xlarge" in layouts
    # the profile every page predicted with and the network a sweep assumed (a trial
    # shared pages that named neither)
    assert "<td class=\"text\">default</td>" in validate
    # the assumptions made for the runs, each once with the runs it covers (a trial)
    assumed = {a for row in document["runs"] for a in row["assumptions"]}
    assert 'id="assumptions-table"' in validate
    assert all(len(re.findall(f'<td class="text [a-z]+" data-value="">'
                              f'{re.escape(html_escape(a))}</td>', validate)) == 1
               for a in assumed)
    assert ">calibration<" in layouts and ">default<" in layouts
    sweep = (tmp_path / "sweep.html").read_text()
    assert ("NVLink domain of 8 GPUs at 900 GB/s per GPU; AWS EFAv4 (SRD): 8 NICs of 400 Gb/s "
            "per node, 400 Gb/s per GPU (one direction)") in sweep
    assert "calibration default" in sweep
    perf = (tmp_path / "perf.html").read_text()
    assert "512 GPUs: 64 × p6-b200.48xlarge" in perf
    # what the CLI says of the job travels with the report: stack, calibration, precision,
    # dispatcher, each term's and component's meaning, and every assumption (a trial)
    # (its 'Predicted step' rows are the terminal's: the load of the busiest EP rank and
    # the calibration's step multiplier were missing; a trial)
    for text in ("megatron-core / default", "EP dispatcher", 'id="memory-table"',
                 "routed experts&#x27; grouped GEMMs", "model.norm not stated",
                 "busiest EP rank&#x27;s load", "the calibration&#x27;s step multiplier"):
        assert text in perf, text
    # the page header too (it put the GPU count where the node count goes: '512 ×
    # p6-b200.48xlarge' for 64 nodes; a trial)
    for kind, cluster in (("layouts", "64 GPUs: 8 ×"), ("perf", "512 GPUs: 64 ×")):
        header = (tmp_path / f"{kind}.html").read_text().split('<header class="page">')[1]
        assert f"{cluster} p6-b200.48xlarge" in header.split("</header>")[0]
    # the law's range warnings of each sweep point's optimum (the sweep printed none)
    sweep = (tmp_path / "sweep.html").read_text()
    assert 'id="extrapolation-table"' in sweep and "days 10" in sweep
    assert "above the fitted range" in sweep


def test_layouts_json_carries_the_best_breakdowns_and_the_report_draws_them(tmp_path):
    document = json.loads(invoke("layouts", str(EXAMPLES / "appendix_e.yaml"), "--devices",
                                 "64", "--top", "5", "--json"))
    best = document["top_breakdowns"]
    assert [b["rank"] for b in best] == [1, 2, 3]
    for breakdown, row in zip(best, document["rows"], strict=False):
        # the listed row's step, split into terms that add up to it
        assert breakdown["step_time_s"] == pytest.approx(row["step_time_s"])
        assert sum(breakdown["breakdown_s"].values()) == pytest.approx(row["step_time_s"])
        assert (sum(breakdown["memory_breakdown_bytes"].values()) / 2**30
                == pytest.approx(row["memory_gib"]))
    html = render_report(document)
    assert "the 5 listed layouts" in html  # the scatter stays in --html
    for figure in ("fig-step", "fig-memory"):
        assert f'data-figure="{figure}"' in html
    # a document without them (written before they were added) says what is missing
    older = {k: v for k, v in document.items() if k != "top_breakdowns"}
    assert "No breakdowns in this document" in render_report(older)


def test_report_rejects_what_is_not_a_result(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"hello": 1}')
    result = runner.invoke(app, ["report", str(bad), "--out", str(tmp_path / "x.html")])
    assert result.exit_code == 2
    assert "not a mosaic result" in result.output and len(result.output.splitlines()) == 1
    bad.write_text("{not json")
    result = runner.invoke(app, ["report", str(bad)])
    assert result.exit_code == 2 and "not valid JSON" in result.output
    broken = {"runs": [{"id": "x"}], "aggregate": {}}  # a validate document missing fields
    bad.write_text(json.dumps(broken))
    result = runner.invoke(app, ["report", str(bad), "--out", str(tmp_path / "x.html")])
    assert result.exit_code == 2 and "incomplete or malformed" in result.output
    # the file and the missing field are named, not a bare KeyError (a fuzz trial)
    assert result.output.startswith(f"error: {bad}: the validate document")
    assert "it lacks the field" in result.output


def test_kinds_are_recognised():
    samples = {"plan": {"envelope": 1, "candidates": 1, "optimum": 1},
               "sweep": {"axis": 1, "points": 1, "envelope": 1},
               "perf": {"step_time_s": 1, "breakdown_s": 1, "memory_breakdown_bytes": 1},
               "layouts": {"rows": 1, "n_plans": 1, "infeasible": 1},
               "validate": {"runs": 1, "aggregate": 1},
               "compare": {"a": 1, "b": 1, "summary": 1, "input_differences": 1},
               "explain": {"current": 1, "bound": 1, "levers": 1, "prediction": 1}}
    assert set(samples) == set(KINDS)
    for kind, document in samples.items():
        assert detect_kind(document) == kind


def test_a_perf_document_saved_with_the_old_keys_still_opens(tmp_path):
    """`mosaic perf --json` named its breakdowns without units before December 2026
    (breakdown, memory_breakdown); a saved file still draws the same page."""
    document = json.loads(invoke("perf", str(EXAMPLES / "appendix_e.yaml"), "--json"))
    old = {("breakdown" if key == "breakdown_s" else
            "memory_breakdown" if key == "memory_breakdown_bytes" else key): value
           for key, value in document.items()}
    assert "breakdown_s" not in old and detect_kind(old) == "perf"
    assert render_report(old) == render_report(document)


def test_every_step_term_has_a_group():
    """A new breakdown term of the time model must be placed in the report's groups."""
    document = json.loads(invoke("perf", str(EXAMPLES / "appendix_e.yaml"), "--json"))
    assert set(document["breakdown_s"]) <= set(TERM_GROUPS)
    grouped = grouped_seconds(document["breakdown_s"])
    assert sum(grouped.values()) == pytest.approx(document["step_time_s"], rel=1e-12)
    assert grouped["EP comm, exposed"] == pytest.approx(document["breakdown_s"]["ep_all_to_all"])


def test_layout_label_and_scatter_sample():
    plan = {"tp": 1, "pp": 16, "vpp": 1, "cp": 1, "ep": 8, "etp": 1, "dp": 32,
            "micro_batch": 2, "sharding": "zero1", "checkpointing": "full"}
    assert layout_label(plan) == "pp16 ep8 dp32 mb2 zero1 ckpt=full"
    assert np.array_equal(scatter_sample(10), np.arange(10))
    sample = scatter_sample(20_000, points=1000, top=100)
    assert len(sample) == 1000 and np.array_equal(sample[:100], np.arange(100))
    assert sample[-1] == 19_999 and np.all(np.diff(sample) > 0)


def test_validate_ranks_within_groups():
    from mosaic.report.html.validate_sweep_page import _ranks, rank_figure

    assert _ranks([3.0, 1.0, 2.0]) == [1, 3, 2]  # 1 = fastest
    runs = [{"id": f"r{i}", "group": "g", "measured_tokens_per_s_per_gpu": m,
             "predicted_tokens_per_s_per_gpu": p}
            for i, (m, p) in enumerate([(100, 90), (200, 210), (150, 100)])]
    figure = rank_figure(runs)
    trace = figure.data[0]
    assert list(trace.x) == [3, 1, 2] and list(trace.y) == [3, 1, 2]
    assert rank_figure(runs[:1]) is None


def forty_groups_of_runs() -> list[dict]:
    """Two runs in each of 40 model+GPU groups (the published runs hold about that many)."""
    return [{"id": f"g{g}-r{i}", "group": f"model {g} @ GPU", "measured_tokens_per_s_per_gpu":
             100.0 + i, "predicted_tokens_per_s_per_gpu": 100.0 + (1 - i) * (g % 2) + i}
            for g in range(40) for i in range(2)]


def test_every_rank_group_is_drawn_its_own_way():
    """The rank chart drew 40 groups in plotly's 10 default colours, four groups a colour,
    lines and markers alike: which group sat off the diagonal could not be read. Each group
    now has its own colour, marker and dash combination."""
    from mosaic.report.html.validate_sweep_page import rank_figure

    figure = rank_figure(forty_groups_of_runs())
    groups = [t for t in figure.data if t.name != "same rank"]
    assert len(groups) == 40
    styles = {(t.marker.color, t.marker.symbol, t.line.dash) for t in groups}
    assert len(styles) == 40
    assert all(t.marker.color == t.line.color for t in groups)


def test_plan_page_with_uncertainty_and_cost(tmp_path):
    """With law samples the page gets P(optimal) and intervals; they agree with the JSON."""
    from mosaic.plan import LawSamples, save_samples

    law = default_law()
    rng = np.random.default_rng(0)
    save_samples(LawSamples(law.form, law.log_coefs + 0.01 * rng.standard_normal(
        (40, law.log_coefs.size))), tmp_path / "samples.json")
    html = tmp_path / "plan.html"
    document = json.loads(invoke("plan", *TINY_PLAN, "--bootstrap-samples",
                                 str(tmp_path / "samples.json"), "--price-per-gpu-hour", "4",
                                 "--json", "--html", str(html)))
    rows = document["uncertainty_candidates"]
    assert len(rows) == len(document["candidates"])
    assert sum(r["p_optimal"] for r in rows) == pytest.approx(1.0)
    page = html.read_text()
    assert 'data-figure="fig-uncertainty"' in page and "P(optimal)" in page
    assert f"{document['cost_usd']:,.0f} at 4 USD per GPU-hour" in page
    assert document["cost_usd"] == pytest.approx(4 * 32 * 10 * 24)
    # the panel names what was sampled: here the law and the calibration's throughput
    # residuals (it said 'law samples' for a plan that sampled only the throughput)
    assert "P(optimal) over law and throughput samples" in page


def test_the_uncertainty_panel_names_what_was_sampled():
    from mosaic.report.plan_report import sampled_uncertainties

    assert sampled_uncertainties(["performance: throughput multiplier ..."]) == "throughput"
    assert sampled_uncertainties(["law: 40 coefficient samples"]) == "law"
    assert sampled_uncertainties(None) == "law"  # plan files that do not say


def test_report_of_garbage_is_one_line(tmp_path):
    """Hand-edited documents: every failure is a one-line input error, never a traceback."""
    document = json.loads(invoke("perf", str(EXAMPLES / "appendix_e.yaml"), "--json"))
    broken = [{**document, "breakdown_s": []}, {**document, "step_time_s": "fast"},
              {**document, "plan": None}, {**document, "step_time_s": 0.0}]
    for i, bad in enumerate(broken):
        path = tmp_path / f"bad{i}.json"
        path.write_text(json.dumps(bad))
        result = runner.invoke(app, ["report", str(path), "--out", str(tmp_path / "x.html")])
        assert result.exit_code in (0, 2), (i, result.output)
        if result.exit_code == 2:
            assert "malformed" in result.output and len(result.output.splitlines()) == 1
    binary = tmp_path / "bin.json"
    binary.write_bytes(b"\xff\xfe\x00")
    result = runner.invoke(app, ["report", str(binary)])
    assert result.exit_code == 2 and "UTF-8" in result.output
    result = runner.invoke(app, ["report", str(tmp_path / "bad0.json"), "--out",
                                 str(tmp_path / "missing" / "x.html")])
    assert result.exit_code == 2 and "does not exist" in result.output


def test_a_stated_kind_that_is_not_the_documents_is_named():
    from mosaic.errors import MosaicInputError

    with pytest.raises(MosaicInputError, match=r"JSON of `mosaic validate`, not of `mosaic "
                                               r"perf`: use --kind validate"):
        render_report({"runs": [], "aggregate": {}}, "perf")


def test_sweep_figure_keeps_small_changes_small_and_ticks_distinct():
    """A trial's sweep: S* moved 0.0002 and filled its panel as a steep climb; MFU ticks
    read '28%, 28%, 27%' (whole percents); the G curves were near-identical pinks."""
    from mosaic.report.html.validate_sweep_page import sweep_figure

    def optimum(sparsity, mfu):
        return {"loss": 1.3, "sparsity": sparsity, "split_factor": 4, "n_active": 2.6e10,
                "tokens": 1e12, "mfu": mfu}

    document = {"axis": "days", "points": [
        {"days": d, "optimum": optimum(s, m), "best_per_split": {
            "1": {"loss": 1.4}, "4": {"loss": 1.3}}}
        for d, s, m in ((14, 0.97475, 0.279), (30, 0.97476, 0.278), (60, 0.9749, 0.259))]}
    figure = sweep_figure(document)
    low, high = figure.layout.yaxis2.range
    assert high - low >= 0.02 and low < 0.97475 and high > 0.9749
    assert figure.layout.yaxis6.tickformat == ".1%"
    colours = {t.name: t.line.color for t in figure.data if t.name.startswith("best with")}
    assert len(set(colours.values())) == 2


def test_breakdown_charts_say_what_each_part_is():
    """Hover text names the term's meaning; memory legends read as words, not keys."""
    step = step_breakdown_figure([("job", {"vocab_stage": 2.0, "optimizer": 1.0})])
    vocab = next(t for t in step["data"] if t["customdata"][0][0] == "vocab_stage")
    assert vocab["customdata"][0][3] == "embedding, LM head and loss (Eq. 13)"
    assert "%{customdata[3]}" in vocab["hovertemplate"]
    memory = memory_breakdown_figure([("job", {"master_weights": 2**30})])
    (trace,) = memory["data"]
    assert trace["name"] == "master weights"
    assert "fp32 master copy of the parameters" in trace["hovertemplate"]


def test_bar_names_break_into_short_lines_under_their_bars():
    """Long layout names were slanted by plotly under the neighbouring bars (a trial): each
    breaks at spaces into lines of at most 16 characters, in both charts."""
    name = "#1 pp16 vpp4 ep16 dp16 mb2 zero1 ckpt=none"
    bars = [(name, {"optimizer": 1.0}), ("#2 dp8", {"optimizer": 2.0})]
    expected = ["#1 pp16 vpp4<br>ep16 dp16 mb2<br>zero1 ckpt=none", "#2 dp8"]
    assert all(len(line) <= 16 for line in expected[0].split("<br>"))
    assert step_breakdown_figure(bars)["data"][0]["x"] == expected
    assert memory_breakdown_figure([(n, {"weights": 1.0}) for n, _ in bars]
                                   )["data"][0]["x"] == expected


def test_mfu_memory_scatter_draws_the_usable_share_and_reads_a_narrow_mfu_range():
    """Feasibility is judged against the usable share (90% of 178.4 GiB), so the scatter
    draws it beside the capacity; MFU within 1.5 points gets a decimal (ticks read '20%,
    20%, 19%' without one; a trial)."""
    from mosaic.report.html.perf_page import mfu_memory_figure

    points = {"mfu": [0.1998, 0.1992, 0.1959], "memory_gib": [148.5, 146.8, 143.4],
              "step_time_s": [202.3, 202.9, 206.4], "labels": ["a", "b", "c"],
              "checkpointing": ["full", "full", "none"]}
    figure = mfu_memory_figure(points, 178.4, "t", usable_fraction=0.9)
    lines = sorted(shape.x0 for shape in figure.layout.shapes)
    assert lines == pytest.approx([178.4 * 0.9, 178.4])
    assert figure.layout.yaxis.tickformat == ".1%"
    assert {trace.name for trace in figure.data} >= {"full recompute", "no recompute"}


def _figure_data(html: str, div_id: str) -> list[dict]:
    """The traces plotly draws in the figure ``div_id`` of a report page."""
    start = html.index(f'"{div_id}",', html.index("Plotly.newPlot")) + len(div_id) + 3
    data, _ = json.JSONDecoder().raw_decode(html, html.index("[", start))
    return data


def test_a_comparison_has_its_report_page(tmp_path):
    """`mosaic compare --html` and `mosaic report` of its --json draw the same page: the
    input that differs, each side's figures in the side-by-side table, and one bar per side
    whose terms add up to that side's step time and memory (A first)."""
    job_a = EXAMPLES / "appendix_e.yaml"
    job_b = tmp_path / "ep4.yaml"
    job_b.write_text(job_a.read_text().replace("ep: 8", "ep: 4"))
    page = tmp_path / "compare.html"
    document = json.loads(invoke("compare", str(job_a), str(job_b), "--json",
                                 "--html", str(page)))
    assert detect_kind(document) == "compare"
    (tmp_path / "compare.json").write_text(json.dumps(document))
    invoke("report", str(tmp_path / "compare.json"), "--out", str(tmp_path / "again.html"))
    html = page.read_text()
    assert (tmp_path / "again.html").read_text() == html
    assert re.search(r">parallelism\.ep</td>\s*<td[^>]*>8</td>\s*<td[^>]*>4</td>", html)
    a, b = document["a"], document["b"]
    assert a["step_time_s"] != b["step_time_s"]
    for side in (a, b):
        assert f">{side['step_time_s']:.3f}</td>" in html
    step_bars = _figure_data(html, "fig-compare-step")
    totals = np.sum([trace["y"] for trace in step_bars], axis=0)
    assert totals == pytest.approx([a["step_time_s"], b["step_time_s"]], rel=1e-9)
    memory_bars = _figure_data(html, "fig-compare-memory")
    gib = np.sum([trace["y"] for trace in memory_bars], axis=0)
    assert gib == pytest.approx([a["memory_gib"], b["memory_gib"]], rel=1e-9)
    assert "Assumed where not given: a training window of 20 days" in html


def _layout_shapes(html: str, div_id: str) -> list[dict]:
    """The horizontal lines (shapes) of the figure ``div_id``'s layout."""
    start = html.index(f'"{div_id}",', html.index("Plotly.newPlot")) + len(div_id) + 3
    decoder = json.JSONDecoder()
    _, end = decoder.raw_decode(html, html.index("[", start))
    layout, _ = decoder.raw_decode(html, html.index("{", end))
    return layout.get("shapes", [])


def test_the_compare_memory_bars_draw_one_capacity_line_only_where_both_sides_share_it(
        tmp_path):
    """Same GPUs: the capacity line and the usable share (the jobs' own 90%) across the
    plot; an H100 job against a B200 one: each bar's own two lines over that bar alone (no
    one line is both sides' capacity; drawing none hid an out-of-memory side, a trial)."""
    job = EXAMPLES / "appendix_e.yaml"
    same = tmp_path / "same.html"
    document = json.loads(invoke("compare", str(job), str(job), "--json", "--html", str(same)))
    capacity = document["a"]["memory_capacity_gib"]
    fraction = document["a"]["usable_memory_fraction"]
    lines = sorted(shape["y0"] for shape in _layout_shapes(same.read_text(),
                                                           "fig-compare-memory"))
    assert lines == pytest.approx(sorted([capacity, capacity * fraction]))
    other = tmp_path / "other.html"
    document = json.loads(invoke("compare", str(job), str(EXAMPLES / "deepseek_v3_h100.yaml"),
                                 "--json", "--html", str(other)))
    shapes = _layout_shapes(other.read_text(), "fig-compare-memory")
    assert all(shape["xref"] == "x" for shape in shapes)
    for index, side in enumerate(("a", "b")):
        capacity = document[side]["memory_capacity_gib"]
        usable = capacity * document[side]["usable_memory_fraction"]
        mine = sorted(shape["y0"] for shape in shapes
                      if (shape["x0"], shape["x1"]) == (index - 0.4, index + 0.4))
        assert mine == pytest.approx(sorted([capacity, usable]))


def test_a_comparison_saved_with_empty_breakdowns_says_so_once(tmp_path):
    """A candidate's breakdown was an empty mapping in documents written before null: the
    page says there are none, once, instead of drawing an empty bar."""
    job = str(EXAMPLES / "appendix_e.yaml")
    document = json.loads(invoke("compare", job, job, "--json"))
    document["b"]["breakdown_s"] = {}
    document["b"]["memory_breakdown_bytes"] = {}
    html = render_report(document)
    assert 'data-figure="fig-compare-step"' not in html
    assert html.count("a plan file holds its optimum") == 1


def test_a_plan_comparison_page_says_a_candidate_has_no_breakdowns(plan_files, tmp_path):
    """A plan's runner-up (#2) carries no breakdowns: the page says so instead of drawing
    an empty bar, and the candidates' layouts or geometries are the inputs that differ."""
    _, html = plan_files
    plan = html.with_suffix(".json")
    page = tmp_path / "plans.html"
    invoke("compare", str(plan), f"{plan}#2", "--html", str(page))
    text = page.read_text()
    assert text.count("a plan file holds its optimum&#x27;s only") == 1
    assert 'data-figure="fig-compare-step"' not in text
    assert re.search(r">(geometry|layout)\.[a-z_]+</td>", text)


def test_candidates_at_the_token_cap_are_said_to_gain_nothing_from_a_faster_cluster(tmp_path):
    """Over 400 days every tiny candidate trains tpp_max·N_act tokens: a faster cluster
    cannot lower its loss, and the page says why its interval is one-sided (a trial: equal
    loss low and high, P(optimal) 0%, unexplained; a later trial: "the same D" was wrong
    for a slower cluster whose budget falls below the cap)."""
    html = tmp_path / "plan.html"
    long_window = [*TINY_PLAN[:TINY_PLAN.index("--days")], "--days", "400", "--workers", "1"]
    document = json.loads(invoke("plan", *long_window, "--json", "--html", str(html)))
    capped = sum(1 for c in document["candidates"] if c["tpp_capped"])
    assert capped == len(document["candidates"]) > 0
    text = html.read_text()
    assert f"{capped} of these candidates train the tokens-per-parameter cap" in text
    assert "high-loss side only" in text


def test_backbone_variants_keep_their_own_uncertainty_and_labels():
    """A --backbone plan's variants all have q = 0: the page matched uncertainty rows on (q,
    E, K, G), so nine L x d variants sharing E, K, G showed the last one's interval and
    P(optimal) 0 (a trial), and its labels read "q0 E128 K8 G8" for different models."""
    from mosaic.report.html.plan_page import _candidate_rows, uncertainty_figure

    shapes = [(24, 2048), (32, 3072), (48, 4096)]
    candidates = [{"q": 0, "layers": layers, "d_model": d, "experts": 128, "top_k": 8,
                   "split_factor": 8, "memory_bytes": 1.0, "plan": None,
                   "loss": 1.40 + 0.01 * i, "sparsity": 0.9}
                  for i, (layers, d) in enumerate(shapes)]
    uncertainty = [{"q": 0, "layers": layers, "d_model": d, "experts": 128, "top_k": 8,
                    "split_factor": 8, "p_optimal": p, "loss_interval": [low, low + 0.02],
                    "expected_regret": 0.0}
                   for (layers, d), p, low in zip(shapes, (0.6, 0.3, 0.1), (1.39, 1.40, 1.41),
                                                  strict=True)]
    rows = _candidate_rows({"candidates": candidates, "uncertainty_candidates": uncertainty})
    assert [r["p_optimal"] for r in rows] == [0.6, 0.3, 0.1]
    assert [r["loss_low"] for r in rows] == [1.39, 1.40, 1.41]
    figure = uncertainty_figure(rows, 0.9, "law")
    # ticks are the ranks (long rotated labels ran under the next panel); each hover
    # names its own variant
    assert list(figure.data[0].x) == ["#1", "#2", "#3"]
    assert list(figure.data[0].customdata) == ["L=24 d=2048 E=128 K=8 G=8",
                                               "L=32 d=3072 E=128 K=8 G=8",
                                               "L=48 d=4096 E=128 K=8 G=8"]
    assert list(figure.data[1].customdata) == list(figure.data[0].customdata)
    # both panels' axes say what they measure and in which unit (they were bare)
    assert figure.layout.yaxis.title.text == "predicted loss (nats/token)"
    assert figure.layout.yaxis2.title.text.startswith("P(optimal)")


def test_goodput_reads_as_a_share_with_its_model():
    """The window row read "goodput constant: goodput 1" (a trial)."""
    from mosaic.report.html.plan_page import goodput_text

    assert goodput_text({"model": "constant", "goodput": 1.0}) == "100.0% (constant)"
    assert goodput_text({"model": "young-daly", "goodput": 0.97, "checkpoint_s": 60.0}) == (
        "97.0% (young-daly: checkpoint_s 60)")


def test_the_summary_shows_repeated_data_and_a_budget_set_window(tmp_path):
    """A trial: the CLI printed the epochs over the unique data and D', the report did not,
    and a --budget-usd window showed as bare days. 4 nodes of 8 GPUs at 2 USD per GPU-hour
    for 15,360 USD is 15,360 / (2 x 32) / 24 = 10 days."""
    html = tmp_path / "plan.html"
    args = [a for a in TINY_PLAN if a not in ("--days", "10")]
    document = json.loads(invoke("plan", *args, "--unique-tokens", "20B",
                                 "--price-per-gpu-hour", "2", "--budget-usd", "15360",
                                 "--json", "--html", str(html)))
    optimum = document["optimum"]
    assert document["envelope"]["days"] == pytest.approx(10.0)
    text = re.sub(r"<[^>]+>", " ", html.read_text()).replace("&#x27;", "'")
    assert "set by the budget: 15,360 USD at 2 USD per GPU-hour" in text
    assert optimum["epochs"] == pytest.approx(optimum["tokens"] / 20e9)
    assert (f"{optimum['epochs']:.2f} epochs of the 20.0 B unique tokens: the loss is computed "
            "from D' =") in text


def test_a_malformed_document_names_the_field_it_failed_at(tmp_path):
    """A hand-edited perf document: the error names the field read last before the failure
    (where the bad value sits), not only the exception's text."""
    document = json.loads(runner.invoke(app, ["perf", str(EXAMPLES / "nemotron_3_nano_b200.yaml"),
                                              "--json"]).output)
    name = next(iter(document["breakdown_s"]))
    document["breakdown_s"][name] = "fast"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(document))
    result = runner.invoke(app, ["report", str(bad), "--out", str(tmp_path / "x.html")])
    assert result.exit_code == 2
    assert f"the last field read: breakdown_s.{name}" in result.output
    document["breakdown_s"] = {}
    document["memory_breakdown_bytes"] = [1, 2]  # a list where an object belongs
    bad.write_text(json.dumps(document))
    result = runner.invoke(app, ["report", str(bad), "--out", str(tmp_path / "x.html")])
    assert "'list' object has no attribute" in result.output and "Traced" not in result.output


def test_a_400_digit_number_is_a_one_line_error(tmp_path):
    """float() of a 400-digit integer raised OverflowError, reported as an internal error
    (a fuzz trial's plan with a huge candidate loss)."""
    document = json.loads(invoke("perf", str(EXAMPLES / "appendix_e.yaml"), "--json"))
    document["step_time_s"] = 10**400
    bad = tmp_path / "huge.json"
    bad.write_text(json.dumps(document))
    result = runner.invoke(app, ["report", str(bad), "--out", str(tmp_path / "x.html")])
    assert result.exit_code == 2 and "malformed" in result.output, result.output
    assert "the last field read: step_time_s" in result.output


def test_the_traced_view_reads_as_the_document():
    from mosaic.report.html.traced import Trail, traced

    trail = Trail()
    view = traced({"a": [{"b": 1}, {"b": 2}], "c": None}, "", trail)
    assert view == {"a": [{"b": 1}, {"b": 2}], "c": None}
    assert [item["b"] for item in view["a"]] == [1, 2] and trail.last == "a[1].b"
    assert view["a"][-1]["b"] == 2 and trail.last == "a[1].b"
    assert json.loads(json.dumps(view)) == {"a": [{"b": 1}, {"b": 2}], "c": None}
    assert dict(view.items())["c"] is None and trail.last == "c"
    assert len(view.items()) == 2 and next(iter(view.values())) is view["a"]  # wrapped once


def test_a_missing_key_is_blamed_on_the_document_only_when_the_document_lacked_it():
    """A page builder's own lookup table can raise a KeyError too (a review): then the key
    is named bare, with the document's last field read beside it."""
    from mosaic.report.html.traced import Trail, missing_field, traced

    trail = Trail()
    view = traced({"runs": [{"id": "x"}]}, "", trail)
    with pytest.raises(KeyError) as lacked:
        view["runs"][0]["step_time_s"]
    assert missing_field(lacked.value, trail) == "runs[0].step_time_s"
    with pytest.raises(KeyError) as own:
        {"compute": 1}[view["runs"][0]["id"]]
    assert missing_field(own.value, trail) == "x (the last field read: runs[0].id)"


def test_hsdp_names_its_shard_group_in_every_layout_line():
    """A trial found the HSDP shard size only in `mosaic layouts`: plan, perf, explain and
    compare wrote 'hsdp'."""
    from mosaic.report.comparison import layout_text as comparison_layout
    from mosaic.report.html.breakdown import layout_label
    from mosaic.report.plan_report import layout_line, layout_text, sharding_text

    plan = {"tp": 1, "pp": 1, "vpp": 1, "cp": 1, "dp": 32, "ep": 8, "etp": 1,
            "micro_batch": 8, "sharding": "hsdp", "hsdp_shard": 8, "checkpointing": "full"}
    assert sharding_text(plan) == "hsdp/8"
    assert sharding_text({**plan, "sharding": "zero2"}) == "zero2"
    assert layout_line(plan) == ("tp=1, pp=1, vpp=1, cp=1, dp=32, ep=8, etp=1, "
                                 "micro_batch=8, hsdp/8, ckpt=full")
    assert "mb8 hsdp/8 ckpt=full" in layout_text(plan, compact=True)
    assert "hsdp/8" in layout_label(plan)
    assert comparison_layout({"layout": plan}) == layout_line(plan)


def test_an_explanation_has_its_report_page(tmp_path):
    """`mosaic explain --html`: the job's perf page with its bound, the measured gap and the
    levers as bars of their gain drawn from 1x (the job as it is); `mosaic report` of the
    --json draws the same page."""
    job = str(EXAMPLES / "appendix_e.yaml")
    html = tmp_path / "explain.html"
    document = json.loads(invoke("explain", job, "--measured-step-time-s", "40", "--json",
                                 "--html", str(html)))
    assert detect_kind(document) == "explain"
    assert document["prediction"]["step_time_s"] == document["current"]["step_time_s"]
    page = html.read_text()
    for part in ("fig-step", "fig-memory", "fig-levers", "levers-table", "bound-table",
                 "gap-table", "Levers, best feasible first"):
        assert part in page
    (tmp_path / "explain.json").write_text(json.dumps(document))
    invoke("report", str(tmp_path / "explain.json"), "--out", str(tmp_path / "again.html"))
    assert "fig-levers" in (tmp_path / "again.html").read_text()


def test_the_lever_bars_start_at_the_job_as_it_is():
    from mosaic.report.html.explain_page import lever_figure, lever_kind

    levers = [{"description": "faster", "gain": 1.25, "feasible": True, "reason": None},
              {"description": "slower", "gain": 0.8, "feasible": True, "reason": None},
              {"description": "too big", "gain": 1.5, "feasible": False, "reason": "OOM"},
              {"description": "same", "gain": 0.9996, "feasible": True, "reason": None},
              {"description": "breaks a rule", "gain": None, "feasible": False,
               "reason": "breaks a rule: x"}]
    figure = lever_figure(levers)
    bars = {trace["name"]: trace for trace in figure["data"]}
    assert set(bars) == {"faster", "slower", "unchanged", "does not fit in memory"}
    assert all(trace["base"] == 1.0 for name, trace in bars.items() if name != "unchanged")
    # a 0.9996x bar is 0.0004 long: the unchanged lever is a mark at its gain instead
    assert bars["unchanged"]["mode"] == "markers" and bars["unchanged"]["x"] == [0.9996]
    assert bars["faster"]["x"] == [pytest.approx(0.25)]
    assert bars["slower"]["x"] == [pytest.approx(-0.2)]
    assert bars["does not fit in memory"]["y"] == ["3. too big"]  # ranked as listed; no bar for 5
    # 0.9996 prints as 1.00x: unchanged, not slower (a review)
    assert [lever_kind(lever) for lever in levers[:4]] == ["faster", "slower",
                                                           "does not fit in memory",
                                                           "unchanged"]


def test_a_short_table_is_shown_whole_a_long_one_scrolls_in_its_box():
    """The step-time table's 18th row hid below a 460 px scroll box (a trial)."""
    from mosaic.report.html.page import WHOLE_TABLE_ROWS, Column, table_html

    columns = [Column("term", "term", text=True)]
    short = table_html(columns, [{"term": "x"}] * WHOLE_TABLE_ROWS, table_id="t")
    long = table_html(columns, [{"term": "x"}] * (WHOLE_TABLE_ROWS + 1), table_id="t")
    assert short.startswith('<div class="whole">') and long.startswith('<div class="scroll">')


def test_a_short_text_column_stays_on_one_line_a_long_one_wraps_in_wide_lines():
    """A layout column ('pp4 vpp4 ep8 dp8 mb4 zero2') read one word a line at 800 px: a
    text column of short values is a label kept on one line, one with a long value is prose
    (report.css wraps it in lines of at least 12em); a number column is neither."""
    from mosaic.report.html.page import LABEL_CHARS, Column, asset_text, table_html

    rows = [{"layout": "pp4 vpp4 ep8 dp8 mb4 zero2", "note": "x" * (LABEL_CHARS + 1),
             "mfu": 0.3}, {"layout": None, "note": "short", "mfu": None}]
    page = table_html([Column("layout", "layout", text=True),
                       Column("note", "note", text=True), Column("mfu", "MFU")],
                      rows, table_id="t")
    cells = re.findall(r'<td class="([^"]*)"', page)
    assert cells == ["text label", "text prose", ""] * 2
    styles = asset_text("report.css")
    assert "td.label { white-space: nowrap; }" in styles
    assert "td.prose { min-width: 12em; }" in styles


def test_every_k_line_of_the_frontier_is_drawn_its_own_way():
    """Twelve K values give twelve distinct (dash, marker) styles: a trial's seventh K drew
    the first one's solid line."""
    from mosaic.report.html.plan_page import k_line_style

    styles = [k_line_style(i, "square") for i in range(12)]
    assert len(set(styles)) == 12
    assert styles[0] == ("solid", "square") and styles[6][0] == "solid"


def test_the_parity_plot_shares_one_range_names_units_and_counts_undrawn_runs():
    """y = x is the diagonal only when both axes span one range; an OOM record has no
    measured tokens/s, and the title says it is not drawn (a trial)."""
    from mosaic.report.html.validate_sweep_page import parity_figure

    def run(measured, predicted):
        return {"id": "r", "moe": False, "feasible": True, "error": 0.0, "group": "g",
                "measured_tokens_per_s_per_gpu": measured,
                "predicted_tokens_per_s_per_gpu": predicted}

    figure = parity_figure([run(1000.0, 1300.0), run(12000.0, 14000.0), run(None, 900.0)],
                           band=0.1)
    layout = figure.layout
    assert tuple(layout.xaxis.range) == tuple(layout.yaxis.range)
    assert layout.xaxis.range[0] == pytest.approx(math.log10(1000 / 1.3))
    assert layout.xaxis.range[1] == pytest.approx(math.log10(14000 * 1.3))
    assert "tokens/s per GPU" in layout.xaxis.title.text
    assert "1 run with no measured tokens/s" in layout.title.text


def test_a_run_records_explain_page_has_the_terminals_gap_rows(tmp_path):
    """`mosaic explain RUNS.yaml#ID --html` of a record whose tokens/s and step time
    disagree: the page's gap table lacked the terminal's "measurement" row saying which
    step is explained, and its lever table had a "--set that gives it" column empty on every
    row (no --set states a record's levers)."""
    import yaml

    from mosaic.config.run_records import MEASUREMENT_DISAGREEMENT_PREFIX
    from mosaic.report.explain_document import measured_gap_rows

    runs = yaml.safe_load((EXAMPLES / "runs_example.yaml").read_text())
    record = next(r for r in runs["runs"] if r["id"].startswith("example-bridge-qwen3"))
    record["measured"].update(step_time_s=30.0, consistent=False)
    runs["runs"] = [record]
    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump(runs))
    html = tmp_path / "explain.html"
    document = json.loads(invoke("explain", f"{path}#{record['id']}", "--json",
                                 "--html", str(html)))
    rows = measured_gap_rows(document["gap"], document["prediction"]["assumptions"])
    assert rows[-1][0] == "measurement" and rows[-1][1].startswith(
        MEASUREMENT_DISAGREEMENT_PREFIX)
    page = html.read_text()
    gap_table = page[page.index('id="gap-table"'):]
    gap_table = gap_table[:gap_table.index("</table>")]
    assert html_escape(rows[-1][1], quote=False) in gap_table
    assert all(not lever["overrides"] for lever in document["levers"])
    assert "--set that gives it" not in page


def test_the_layouts_scatter_draws_the_memory_lines_of_the_bars():
    """The layouts page's scatter said 'capacity 178 GiB' in red and 'usable 160.5 GiB' in
    orange under the bars' 'capacity 178.4 GiB' and 'usable 160.5 GiB (90%)', both red: one
    helper (breakdown.memory_limits) draws both."""
    from mosaic.report.html.perf_page import mfu_memory_figure
    from mosaic.units import GIB

    capacity_gib, fraction = 178.4, 0.9
    bars = memory_breakdown_figure([("a", {"weights": 10 * GIB})], capacity_gib * GIB,
                                   usable_fraction=fraction)
    points = {"checkpointing": ["none"], "memory_gib": [10.0], "mfu": [0.2],
              "labels": ["a"], "step_time_s": [1.0]}
    scatter = mfu_memory_figure(points, capacity_gib, "t", fraction).to_plotly_json()
    texts = [a["text"] for a in bars["layout"]["annotations"]]
    assert texts == ["capacity 178.4 GiB", "usable 160.6 GiB (90%)"]
    assert [a["text"] for a in scatter["layout"]["annotations"]] == texts
    assert ({s["line"]["color"] for s in scatter["layout"]["shapes"]}
            == {s["line"]["color"] for s in bars["layout"]["shapes"]})


def test_a_bar_named_by_a_path_is_cut_into_short_lines():
    """A compare page names its bars by their files: 'B: examples/deepseek_v3_h100.yaml'
    kept the path as one 30-character line, and at 500 px the two names slanted and ran
    into each other. A long word is cut after '/', '_' or '-'."""
    names = bar_names([("A: examples/appendix_e.yaml", None),
                       ("B: examples/deepseek_v3_h100.yaml", None)])
    assert names == ["A: examples/<br>appendix_e.yaml",
                     "B: examples/<br>deepseek_v3_<br>h100.yaml"]
    assert all(len(line) <= BAR_NAME_LINE_CHARS for n in names for line in n.split("<br>"))


def test_plan_page_gives_the_cheapest_budget_as_the_terminal_does(tmp_path):
    """`plan --target-loss --price-per-gpu-hour --html`: the page named the cheapest budget's
    nodes, days (to 6 digits) and GPU-hours only; the terminal also gives its cost and the
    loss it reaches (a trial). Both now say the same, from the same JSON."""
    html = tmp_path / "plan.html"
    args = ["plan", "--nodes", "1", "--days", "2", "--q", "4,6", "--experts", "8,16,32",
            "--top-k", "1,2", "--split-factor", "1,4", "--s-min", "0.5", "--workers", "1",
            "--target-loss", "1.8", "--cheapest-nodes", "1,2", "--cheapest-days", "1,2",
            "--price-per-gpu-hour", "2"]
    choice = json.loads(invoke(*args, "--json", "--html", str(html)))["cheapest"]["choice"]
    terminal = " ".join(invoke(*args).split())
    page = " ".join(re.sub(r"<[^>]+>", " ", html.read_text()).split())
    for text in (f"{choice['nodes']} nodes × {choice['days']:.4g} days",
                 f"{choice['cost_usd']:,.0f}", f"{choice['loss']:.4f}"):
        assert text in terminal, text
        assert text in page, text


def test_plan_page_says_the_cheapest_budget_trains_fewer_days_than_its_window(tmp_path):
    """A cheapest budget whose optimum is held at tpp_max is costed at the days it trains:
    the page says those days beside its GPU-hours, as the terminal does."""
    html = tmp_path / "plan.html"
    args = ["plan", "--nodes", "1", "--days", "2", "--q", "4", "--experts", "8", "--top-k",
            "1", "--split-factor", "1", "--s-min", "0.5", "--workers", "1",
            "--target-loss", "1.803", "--cheapest-nodes", "1", "--cheapest-days", "2,4,8",
            "--price-per-gpu-hour", "3"]
    choice = json.loads(invoke(*args, "--json", "--html", str(html)))["cheapest"]["choice"]
    assert choice["train_days"] < choice["days"]
    page = " ".join(re.sub(r"<[^>]+>", " ", html.read_text()).split())
    assert (f"{choice['gpu_hours']:,.0f} GPU-hours, {choice['cost_usd']:,.0f} USD (of the "
            f"{choice['train_days']:.3g} days it trains)") in page


def test_plan_page_repeats_the_law_fits_caveats(plan_files):
    """Every --law command warns of a law whose fit left coefficients on their bounds or held
    nothing out; the page of a plan on such a law (a tiny ladder's fit) did not say so."""
    import copy

    document, html_path = plan_files
    assert "law fit caveats" not in html_path.read_text()  # Table 2's law: no caveat
    on_bounds = copy.deepcopy(document)
    provenance = on_bounds["assumptions"]["law"]["provenance"]
    provenance["at_bound"] = {"b": {"side": "upper", "bound": 1e10}}
    provenance["metrics"] = {"n_heldout": 0, "r2": 0.99}
    html = render_report(on_bounds)
    row = html[html.index("law fit caveats"):]
    assert "b at its upper bound 1e+10" in row[:600]
    assert "its fit held no run out" in row[:600]


def test_plan_page_says_the_batch_was_searched_as_the_terminal_does(tmp_path):
    """`plan --global-batch MIN:MAX --html`: the page gave the optimum's batch as if it were
    fixed ('2048 sequences × 2048 tokens'), with no B column and no rule, where the terminal
    prints the optimum's bound and ranks each candidate's batch. 1024:2048 searches 1024 and
    2048 (MIN, 2·MIN, ... up to MAX: plan/batch.py)."""
    html = tmp_path / "plan.html"
    args = ["plan", "--q", "8", "--experts", "8", "--top-k", "1", "--split-factor", "1",
            "--nodes", "4", "--days", "10", "--workers", "1", "--global-batch", "1024:2048"]
    document = json.loads(invoke(*args, "--json", "--html", str(html)))
    assert document["batch"]["candidates"] == [1024, 2048]
    optimum = document["optimum"]
    bound = (f"{optimum['global_batch']} sequences (bound "
             f"{optimum['batch_bound_tokens']:.3g} tokens per step)")
    assert bound in " ".join(invoke(*args).split())  # the terminal's optimum table
    page = " ".join(re.sub(r"<[^>]+>", " ", html.read_text()).split())
    assert f"global batch (bound) {bound}" in page
    assert "searched among 1024..2048 sequences under the deepseek rule" in page
    headers = re.findall(r"<th[^>]*>([^<]*)</th>", html.read_text().split(
        'id="candidates-table"')[1].split("</thead>")[0])
    assert headers.index("B") == headers.index("MFU") - 1, headers


def test_plan_page_shows_both_optima_of_versus_as_the_terminal_does(tmp_path):
    """`plan --versus --html` (the README's `make run` with a report): the terminal prints
    the optimum under each calibration and why they differ; the page left both out."""
    html = tmp_path / "plan.html"
    args = ["plan", "--nodes", "1", "--days", "2", "--q", "4", "--experts", "8,16",
            "--top-k", "1,2", "--split-factor", "1,4", "--s-min", "0.5", "--workers", "1",
            "--calibration", "paper-p6b200", "--versus", "default"]
    versus = json.loads(invoke(*args, "--json", "--html", str(html)))["versus"]
    page = html.read_text()
    table = page[page.index('id="versus-table"'):]
    cells = [re.findall(r"<td[^>]*>([^<]*)</td>", row)
             for row in table.split("</tbody>")[0].split("<tr")[2:]]
    assert [row[0] for row in cells] == ["paper-p6b200 / paper-nemo", "default / megatron-core"]
    for row, entry in zip(cells, versus["plans"], strict=True):
        best = entry["optimum"]
        assert row[1:5] == [str(best[k]) for k in ("q", "experts", "top_k", "split_factor")]
        assert f"{best['loss']:.4f}" in row and f"{best['mfu']:.1%}" in row
    text = " ".join(html_escape_free(page).split())
    for clause in versus["why"].split("; "):
        assert " ".join(clause.split()) in text, clause


def html_escape_free(page: str) -> str:
    """The page's text without tags, its entities read back."""
    from html import unescape

    return unescape(re.sub(r"<[^>]+>", " ", page))


def test_a_layouts_page_where_nothing_fits_says_so_without_empty_charts(tmp_path):
    """DeepSeek-V3 (671 B parameters) on 8 H100s: no layout fits 80 GB. The page drew an
    empty scatter on a -1..6 GiB axis with its capacity line off the plot, a table of
    headers only, and said the breakdowns were missing from 'older JSON'."""
    html = tmp_path / "layouts.html"
    document = json.loads(invoke("layouts", str(EXAMPLES / "deepseek_v3_h100.yaml"),
                                 "--devices", "8", "--json", "--html", str(html)))
    assert document["n_feasible"] == 0 and document["rows"] == []
    page = html.read_text()
    assert "data-figure=" not in page and 'id="layouts-table"' not in page
    assert "older JSON" not in page
    assert page.count("No layout is feasible") == 3  # breakdowns, scatter, ranking
    assert 'id="infeasible-table"' in page and "out of memory" in page


def table_headers(page: str, table_id: str) -> list[str]:
    """The header texts of one table of a page."""
    head = page.split(f'id="{table_id}"')[1].split("</thead>")[0]
    return re.findall(r"<th[^>]*>([^<]*)</th>", head)


def test_backbone_pages_name_variants_by_depth_and_width_not_q(tmp_path):
    """A --backbone plan's and sweep's variants all have q = 0: the terminal's tables show
    L×d, the pages a q column of zeros; the sweep's search space printed the backbone as a
    Python dictionary ({'layers': 48, ...})."""
    backbone = ["--backbone", str(EXAMPLES / "hf" / "qwen3-30b-a3b.json"), "--experts",
                "64,128", "--top-k", "4,8", "--days", "10", "--workers", "1"]
    plan_html, sweep_html = tmp_path / "plan.html", tmp_path / "sweep.html"
    document = json.loads(invoke("plan", *backbone, "--nodes", "8", "--json", "--html",
                                 str(plan_html)))
    assert {c["q"] for c in document["candidates"]} == {0}
    invoke("sweep", "nodes", "--values", "4,8", *backbone, "--html", str(sweep_html))
    for html, table in ((plan_html, "candidates-table"), (sweep_html, "sweep-table")):
        headers = table_headers(html.read_text(), table)
        assert "q" not in headers and {"L", "d"} <= set(headers), (table, headers)
    space = sweep_html.read_text().split('id="space-table"')[1].split("</table>")[0]
    assert "{" not in space and "variants of the --backbone model: vocabulary 151,936" in space
    # the paper's ladder keeps its q column
    ladder = tmp_path / "ladder.html"
    invoke("plan", *TINY_PLAN, "--html", str(ladder))
    assert "q" in table_headers(ladder.read_text(), "candidates-table")
