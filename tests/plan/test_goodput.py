"""Goodput models: Young's checkpoint interval and the lost fraction, by hand."""

import json
import math

import pytest

from mosaic.errors import MosaicInputError
from mosaic.plan import ConstantGoodput, YoungDalyGoodput


def test_young_daly_interval_and_loss_by_hand():
    # 256 GPUs, MTBF 50,000 GPU-hours, 120 s checkpoints, 600 s restarts.
    model = YoungDalyGoodput(mtbf_gpu_s=50_000 * 3600.0, checkpoint_s=120.0, restart_s=600.0)
    mtbf = 50_000 * 3600.0 / 256  # 703,125 s between job failures
    tau = math.sqrt(2 * 120.0 * mtbf)  # Young 1974: sqrt(2 δ M) = 12,990.4 s
    assert model.system_mtbf_s(256) == pytest.approx(703_125.0)
    assert model.checkpoint_interval_s(256) == pytest.approx(tau)
    assert tau == pytest.approx(12_990.38, rel=1e-6)
    lost = 120.0 / tau + tau / (2 * mtbf) + 600.0 / mtbf
    assert model.lost_fraction(256) == pytest.approx(lost)
    # At Young's interval the first two terms add to sqrt(2 δ / M).
    assert lost == pytest.approx(math.sqrt(2 * 120.0 / mtbf) + 600.0 / mtbf)
    assert model.fraction(256) == pytest.approx(1 - lost)


def test_goodput_falls_with_devices_and_floors_at_zero():
    model = YoungDalyGoodput(mtbf_gpu_s=10_000 * 3600.0, checkpoint_s=300.0)
    fractions = [model.fraction(n) for n in (8, 64, 512, 4096)]
    assert fractions == sorted(fractions, reverse=True)
    assert YoungDalyGoodput(mtbf_gpu_s=3600.0, checkpoint_s=3000.0).fraction(1024) == 0.0


def test_constant_goodput_and_bad_inputs():
    assert ConstantGoodput(0.9).fraction(10_000) == 0.9
    with pytest.raises(MosaicInputError, match="goodput must be in"):
        ConstantGoodput(1.5)
    with pytest.raises(MosaicInputError, match="checkpoint time"):
        YoungDalyGoodput(mtbf_gpu_s=1e6, checkpoint_s=0.0)


def test_a_job_that_fails_faster_than_it_checkpoints_is_refused_with_the_reason():
    """MTBF 1 GPU-hour over 256 GPUs: the job fails every 3600/256 = 14.06 s, less than one
    100 s checkpoint, so goodput is 0; the plan used to search and call every geometry's
    window too short (a fuzz trial)."""
    import pytest

    from mosaic.errors import MosaicInputError

    model = YoungDalyGoodput(mtbf_gpu_s=3600.0, checkpoint_s=100.0)
    assert model.fraction(256) == 0.0
    with pytest.raises(MosaicInputError, match=r"fails every 14\.1 s"):
        model.require_progress(256)
    YoungDalyGoodput(mtbf_gpu_s=3.6e7, checkpoint_s=100.0).require_progress(256)
    ConstantGoodput(0.5).require_progress(256)


def test_a_stated_checkpoint_interval_loses_that_intervals_share():
    """"We checkpoint every hour": the goodput was always Young's optimum. 32 GPUs, MTBF
    50,000 GPU-hours (M = 5.625e6 s), 120 s checkpoints every 3,600 s, 600 s restarts:
    120/3600 + 3600/(2 M) + 600/M = 0.033760 lost, against 0.006638 at τ* = 36,742 s."""
    mtbf = 50_000 * 3600.0 / 32
    hourly = YoungDalyGoodput(50_000 * 3600.0, 120.0, 600.0, interval_s=3600.0)
    lost = 120.0 / 3600.0 + 3600.0 / (2 * mtbf) + 600.0 / mtbf
    assert lost == pytest.approx(0.033760, abs=5e-7)
    assert hourly.checkpoint_interval_s(32) == 3600.0
    assert hourly.fraction(32) == pytest.approx(1 - lost)
    optimal = YoungDalyGoodput(50_000 * 3600.0, 120.0, 600.0)
    assert optimal.fraction(32) > hourly.fraction(32)  # the optimum loses least
    assert hourly.describe(32)["checkpoint_interval"] == "stated"
    assert optimal.describe(32)["checkpoint_interval"] == "optimal"
    with pytest.raises(MosaicInputError, match="checkpoint interval"):
        YoungDalyGoodput(1e6, 120.0, interval_s=0.0)


def test_plan_takes_the_checkpoint_interval_and_says_so():
    from typer.testing import CliRunner

    from mosaic.cli.main import app

    args = ["plan", "--q", "4", "--experts", "8,16", "--top-k", "1", "--split-factor", "1",
            "--s-min", "0.5", "--workers", "1", "--nodes", "4", "--days", "10",
            "--mtbf-gpu-hours", "50000", "--checkpoint-s", "120", "--restart-s", "600"]
    result = CliRunner().invoke(app, [*args, "--checkpoint-interval-s", "3600", "--json"])
    assert result.exit_code == 0, result.output
    goodput = json.loads(result.stdout)["envelope"]["goodput"]
    mtbf = 50_000 * 3600.0 / 32
    assert goodput["goodput"] == pytest.approx(1 - 120 / 3600 - 3600 / (2 * mtbf) - 600 / mtbf)
    assert goodput["checkpoint_interval_s"] == 3600
    result = CliRunner().invoke(app, [*args, "--checkpoint-interval-s", "3600"])
    assert "a checkpoint every 3,600 s (--checkpoint-interval-s)" in result.stdout
    result = CliRunner().invoke(app, ["plan", "--checkpoint-interval-s", "3600"])
    assert result.exit_code == 2
    assert "--checkpoint-interval-s enters the Young-Daly goodput" in result.stderr
