"""The paper's MoE pre-training recipe (Appendix A) as a reference trainer, and the ladder.

Modules (torch is needed by all but ``config``, ``schedule`` and ``ladder``'s grid parsing;
install ``mosaic[train]``):

* ``config``      — the job schema (model geometry, routing, optimiser, data, run), validated
* ``routing``     — Algorithm 1, the Eq. 19 bias controller, z-loss, balance losses
* ``model``       — the decoder built from a ``mosaic.arch.Geometry``; counts equal mosaic arch
* ``data``        — memory-mapped token files and the byte-level fallback, sampled by step
* ``schedule``    — WSD learning-rate schedule, Eq. 17 peak learning rate
* ``metrics``     — MFU (paper and with-attention conventions), smoothed loss, JSON lines
* ``distributed`` — torchrun process group and FSDP2 sharding
* ``expert_parallel`` — experts split over ranks, all-to-all dispatch and combine
* ``trainer``     — the loop: accumulation, controller, checkpoint and exact resume
* ``ladder``      — grid of rungs -> runs.csv in the format ``mosaic law fit`` reads
* ``plot``        — metrics.html of a run (plotly)
"""
