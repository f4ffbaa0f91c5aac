"""The plan fields each memory term reads (mosaic.perf.factorise): a layout search computes a
term once per distinct value of its fields.
"""

from __future__ import annotations

# The plan fields each term reads (mosaic.perf.factorise): a layout search computes a term
# once per distinct value of its fields. Stage parameters follow the TP/EP splits and the
# blocks on the stage; activations the per-rank tokens, expert layout, checkpointing and
# in-flight micro-batches; parameter states add the (E)DP sharding.
STAGE_PARAMETER_KEY = ("tp", "pp", "vpp", "ep", "etp")
BLOCK_ACTIVATION_KEY = ("tp", "cp", "micro_batch", "sequence_parallel", "ep", "etp")
STAGE_ACTIVATION_KEY = (*BLOCK_ACTIVATION_KEY, "checkpointing", "pp", "vpp", "dp")
PARAMETER_STATE_KEY = (*STAGE_PARAMETER_KEY, "cp", "dp", "sharding", "hsdp_shard")
BUFFER_KEY = (*BLOCK_ACTIVATION_KEY, "pp", "vpp", "sharding", "dp", "hsdp_shard")
