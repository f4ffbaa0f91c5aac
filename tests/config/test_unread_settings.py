"""Settings a job states that its own layout does not read are named in its assumptions
(config.job_schema.unread_layout_settings): a prediction equal to the one without them was
taken for their effect (`perf --set parallelism.tp_comm_overlap=true` at tp 1 said nothing)."""

from pathlib import Path

import pytest

from mosaic.config.job_schema import load_job
from mosaic.evaluate.job import predict_job
from mosaic.perf.calibration import default_calibration

# tp 1, zero1, full checkpointing, the alltoall dispatcher (its assumptions say so)
JOB = Path(__file__).resolve().parents[2] / "examples" / "appendix_e.yaml"
CALIBRATION = default_calibration()


def _step_and_notes(*overrides: str) -> tuple[float, tuple[str, ...]]:
    spec = load_job(JOB, list(overrides))
    return float(predict_job(spec, CALIBRATION).prediction.step_time_s[0]), spec.assumptions


@pytest.mark.parametrize(("setting", "context", "unread"), [
    # tp 1: no sequence parallelism, whose collectives the overlap hides (Megatron-LM
    # refuses --tp-comm-overlap without --sequence-parallel)
    ("parallelism.tp_comm_overlap=true", (), "parallelism.tp_comm_overlap not read"),
    ("parallelism.tp_comm_overlap=true",
     ("parallelism.tp=2", "parallelism.sequence_parallel=false"),
     "parallelism.tp_comm_overlap not read"),
    # zero1 gathers no parameters per unit
    ("performance.fsdp_gather=tensor", (), "performance.fsdp_gather tensor not read"),
    ("performance.fsdp_keep_gathered=true", (), "performance.fsdp_keep_gathered not read"),
    # full checkpointing recomputes whole blocks, not modules
    ("performance.recompute_modules=[core_attn,moe]", (),
     "performance.recompute_modules not read: checkpointing is full"),
    ("performance.recompute_block_fraction=0.5", ("performance.checkpointing=none",),
     "performance.recompute_block_fraction not read"),
    # the pairwise all-to-all sends every routed copy: no per-node deduplication to bound
    ("performance.max_nodes_per_token=2", (), "performance.max_nodes_per_token 2 not read"),
    # ep 1: no EP all-to-all to overlap (Megatron-Core asserts expert parallelism for it)
    ("parallelism.ep_overlap=true", ("parallelism.ep=1", "performance.checkpointing=selective"),
     "parallelism.ep_overlap not read"),
    # Megatron-Core runs one schedule a step over global / (dp·micro) micro-batches: it has
    # no local batch (torchtitan's and NeMo AutoModel's local_batch_size); 8192 / (32·8)
    ("batch.local_seqs=8", (), "batch.local_seqs 8 not read"),
])
def test_an_unread_setting_changes_nothing_and_is_named(setting, context, unread):
    base_step, base_notes = _step_and_notes(*context)
    step, notes = _step_and_notes(*context, setting)
    assert step == base_step
    assert not any(unread in line for line in base_notes)
    assert sum(unread in line for line in notes) == 1, notes


@pytest.mark.parametrize(("setting", "context", "unread"), [
    ("parallelism.tp_comm_overlap=true", ("parallelism.tp=2",), "tp_comm_overlap not read"),
    ("performance.fsdp_gather=tensor", ("parallelism.sharding=fsdp",), "fsdp_gather"),
    ("performance.recompute_modules=[core_attn,moe]", ("performance.checkpointing=selective",),
     "recompute_modules not read"),
    ("performance.recompute_block_fraction=0.5", (), "recompute_block_fraction not read"),
    # ep 32 spans 4 nodes of 8 GPUs: at most 2 of them per token binds
    ("performance.max_nodes_per_token=2", ("parallelism.dispatcher=deepep", "parallelism.ep=32"),
     "max_nodes_per_token 2 not read"),
    ("parallelism.ep_overlap=true", ("performance.checkpointing=selective",),
     "ep_overlap not read"),
    # torchtitan at pp 16 runs one schedule per local batch: 32 passes of 4 micro-batches
    ("batch.local_seqs=8", ("performance.stack=torchtitan", "parallelism.vpp=1"),
     "local_seqs 8 not read"),
])
def test_a_setting_its_layout_reads_changes_the_step_without_the_note(setting, context,
                                                                     unread):
    base_step, _ = _step_and_notes(*context)
    step, notes = _step_and_notes(*context, setting)
    assert step != base_step
    assert not any(unread in line for line in notes), notes


def test_a_dispatcher_on_a_dense_model_changes_nothing_and_is_named(tmp_path):
    """A dense model dispatches no token (Megatron-Bridge skips DeepEP/HybridEP for it)."""
    import re

    dense = tmp_path / "dense.yaml"
    dense.write_text(re.sub(r"\nmoe:\n(  .*\n)+", "\n", JOB.read_text()).replace("ep: 8",
                                                                                   "ep: 1"))
    base = load_job(dense, [])
    spec = load_job(dense, ["parallelism.dispatcher=deepep"])
    step = float(predict_job(spec, CALIBRATION).prediction.step_time_s[0])
    assert step == float(predict_job(base, CALIBRATION).prediction.step_time_s[0])
    line = ("parallelism.dispatcher deepep not read: the model has no MoE layers, so no token "
            "is dispatched to an expert")
    assert line in spec.assumptions and line not in base.assumptions
