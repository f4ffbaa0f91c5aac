"""The names of the bench's families, in run order (no heavy imports: the CLI reads them).

Kernel families run in one process; the collectives family runs under torchrun.
"""

from __future__ import annotations

KERNEL_FAMILY_NAMES = ("gemm", "grouped", "attention", "kernels", "te_grouped")
COLLECTIVES_FAMILY = "collectives"
FAMILIES = (*KERNEL_FAMILY_NAMES, COLLECTIVES_FAMILY)

# The columns every row of a family's table carries as `mosaic bench` writes them, and those
# the fits (evaluate.microbench_fit, calibrate --microbench) read from its measured rows: a
# table without them is not the bench's (the job-format copy in measured/, a hand-made
# file) and is refused by name before a fit reads it (a trial's KeyError: 'metadata_id').
ROW_COLUMNS = ("case", "metadata_id")
FIT_COLUMNS = {
    "gemm": ("dtype", "m", "n", "k", "pass", "time_s"),
    "grouped": ("dtype", "groups", "m_per_group", "n", "k", "pass", "distribution", "time_s"),
    "attention": ("backend", "pass", "batch", "heads", "seq", "head_dim", "time_s"),
    "kernels": ("op", "moved_bytes", "time_s"),
    "te_grouped": ("dtype", "groups"),
    "collectives": ("collective", "pattern", "group_size", "stride", "message_bytes", "scope",
                    "time_s", "bus_bw_bytes_per_s"),
}
