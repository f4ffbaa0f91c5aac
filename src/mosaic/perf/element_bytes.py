"""Bytes per element of the dtypes the performance model moves and stores (one definition
for the time and the memory models)."""

BF16_BYTES = 2
FP32_BYTES = 4
# Activations travel and are saved in bf16 (paper Sec. 3.1: "bf16 weights and activations").
ACTIVATION_BYTES = BF16_BYTES
