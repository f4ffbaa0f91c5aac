"""What is trained, independent of how it is laid out: model, batch, precision, optimizer."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from mosaic.arch import Geometry
from mosaic.errors import MosaicInputError


class Precision(StrEnum):
    """Compute precision of GEMMs; selects the device's peak-FLOP/s lane."""

    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"


class OptimizerKind(StrEnum):
    """Optimizer families with different state sizes and update costs."""

    ADAM = "adam"
    ADAMW = "adamw"
    MUON = "muon"
    SGD = "sgd"


@dataclass(frozen=True)
class Workload:
    """A training job minus its parallel layout and hardware.

    Attributes:
        geometry: the model.
        global_batch: sequences per optimizer step (B_global).
        seq_len: tokens per sequence (T_seq).
        precision: GEMM precision; weights/activations are stored in bf16 either way
            (fp8 recipes keep bf16 copies, Micikevicius et al., 2022).
        optimizer: optimizer family.
        stack: software-stack label calibration can attach overheads to.
        routing: MoE routing regime (dropless, balanced, token_drop, unknown); calibration
            attaches a load-imbalance factor to it. The paper trains dropless (A.2).
    """

    geometry: Geometry
    global_batch: int
    seq_len: int
    precision: Precision = Precision.BF16
    optimizer: OptimizerKind = OptimizerKind.ADAMW
    stack: str = "megatron-core"
    routing: str = "dropless"

    def __post_init__(self) -> None:
        for name in ("global_batch", "seq_len"):
            value = getattr(self, name)
            if value <= 0:
                raise MosaicInputError(f"data.{name} must be a positive integer, got {value}")
        object.__setattr__(self, "precision", Precision(self.precision))
        object.__setattr__(self, "optimizer", OptimizerKind(self.optimizer))

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch * self.seq_len
