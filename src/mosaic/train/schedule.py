"""Learning-rate schedule: warmup-stable-decay (Hägele et al., 2024; paper Appendix A.2).

Warm-up is set in tokens (about 1e8 in the paper, whatever the run length), then the peak
rate holds, then it decays linearly to zero over the final ``decay_fraction`` (20%) of the
steps. The peak comes from Eq. 17 (lr* = 3.30·C^-0.199, C = 6·N_act·D) unless given.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mosaic.arch.flops import FLOPS_PER_PARAM_TOKEN
from mosaic.errors import MosaicInputError
from mosaic.law.optimum import EQ17_MIN_C_MODEL_FLOPS, peak_learning_rate

# Below EQ17_MIN_C_MODEL_FLOPS (the smallest run Eq. 17 was fitted on) the rate grows
# without bound (C = 2e10, a tiny ladder rung: 0.032). Measured on such a rung at 0.032
# (docs/train.md, "Router collapse"): the first Adam steps turn each N(0, 0.006^2) router
# row by 0.5-0.9 rad and the residual stream grows from rms 0.006 to 6 along one
# token-independent direction in 5 steps, so every token reaches the router with the same
# hidden state and the one bias per expert of Eq. 18 can only move the whole batch from
# expert to expert (Eq. 19).


def eq17_peak_lr(n_active: float, tokens: float) -> float:
    """Peak learning rate of Eq. 17 for N_act active parameters trained on D tokens."""
    return float(peak_learning_rate(FLOPS_PER_PARAM_TOKEN * n_active * tokens))


def default_peak_lr(n_active: float, tokens: float) -> tuple[float, str]:
    """Eq. 17 inside the range it was fitted on, held at its edge below it; and a note.

    Guide rule: never extrapolate silently. Below C_model = 1.80e18 FLOPs the rate is that
    of the smallest run of the paper's sweep (7.7e-4); set ``optim.lr`` to override.
    """
    c_model = FLOPS_PER_PARAM_TOKEN * n_active * tokens
    if c_model >= EQ17_MIN_C_MODEL_FLOPS:
        return eq17_peak_lr(n_active, tokens), "Eq. 17"
    lr = float(peak_learning_rate(EQ17_MIN_C_MODEL_FLOPS))
    return lr, (f"Eq. 17 at C_model {EQ17_MIN_C_MODEL_FLOPS:.3g} FLOPs, the smallest run it "
                f"was fitted on (this run: {c_model:.3g}; Eq. 17 would give "
                f"{eq17_peak_lr(n_active, tokens):.3g}); set optim.lr to override")


@dataclass(frozen=True)
class WSDSchedule:
    """lr(step) for 0-based optimizer steps 0 .. total_steps - 1."""

    peak_lr: float
    total_steps: int
    warmup_steps: int
    decay_steps: int

    @classmethod
    def build(cls, peak_lr: float, total_steps: int, tokens_per_step: int,
              warmup_tokens: float, decay_fraction: float) -> WSDSchedule:
        warmup = math.ceil(warmup_tokens / tokens_per_step)
        decay = round(decay_fraction * total_steps)
        if warmup + decay > total_steps:
            raise MosaicInputError(
                f"optim.warmup_tokens {warmup_tokens:g} is {warmup} steps of {tokens_per_step} "
                f"tokens; with {decay} decay steps that exceeds the run's {total_steps} steps "
                f"(allowed: at most {(total_steps - decay) * tokens_per_step} tokens)")
        return cls(peak_lr, total_steps, warmup, decay)

    def __call__(self, step: int) -> float:
        if step < self.warmup_steps:
            return self.peak_lr * (step + 1) / self.warmup_steps
        decay_start = self.total_steps - self.decay_steps
        if step < decay_start:
            return self.peak_lr
        # Linear to zero: the rate would reach 0 at step == total_steps.
        return self.peak_lr * (self.total_steps - step) / self.decay_steps
