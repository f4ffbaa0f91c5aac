"""The setting names the input schemas share are the model's own (one spelling each)."""

from typing import get_args

from mosaic.config.blocks import (
    CrossEntropyName,
    MoePermuteName,
    OptimizerDtypeName,
    RecomputeName,
)
from mosaic.perf.moe_permute_traffic import MoePermute
from mosaic.perf.plan import Checkpointing
from mosaic.perf.workload import OptimizerDtype
from mosaic.stacks import CrossEntropy


def test_schema_names_are_the_model_enums_values():
    assert set(get_args(CrossEntropyName)) == {member.value for member in CrossEntropy}
    assert set(get_args(OptimizerDtypeName)) == {member.value for member in OptimizerDtype}
    assert set(get_args(MoePermuteName)) == {member.value for member in MoePermute}
    names = get_args(RecomputeName)
    assert [Checkpointing.parse(name).name.lower() for name in names] == list(names)
    assert set(names) == {member.name.lower() for member in Checkpointing}
