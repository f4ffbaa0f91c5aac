"""Which mosaic command wrote a document: the keys each command's ``--json`` (or ``--out``)
document always has. `mosaic report` recognises a result by them, and an input reader (a job
file, a hardware catalog) names the command whose output it was given instead of listing
every key as unknown. A root module: the config and hardware packages both read it."""

from __future__ import annotations

# command -> keys its --json document always has (how `mosaic report` recognises a file, and
# how a job loader tells another command's output from a job with a misspelt block)
RESULT_SIGNATURES: dict[str, tuple[str, ...]] = {
    "plan": ("envelope", "candidates", "optimum"),
    "sweep": ("axis", "points", "envelope"),
    "perf": ("step_time_s", "breakdown_s", "memory_breakdown_bytes"),
    "layouts": ("rows", "n_plans", "infeasible"),
    "validate": ("runs", "aggregate"),
    "compare": ("a", "b", "summary", "input_differences"),
    "explain": ("current", "bound", "levers", "prediction"),
}


# Keys a command's --json wrote before they carried their unit, renamed on reading so that a
# saved document still opens: `mosaic perf --json` before December 2026 (seconds, bytes).
LEGACY_RESULT_KEYS: dict[str, str] = {"breakdown": "breakdown_s",
                                      "memory_breakdown": "memory_breakdown_bytes"}


def with_current_keys(document: object) -> object:
    """``document`` with the legacy keys of a perf document renamed (LEGACY_RESULT_KEYS);
    any other document unchanged."""
    if (isinstance(document, dict) and "step_time_s" in document
            and all(old in document and new not in document
                    for old, new in LEGACY_RESULT_KEYS.items())):
        return {LEGACY_RESULT_KEYS.get(key, key): value for key, value in document.items()}
    return document


def result_kind(document: object) -> str | None:
    """The command whose ``--json`` output ``document`` is (RESULT_SIGNATURES, legacy keys
    read as their current names), or None."""
    document = with_current_keys(document)
    if isinstance(document, dict):
        for kind, keys in RESULT_SIGNATURES.items():
            if all(key in document for key in keys):
                return kind
    return None


# Other outputs a user may hand a job command by mistake: the command that writes each, and
# keys that together say so (these have no HTML report, so they are not report kinds).
OTHER_OUTPUT_SIGNATURES: dict[str, tuple[str, ...]] = {
    "law fit --out": ("format", "form", "coefficients"),
    "law optimum --json": ("c_model_flops", "n_active", "lr", "sparsity_range"),
    "law predict --json": ("n_total", "tokens", "loss", "form", "law"),
    "arch --json": ("n_total", "n_active", "flops_per_token", "attention_flops_per_token"),
    "calibrate --out": ("name", "provenance", "constants"),
    # the trainer, the ladder and the bench (a trial gave `report` a run's result.json and
    # each command's --json, and was told each was "not a mosaic result")
    "train --json": ("steps", "total_steps", "smoothed_loss", "complete"),  # = result.json
    "train --out": ("geometry", "total_steps", "tokens_per_step", "schedule"),  # run.json
    "ladder run --json": ("runs_csv", "runs"),
    "ladder fit --json": ("law_file", "coefficients", "unbalanced_rungs_left_out"),
    "bench --json": ("out", "families"),
}


def output_command(document: object) -> str | None:
    """The mosaic command (with its output option) that wrote ``document``, or None."""
    kind = result_kind(document)
    if kind is not None:
        return f"{kind} --json"
    if isinstance(document, dict):
        for command, keys in OTHER_OUTPUT_SIGNATURES.items():
            if all(key in document for key in keys):
                return command
    return None
