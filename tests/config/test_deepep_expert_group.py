"""A stated DeepEP dispatcher needs more than one rank to dispatch over: Megatron-Core's
MoEFlexTokenDispatcher asserts "DeepEP dispatcher requires TPxEP > 1" over expert-TP x EP
(megatron/core/transformer/moe/token_dispatcher.py l. 1836 @ d98e8a64dd), and
Megatron-Bridge's apply_flex_dispatcher_backend sets flex at any EP size. A job stating it
at ep = etp = 1 predicted a step Megatron cannot launch."""

from pathlib import Path

import pytest

from mosaic.config.job_schema import load_job
from mosaic.errors import MosaicInputError
from mosaic.evaluate.job import predict_job
from mosaic.perf.calibration import default_calibration
from mosaic.perf.workload import Dispatcher

JOB = Path(__file__).resolve().parents[2] / "examples" / "appendix_e.yaml"
CALIBRATION = default_calibration()


@pytest.mark.parametrize("dispatcher", ["deepep", "flex"])  # flex: Megatron's default DeepEP
def test_a_stated_deepep_at_ep_etp_one_is_refused_in_one_line(dispatcher):
    with pytest.raises(MosaicInputError) as refused:
        predict_job(load_job(JOB, ["parallelism.ep=1", f"parallelism.dispatcher={dispatcher}"]),
                    CALIBRATION)
    message = str(refused.value)
    assert "\n" not in message
    assert "etp·ep=1·1 with the deepep dispatcher" in message
    assert "state dispatcher alltoall or etp·ep > 1" in message


@pytest.mark.parametrize("overrides", [
    ("parallelism.ep=2", "parallelism.dispatcher=deepep"),
    # etp 2 makes the expert-TP x EP group two ranks
    ("parallelism.ep=1", "parallelism.tp=2", "parallelism.etp=2",
     "parallelism.dispatcher=deepep"),
    # HybridEP has no such assert
    ("parallelism.ep=1", "parallelism.dispatcher=hybridep"),
    ("parallelism.ep=1", "parallelism.dispatcher=alltoall"),
])
def test_launchable_layouts_are_not_refused(overrides):
    assert predict_job(load_job(JOB, list(overrides)), CALIBRATION).prediction.step_time_s[0] > 0


def test_the_stacks_default_is_not_held_to_the_stated_rule():
    """megatron-bridge on H100 defaults to DeepEP; what it runs at ep 1 is the
    open question the rule leaves alone (the job is costed, not refused)."""
    spec = load_job(JOB, ["parallelism.ep=1", "performance.stack=megatron-bridge",
                          "hardware.node_type=p5.48xlarge"])
    assert spec.workload.dispatcher is Dispatcher.DEEPEP
    assert not spec.workload.dispatcher_stated
    assert predict_job(spec, CALIBRATION).prediction.step_time_s[0] > 0


def test_a_stated_deepep_with_expert_tp_on_torchtitan_is_refused_in_one_line():
    """torchtitan raises NotImplementedError "DeepEP with Expert Tensor Parallelism (ETP) is
    not supported yet" at etp > 1 (models/deepseek_v3/infra/parallelize.py @ 1a36996b8)."""
    titan = ["performance.stack=torchtitan", "parallelism.tp=2", "parallelism.vpp=1"]
    with pytest.raises(MosaicInputError) as refused:
        predict_job(load_job(JOB, [*titan, "parallelism.etp=2",
                                   "parallelism.dispatcher=deepep"]), CALIBRATION)
    message = str(refused.value)
    assert "\n" not in message
    assert "etp=2 with the deepep dispatcher: torchtitan runs DeepEP with etp 1 only" in message
    for launchable in (["parallelism.etp=1", "parallelism.dispatcher=deepep"],
                       ["parallelism.etp=2", "parallelism.dispatcher=alltoall"]):
        spec = load_job(JOB, [*titan, *launchable])
        assert predict_job(spec, CALIBRATION).prediction.step_time_s[0] > 0


@pytest.mark.parametrize("dispatcher", ["deepep", "hybridep"])
def test_a_stated_flex_dispatcher_at_ep_one_on_nemo_automodel_is_refused(dispatcher):
    """NeMo AutoModel builds its DeepEP/HybridEP dispatcher only in apply_ep, which asserts
    an EP mesh of more than one rank (components/moe/parallelizer.py @ 36044ad3d)."""
    automodel = ["performance.stack=nemo-automodel", f"parallelism.dispatcher={dispatcher}"]
    with pytest.raises(MosaicInputError) as refused:
        predict_job(load_job(JOB, [*automodel, "parallelism.ep=1"]), CALIBRATION)
    message = str(refused.value)
    assert "\n" not in message
    assert f"ep=1 with the {dispatcher} dispatcher: it needs ep > 1" in message
    assert predict_job(load_job(JOB, [*automodel, "parallelism.ep=8"]),
                       CALIBRATION).prediction.step_time_s[0] > 0
