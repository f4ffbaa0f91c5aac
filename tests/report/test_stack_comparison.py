"""`mosaic plan --versus`: the line that says why two stacks' optima differ names every
layout axis the stacks offer differently (stack traits layout_*)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from mosaic.plan import Envelope, resolve_system
from mosaic.report.stack_comparison import _envelope_differences
from mosaic.stacks import get_stack


def _plan(stack: str) -> SimpleNamespace:
    """What the line reads of a plan: its envelope."""
    return SimpleNamespace(envelope=Envelope(resolve_system("H100"), n_nodes=8, stack=stack))


@pytest.mark.parametrize("other", ["levanter", "hf-transformers"])
def test_the_versus_line_names_a_stack_that_runs_no_pipeline(other):
    """Megatron-Core runs any pp, levanter and hf-transformers pp 1 only (trait layout_pp):
    the line named their sharding and vpp, not the pipeline they cannot run."""
    assert get_stack(other).layout_pp == (1,)
    line = _envelope_differences(_plan("megatron-core"), _plan(other))
    assert "pipeline degrees any against 1" in line
    assert "pipeline degrees 1 against any" in _envelope_differences(_plan(other),
                                                                       _plan("megatron-core"))


def test_the_versus_line_names_no_pipeline_difference_where_there_is_none():
    """torchtitan and Megatron-Core both run any pp: no pipeline line."""
    assert "pipeline degrees" not in _envelope_differences(_plan("megatron-core"),
                                                           _plan("torchtitan"))


def test_html_stack_text_names_no_dispatcher_on_a_stack_without_expert_parallelism():
    """The HTML plan page named 'MoE dispatcher alltoall' for hf-transformers, which offers
    ep 1 only (the terminal says none); a stack with EP keeps it, an unknown name too."""
    from mosaic.report.html.plan_page import stack_text

    assert "dispatcher" not in stack_text({"stack": "hf-transformers", "dispatcher": "alltoall"})
    assert "MoE dispatcher alltoall" in stack_text({"stack": "megatron-core",
                                                   "dispatcher": "alltoall"})
    assert "MoE dispatcher deepep" in stack_text({"stack": "no-such-stack",
                                                 "dispatcher": "deepep"})
