"""The number predicates every file reader shares (mosaic.limits)."""

import math

from mosaic.limits import is_finite_number, is_number


def test_a_number_is_an_int_or_float_never_a_bool():
    assert is_number(3) and is_number(2.5) and is_number(math.nan)
    assert not is_number(True) and not is_number("3") and not is_number(None)


def test_a_finite_number_excludes_nan_inf_and_integers_beyond_a_float():
    """A 400-digit JSON integer made math.isfinite raise (OverflowError) in the readers
    that share this test (a review)."""
    assert is_finite_number(10**300) and is_finite_number(-1.5)
    assert not is_finite_number(10**400) and not is_finite_number(-(10**400))
    assert not is_finite_number(math.inf) and not is_finite_number(math.nan)
    assert not is_finite_number(False)
