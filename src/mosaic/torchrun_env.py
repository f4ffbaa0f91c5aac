"""What torchrun tells each process it starts, through the environment (the docstring of
torch/distributed/run.py, torch 2.13, "Environment Variables"): its global RANK, and
TORCHELASTIC_RUN_ID, set for every worker. Outside torchrun neither is set, and the one
process is rank 0."""

from __future__ import annotations

import os


def is_rank_zero() -> bool:
    """Whether this process is rank 0 (the one that reports), or runs alone."""
    return os.environ.get("RANK", "0") == "0"


def under_torchrun() -> bool:
    """Whether torchrun started this process (a rerun hint then names torchrun)."""
    return "TORCHELASTIC_RUN_ID" in os.environ
