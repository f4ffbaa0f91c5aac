"""Eq. 15's system factor χ_sys and the physical quantities it scales: the all-to-all share
of a step whose EP group crosses hosts, the hosts a pipeline spans beyond one, and a deep
pipeline kept in one host.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mosaic.perf.calibration import Calibration
from mosaic.perf.collectives import ep_and_pp_nodes_spanned
from mosaic.perf.factorise import plan_key
from mosaic.perf.machine import Machine
from mosaic.perf.plan import ParallelPlans


@dataclass(frozen=True)
class ChiDrivers:
    """The physical quantities Eq. 15 scales (arrays over plans).

    Node spans come from the actual rank placement (EP stride etp, PP stride tp·cp·dp)
    instead of the paper's ceil(P·P_TP / N_gpu/node).
    """

    a2a_share: np.ndarray  # t_A2A / t_iter, zero when the EP group stays in one node
    pp_extra_nodes: np.ndarray  # N_PP_node − 1
    deep_local_pipeline: np.ndarray  # pp ≥ GPUs per node and the pipeline in one node


def chi_drivers(machine: Machine, plans: ParallelPlans, a2a_s: np.ndarray,
                t_iter: np.ndarray) -> ChiDrivers:
    """Drivers of χ_sys for every plan."""
    ep_nodes, pp_nodes = _nodes_spanned_by_ep_and_pp(machine, plans)
    return ChiDrivers(
        a2a_share=np.where(ep_nodes > 1, a2a_s / np.maximum(t_iter, 1e-30), 0.0),
        pp_extra_nodes=(pp_nodes - 1).astype(float),
        deep_local_pipeline=((plans.pp >= machine.gpus_per_node) & (pp_nodes == 1)).astype(float),
    )


@plan_key("tp", "pp", "cp", "dp", "ep", "etp")
def _nodes_spanned_by_ep_and_pp(machine: Machine, plans: ParallelPlans
                                ) -> tuple[np.ndarray, np.ndarray]:
    """Hosts an EP group spans and hosts the pipeline spans
    (:func:`~mosaic.perf.collectives.ep_and_pp_nodes_spanned`)."""
    return ep_and_pp_nodes_spanned(plans.ep, plans.etp, plans.pp, plans.tp, plans.cp, plans.dp,
                                   machine.interconnect.gpus_per_node)


def chi_sys(drivers: ChiDrivers, calibration: Calibration) -> np.ndarray:
    """Eq. 15: 1 + c_A2A·t_A2A/t_iter·[EP spans nodes] + c_PP·(N_PP_node − 1)
    + c_ovl·[pp ≥ GPUs/node and the pipeline stays in one node]."""
    return (1.0 + calibration.chi_a2a * drivers.a2a_share
            + calibration.chi_pp * drivers.pp_extra_nodes
            + calibration.chi_overlap * drivers.deep_local_pipeline)
