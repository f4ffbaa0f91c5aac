"""A job's recompute settings that name what its model or stack does not have: Megatron-Core's
TransformerConfig refuses mla_up_proj without MLA and moe_act without the experts' grouped
GEMM (transformer_config.py @ d98e8a64dd, ValueError), and reads 'moe' and 'shared_experts'
nowhere on a model without them; recompute_block_fraction is a share of whole blocks, which
Megatron-Core's per-module selective recompute does not take ('recompute_num_layers must be
None'). Before these were checked, each was accepted without a word."""

import re
from pathlib import Path

import pytest

from mosaic.config.job_schema import load_job
from mosaic.errors import MosaicInputError
from mosaic.evaluate.job import predict_job
from mosaic.perf.calibration import default_calibration

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
MOE_JOB = EXAMPLES / "appendix_e.yaml"  # GQA, 128 experts, no shared expert, megatron-core
MLA_JOB = EXAMPLES / "deepseek_v3_h100.yaml"
CALIBRATION = default_calibration()
SELECTIVE = "performance.checkpointing=selective"


@pytest.fixture
def dense_job(tmp_path: Path) -> Path:
    """appendix_e.yaml without its moe block (and so ep 1): a dense GQA model."""
    text = re.sub(r"\nmoe:\n(  .*\n)+", "\n", MOE_JOB.read_text()).replace("ep: 8", "ep: 1")
    path = tmp_path / "dense.yaml"
    path.write_text(text)
    return path


def _step(job: Path, *overrides: str) -> tuple[float, tuple[str, ...]]:
    spec = load_job(job, list(overrides))
    return float(predict_job(spec, CALIBRATION).prediction.step_time_s[0]), spec.assumptions


@pytest.mark.parametrize(("modules", "words"), [
    ("[moe_act]", "moe_act recomputes the routed experts' activation, and the model has no "
                  "MoE layers"),
    ("[core_attn,mla_up_proj]", "mla_up_proj recomputes MLA's up-projections, and the "
                                "model's attention is gqa"),
])
def test_a_module_megatron_refuses_without_its_part_is_refused(dense_job, modules, words):
    with pytest.raises(MosaicInputError, match=re.escape(words)) as caught:
        load_job(dense_job, [SELECTIVE, f"performance.recompute_modules={modules}"])
    assert "\n" not in str(caught.value)


def test_under_full_or_no_recompute_the_modules_are_unread_not_refused(dense_job):
    """Megatron-Core checks recompute_modules only under recompute_granularity selective
    (transformer_config.py @ d98e8a64dd): under full or none it starts, so mosaic names the
    modules as not read rather than refusing the job (a review)."""
    for checkpointing in ("full", "none"):
        spec = load_job(dense_job, [f"performance.checkpointing={checkpointing}",
                                    "performance.recompute_modules=[moe_act,mla_up_proj]"])
        assert any(note.startswith("performance.recompute_modules not read")
                   for note in spec.assumptions), checkpointing


def test_the_parts_a_model_has_are_accepted():
    # DeepSeek-V3: MLA and routed experts
    spec = load_job(MLA_JOB, ["performance.recompute_modules=[mla_up_proj,moe_act]"])
    assert spec.workload.recompute_modules == ("mla_up_proj", "moe_act")


def test_moe_and_shared_experts_on_a_dense_model_change_nothing_and_are_named(dense_job):
    base, base_notes = _step(dense_job, SELECTIVE)  # core_attn, Megatron-Core's default
    step, notes = _step(dense_job, SELECTIVE,
                        "performance.recompute_modules=[core_attn,moe,shared_experts]")
    assert step == base
    line = ("performance.recompute_modules moe, shared_experts not read: the model has no "
            "MoE layers and no shared experts")
    assert line in notes and line not in base_notes


def test_shared_experts_on_an_moe_without_them_is_named():
    base, _ = _step(MOE_JOB, SELECTIVE, "performance.recompute_modules=[core_attn,moe_act]")
    step, notes = _step(MOE_JOB, SELECTIVE,
                        "performance.recompute_modules=[core_attn,moe_act,shared_experts]")
    assert step == base
    assert sum("shared_experts not read: the model has no shared experts" in n
               for n in notes) == 1


def test_an_moe_module_the_model_has_is_not_named():
    _, notes = _step(MOE_JOB, SELECTIVE, "performance.recompute_modules=[core_attn,moe]")
    assert not any("recompute_modules" in n and "not read" in n for n in notes)


def test_block_fraction_under_per_module_selective_changes_nothing_and_is_named():
    base, base_notes = _step(MOE_JOB, SELECTIVE)
    step, notes = _step(MOE_JOB, SELECTIVE, "performance.recompute_block_fraction=0.5")
    assert step == base
    unread = "performance.recompute_block_fraction not read: checkpointing is selective"
    assert not any(unread in n for n in base_notes)
    assert sum(unread in n for n in notes) == 1


def test_block_fraction_under_block_level_selective_is_read_without_the_note():
    # fms-fsdp's selective_checkpointing p checkpoints that share of blocks whole
    base, _ = _step(MOE_JOB, SELECTIVE, "performance.stack=fms-fsdp")
    step, notes = _step(MOE_JOB, SELECTIVE, "performance.stack=fms-fsdp",
                        "performance.recompute_block_fraction=0.5")
    assert step < base  # half the blocks recomputed instead of all
    assert not any("recompute_block_fraction not read" in n for n in notes)
