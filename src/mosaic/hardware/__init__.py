"""Hardware catalog: accelerators (Device), node types (System) and clusters (Cluster).

    >>> from mosaic.hardware import get_system
    >>> cluster = get_system("p6-b200.48xlarge").cluster(n_nodes=32)
    >>> cluster.n_devices, cluster.device.peak_flops_per_s_for("bf16")
    (256, 2250000000000000.0)

Shipped data: mosaic/hardware/data/{devices,systems}.yaml. Add your own hardware with
`load_catalog("my_hardware.yaml")` (same schema; see docs/hardware.md).
"""

from mosaic.hardware.catalog import (
    Catalog,
    active_catalog,
    active_catalog_paths,
    get_device,
    get_system,
    list_devices,
    list_systems,
    load_catalog,
    shipped_catalog,
    use_catalog,
)
from mosaic.hardware.device import DTYPES, Device, normalize_dtype
from mosaic.hardware.system import Cluster, System

__all__ = [
    "DTYPES",
    "Catalog",
    "Cluster",
    "Device",
    "System",
    "active_catalog",
    "active_catalog_paths",
    "get_device",
    "get_system",
    "list_devices",
    "list_systems",
    "load_catalog",
    "normalize_dtype",
    "shipped_catalog",
    "use_catalog",
]
