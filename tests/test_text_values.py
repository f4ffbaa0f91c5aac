"""Comma-separated values typed on the command line or in the studio's form."""

import pytest

from mosaic.errors import MosaicInputError
from mosaic.text_values import parse_floats, parse_ints


def test_a_value_left_out_between_commas_is_refused_a_trailing_comma_is_not():
    """'20,30,,40' was read as 20, 30, 40 (a lead's trial): the left-out value is named."""
    with pytest.raises(MosaicInputError, match=r"--values '20,30,,40' has an empty value"):
        parse_floats("--values", "20,30,,40")
    with pytest.raises(MosaicInputError, match="empty value"):
        parse_ints("--q", ",8")
    assert parse_ints("--q", "8,10,") == (8, 10)
    assert parse_floats("--values", " 10 , 20.5 ") == (10.0, 20.5)
    with pytest.raises(MosaicInputError, match="is empty"):
        parse_ints("--q", " , ")
