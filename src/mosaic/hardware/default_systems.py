"""The node type an accelerator name stands for, where a user names only the GPU.

`mosaic plan --gpu H100` and a job's ``hardware.gpu: H100`` both mean "this accelerator on
its usual node type": the device's ``default_system`` in the catalog (an AWS instance where
the paper's setting, AWS p6, has an AWS sibling, else the NVIDIA reference system; a user
catalog sets its own), else the first catalog node type holding it. A stated node type
(``--system``, ``hardware.system``) wins, and must hold the named GPU.
"""

from __future__ import annotations

import warnings

from mosaic.errors import MosaicInputError, MosaicNote
from mosaic.hardware.catalog import active_catalog, get_device, get_system, shipped_catalog
from mosaic.hardware.system import System


def resolve_system(gpu: str | None = None, system: str | None = None,
                   gpu_field: str = "--gpu", system_field: str = "--system") -> System:
    """The node type for a GPU name and/or a node type: the node type wins; both must agree.
    Neither given: B200's (the paper's). ``*_field`` name the two inputs in messages."""
    for field, value in ((gpu_field, gpu), (system_field, system)):
        if value is not None and not value.strip():
            raise MosaicInputError(f"{field} is empty: name one (`mosaic hardware list`) "
                                   f"or leave it out")
    if system is not None:
        chosen = get_system(system)
        if gpu is not None and (device := get_device(gpu)).name != chosen.device.name:
            # a --set override cannot drop the file's node type: name those that fit (a
            # trial overriding a job's GPU was told only to drop one)
            holders = [s.name for s in active_catalog().systems.values()
                       if s.device.name == device.name]
            fits = (f", or give {system_field} one holding {device.name}: "
                    f"{', '.join(holders)}" if holders else "")
            raise MosaicInputError(
                f"{gpu_field} {gpu} does not match {system_field} {chosen.name}, which holds "
                f"{chosen.device.name}; drop one of them{fits}"
            )
        return chosen
    device = get_device("B200" if gpu is None else gpu)
    if device.default_system is not None:  # the catalog's (hardware/data/devices.yaml)
        return get_system(device.default_system)
    for candidate in active_catalog().systems.values():  # yours too (--catalog)
        if candidate.device.name == device.name:
            _note_lost_default(device.name, candidate.name, system_field)
            return candidate
    raise MosaicInputError(
        f"no node type in the catalog holds {device.name}; give {system_field} with a catalog "
        f"system (see `mosaic hardware list`) or add one (docs/hardware.md)"
    )


def _note_lost_default(device: str, chosen: str, system_field: str) -> None:
    """Say so when the shipped catalog gives ``device`` a default node type that a user
    catalog replaced with one holding another device (the catalog then drops it)."""
    try:
        shipped = shipped_catalog().device(device).default_system
    except MosaicInputError:  # a device of the user's own
        return
    if shipped is not None and shipped != chosen:
        warnings.warn(f"{device} means node type {shipped} in the shipped catalog, which your "
                      f"catalog replaced with one holding another device: {chosen}, the first "
                      f"node type holding {device}, is used ({system_field} names another)",
                      MosaicNote, stacklevel=3)
