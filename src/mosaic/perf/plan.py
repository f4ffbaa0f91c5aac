"""Parallel execution plans as a structure of numpy arrays.

One plan is a set of arrays of length 1; a layout search holds every candidate plan of a
job in the same arrays, so every cost formula in :mod:`mosaic.perf` is written once over
arrays and the single-plan path is the vectorised path (they cannot disagree).

Mesh (paper Appendix D.1, Megatron-Core): N_dev = tp·cp·pp·dp for dense layers; inside MoE
layers the data-parallel domain is repartitioned as tp·cp·dp = etp·ep·edp (expert tensor,
expert and expert-data parallelism), so ep does not multiply the world size.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from enum import IntEnum
from typing import Any

import numpy as np

from mosaic.errors import MosaicInputError, shown


class Sharding(IntEnum):
    """How data-parallel replicas shard weights, gradients and optimizer state."""

    NONE = 0  # plain DDP: everything replicated, gradients all-reduced
    ZERO1 = 1  # distributed optimizer: optimizer state + master weights sharded
    ZERO2 = 2  # + gradients sharded (reduce-scatter)
    FSDP = 3  # ZeRO-3: + parameters sharded, gathered per layer
    HSDP = 4  # FSDP inside a shard group, replicated across groups

    @classmethod
    def parse(cls, name: str) -> Sharding:
        aliases = {
            "ddp": "none",
            "zero-1": "zero1",
            "distributed_optimizer": "zero1",
            "zero-2": "zero2",
            "zero3": "fsdp",
            "zero-3": "fsdp",
            "fsdp2": "fsdp",
        }
        key = aliases.get(name.lower(), name.lower())
        try:
            return cls[key.upper()]
        except KeyError:
            allowed = ", ".join(m.name.lower() for m in cls)
            raise MosaicInputError(f"unknown sharding {shown(name)}; allowed: {allowed}") from None


class Checkpointing(IntEnum):
    """Activation checkpointing (recomputation) modes (Korthikanti et al., 2022)."""

    NONE = 0  # keep every activation
    SELECTIVE = 1  # recompute the attention core only (Korthikanti et al., Sec. 4.2)
    FULL = 2  # keep block inputs only; recompute each block's forward in backward

    @classmethod
    def parse(cls, name: str) -> Checkpointing:
        try:
            return cls[name.upper()]
        except KeyError:
            allowed = ", ".join(m.name.lower() for m in cls)
            raise MosaicInputError(f"unknown checkpointing {shown(name)}; allowed: {allowed}"
                                   ) from None


@dataclass(frozen=True)
class ParallelPlans:
    """Candidate plans, one per array index (all arrays share one length).

    Attributes:
        tp: tensor-parallel degree (with sequence parallelism when ``sequence_parallel``).
        pp: pipeline stages.
        vpp: virtual stages per pipeline rank (interleaved 1F1B); 1 = none.
        cp: context-parallel degree.
        dp: data-parallel degree of dense layers, N_dev / (tp·cp·pp).
        ep: expert-parallel degree (folded inside tp·cp·dp, Eq. 24).
        etp: expert tensor-parallel degree.
        micro_batch: sequences per micro-batch per replica.
        sharding: :class:`Sharding` code per plan.
        checkpointing: :class:`Checkpointing` code per plan.
        hsdp_shard: FSDP shard-group size for HSDP (= dp for the other modes).
        sequence_parallel: TP activations sharded along the sequence (Korthikanti et al.).
    """

    tp: np.ndarray
    pp: np.ndarray
    vpp: np.ndarray
    cp: np.ndarray
    dp: np.ndarray
    ep: np.ndarray
    etp: np.ndarray
    micro_batch: np.ndarray
    sharding: np.ndarray
    checkpointing: np.ndarray
    hsdp_shard: np.ndarray
    sequence_parallel: np.ndarray

    def __len__(self) -> int:
        return int(self.tp.size)

    @property
    def n_devices(self) -> np.ndarray:
        return self.tp * self.cp * self.pp * self.dp

    @property
    def stage_ranks(self) -> np.ndarray:
        """Ranks of one pipeline stage, tp·cp·dp: the rank stride between stages
        (Megatron-Core's order tp-cp-dp-pp) and the ranks an MoE layer repartitions
        (Eq. 24)."""
        return self.tp * self.cp * self.dp

    @property
    def dense_dp_group(self) -> np.ndarray:
        """Ranks a dense parameter's gradient is reduced over, dp·cp (at stride tp)."""
        return self.dp * self.cp

    @property
    def expert_group_stride(self) -> np.ndarray:
        """Rank stride of the expert-data-parallel group, etp·ep."""
        return self.etp * self.ep

    @property
    def edp(self) -> np.ndarray:
        """Expert-data-parallel degree: tp·cp·dp / (etp·ep) (Eq. 24 with expert TP)."""
        return self.stage_ranks // self.expert_group_stride

    def take(self, index: np.ndarray | int) -> ParallelPlans:
        """The sub-set of plans at ``index`` (an int keeps a length-1 set)."""
        index = np.atleast_1d(index)
        return ParallelPlans(**{f.name: getattr(self, f.name)[index] for f in fields(self)})

    def row(self, index: int) -> dict[str, int | str | bool]:
        """One plan as plain values (for printing and JSON)."""
        values: dict[str, int | str | bool] = {}
        for f in fields(self):
            value = getattr(self, f.name)[index]
            if f.name == "sharding":
                values[f.name] = Sharding(int(value)).name.lower()
            elif f.name == "checkpointing":
                values[f.name] = Checkpointing(int(value)).name.lower()
            elif f.name == "sequence_parallel":
                values[f.name] = bool(value)
            else:
                values[f.name] = int(value)
        return values


def single_plan(
    *,
    tp: int = 1,
    pp: int = 1,
    vpp: int = 1,
    cp: int = 1,
    dp: int = 1,
    ep: int = 1,
    etp: int = 1,
    micro_batch: int = 1,
    sharding: Sharding = Sharding.ZERO1,
    checkpointing: Checkpointing = Checkpointing.NONE,
    hsdp_shard: int | None = None,
    sequence_parallel: bool | None = None,
) -> ParallelPlans:
    """A length-1 :class:`ParallelPlans` (``sequence_parallel`` None: the default of
    :func:`default_sequence_parallel`)."""
    return plans_from_columns(
        tp=[tp],
        pp=[pp],
        vpp=[vpp],
        cp=[cp],
        dp=[dp],
        ep=[ep],
        etp=[etp],
        micro_batch=[micro_batch],
        sharding=[int(sharding)],
        checkpointing=[int(checkpointing)],
        hsdp_shard=[hsdp_shard if hsdp_shard is not None else dp],
        sequence_parallel=[default_sequence_parallel(tp) if sequence_parallel is None
                           else sequence_parallel],
    )


def default_sequence_parallel(tp: Any, unstated: str = "tp") -> Any:
    """Sequence parallelism where a job or plan leaves it unstated: on with tp > 1, as the
    Megatron-Core recipes run every tp > 1 (Korthikanti et al. 2022), and off at tp 1, where
    it has nothing to shard (Megatron-LM arguments.py: "Disabling sequence parallelism
    because tensor model parallelism is disabled"); off at every tp on a stack whose TP runs
    without it unless told (``unstated``: stack trait ``unstated_sequence_parallel``).
    Ints or arrays."""
    return (tp > 1) & (unstated == "tp")


def plans_from_columns(**columns: Iterable[int]) -> ParallelPlans:
    """Build :class:`ParallelPlans` from equal-length columns."""
    arrays = {name: np.asarray(list(values), dtype=np.int64) for name, values in columns.items()}
    arrays["sequence_parallel"] = arrays["sequence_parallel"].astype(bool)
    lengths = {a.size for a in arrays.values()}
    if len(lengths) != 1:
        raise MosaicInputError(f"plan columns differ in length: {sorted(lengths)}")
    return ParallelPlans(**arrays)


def concatenate_plans(parts: Sequence[ParallelPlans]) -> ParallelPlans:
    """The plans of ``parts`` end to end, in order (at least one part)."""
    if len(parts) == 1:
        return parts[0]
    return ParallelPlans(**{f.name: np.concatenate([getattr(p, f.name) for p in parts])
                            for f in fields(ParallelPlans)})
