"""The setting names the input schemas share are the model's own (one spelling each)."""

from typing import get_args

from mosaic.config.blocks import (
    CrossEntropyName,
    EagerKernelsName,
    MoePermuteName,
    OptimizerDtypeName,
    RecomputeName,
    Routing,
)
from mosaic.perf.elementwise_traffic import RMSNORM_ERAS
from mosaic.perf.moe_permute_traffic import MoePermute
from mosaic.perf.plan import Checkpointing
from mosaic.perf.workload import ROUTING_REGIMES, OptimizerDtype
from mosaic.stacks import CrossEntropy


def test_schema_names_are_the_model_enums_values():
    assert set(get_args(CrossEntropyName)) == {member.value for member in CrossEntropy}
    assert set(get_args(OptimizerDtypeName)) == {member.value for member in OptimizerDtype}
    assert set(get_args(MoePermuteName)) == {member.value for member in MoePermute}
    assert set(get_args(EagerKernelsName)) == {member.value for member in RMSNORM_ERAS}
    assert set(get_args(Routing)) == set(ROUTING_REGIMES)  # calibration keys read them
    names = get_args(RecomputeName)
    assert [Checkpointing.parse(name).name.lower() for name in names] == list(names)
    assert set(names) == {member.name.lower() for member in Checkpointing}


def test_stack_registry_names_the_perf_implementations():
    """The stack registry (below perf, so it cannot import perf's enums) spells the
    element-wise and MoE token-movement implementations as perf's enums do."""
    from mosaic.perf.elementwise_traffic import ElementwiseKernels
    from mosaic.stacks.registry import _Entry

    def literal(field: str) -> set[str]:
        return set(get_args(_Entry.model_fields[field].annotation))

    assert literal("elementwise_kernels") == {member.value for member in ElementwiseKernels}
    assert literal("moe_permute") == {member.value for member in MoePermute}
