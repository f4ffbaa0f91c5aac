"""Numbers in tables keep their significant zeros, so a column reads alike (a trial saw the D
column of the ranked plan read 3.91T, 3.9T, 3T)."""

from mosaic.cli.plan_render import short_count
from mosaic.report.html.page import fmt_si
from mosaic.units import counted, significant


def test_three_significant_digits_keep_their_zeros():
    assert [significant(x) for x in (3.91, 3.9, 2.998, 26.09, 0.5, 999.6)] == [
        "3.91", "3.90", "3.00", "26.1", "0.500", "1000"]


def test_table_counts_read_alike():
    assert [short_count(x) for x in (3.91e12, 3.9e12, 2.998e12, 4.427e9)] == [
        "3.91T", "3.90T", "3.00T", "4.43B"]
    assert [fmt_si()(x) for x in (3.9e12, 1.42e12, 2.0e9)] == ["3.90 T", "1.42 T", "2.00 B"]


def test_counts_of_one_are_singular():
    """A trial read '4 nodes x 1 days' in the cheapest-budget search's refusal."""
    assert [counted(v, "day") for v in (1, 1.0, 2, 1.5, 0.5)] == [
        "1 day", "1 day", "2 days", "1.5 days", "0.5 days"]


def test_a_compare_difference_that_rounds_to_zero_has_no_sign():
    # a trial: both sides charged routing_imbalance alike and B - A read '-0.0000'
    from mosaic.report.comparison import memory_rows, step_rows

    document = {"breakdown_s": [{"term": "routing_imbalance", "a": 0.1, "b": 0.1 - 1e-12},
                                {"term": "ep_all_to_all", "a": 1.0, "b": 1.25}],
                "memory_breakdown_bytes": [{"part": "weights", "a": 2**30, "b": 2**30 - 1}]}
    assert [row[3] for row in step_rows(document)] == ["0.0000", "+0.2500"]
    assert memory_rows(document)[0][3] == "0.00"
