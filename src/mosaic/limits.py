"""Physical ranges of every input, checked once at the boundary before any work starts.

One table for every command (job files, run records, flags, the planner's envelope), so
the same absurd value is refused the same way everywhere (issue 11). The bounds are
generous: each is far beyond any machine or run published to date, and tight enough that
no array sized by an input can outgrow memory and no loop runs for minutes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mosaic.errors import MosaicInputError, shown


@dataclass(frozen=True)
class Range:
    """Inclusive range of one quantity, with why it is bounded there."""

    low: float
    high: float
    why: str

    def describe(self) -> str:
        return f"{_fmt(self.low)}..{_fmt(self.high)}"


def is_number(value: object) -> bool:
    """Whether a parsed JSON/YAML value is a number: an int or float, not a bool (which
    Python counts as an int)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def is_finite_number(value: object) -> bool:
    """A number (:func:`is_number`) that is neither NaN nor infinite; an integer too large
    for a float counts as infinite (math.isfinite raises on it: a 400-digit JSON literal)."""
    if not is_number(value):
        return False
    try:
        return math.isfinite(value)  # type: ignore[arg-type]
    except OverflowError:
        return False


HUGE_INTEGER = 10**30  # an integer from here on is shown as words, not its digits


def shown_number(value: object) -> str:
    """How an error shows a refused value: an integer of :data:`HUGE_INTEGER` or more as 'a
    huge integer' (a fuzz trial's 400 digits filled the message), anything else by its
    repr."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= HUGE_INTEGER:
        return "a huge integer"
    return repr(value)


def _fmt(value: float) -> str:
    if float(value).is_integer() and abs(value) < 1e10:
        return str(int(value))
    return f"{value:g}"


# Largest AI clusters announced are ~10^5-10^6 accelerators (xAI Colossus 200k GPUs, 2025).
MAX_DEVICES = 2**20
LIMITS: dict[str, Range] = {
    "devices": Range(1, MAX_DEVICES, "more accelerators than any cluster built"),
    "nodes": Range(1, MAX_DEVICES, "more nodes than any cluster built"),
    # NVIDIA's largest announced NVLink domain is 576 GPUs (Vera Rubin NVL576, GTC 2025).
    "gpus_per_node": Range(1, 576, "the largest NVLink domain announced (NVL576)"),
    "parallel_degree": Range(1, MAX_DEVICES, "a degree cannot exceed the devices"),
    "vpp": Range(1, 1024, "virtual stages per rank; each needs at least one layer"),
    "micro_batch": Range(1, 2**20, "sequences per micro-batch"),
    "global_batch": Range(1, 2**24, "sequences per optimizer step"),
    "seq_len": Range(1, 2**24, "tokens per sequence (16 M, beyond any published context)"),
    "layers": Range(1, 2**14, "transformer blocks"),
    "width": Range(1, 2**20, "model widths (d_model, d_ff, d_expert, heads, head_dim)"),
    "vocab": Range(1, 2**24, "vocabulary entries"),
    "experts": Range(1, 2**20, "routed experts (PEER, 2024, uses ~10^6 experts)"),
    "days": Range(1e-6, 3650.0, "a training window of at most ten years"),
    "seconds": Range(0.0, 1e9, "a duration of at most ~30 years"),
    "hours": Range(1e-6, 1e9, "hours"),
    # A what-if scale-out rate per GPU (`--scale-out-gbps`): the fastest shipping is 800 Gb/s
    # per GPU (ConnectX-8 on GB300); 1e5 Gb/s is over ten times a B200's whole NVLink 5
    # (900 GB/s = 7.2 Tb/s per direction), a Gb/s figure typed in bits/s is refused
    "scale_out_gbps": Range(0.0, 1e5, "Gb/s per GPU, over ten times a GPU's NVLink 5 rate"),
    # A measured peak per GPU: the largest device holds ~288 GB, so this is beyond any; a
    # figure in bytes written as GiB (~1e11, a node's total ~1e13) stays inside, for the
    # unit-slip check to name (evaluate.plausibility), and GiB x 2^30 stays a finite float.
    "memory_gib": Range(0.0, 1e15, "GiB per GPU"),
    # Law inputs: the joint law (Eq. 10) is fitted on 1e8..1e11 parameters and 1e9..1e11
    # tokens (App. C); predictions far outside are extrapolations (and say so). The floor
    # admits the reference trainer's tiny ladder (examples/ladder_tiny.yaml: ~1e5
    # parameters on ~2e4 tokens), whose fitted law must be checkable at its own rungs;
    # above 1e16 / 1e18 it is no longer a pretraining run.
    "n_params": Range(1e3, 1e16, "parameters of a trainable model"),
    "tokens": Range(1e3, 1e18, "training tokens"),
    # 6 x the smallest parameters x the smallest tokens: the tiny ladder's optimum (its rungs
    # span C = 4e10..9e11) is askable; 1e12 refused it (a trial)
    "flops": Range(6e6, 1e32, "training FLOPs"),
    "split_factor": Range(1, 1024, "expert split factor G"),
    "sparsity": Range(0.0, 0.9999, "sparsity S = 1 - N_act/N_tot, below 1"),
    # Cross-entropy of a language model: ln(vocab) < 17 nats for any real vocabulary.
    "loss": Range(0.0, 50.0, "nats per token"),
    # the widest rung's d_ff = 2.5·512·q = 1280·q within the width range (a trial's q = 999
    # was refused as 'model.ffn 1278720', a field it never typed)
    "ladder_q": Range(1, 819, "ladder seed q (d_ff = 1280·q stays within 2^20)"),
    "tpp": Range(1e-3, 1e6, "tokens per active parameter"),
    "grid": Range(1, 10**6, "geometries in one search grid"),
    "workers": Range(1, 1024, "worker processes"),
    "top": Range(0, 10**6, "rows to print"),
    "fraction": Range(0.0, 1.0, "a share of the runs"),
    "huber_delta": Range(1e-6, 100.0, "the Huber loss's threshold, in nats"),
}


def check_range(field: str, value: float | int, kind: str, *, integer: bool = False,
                low: float | None = None, high: float | None = None,
                above_low: bool = False) -> None:
    """Raise a one-line MosaicInputError unless ``value`` lies in ``LIMITS[kind]``.

    ``low``/``high`` narrow the range for one use; ``above_low`` leaves the low end out
    (a checkpoint takes time: seconds in (0, 1e9], said as such, where '0..1e9' named a 0
    that was refused). Booleans are refused where numbers are expected, and NaN/inf are
    refused everywhere.
    """
    bounds = LIMITS[kind]
    lo = bounds.low if low is None else low
    hi = bounds.high if high is None else high
    span = f"({_fmt(lo)}, {_fmt(hi)}]" if above_low else f"{_fmt(lo)}..{_fmt(hi)}"
    allowed = f"{'an integer' if integer else 'a number'} in {span}"
    if not is_number(value):
        raise MosaicInputError(f"{field}: got {shown(value)}; allowed: {allowed}")
    if integer and not isinstance(value, int) and not (
            math.isfinite(value) and float(value).is_integer()):
        raise MosaicInputError(f"{field}: got {shown(value)}; allowed: {allowed}")
    finite = isinstance(value, int) or math.isfinite(value)
    if not finite or not lo <= value <= hi or (above_low and value == lo):
        number = shown_number(value)
        # the range's reason, where the range is the kind's own (a narrowed one has its own)
        why = f" ({bounds.why})" if finite and value > hi and high is None else ""
        raise MosaicInputError(f"{field}: got {number}; allowed: {allowed}{why}")


def require_finite(field: str, value: float, *, positive: bool = False) -> float:
    """``value`` as a float, or a one-line error if it is NaN/inf (or not > 0 if asked)."""
    if not is_number(value):
        raise MosaicInputError(f"{field}: got {shown(value)}; allowed: a finite number")
    number = float(value) if abs(value) < 1e308 or isinstance(value, float) else math.inf
    if not math.isfinite(number) or (positive and number <= 0):
        what = "a finite number > 0" if positive else "a finite number"
        raise MosaicInputError(f"{field}: got {shown(value)}; allowed: {what}")
    return number


# Megatron-Core can count the embedding and the loss as one pipeline layer each
# (--account-for-embedding-in-pipeline-split, --account-for-loss-in-pipeline-split), so a
# published run may have two more virtual stages than transformer blocks (xtuner's
# Qwen3-235B runs: pp 32 x vpp 3 = 96 stages for 94 blocks).
PIPELINE_EXTRA_STAGES = 2


def check_pipeline(pp: int, vpp: int, layers: int, where: str) -> None:
    """No more virtual pipeline stages than layers to hold (blocks + embedding + loss).

    The same bound in every command (perf, layouts, validate), so an absurd depth is refused
    before any schedule is built (a 10^6-deep pipeline otherwise loops for minutes).
    """
    allowed = layers + PIPELINE_EXTRA_STAGES
    if pp * vpp > allowed:
        raise MosaicInputError(
            f"{where}: pp·vpp = {pp}·{vpp} = {pp * vpp} pipeline stages for {layers} layers; "
            f"allowed: pp·vpp <= layers + {PIPELINE_EXTRA_STAGES} = {allowed} (each stage "
            "holds a block, the embedding or the loss)")
