"""The names of the bench's families, in run order (no heavy imports: the CLI reads them).

Kernel families run in one process; the collectives family runs under torchrun.
"""

from __future__ import annotations

KERNEL_FAMILY_NAMES = ("gemm", "grouped", "attention", "kernels", "te_grouped")
COLLECTIVES_FAMILY = "collectives"
FAMILIES = (*KERNEL_FAMILY_NAMES, COLLECTIVES_FAMILY)
