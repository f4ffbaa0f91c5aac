"""Software stacks as a validated registry: each stack's traits and defaults, with sources."""

from mosaic.stacks.registry import (
    DEFAULT_STACK,
    CrossEntropy,
    FsdpShardStorage,
    MicroBatchDefault,
    SelectiveRecompute,
    StackTraits,
    default_loss,
    degree_one_only,
    get_stack,
    known_stacks,
    stack_for_software,
    stacks_with,
)

__all__ = [
    "DEFAULT_STACK",
    "CrossEntropy",
    "FsdpShardStorage",
    "MicroBatchDefault",
    "SelectiveRecompute",
    "StackTraits",
    "default_loss",
    "degree_one_only",
    "get_stack",
    "known_stacks",
    "stack_for_software",
    "stacks_with",
]
