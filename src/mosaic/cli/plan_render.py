"""Human tables of `mosaic plan` and `mosaic sweep` (rich)."""

from __future__ import annotations

from typing import Any

import typer

from mosaic.cli.common import print_key_value_table, print_table
from mosaic.law.extrapolation import extrapolation_rows
from mosaic.perf.layouts import DEFAULT_MICRO_BATCHES, LayoutLimits
from mosaic.plan.cost import RunCost, budget_order_key
from mosaic.plan.envelope import TABLE3_LAYOUT_LIMITS, Envelope
from mosaic.plan.search import PlanResult, model_parallel_factor_note
from mosaic.plan.sweep import SweepPoint
from mosaic.plan.uncertainty import Uncertainty
from mosaic.report.plan_report import (
    DIVISIBILITY_CATEGORY,
    EARLY_STOP_MARK,
    budget_train_days,
    cheapest_within_window_row,
    cost_document,
    cost_text,
    geometry_label,
    grid_template_text,
    infeasible_summary,
    layout_limits_text,
    layout_text,
    loss_gap_text,
    model_limits_text,
    optimizer_text,
    pick_deliverable_text,
    precision_text,
    sweep_cost_notes,
    sweep_fixed_text,
    sweep_point_stops_early,
    untrainable_message,
)
from mosaic.stacks import degree_one_only, get_stack
from mosaic.units import GIB, significant


def count(value: float) -> str:
    """Human count: 3.272e11 -> '327.2 B'."""
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M")):
        if abs(value) >= scale:
            return f"{value / scale:.4g} {suffix}"
    return f"{value:.4g}"


def short_count(value: float) -> str:
    """Compact count for table cells, three significant digits with their zeros (a column
    reads 3.91T, 3.90T, 3.00T, not 3.91T, 3.9T, 3T): 4.427e9 -> '4.43B'."""
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M")):
        if abs(value) >= scale:
            return significant(value / scale) + suffix
    return significant(value)


def _pipeline_split_text(envelope: Envelope, limits: LayoutLimits) -> str:
    """How the searched layouts split the blocks over pipeline stages; none where no layout
    searched has a pipeline (the stack offers pp 1 only, trait ``layout_pp``, or pp is
    pinned to 1), which Megatron's split does not describe (a trial read "Megatron's
    default" on hf-transformers, which runs no pipeline); else the stack's split (trait
    ``uneven_stage_split``: a review read "Megatron's default" on torchtitan)."""
    traits = get_stack(envelope.stack)
    if degree_one_only(traits.layout_pp):
        return f"none: stack {envelope.stack} runs no pipeline (pp 1)"
    if degree_one_only(limits.pp):
        return "none: pp pinned to 1"
    if envelope.balanced_pipeline:
        return "balanced Megatron layouts (embedding, loss, MTP as layer slots)"
    # the search takes pp·vpp dividing the blocks; an uneven split is cut as the stack cuts
    # it (trait uneven_stage_split, mosaic.perf.pipeline_layout.chunk_bounds: Megatron-Core's
    # remainder last, torchtitan's and NeMo AutoModel's extra blocks first)
    owner = ("Megatron's default" if traits.pipeline_layout_flag
             else f"{envelope.stack}'s default")
    uneven = ("puts the short chunk last" if traits.uneven_stage_split == "remainder_last"
              else "gives the first L mod (pp·vpp) chunks one block more")
    return (f"{owner}: whole blocks per stage, pp·vpp dividing them (an uneven split, not "
            f"searched, {uneven})")


def _dispatcher_text(envelope: Envelope, limits: LayoutLimits) -> str:
    """The EP token dispatcher of the searched layouts; none where no layout searched has
    ep > 1 (the stack offers ep 1 only, trait ``layout_ep``, or ep is pinned to 1), where no
    token is dispatched (a trial read "alltoall" on hf-transformers, which offers ep 1)."""
    if degree_one_only(get_stack(envelope.stack).layout_ep):
        return f"none (ep 1: stack {envelope.stack} offers no expert parallelism)"
    if degree_one_only(limits.ep):
        return "none (ep pinned to 1)"
    return str(envelope.dispatcher)


def print_envelope(result: PlanResult, cost: RunCost, calibration: str = "default") -> None:
    envelope = result.envelope
    goodput = envelope.goodput.describe(envelope.n_devices)
    rows = [
        ("hardware", f"{envelope.system.nodes_text(envelope.n_nodes)} "
                     f"({envelope.n_devices} × {envelope.system.device.name})"),
        # the links every candidate is costed on (a --scale-out-gbps or --gpus-per-node
        # what-if changes them; the JSON and the HTML report carry the same line)
        ("network", envelope.system.network_text()),
        ("window", f"{envelope.days:.4g} day{'s' if envelope.days != 1 else ''}"
                   + ("" if envelope.dollar_budget is None else
                      f" ({envelope.dollar_budget.window_text(envelope.n_devices)})")),
        ("goodput η_good", f"{goodput['goodput']:.4f} ({goodput['model']}"
                           + ("; no failures or restarts assumed: --goodput or "
                              "--mtbf-gpu-hours (Young-Daly) for a real cluster)"
                              if goodput["model"] == "constant" and goodput["goodput"] == 1
                              else _interval_text(goodput) + ")")),
        ("batch", f"B_global {envelope.global_batch} × T_seq {envelope.seq_len}"
                  + ("" if result.global_batch is None else " (searched; the optimum's)")),
        ("stack / calibration", f"{envelope.stack}"
                                + (f" {envelope.stack_version}" if envelope.stack_version else "")
                                + f" / {calibration}"),
        ("precision / dispatcher", f"{precision_text(envelope.to_dict())} / "
                                   f"{_dispatcher_text(envelope, result.throughput.limits)}"),
        ("optimizer", optimizer_text(envelope.to_dict())),
        ("recipe settings", _recipe_text(envelope)),
        ("usable memory", _headroom_text(envelope)),
        ("pipeline split", _pipeline_split_text(envelope, result.throughput.limits)),
        ("C_peak = F_peak·N_dev·T", f"{envelope.c_peak_flops:.3e} FLOP"),
    ]
    hours, priced = cost_text(cost_document(cost), envelope.days)
    rows.append(("GPU-hours", hours))
    if priced is not None:
        rows.append(("cost (USD)", priced))
    table = result.throughput
    rows.append(("geometries", grid_template_text(result.space.to_dict())))
    caps = model_limits_text(result.space.to_dict())
    if caps:
        rows.append(("model and data limits", caps))
    layouts = layout_limits_text(table.limits.to_dict())
    # said when not narrowed too: `layouts` tries micro-batches of 8 as well, and a trial
    # found the two commands' best layouts apart without a word (plan.md, Table 3)
    table3 = TABLE3_LAYOUT_LIMITS.micro_batches
    beyond = [size for size in DEFAULT_MICRO_BATCHES if size not in table3]
    rows.append(("layouts allowed", layouts or (
        f"the paper's Table 3 search: micro-batches {', '.join(map(str, table3))} (mosaic "
        f"layouts also tries {', '.join(map(str, beyond))}: --mbs "
        f"{','.join(map(str, DEFAULT_MICRO_BATCHES))})")))
    rows.append(("searched", f"{len(result.grid)} geometries, {table.plans_evaluated:,} "
                             f"layouts checked, {table.plans_timed:,} timed"))
    print_key_value_table("Envelope", rows)


def _interval_text(goodput: dict[str, Any]) -> str:
    """'; a checkpoint every 3,600 s (--checkpoint-interval-s)' or '; ... (Young's
    optimum)' for the Young-Daly model; '' for a constant goodput."""
    if "checkpoint_interval_s" not in goodput:
        return ""
    source = ("--checkpoint-interval-s" if goodput.get("checkpoint_interval") == "stated"
              else "Young's optimum")
    return f"; a checkpoint every {goodput['checkpoint_interval_s']:,.0f} s ({source})"


def _recipe_text(envelope: Any) -> str:
    """The settings every candidate takes from the stack release's recipes."""
    if not envelope.stack_version:
        return "none (no --stack-version)"
    on = [name for name in ("ep_overlap", "full_iteration_cuda_graph", "fp8_param_gather",
                            "fp4_param_gather", "fused_grouped_mlp") if getattr(envelope, name)]
    if not envelope.grad_reduce_in_fp32:
        on.append("bf16 gradient reduce")
    if envelope.cross_entropy:
        on.append(f"cross_entropy {envelope.cross_entropy}")
    return ", ".join(on) if on else (f"none ({envelope.stack} {envelope.stack_version} "
                                     "sets none of them for every MoE model)")


def _headroom_text(envelope: Any) -> str:
    """'160.5 of 178.4 GiB per GPU (90%, default)'; the JSON carries the source."""
    hbm = envelope.system.device.hbm_bytes
    fraction = envelope.usable_memory_fraction
    return (f"{envelope.usable_memory_bytes / GIB:.1f} of {hbm / GIB:.1f} GiB per GPU "
            f"({fraction:.0%}; {envelope.headroom.origin})")


def print_optimum(candidate: dict[str, Any]) -> None:
    print_key_value_table("MOSAIC optimum", [
        ("geometry", (f"q={candidate['q']} " if candidate["q"] else "backbone ")
                     + f"L={candidate['layers']} d={candidate['d_model']} "
                     f"E={candidate['experts']} K={candidate['top_k']} "
                     f"G={candidate['split_factor']}"),
        ("N_act / N_tot", f"{count(candidate['n_active'])} / {count(candidate['n_total'])}"),
        ("sparsity S", f"{candidate['sparsity']:.4f}"),
        ("tokens D (TPP)", f"{count(candidate['tokens'])} ({candidate['tpp']:.1f}"
                           f"{', capped' if candidate['tpp_capped'] else ''})"),
        *_capped_rows(candidate),
        *([("epochs of the unique data", f"{candidate['epochs']:.2f}: the law sees D' = "
                                          f"{count(candidate['effective_tokens'])}")]
          if "epochs" in candidate else []),
        ("MFU (paper Eq. 1, dense bf16 peak)", f"{candidate['mfu']:.2%}"
         + (f" ({candidate['mfu_gemm_lane']:.2%} of the GEMM lane's peak)"
            if candidate.get("mfu_gemm_lane", candidate["mfu"]) < candidate["mfu"] else "")),
        ("tokens/s", f"{candidate['tokens_per_s']:,.0f}"),
        ("step time", f"{candidate['step_time_s']:.3f} s"),
        ("memory per GPU", f"{candidate['memory_bytes'] / GIB:.1f} GiB"),
        # nats per token of the law's own training data and tokenizer (the paper's Table 2:
        # its corpus, GPT-2 BPE): a trial read it as the loss on their data
        ("predicted loss (nats/token, the law's data)", f"{candidate['loss']:.4f}"),
        ("layout", layout_text(candidate["plan"])),
        *([("pipeline layout", candidate["plan"]["pipeline_layout"])]
          if candidate["plan"] and "pipeline_layout" in candidate["plan"] else []),
        *_batch_rows(candidate),
        *extrapolation_rows(candidate.get("extrapolation")),
    ])


def _capped_rows(candidate: dict[str, Any]) -> list[tuple[str, str]]:
    """When D is held at tpp_max, how much of the window training it takes (the GPU-hours
    and cost rows count those days, with the window's beside them)."""
    if not candidate["tpp_capped"]:
        return []
    return [("training time", f"{candidate['train_days']:.1f} days of the window: D is held "
             "at the tokens-per-parameter cap (--tpp), so the run ends early; GPU-hours and "
             "cost count these days"),
            # a team with its model chosen asks what the window trains (a trial)
            ("tokens the window trains", f"{count(candidate['budget_tokens'])} at this "
             "throughput (D* = tokens/s x window x goodput, Eq. 25); raise --tpp to plan "
             "for them")]


def _batch_rows(candidate: dict[str, Any]) -> list[tuple[str, str]]:
    """The searched batch and the bound it respects (none for a fixed batch)."""
    if "batch_bound_tokens" not in candidate:
        return []
    return [("global batch (bound)", f"{candidate['global_batch']} sequences "
             f"(bound {candidate['batch_bound_tokens']:.3g} tokens per step)")]


def print_ranking(result: PlanResult, top: int, uncertainty: Uncertainty | None) -> None:
    """The top geometries, then their layouts (two tables keep each narrow)."""
    ladder = result.grid.is_ladder  # else backbone variants: depth x width instead of q
    columns = ["#", "q" if ladder else "L×d", "E", "K", "G", "N_act", "N_tot", "S", "D",
               "TPP", "MFU", "loss"]
    searched = result.global_batch is not None  # a batch search: show each row's batch
    if searched:
        columns.insert(-2, "B")
    if uncertainty is not None:
        columns.append("P(opt)")
    rows, layouts = [], []
    for rank, row in enumerate(result.ranking[:top], start=1):
        c = result.candidate(int(row))
        shape = str(c["q"]) if ladder else f"{c['layers']}×{c['d_model']}"
        cells = [str(rank), shape, str(c["experts"]), str(c["top_k"]),
                 str(c["split_factor"]), short_count(c["n_active"]),
                 short_count(c["n_total"]), f"{c['sparsity']:.3f}", short_count(c["tokens"]),
                 f"{c['tpp']:.0f}" + ("*" if c["tpp_capped"] else ""), f"{c['mfu']:.1%}",
                 f"{c['loss']:.4f}"]
        if searched:
            cells.insert(-2, str(c["global_batch"]))
        if uncertainty is not None:
            cells.append(f"{uncertainty.summary(int(row))['p_optimal']:.2f}")
        rows.append(cells)
        layouts.append([str(rank), layout_text(c["plan"], compact=True),
                        f"{c['step_time_s']:.2f}", f"{c['memory_bytes'] / GIB:.0f}"])
    print_table(f"Top {len(rows)} of {int(result.feasible.sum())} trainable geometries",
                columns, rows)
    if any(cells[columns.index("TPP")].endswith("*") for cells in rows):
        typer.echo("TPP*: D held at the tokens-per-parameter cap (--tpp), below what the "
                   "window could train: the run ends early (the optimum's GPU-hours and cost count "
                   "its days)")
    print_table("Their best layouts", ["#", "layout", "step s", "GiB/GPU"], layouts)
    summary = infeasible_summary(result)
    if summary:
        print_table("Not trainable in this window", ["reason", "geometries"],
                    [[reason, str(n)] for reason, n in summary.items()])
        envelope = result.envelope
        note = model_parallel_factor_note(envelope.n_devices, envelope.global_batch)
        if DIVISIBILITY_CATEGORY in summary and note:
            typer.echo(f"Few layouts divide this cluster{note}.")


def print_comparison(document: dict[str, Any]) -> None:
    mf = document["model_flops_geometry"]
    gap = document["loss_gap_nats"]
    s_feas = document["s_feas_max"]
    print_key_value_table(
        f"Model-FLOPs view at C_model = {document['c_model_flops']:.3g} FLOP, "
        f"G = {document['split_factor']} (Sec. 6)", [
            ("Eq. 16 optimum S* (continuous)",
             f"{document['continuous_optimum']['sparsity']:.4f}"
             + (" (on the S bound)" if document["continuous_optimum"]["at_sparsity_boundary"]
                else "")
             + "".join(f"; outside the caps: {text}"
                       for text in document["continuous_optimum"].get("outside_caps", []))),
            ("model-FLOPs pick on the grid",
             (f"q={mf['q']}" if mf["q"] else f"L={mf['layers']} d={mf['d_model']}")
             + f" E={mf['experts']} K={mf['top_k']} S={mf['sparsity']:.4f}"),
            ("pick deliverable in the window",
             pick_deliverable_text(mf, document["c_model_flops"])),
            ("S_feas_max", "-" if s_feas is None else f"{s_feas:.4f}"),
            ("cluster-optimal S", "-" if document["cluster_sparsity"] is None
             else f"{document['cluster_sparsity']:.4f}"),
            ("loss gap (nats, pick - optimum: > 0 the pick is worse)",
             loss_gap_text(gap, mf)),
        ])


def print_model_notes(assumptions: dict[str, Any]) -> None:
    """What the performance model leaves out of a --backbone model, one line each."""
    for line in assumptions.get("model", []):
        typer.echo(f"model: {line}")


def print_uncertainty(document: dict[str, Any]) -> None:
    def label(c: dict[str, Any]) -> str:
        low, high = c["loss_interval"]
        flags = [f["quantity"] for f in (c.get("extrapolation") or {}).get("flags", [])]
        # expected loss and worst regret, the two rules' own figures: a minimax choice
        # showed P(opt) 0.00 with no word of what it trades (a trial; at the token cap its
        # loss ignores the throughput draws, so its worst case is the least bad)
        trade = "".join(f", {name} {c[key]:.4f}" for name, key in (
            ("expected", "expected_loss"), ("worst regret", "max_regret")) if key in c)
        return (f"{geometry_label(c)}: "
                f"P(opt) {c['p_optimal']:.2f}, loss [{low:.4f}, {high:.4f}]{trade}"
                + (f"; the law extrapolates in {', '.join(flags)}" if flags else ""))

    # one row per distinct candidate: the three choices are often the same one (a trial
    # read the same line three times)
    choices: dict[str, list[str]] = {}
    for name, key in (("point optimum", "optimum"), ("robust choice", "robust_choice"),
                      ("minimax-regret choice", "minimax_regret_choice")):
        choices.setdefault(label(document[key]), []).append(name)
    print_key_value_table(
        f"Uncertainty ({document['samples']} samples, {document['level']:.0%} intervals; "
        "robust = least expected loss)", [
            *((" = ".join(names), text) for text, names in choices.items()),
            *(("propagated", source) for source in document["sources"]),
        ])


def print_coverage(rows: list[tuple[str, str]]) -> None:
    """The optimum's layout against the calibration: envelope verdict and intervals."""
    print_key_value_table("Optimum against the calibration (intervals from held-out "
                          "residuals)", [tuple(row) for row in rows])


def print_cheapest(document: dict[str, Any]) -> None:
    choice = document["choice"]
    if choice is None:
        reached = [o for o in document["options"] if o["loss"] is not None]
        rows = [("result", "no budget of the sweep reaches it")]
        if reached:
            best = min(reached, key=lambda o: o["loss"])
            rows.append(("lowest loss in the sweep",
                         f"{best['loss']:.4f} at {best['nodes']} nodes × {best['days']:g} days "
                         "(try more nodes or days)"))
        print_key_value_table(f"Cheapest budget reaching loss {document['target_loss']:.4f}",
                              rows)
        return
    # as the envelope's rows: the days the run trains where it stops early at tpp_max
    hours, priced = cost_text(choice, choice["days"])
    rows = [("budget", f"{choice['nodes']} nodes × {choice['days']:.4g} days"),
            ("GPU-hours", hours)]
    if priced is not None:
        rows.append(("cost (USD)", priced))
    optimum = choice["optimum"]
    rows += [("optimum loss", f"{choice['loss']:.4f}"),
             ("geometry", f"{geometry_label(optimum)} S={optimum['sparsity']:.4f}")]
    missed = [o for o in document["options"] if o["nodes"] == choice["nodes"]
              and o["days"] < choice["days"]]
    if missed:  # the cheapest budget lies between the two windows (a trial: 1.7x off)
        below = max(missed, key=lambda o: o["days"])
        rows.append(("cheapest of those evaluated",
                     f"at {choice['nodes']} nodes it lies between {below['days']:.4g} days "
                     f"(misses) and {choice['days']:.4g}: --cheapest-days with windows "
                     "between them narrows it"))
    within = cheapest_within_window_row(document)
    rows += [] if within is None else [within]
    print_key_value_table(f"Cheapest budget reaching loss {document['target_loss']:.4f}", rows)
    _print_budget_options(document)


def _print_budget_options(document: dict[str, Any]) -> None:
    """Every budget the target search evaluated, cheapest first (only --json had them)."""
    # in the order the choice was made (equal costs: the lower loss first; a review found
    # the raw GPU-hours listing a budget above the choice it lost to)
    options = sorted(document["options"], key=lambda o: budget_order_key(
        o["gpu_hours"], o["loss"], o["days"], o["nodes"]))
    if len(options) < 2:
        return
    target = document["target_loss"]
    priced = any(o.get("cost_usd") is not None for o in options)  # the JSON's cost, shown
    print_table("Budgets evaluated",
                ["nodes", "days", "GPU-hours", *(["cost (USD)"] if priced else []),
                 "optimum loss", "reaches"],
                [[str(o["nodes"]), f"{o['days']:.4g}", f"{o['gpu_hours']:,.0f}" + (
                    f" ({o['train_days']:.3g} days trained)"
                    if budget_train_days(o) < o["days"] else ""),
                  *([f"{o['cost_usd']:,.0f}"] if priced else []),
                  "-" if o["loss"] is None else f"{o['loss']:.4f}",
                  "yes" if o["loss"] is not None and o["loss"] <= target else "no"]
                 for o in options])


def print_sweep(points: list[SweepPoint], document: dict[str, Any]) -> None:
    """The sweep table of ``points`` and their sweep document (plan_report.sweep_document):
    a cost column where it is priced, each point whose run stops early marked, and the limit
    that sets the window named (plan_report.sweep_cost_notes)."""
    axis = points[0].axis
    entries = document["points"]
    costs_usd = ([entry.get("cost_usd") for entry in entries]
                 if "price_usd_per_gpu_hour" in document else None)
    ladder = points[0].result.grid.is_ladder
    splits = sorted({g for p in points for g in p.best_per_split})
    # the optimum's layout, step and memory too, so a budget's plan is read without
    # re-running `plan` (a trial)
    columns = [axis, "q" if ladder else "L×d", "E", "K", "G*", "S*", "N_act", "N_tot", "D",
               "MFU", "layout", "step s", "GiB", "loss*"]
    if costs_usd is not None:
        columns.append("cost USD")
    columns += [f"best G={g}" for g in splits]
    budget = points[0].result.envelope.dollar_budget  # each node count its own window
    if budget is not None:
        columns.insert(1, "days")
    # Young-Daly goodput falls with the node count; shown where it differs between points
    # (a trial found it only in the JSON)
    goodputs = [p.result.envelope.goodput_fraction for p in points]
    varies = len(set(goodputs)) > 1
    if varies:
        columns.insert(columns.index("q" if ladder else "L×d"), "goodput")
    rows = []
    for index, p in enumerate(points):
        row = p.result.optimum_index
        cells = [f"{p.value:g}"] + ([] if budget is None else [f"{p.result.envelope.days:.4g}"])
        cells += [f"{goodputs[index]:.3f}"] if varies else []
        if row is None:
            cells += ["-"] * 13
        else:
            c = p.result.candidate(row)
            shape = str(c["q"]) if ladder else f"{c['layers']}×{c['d_model']}"
            cells += [shape, str(c["experts"]), str(c["top_k"]),
                      str(c["split_factor"]), f"{c['sparsity']:.3f}",
                      short_count(c["n_active"]), short_count(c["n_total"]),
                      short_count(c["tokens"]) + (" (capped)" if c["tpp_capped"] else ""),
                      f"{c['mfu']:.1%}", layout_text(c["plan"], compact=True),
                      f"{c['step_time_s']:.2f}", f"{c['memory_bytes'] / GIB:.1f}",
                      f"{c['loss']:.4f}"]
        if costs_usd is not None:  # the budget's cost, with or without an optimum
            cells.append(f"{costs_usd[index]:,.0f}"
                         + (f" {EARLY_STOP_MARK}" if sweep_point_stops_early(entries[index])
                            else ""))
        # a G's best held at the tokens-per-parameter cap reads the same at every window:
        # marked as a capped D is (a trial took the constant column for a bug)
        cells += [f"{p.result.loss[p.best_per_split[g]]:.4f}"
                  + (" (capped)" if p.result.candidate(p.best_per_split[g])["tpp_capped"]
                     else "")
                  if g in p.best_per_split else "-" for g in splits]
        rows.append(cells)
    # what the sweep holds, as the HTML report's "Fixed" line: the window or the limit that
    # binds (--days or --budget-usd) and the node type, or the cluster of a sweep over days
    title = f"MOSAIC optimum per {axis} (Fig. 11) at {sweep_fixed_text(document)}"
    print_table(title, columns, rows)
    for line in sweep_cost_notes(document):
        # the marked cells are the cost column's: no such line without it
        if costs_usd is not None or not line.startswith(EARLY_STOP_MARK):
            typer.echo(line)
    for p in points:  # why a budget has no optimum (a fuzz trial saw only dashes)
        if p.result.optimum_index is None:
            typer.echo(f"{axis} {p.value:g}: {untrainable_message(p.result)}")
    if any(p.result.candidate(row)["tpp_capped"] for p in points
           for row in [*p.best_per_split.values(), p.result.optimum_index] if row is not None):
        typer.echo("(capped): D held at the tokens-per-parameter cap (--tpp), not what the "
                   "cluster could process in the window, so more of the axis buys no loss")
    typer.echo("G*, S*, loss*: the optimum's split factor, sparsity and loss; best G=g: the "
               "lowest loss among geometries of that split factor")


def print_versus(versus: dict[str, Any], ladder: bool = True) -> None:
    """The optimum under two calibrations side by side, and why they differ; ``ladder``
    False: a --backbone's variants, named by depth × width (q is 0 for all of them)."""
    columns = ["calibration / stack", "q" if ladder else "L×d", "E", "K", "G", "N_act", "S",
               "D", "MFU", "loss"]
    rows = []
    for entry in versus["plans"]:
        best = entry["optimum"]
        label = f"{entry['calibration']} / {entry['stack']}"
        if best is None:
            rows.append([label] + ["-"] * (len(columns) - 1))
            continue
        shape = str(best["q"]) if ladder else f"{best['layers']}×{best['d_model']}"
        rows.append([label, shape, str(best["experts"]), str(best["top_k"]),
                     str(best["split_factor"]), count(best["n_active"]),
                     f"{best['sparsity']:.3f}", count(best["tokens"]), f"{best['mfu']:.1%}",
                     f"{best['loss']:.4f}"])
    print_table("The optimum under each stack", columns, rows)
    # one clause a line (a trial read a 900-character line); --json keeps the one string
    first, *rest = versus["why"].split("; ")
    typer.echo(f"why: {first}" + (";" if rest else ""))
    for index, clause in enumerate(rest):
        typer.echo(f"  {clause}" + (";" if index < len(rest) - 1 else ""))
