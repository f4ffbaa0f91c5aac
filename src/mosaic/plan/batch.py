"""The global batch as a decision variable, bounded by a batch-size rule (issue 10 §2).

The paper fixes B_global (Table 3) and names a joint batch/layout search as future work
(Sec. 8). A larger batch raises throughput (more micro-batches fill the pipeline, gathers
and gradient reductions amortise), but past the critical batch size the optimiser needs
proportionally more tokens for the same loss (McCandlish et al. 2018, "An Empirical Model
of Large-Batch Training", Eq. 2.11-2.12), which the loss law, fitted at one batch, does
not see. So every candidate batch must lie under a published bound, and among those the
search takes, per geometry, the batch and layout that deliver the most tokens (the law
decreases in D, so that is the lowest loss; ties go to the smaller batch).

Rules (``--batch-rule``), each a bound on tokens per optimizer step:

* ``deepseek`` (default): B_opt(C) = 0.2920 · C^0.3271 tokens, C in FLOPs (DeepSeek LLM,
  Bi et al. 2024, arXiv:2401.02954, Sec. 3.1, Eq. 1; fitted on 1e17-3e20 FLOPs). DeepSeek
  counts C = M·D with M the non-embedding FLOPs per token including attention; here
  C = 6·N_act·D, the law's model FLOPs (paper Sec. 2.1), which omits attention.
* ``kaplan``: B_crit(L) = B* / L^(1/α_B), B* = 2e8 tokens, α_B = 0.21 (Kaplan et al. 2020,
  arXiv:2001.08361, Eq. 1.4 / Sec. 5.1), with L the predicted loss in nats. Kaplan's loss is
  on WebText2 with GPT-2's tokenizer (the paper's vocabulary too); a law fitted on other
  data shifts it.
* ``tokens:N``: a fixed bound of N tokens, e.g. a critical batch the user measured with
  McCandlish et al.'s gradient noise scale.

The bound of a (geometry, batch) pair is evaluated at that pair's own tokens (and loss),
so it is exact, not iterated. Candidate batches above what the rule could allow even at
the window's largest budget are pruned before their layout search.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from mosaic.arch import LadderGrid
from mosaic.arch.flops import FLOPS_PER_PARAM_TOKEN
from mosaic.errors import MosaicInputError, shown
from mosaic.law import ScalingLaw
from mosaic.limits import check_range
from mosaic.perf.calibration import Calibration
from mosaic.perf.layouts import LayoutLimits
from mosaic.plan.envelope import TABLE3_LAYOUT_LIMITS, Envelope, SearchSpace
from mosaic.plan.peak_bound import peak_bound
from mosaic.plan.search import (
    PlanResult,
    ProgressFn,
    ThroughputTable,
    profile_geometries,
    score,
)
from mosaic.schema_validation import int_from_text
from mosaic.text_values import parse_count

# DeepSeek LLM (arXiv:2401.02954) Sec. 3.1, Eq. 1: B_opt = 0.2920 · C^0.3271 (tokens).
DEEPSEEK_BATCH_COEFFICIENT = 0.2920
DEEPSEEK_BATCH_EXPONENT = 0.3271
# Kaplan et al. 2020 (arXiv:2001.08361) Eq. 1.4: B_crit(L) = B* / L^(1/α_B).
KAPLAN_B_STAR_TOKENS = 2e8
KAPLAN_ALPHA_B = 0.21
# `--global-batch auto`: powers of two from 64 to 65,536 sequences, pruned by the rule.
AUTO_BATCHES = tuple(2**i for i in range(6, 17))


@dataclass(frozen=True)
class BatchRule:
    """An upper bound on tokens per optimizer step, with its source."""

    name: str
    source: str
    fixed_tokens: float | None = None  # the ``tokens:N`` rule

    def bound_tokens(self, c_model_flops: np.ndarray, loss: np.ndarray) -> np.ndarray:
        """The bound at each point's model FLOPs 6·N_act·D and predicted loss."""
        if self.fixed_tokens is not None:
            return np.full(np.shape(c_model_flops), self.fixed_tokens)
        if self.name == "kaplan":
            return KAPLAN_B_STAR_TOKENS / np.asarray(loss, float) ** (1.0 / KAPLAN_ALPHA_B)
        return DEEPSEEK_BATCH_COEFFICIENT * np.asarray(c_model_flops, float) \
            ** DEEPSEEK_BATCH_EXPONENT

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "source": self.source}


RULES = {
    "deepseek": BatchRule("deepseek", "B_opt = 0.2920·C^0.3271 tokens, C = 6·N_act·D "
                          "(DeepSeek LLM, arXiv:2401.02954, Sec. 3.1 Eq. 1)"),
    "kaplan": BatchRule("kaplan", "B_crit = 2e8 tokens / L^(1/0.21), L the predicted loss "
                        "(Kaplan et al. 2020, arXiv:2001.08361, Eq. 1.4)"),
}
DEFAULT_RULE = "deepseek"


def parse_batch_rule(text: str) -> BatchRule:
    """'deepseek', 'kaplan' or 'tokens:N'."""
    if text in RULES:
        return RULES[text]
    if text.startswith("tokens:"):
        # the token counts of the other options (--unique-tokens 5T): 4M, 4.2e6, 4194304
        number = text.removeprefix("tokens:")
        try:
            tokens = parse_count("tokens:N", number)
        except MosaicInputError:
            raise MosaicInputError(f"--batch-rule {shown(text)}: tokens:N needs a number of tokens "
                                   f"per step (e.g. 4194304 or 4M), got {shown(number)}") from None
        check_range("--batch-rule tokens", tokens, "tokens", low=1.0)
        return BatchRule("tokens", f"user bound of {tokens:.4g} tokens per step",
                         fixed_tokens=tokens)
    raise MosaicInputError(f"--batch-rule {shown(text)}: allowed values are "
                           f"{', '.join(RULES)} or tokens:N")


def is_batch_search(text: str) -> bool:
    """Whether a ``--global-batch`` text searches the batch ('auto' or 'MIN:MAX') rather than
    fixing it ('1024'); :func:`parse_global_batch` reads its candidates."""
    return text.strip() == "auto" or ":" in text


def check_rule_read(rule: str | None, global_batch: str) -> None:
    """Refuse a batch rule stated (``rule``; None where none was) with a fixed batch, which
    it does not bound: the rule bounds only a searched batch (a trial: kaplan planned at
    1024 without a word)."""
    if rule is not None and not is_batch_search(global_batch):
        raise MosaicInputError(f"--batch-rule {rule} bounds a searched batch; with a fixed "
                               f"--global-batch {global_batch.strip()} it is not read: give "
                               "--global-batch auto or MIN:MAX, or drop --batch-rule")


def parse_global_batch(text: str) -> tuple[int, ...]:
    """'1024' (fixed), 'auto' (:data:`AUTO_BATCHES`) or 'MIN:MAX' (MIN, 2·MIN, ... ≤ MAX);
    the numbers by the rule of every typed integer (:func:`int_from_text`: '3_2' is not 32,
    as Python's int() reads it)."""
    text = text.strip()
    if text == "auto":
        return AUTO_BATCHES
    try:
        parts = [int_from_text(p) for p in text.split(":")]
    except ValueError:
        parts = []
    if len(parts) not in (1, 2):
        raise MosaicInputError(f"--global-batch must be N, MIN:MAX or auto (sequences per "
                               f"step), got {shown(text)}")
    for value in parts:
        check_range("--global-batch", value, "global_batch", integer=True)
    if len(parts) == 1:
        return (parts[0],)
    low, high = parts
    if low > high:
        raise MosaicInputError(f"--global-batch {text}: MIN must not exceed MAX")
    values = [low]
    while values[-1] * 2 <= high:
        values.append(values[-1] * 2)
    return tuple(values)


@dataclass(frozen=True)
class BatchChoice:
    """The batch search's rule and candidates (per-row choices live in the PlanResult)."""

    rule: BatchRule
    candidates: tuple[int, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"mode": "search", "candidates": list(self.candidates),
                "rule": self.rule.to_dict()}


def _bound_ceiling(envelope: Envelope, space: SearchSpace, law: ScalingLaw,
                   grid: LadderGrid, rule: BatchRule) -> np.ndarray:
    """The largest bound each row could reach: that of a run at the GEMM precision's full
    peak (:mod:`mosaic.plan.peak_bound`), or at the TPP cap."""
    ceiling = peak_bound(envelope, space, law, grid)
    return rule.bound_tokens(FLOPS_PER_PARAM_TOKEN * grid.n_active * ceiling.tokens,
                             ceiling.loss)


def searched_batches(envelope: Envelope, space: SearchSpace, law: ScalingLaw,
                     batches: tuple[int, ...], rule: BatchRule) -> tuple[int, ...]:
    """The candidates :func:`search_batch` runs a layout search for, in its order: those
    whose tokens per step some geometry's bound ceiling reaches (it prunes the rest before
    their search, with no progress reported for them)."""
    return _reaching(batches, envelope.seq_len,
                     _bound_ceiling(envelope, space, law, space.enumerate(), rule))


def _reaching(batches: tuple[int, ...], seq_len: int, ceiling: np.ndarray
              ) -> tuple[int, ...]:
    """``batches`` in increasing order, less those whose tokens per step exceed every
    geometry's bound ``ceiling`` (pruned before their layout search)."""
    return tuple(batch for batch in sorted(batches)
                 if bool(np.any(batch * seq_len <= ceiling)))


def search_batch(
    envelope: Envelope, space: SearchSpace, law: ScalingLaw, calibration: Calibration,
    batches: tuple[int, ...], rule: BatchRule, limits: LayoutLimits | None = None,
    progress: Callable[[int], ProgressFn | None] | None = None, workers: int | None = None,
) -> tuple[PlanResult, BatchChoice]:
    """Eq. 5 with B_global as a decision variable under ``rule`` (see module doc).

    ``progress(batch)`` gives the progress callback of one batch's layout search. A
    cluster whose goodput is 0 is refused with the reason, as :func:`search` does.
    """
    envelope.goodput.require_progress(envelope.n_devices)
    grid = space.enumerate()
    n = len(grid)
    ceiling = _bound_ceiling(envelope, space, law, grid, rule)
    best_tokens = np.full(n, -np.inf)
    chosen = np.zeros(n, dtype=np.int64)
    bound = np.full(n, np.nan)
    tps, mfu, step, memory = np.zeros(n), np.full(n, np.nan), np.full(n, np.nan), \
        np.full(n, np.nan)
    plans: list[dict[str, Any] | None] = [None] * n
    reasons = [""] * n
    blocked = np.zeros(n, dtype=bool)  # trainable at some batch, but above its bound
    # some batch above the row's largest possible bound
    pruned = ceiling < max(batches, default=0) * envelope.seq_len
    evaluated = timed = 0
    for batch in _reaching(batches, envelope.seq_len, ceiling):
        tokens_per_step = batch * envelope.seq_len
        rows = np.flatnonzero(tokens_per_step <= ceiling)
        sized = replace(envelope, global_batch=batch)
        table = profile_geometries(sized, grid.take(rows), calibration, limits,
                                   progress(batch) if progress else None, workers)
        evaluated += table.plans_evaluated
        timed += table.plans_timed
        scored = score(table, sized, space, law)
        c_model = np.where(scored.feasible, scored.c_model_flops, 0.0)
        row_bound = rule.bound_tokens(c_model, np.where(scored.feasible, scored.loss, 1.0))
        allowed = scored.feasible & (tokens_per_step <= row_bound)
        blocked[rows[scored.feasible & ~allowed]] = True
        for i in np.flatnonzero(~scored.feasible):
            reasons[rows[i]] = reasons[rows[i]] or scored.reasons[i]
        better = allowed & (scored.tokens > best_tokens[rows])  # ties keep the smaller batch
        for i in np.flatnonzero(better):
            r = rows[i]
            best_tokens[r] = scored.tokens[i]
            chosen[r], bound[r] = batch, row_bound[i]
            tps[r], mfu[r] = table.tokens_per_s[i], table.mfu[i]
            step[r], memory[r] = table.step_time_s[i], table.memory_bytes[i]
            plans[r] = table.plans[i]
    for r in range(n):
        if chosen[r]:
            reasons[r] = ""
        elif blocked[r] or (pruned[r] and not reasons[r]):
            reasons[r] = (f"every trainable batch exceeds the {rule.name} batch bound "
                          f"(at most {ceiling[r]:.3g} tokens per step in this window)")
        else:
            reasons[r] = reasons[r] or "no candidate batch"
    merged = ThroughputTable(grid=grid, n_devices=envelope.n_devices, tokens_per_s=tps,
                             mfu=mfu, step_time_s=step, memory_bytes=memory,
                             plans=tuple(plans), layout_reasons=tuple(reasons),
                             plans_evaluated=evaluated, plans_timed=timed,
                             limits=limits or TABLE3_LAYOUT_LIMITS)
    result = replace(score(merged, envelope, space, law), global_batch=chosen,
                     batch_bound_tokens=bound)
    if result.optimum_index is not None:  # the envelope of the chosen plan
        result = replace(result, envelope=replace(
            envelope, global_batch=int(chosen[result.optimum_index])))
    return result, BatchChoice(rule, tuple(sorted(batches)))
