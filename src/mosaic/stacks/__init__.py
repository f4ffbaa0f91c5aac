"""Software stacks as a validated registry: each stack's traits and defaults, with sources."""

from mosaic.stacks.registry import (
    CrossEntropy,
    FsdpShardStorage,
    MicroBatchDefault,
    SelectiveRecompute,
    StackTraits,
    default_loss,
    get_stack,
    known_stacks,
    stack_for_software,
    stacks_with,
)

__all__ = [
    "CrossEntropy",
    "FsdpShardStorage",
    "MicroBatchDefault",
    "SelectiveRecompute",
    "StackTraits",
    "default_loss",
    "get_stack",
    "known_stacks",
    "stack_for_software",
    "stacks_with",
]
