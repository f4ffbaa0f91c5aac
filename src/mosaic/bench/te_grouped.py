"""Host time of Transformer Engine's GroupedLinear (the expert GEMMs of Megatron-Core's MoE
layers) per call, by number of local experts and precision.

The step-time model charges each MoE block the host floor of its grouped expert GEMMs
(:func:`mosaic.perf.kernels.te_grouped_linear_host_floor_s`: fixed + per-group seconds,
fitted to BF16 calls of TE 2.4 on a B200 host). Whether FP8 current scaling and MXFP8 cost
the host more per group is what decides if a run with many local experts is host-bound
(docs/evidence/pipeline_layouts_mtp.md, "What remains"); this family measures it on the
user's GPU and host. Each case calls ``GroupedLinear(groups, k, n)`` on ``groups ·
M_PER_GROUP`` tokens, tiny GEMMs whose GPU time is a few microseconds, so a call's wall time
is what the host takes to issue it (the same reading as ScalePlan's ``gemm_grouped`` rows the
built-in floor was fitted to). ``fwd`` times the forward alone, ``fwd_bwd`` forward and
backward; ``mosaic calibrate --microbench`` fits a line over the group counts per pass and
precision and applies it to jobs on the measured device.

Needs ``transformer_engine`` (``pip install transformer_engine[pytorch]``) and a CUDA GPU;
elsewhere every case is recorded as skipped. Recipes: FP8 current scaling
(``Float8CurrentScaling``) and MXFP8 (``MXFP8BlockScaling``, Blackwell), from
``transformer_engine.common.recipe``.
"""

from __future__ import annotations

from typing import Any

from mosaic.bench.cases import BenchOptions, Case, Unsupported, summary_columns
from mosaic.bench.device import random
from mosaic.bench.shapes import BenchShapes
from mosaic.bench.timer import time_call

FAMILY = "te_grouped"
PASSES = ("fwd", "fwd_bwd")
PRECISIONS = ("bf16", "fp8", "mxfp8")
# local experts per rank a run may hold: 1 (EP = experts) to 64 (EP 4 of DeepSeek-V3's 256)
GROUP_COUNTS = (1, 2, 4, 8, 16, 32, 64)
# tokens per expert: a multiple of the 32-row MXFP8 block (and of FP8's 16), small enough
# that the GEMMs' GPU time stays under the host's
M_PER_GROUP = 32
FEATURES = 1024  # in and out features of every expert GEMM
# the least compute capability of each precision's GEMMs (FP8: Ada/Hopper; MXFP8: Blackwell)
MIN_CAPABILITY = {"bf16": (8, 0), "fp8": (8, 9), "mxfp8": (10, 0)}


def build_cases(_shapes: BenchShapes, options: BenchOptions) -> list[Case]:
    """One case per precision (of ``options.dtypes``), pass and group count."""
    precisions = [p for p in PRECISIONS if p in options.dtypes] or ["bf16"]
    return [Case(FAMILY, f"{precision}:{name}:{groups}x{M_PER_GROUP}x{FEATURES}x{FEATURES}",
                 {"dtype": precision, "pass": name, "groups": groups,
                  "m_per_group": M_PER_GROUP, "n": FEATURES, "k": FEATURES})
            for precision in precisions for name in PASSES for groups in GROUP_COUNTS]


def _transformer_engine() -> Any:
    try:
        import transformer_engine.pytorch as te
    except ImportError:  # (its CUDA libraries missing raise ImportError or OSError)
        raise Unsupported("transformer_engine is not installed "
                          "(pip install 'transformer_engine[pytorch]')") from None
    except OSError as exc:
        raise Unsupported(f"transformer_engine does not load: {str(exc)[:100]}") from None
    return te


def _autocast(te: Any, precision: str) -> Any:
    """TE's FP8 context for ``precision`` (disabled for bf16): ``te.autocast(recipe=)`` from
    TE 2.9, ``te.fp8_autocast(fp8_recipe=)`` before."""
    from transformer_engine.common import recipe

    chosen = {"bf16": None, "fp8": "Float8CurrentScaling", "mxfp8": "MXFP8BlockScaling"}[
        precision]
    instance = getattr(recipe, chosen)() if chosen else None
    if hasattr(te, "autocast"):
        return te.autocast(enabled=instance is not None, recipe=instance)
    return te.fp8_autocast(enabled=instance is not None, fp8_recipe=instance)


def skip_reason(case: Case, device: Any) -> str | None:
    """Why ``device`` cannot run ``case`` (listed so by the dry run, skipped by the run)."""
    import torch

    precision = case.columns["dtype"]
    if device.type != "cuda":
        return "Transformer Engine runs on CUDA GPUs only"
    if torch.cuda.get_device_capability(device) < MIN_CAPABILITY[precision]:
        return (f"{precision} GEMMs need compute capability >= "
                f"{'.'.join(map(str, MIN_CAPABILITY[precision]))}")
    return None


def measure(case: Case, device: Any, options: BenchOptions) -> dict[str, Any]:
    """Wall time of one GroupedLinear call (forward, or forward and backward)."""
    import torch

    c = case.columns
    precision, groups = c["dtype"], c["groups"]
    reason = skip_reason(case, device)
    if reason is not None:
        raise Unsupported(reason)
    te = _transformer_engine()
    tokens = groups * c["m_per_group"]
    module = te.GroupedLinear(groups, c["k"], c["n"], bias=False, params_dtype=torch.bfloat16,
                              device=device)
    backward = c["pass"] == "fwd_bwd"
    x = random((tokens, c["k"]), device, torch.bfloat16, requires_grad=backward)
    dy = random((tokens, c["n"]), device, torch.bfloat16)
    m_splits = [c["m_per_group"]] * groups

    def call() -> Any:
        with _autocast(te, precision):
            out = module(x, m_splits)
        if backward:
            out.backward(dy)
        return out

    try:
        summary, calls = time_call(call, device, options.policy)
    except (RuntimeError, AssertionError, ValueError) as exc:  # a recipe this TE refuses
        raise Unsupported(str(exc).splitlines()[0][:120] if str(exc) else
                          type(exc).__name__) from None
    return {**summary_columns(summary, calls), "impl": f"te {te.__version__}"}
