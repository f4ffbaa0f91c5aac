"""The accuracy summary of a validation, as (label, text) rows: one list for the terminal
table of ``mosaic validate`` and the HTML report's summary, so the two never disagree (the
HTML had lost the infeasible-run, headroom, median/max and same-release rows; a trial)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def percent(value: float | None) -> str:
    """12.3% (n/a for None)."""
    return "n/a" if value is None else f"{value:.1%}"


def count_with_ids(count: int, ids: list[str], shown: int = 3) -> str:
    """'2: a, b' (at most ``shown`` ids, then '...')."""
    if not count:
        return "0"
    more = ", ..." if len(ids) > shown else ""
    return f"{count}: {', '.join(ids[:shown])}{more}"


def accuracy_rows(stats: dict[str, Any], n_skipped: int) -> list[tuple[str, str]]:
    """The rows of a validation's aggregate (``evaluate.validation_report.aggregate``) with
    ``n_skipped`` records skipped on load."""
    def spearman(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.2f}"

    over = stats.get("trained_runs_over_planning_headroom_ids", [])
    return [
        ("runs scored for tokens/s",
         f"{stats['n_runs']} ({n_skipped} records skipped, "
         f"{len(stats['throughput_not_scored'])} not scored)"),
        ("MAPE tokens/s, all", percent(stats["mape"])),
        *([("MAPE without the runs whose tokens/s looks mis-entered",
            percent(stats["mape_without_implausible"]))]
          if stats.get("mape_without_implausible") is not None else []),
        ("MAPE, MoE runs", f"{percent(stats['moe']['mape'])} of {stats['moe']['n_runs']}"),
        ("MAPE, dense runs", f"{percent(stats['dense']['mape'])} of {stats['dense']['n_runs']}"),
        ("median / max |error|",
         f"{percent(stats['median_abs_error'])} / {percent(stats['max_abs_error'])}"),
        ("Spearman within model+GPU groups", spearman(stats["spearman"])),
        ("Spearman, same groups and software release",
         spearman(stats["spearman_same_software"])),
        ("top-3 overlap within groups", percent(stats["top_k_overlap"])),
        ("OOM runs predicted infeasible", f"{stats['oom_correct']} of {stats['oom_runs']}"),
        ("trained runs predicted infeasible", count_with_ids(
            stats["trained_runs_predicted_infeasible"],
            stats.get("trained_runs_predicted_infeasible_ids", []))),
        ("trained runs over the planning headroom (layouts and plan leave them out)",
         count_with_ids(len(over), over)),
        ("memory MAPE (runs reporting memory)",
         f"{percent(stats['memory']['mape'])} of {stats['memory']['n_runs']}"),
        *([("runs the calibration's values were fitted on (its own fit or its base's)",
            f"{stats['in_sample_runs']} (their errors are in-sample)")]
          if stats.get("in_sample_runs") else []),
    ]


def assumption_counts(runs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each distinct assumption the model made for the runs (``assumptions`` of a validation
    row) with the runs it was made for, the most common first: what the records left
    unstated or the model approximated (a trial saw them only in --json, one run at a
    time)."""
    ids_by_text: dict[str, list[str]] = {}
    for run in runs:
        for text in run["assumptions"]:
            ids_by_text.setdefault(text, []).append(run["id"])
    return [{"assumption": text, "runs": len(ids), "ids": ids}
            for text, ids in sorted(ids_by_text.items(), key=lambda item: (-len(item[1]),
                                                                           item[0]))]
