"""A law file's provenance keys that commands read back are checked when it loads (a fuzz
trial: a string where an object belongs ended in an internal error; a negative split-factor
range gave an optimum of G = -1 and D* = 1 token)."""

from __future__ import annotations

import json
import math

import pytest

from mosaic.errors import MosaicInputError
from mosaic.law import ScalingLaw
from mosaic.law.law import default_law


def _law_with(provenance: dict) -> dict:
    return default_law().to_dict() | {"provenance": provenance}


@pytest.mark.parametrize(("provenance", "message"), [
    ({"metrics": "abc"}, "provenance.metrics: expected an object"),
    ({"metrics": {"r2": "x"}}, "provenance.metrics.r2: expected a number"),
    ({"at_bound": "x"}, "provenance.at_bound: expected an object"),
    ({"at_bound": {"c": {"bound": 1.0}}}, "provenance.at_bound.c: expected side"),
    ({"unidentified": [1]}, "provenance.unidentified: expected an object"),
    ({"unidentified": {"eta": 5}}, "provenance.unidentified.eta: expected a list"),
    ({"data_support": {"sparsity": ["a", "b"]}}, r"data_support.sparsity: expected \[low, high\]"),
    ({"data_support": {"n_total": [1e12, 1e3]}}, "low <= high"),
    ({"data_support": {"split_factor": [-4, -1]}}, r"outside its domain \(G in 1..1024\)"),
    ({"data_support": {"sparsity": [0.5, 1.0]}}, r"outside its domain \(0 <= S < 1\)"),
    ({"data_support": {"tokens": [0, 1e12]}}, r"outside its domain \(positive\)"),
])
def test_bad_provenance_is_one_line_naming_the_key(provenance, message):
    with pytest.raises(MosaicInputError, match=message):
        ScalingLaw.from_dict(_law_with(provenance), source="law.json")


def test_a_fitted_files_provenance_loads():
    """The keys as `law fit` writes them, an R² of runs with no spread (NaN) included."""
    provenance = {"at_bound": {"c": {"side": "lower", "bound": 1e-6}},
                  "unidentified": {"split_factor": ["gamma"]},
                  "metrics": {"r2": math.nan, "n_heldout": 0},
                  "data_support": {"n_total": [1e8, 1e10], "sparsity": [0.0, 0.97],
                                   "split_factor": [1, 8]},
                  "source": "free text stays free"}
    law = ScalingLaw.from_dict(json.loads(json.dumps(_law_with(provenance))), source="law.json")
    assert law.provenance["source"] == "free text stays free"


def test_split_factor_of_the_wrong_type_is_named():
    with pytest.raises(MosaicInputError, match="split_factor: expected a number or null"):
        ScalingLaw.from_dict(default_law().to_dict() | {"split_factor": "abc"}, source="l.json")
