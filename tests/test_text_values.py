"""Comma-separated values typed on the command line or in the studio's form."""

import pytest

from mosaic.errors import MosaicInputError
from mosaic.text_values import parse_floats, parse_ints, parse_names


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


def test_a_name_list_is_read_like_a_number_list_and_checked_against_what_is_allowed():
    """'--fit a,,b' and '--exclude x,,y' were read as two names; every name list (calibrate's
    --fit, validate's --exclude, bench's --dtypes/--ops, layouts' --sharding) now reads
    through one function that names the option."""
    assert parse_names("--dtypes", " bf16, fp8 ,bf16,") == ("bf16", "fp8")
    with pytest.raises(MosaicInputError, match=r"--fit 'a,,b' has an empty value"):
        parse_names("--fit", "a,,b")
    with pytest.raises(MosaicInputError, match="--ops is empty"):
        parse_names("--ops", ",")
    with pytest.raises(MosaicInputError,
                       match=r"--dtypes 'bf16,fp7': unknown 'fp7'; allowed: bf16, fp8"):
        parse_names("--dtypes", "bf16,fp7", ("bf16", "fp8"))


@pytest.mark.parametrize("text", ["x" * 5000, ",".join(f"n{i:04}" for i in range(1000))])
def test_unknown_names_are_shown_by_their_start_and_a_count(text):
    """The unknown names were listed whole: a 5,000-character name, or a thousand names."""
    with pytest.raises(MosaicInputError) as refused:
        parse_names("--dtypes", text, ("bf16", "fp8"))
    assert len(str(refused.value)) < 300, str(refused.value)[:300]


def test_calibrate_fit_and_layout_sharding_lists_refuse_a_gap():
    from mosaic.evaluate.calibrate import chosen_constants
    from mosaic.plan.inputs import layout_limits

    with pytest.raises(MosaicInputError, match=r"--fit 'a,,b' has an empty value"):
        chosen_constants("a,,b", None, None)  # (the base and runs matter for auto alone)

    with pytest.raises(MosaicInputError, match=r"--sharding 'zero1,,fsdp' has an empty"):
        layout_limits(sharding="zero1,,fsdp")
    assert layout_limits(sharding="zero1,fsdp").sharding is not None


@pytest.mark.parametrize("parse", [parse_ints, parse_floats])
def test_a_long_value_is_named_by_its_start_and_length(parse):
    """A 5,000-character value was echoed whole in the one-line error (a trial)."""
    with pytest.raises(MosaicInputError) as refused:
        parse("--q", "x" * 5000)
    assert "(5,000 characters)" in str(refused.value) and len(str(refused.value)) < 200
