"""Bytes per element of the dtypes the performance model moves and stores (one definition
for the time and the memory models; the dtype sizes themselves are mosaic.units')."""

from mosaic.units import BF16_BYTES, FP32_BYTES

__all__ = ["ACTIVATION_BYTES", "BF16_BYTES", "FP32_BYTES"]

# Activations travel and are saved in bf16 (paper Sec. 3.1: "bf16 weights and activations").
ACTIVATION_BYTES = BF16_BYTES
