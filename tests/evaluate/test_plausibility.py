"""The mis-entered-measurement checks of `validate`, `calibrate` and `explain`."""

from mosaic.evaluate.plausibility import implausible_reason


def test_a_unit_slip_hint_names_only_slips_that_point_the_measured_way():
    """A measurement far below the prediction is named as a step time in milliseconds, not
    as a node's or cluster's tokens/s, which would read far above it (a trial's step time
    in milliseconds was told it might be tokens/s per cluster); one far above it, yet under
    the device's peak, is named as a node's total given per GPU."""
    below = implausible_reason(5.0, 1 / 1000, 0.4)
    assert below is not None and "below" in below and "milliseconds" in below
    assert "per node" not in below and "per cluster" not in below
    above = implausible_reason(40_000.0, 5.0, 0.1)  # 50% MFU measured: under the peak
    assert above is not None and "above" in above and "per node" in above
    assert "milliseconds" not in above
    assert implausible_reason(5_000.0, 1.2, 0.4) is None
