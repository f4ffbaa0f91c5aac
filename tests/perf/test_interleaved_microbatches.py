"""An interleaved pipeline (vpp > 1) needs at least pp micro-batches per step: Megatron-Core
runs micro-batches in groups of pp per model chunk and refuses fewer (schedules.py @
core_v0.16.0); with one micro-batch the chunks run one after another, so the bubble formula
(pp-1)/(vpp·n_mb) would credit interleaving that cannot happen (a new user's trial found
pp=2, vpp=4 at one micro-batch ranked first by `mosaic layouts`)."""

from __future__ import annotations

import numpy as np
import pytest

from mosaic.arch import Geometry
from mosaic.errors import MosaicInputError
from mosaic.perf.constraints import plan_violations
from mosaic.perf.plan import concatenate_plans, single_plan
from mosaic.perf.workload import Workload

DENSE = Geometry(layers=48, d_model=2048, heads=32, kv_heads=4, head_dim=128, ffn=8192,
                 vocab=32000)
RULE = "micro-batches per step"


def _violated(global_batch: int, **layout: int) -> bool:
    workload = Workload(geometry=DENSE, global_batch=global_batch, seq_len=4096)
    plans = concatenate_plans([single_plan(**layout)])
    hits = [v for v in plan_violations(workload, plans, 512) if RULE in v.rule]
    return bool(hits and np.any(hits[0].violated))


def test_one_micro_batch_per_step_refuses_interleaving():
    # dp 256 x micro-batch 2 = 512 sequences: the whole global batch in one micro-batch
    assert _violated(512, pp=2, vpp=4, dp=256, micro_batch=2)
    assert not _violated(512, pp=2, vpp=1, dp=256, micro_batch=2)  # plain 1F1B is fine


def test_pp_micro_batches_are_enough():
    # 1024 / (256·2) = 2 = pp micro-batches; one fewer than pp (pp=4) is refused
    assert not _violated(1024, pp=2, vpp=4, dp=256, micro_batch=2)
    assert _violated(1536, pp=4, vpp=2, dp=128, micro_batch=4)  # 1536/512 = 3 < 4


def test_offloading_every_layer_is_refused_as_megatron_does():
    # Megatron-Core: cpu_offloading_num_layers must be < num_layers (transformer_config.py)
    Workload(geometry=DENSE, global_batch=512, seq_len=4096, offloaded_activation_layers=47)
    with pytest.raises(MosaicInputError, match="below the model's 48 layers, got 48"):
        Workload(geometry=DENSE, global_batch=512, seq_len=4096, offloaded_activation_layers=48)


# Stacks that run one pipeline schedule per gradient-accumulation pass (trait
# pipeline_schedule_per_pass): torchtitan builds each schedule of local_batch_size //
# micro-batch micro-batches (distributed/pipeline_parallel.py build_pipeline_schedule
# @ v0.2.2), so the rule counts per schedule there, per step on Megatron.
PER_SCHEDULE = "micro-batches per pipeline schedule"


def _reasons(stack: str, local_batch: int | None, **layout: int) -> list[str]:
    workload = Workload(geometry=DENSE, global_batch=256, seq_len=4096, stack=stack,
                        local_batch=local_batch)
    plans = concatenate_plans([single_plan(**layout)])
    return [v.message(plans, 0) for v in plan_violations(workload, plans, 512)
            if ("micro-batches per" in v.rule) and v.violated[0]]


def test_torchtitan_counts_micro_batches_per_schedule_not_per_step():
    # dp 16, micro-batch 1: 256 / 16 = 16 micro-batches a step, >= pp = 4 (the per-step rule
    # passes); local_seqs 2: 256 / (16·2) = 8 passes, each a schedule of 2 / 1 = 2 < 4
    layout = {"pp": 4, "vpp": 2, "dp": 16, "micro_batch": 1, "tp": 2}
    reasons = _reasons("torchtitan", 2, **layout)
    assert reasons == ["vpp=2 > 1 needs at least pp=4 micro-batches per pipeline schedule; "
                       "torchtitan runs one schedule per local batch, of "
                       "local_seqs/micro_batch=2 (local_seqs=2, micro_batch=1); with fewer, "
                       "interleaving cannot shrink the bubble (the stack warns of it): "
                       "state vpp 1, a larger local_seqs or a smaller micro-batch"]
    # local_seqs 4: 4 passes of 4 micro-batches = pp: feasible
    assert _reasons("torchtitan", 4, **layout) == []
    # micro-batch 2 of local 8: 8 / 2 = 4 per schedule, feasible; of local 4: 2, refused
    assert _reasons("torchtitan", 8, **{**layout, "micro_batch": 2}) == []
    assert "local_seqs/micro_batch=2 (local_seqs=4, micro_batch=2)" in _reasons("torchtitan", 4,
                                               **{**layout, "micro_batch": 2})[0]
    # NeMo AutoModel also runs one schedule a pass (step_scheduler.py grad_acc_steps)
    assert "nemo-automodel runs one schedule per local batch" in _reasons(
        "nemo-automodel", 2, **layout)[0]


def test_megatron_and_unstated_local_batch_keep_counting_per_step():
    layout = {"pp": 4, "vpp": 2, "dp": 16, "micro_batch": 1, "tp": 2}
    # Megatron runs one schedule a step: 16 micro-batches >= 4, whatever local_seqs says
    assert _reasons("megatron-core", 2, **layout) == []
    # torchtitan without a stated local batch: one schedule of the step's 16
    assert _reasons("torchtitan", None, **layout) == []
    # the per-step rule and its message where the step itself has too few: 256 / (64·2) = 2
    few = {"pp": 4, "vpp": 2, "dp": 64, "micro_batch": 2, "tp": 2}
    assert _reasons("megatron-core", None, **few) == [
        "vpp=2 > 1 needs at least pp=4 micro-batches per step (global_batch=256 / "
        "(dp·micro_batch=64·2))"]


def _rounds_reasons(stack: str, local_batch: int | None, global_batch: int = 288,
                    **layout: int) -> list[str]:
    workload = Workload(geometry=DENSE, global_batch=global_batch, seq_len=4096, stack=stack,
                        local_batch=local_batch)
    plans = concatenate_plans([single_plan(**layout)])
    return [v.message(plans, 0) for v in plan_violations(workload, plans, 512)
            if "equal rounds" in v.rule and v.violated[0]]


def test_torch_interleaved_rounds_must_divide_the_schedules_micro_batches():
    """torch 2.13.0 ScheduleInterleaved1F1B: rounds = max(1, n // pp), ValueError unless
    n % rounds == 0. pp 4, dp 16, micro-batch 1, 288 sequences: local_seqs 9 makes 2 passes
    of 9 micro-batches, 9 // 4 = 2 rounds, refused; local_seqs 6: 6 // 4 = 1 round, runs;
    local_seqs 18 (one pass of 18): 4 rounds, 18 % 4 = 2, refused."""
    layout = {"pp": 4, "vpp": 2, "dp": 16, "micro_batch": 1, "tp": 2}
    assert _rounds_reasons("torchtitan", 9, **layout) == [
        "vpp=2 > 1: torch's interleaved schedules split the micro-batches of one pipeline "
        "schedule, local_seqs/micro_batch=9 (local_seqs=9, micro_batch=1), into equal "
        "rounds, max(1, n // pp)=2 of them (pp=4), whose number must divide them "
        "(torch's ScheduleInterleaved1F1B and ScheduleInterleavedZeroBubble raise ValueError "
        "otherwise)"]
    assert _rounds_reasons("torchtitan", 6, **layout) == []
    assert "=4 of them" in _rounds_reasons("torchtitan", 18, **layout)[0]
    assert _rounds_reasons("torchtitan", 9, **{**layout, "vpp": 1}) == []  # plain 1F1B
    # no local batch: one schedule of the step's 288 / 16 = 18, 4 rounds: refused
    assert "global_batch/(dp·micro_batch)=18" in _rounds_reasons("torchtitan", None,
                                                                   **layout)[0]
    # Megatron-Core runs its own schedule, not torch's: no such rule
    assert _rounds_reasons("megatron-core", 9, **layout) == []


def test_the_rounds_message_names_torchs_schedules_not_a_stacks():
    # NeMo AutoModel takes its schedule class from the job (torch's get_schedule_class), so
    # the message names torch's interleaved schedules, not "nemo-automodel's Interleaved1F1B"
    layout = {"pp": 4, "vpp": 2, "dp": 16, "micro_batch": 1, "tp": 2}
    (reason,) = _rounds_reasons("nemo-automodel", 9, **layout)
    assert "nemo-automodel's" not in reason
    assert "ScheduleInterleaved1F1B and ScheduleInterleavedZeroBubble raise ValueError" in reason
