"""Property tests (Hypothesis): generated job files, run records, law CSVs, calibration
files and flag values keep the CLI contract (exit 0 with finite, ranged JSON, or exit 2
with one line; bounded time). Examples are few and derandomized so the suite stays fast."""

from __future__ import annotations

import math

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .conftest import REPO, assert_contract

FAST = settings(max_examples=12, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow])
NUMBERS = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, 1, -1, 2**63, 10**400, 1e308, 1e-320]),
)
VALUES = st.one_of(NUMBERS, st.text(max_size=20), st.none(), st.booleans(),
                   st.lists(st.integers(), max_size=3))
JOB = yaml.safe_load((REPO / "examples/appendix_e.yaml").read_text())
JOB_FIELDS = [(block, key) for block, body in JOB.items() if isinstance(body, dict)
              for key in body]
RUNS = yaml.safe_load((REPO / "examples/runs_example.yaml").read_text())
CALIBRATION = yaml.safe_load(
    (REPO / "src/mosaic/perf/data/calibration_default.yaml").read_text())
SCALAR_CONSTANTS = [name for name, entry in CALIBRATION["constants"].items()
                    if not isinstance(entry["value"], dict)]


def _yaml(document: object) -> bytes:
    return yaml.safe_dump(document, sort_keys=False).encode()


@FAST
@given(field=st.sampled_from(JOB_FIELDS), value=VALUES)
def test_job_field_values(field, value):
    block, key = field
    document = {name: dict(body) if isinstance(body, dict) else body
                for name, body in JOB.items()}
    document[block][key] = value
    assert_contract(["perf", "{dir}/job.yaml", "--json"], {"job.yaml": _yaml(document)})


@FAST
@given(field=st.sampled_from(["tp", "pp", "vpp", "cp", "ep", "dp", "etp"]),
       value=st.one_of(st.integers(min_value=-5, max_value=2**64), st.floats()))
def test_run_record_parallel_degrees(field, value):
    document = {**RUNS, "runs": [dict(RUNS["runs"][0])]}
    document["runs"][0]["parallelism"] = {**document["runs"][0]["parallelism"], field: value}
    assert_contract(["validate", "{dir}/runs.yaml", "--json"], {"runs.yaml": _yaml(document)})


@FAST
@given(rows=st.lists(st.tuples(st.floats(1e-5, 1e14), st.floats(1e-5, 1e14),
                               st.one_of(st.floats(), st.just(2.5))),
                     min_size=0, max_size=8))
def test_law_csv_rows(rows):
    text = "n_total,tokens,loss\n" + "".join(f"{n!r},{d!r},{loss!r}\n" for n, d, loss in rows)
    assert_contract(["law", "fit", "{dir}/runs.csv", "--starts", "8", "--refine", "1",
                     "--form", "chinchilla", "--holdout", "0", "--json"],
                    {"runs.csv": text.encode()})


@FAST
@given(name=st.sampled_from(SCALAR_CONSTANTS), value=NUMBERS)
def test_calibration_constants(name, value):
    document = {**CALIBRATION, "constants": dict(CALIBRATION["constants"])}
    document["constants"][name] = {**document["constants"][name], "value": value}
    outcome = assert_contract(["perf", "examples/appendix_e.yaml", "--json", "--calibration",
                               "{dir}/c.yaml"], {"c.yaml": _yaml(document)})
    if isinstance(value, float) and not math.isfinite(value):
        assert outcome.exit_code == 2


@FAST
@given(n_total=NUMBERS, tokens=NUMBERS, sparsity=NUMBERS, split=NUMBERS)
def test_law_predict_flags(n_total, tokens, sparsity, split):
    argv = ["law", "predict", "--json"]
    for flag, value in (("--n-total", n_total), ("--tokens", tokens),
                        ("--sparsity", sparsity), ("--split-factor", split)):
        argv += [flag, repr(value) if not isinstance(value, int) else str(value)]
    assert_contract(argv)


@FAST
@given(nodes=st.one_of(st.integers(-3, 10**13), st.just(2)),
       days=st.one_of(st.floats(), st.just(20.0)))
def test_plan_budget_flags(nodes, days):
    assert_contract(["plan", "--q", "8", "--experts", "8", "--top-k", "1", "--split-factor",
                     "1", "--workers", "1", "--nodes", str(nodes), "--days", repr(days),
                     "--json"])
