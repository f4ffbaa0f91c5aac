"""The hardware catalog: shipped devices and systems plus any the user adds from YAML.

Names are looked up case-insensitively, ignoring spaces, '-' and '_', so "p6-b200.48xlarge",
"P6-B200.48 xlarge" and the alias "p6-b200" all find the paper's node type.
"""

from __future__ import annotations

import difflib
import functools
import re
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import TypeVar

from mosaic.errors import MosaicInputError, MosaicWarning, shown
from mosaic.hardware.device import Device
from mosaic.hardware.schema import CatalogFile, DeviceEntry, SystemEntry, read_catalog_file
from mosaic.hardware.system import (
    System,
    parse_host_size_variant,
    parse_scale_out_variant,
    with_gpus_per_node,
    with_scale_out_gbps,
)

_SHIPPED_FILES = ("devices.yaml", "systems.yaml")


@functools.lru_cache(maxsize=4096)
def name_key(name: str) -> str:
    """Lookup key of a name: case-folded, without whitespace, '-' or '_'."""
    return re.sub(r"[\s_\-]+", "", name).casefold()


@dataclass(frozen=True)
class Catalog:
    """Devices and systems by canonical name (read-only mappings, catalog order)."""

    devices: Mapping[str, Device]
    systems: Mapping[str, System]

    @functools.cached_property
    def _devices_by_key(self) -> dict[str, Device]:
        return _by_key(self.devices)

    @functools.cached_property
    def _systems_by_key(self) -> dict[str, System]:
        return _by_key(self.systems)

    def device(self, name: str) -> Device:
        """The device called `name` (or an alias of it); MosaicInputError lists known names
        and suggests the closest (or, for a system's name, the device it holds)."""
        found = self._devices_by_key.get(name_key(name))
        if found is not None:
            return found
        hint = ""
        for system in self.systems.values():
            if _names(system, name):
                hint = f"{system.name} is a system holding {system.device.name}"
                break
        return _lookup("device", name, self.devices, hint)

    def system(self, name: str) -> System:
        """The system called `name` (or an alias of it); MosaicInputError lists known names
        and suggests the closest (for a device's name, the systems that hold it)."""
        found = self._systems_by_key.get(name_key(name))
        if found is not None:
            return found
        variant = parse_host_size_variant(name)
        if variant is not None:  # a plan's --gpus-per-node node type, by its own name
            base, gpus_per_node = variant
            return with_gpus_per_node(self.system(base), gpus_per_node)
        scale_out = parse_scale_out_variant(name)
        if scale_out is not None:  # a plan's --scale-out-gbps node type, by its own name
            base, gbps = scale_out
            return with_scale_out_gbps(self.system(base), gbps,
                                       f"system {name.strip()!r}: its Gb/s per GPU")
        hint = ""
        for device in self.devices.values():
            if _names(device, name):
                holders = [s.name for s in self.systems.values() if s.device.name == device.name]
                hint = (f"{device.name} is a device; systems holding it: {', '.join(holders)}"
                        if holders else f"{device.name} is a device no catalog system holds")
                break
        return _lookup("system", name, self.systems, hint)


_Entry = TypeVar("_Entry", Device, System)


def _by_key(entries: Mapping[str, _Entry]) -> dict[str, _Entry]:
    """Each name and alias's lookup key -> its entry (the first entry wins, as in a scan)."""
    keyed: dict[str, _Entry] = {}
    for entry in entries.values():
        for spelling in (entry.name, *entry.aliases):
            keyed.setdefault(name_key(spelling), entry)
    return keyed


def _names(entry: Device | System, name: str) -> bool:
    """Whether ``name`` is ``entry``'s name or one of its aliases (lookup keys compared)."""
    return name_key(name) in {name_key(n) for n in (entry.name, *entry.aliases)}


# Letters typed for the digits they look like (H1OO for H100, Hl00): read as those digits
# when names are compared for a suggestion, not when they are looked up
_LOOK_ALIKE = str.maketrans({"o": "0", "i": "1", "l": "1"})


def close_names(name: str, entries: Iterable[Device | System], canonical: bool = False,
                count: int = 3) -> list[str]:
    """The names or aliases of ``entries`` closest to ``name`` (at most ``count``, closest
    first; with ``canonical``, each entry's own name once): difflib's ratio of at least 0.6
    between lookup keys, with O, I and l read as 0 and 1 ('H1OO' had no suggestion, its
    ratio to 'h100' was 0.5; a trial)."""
    spelled: dict[str, str] = {}
    for entry in entries:
        for alias in (entry.name, *entry.aliases):
            spelled.setdefault(name_key(alias).translate(_LOOK_ALIKE),
                               entry.name if canonical else alias)
    keys = difflib.get_close_matches(name_key(name).translate(_LOOK_ALIKE), list(spelled),
                                     n=len(spelled), cutoff=0.6)
    return list(dict.fromkeys(spelled[key] for key in keys))[:count]


def _lookup(kind: str, name: str, entries: Mapping[str, _Entry], hint: str = "") -> _Entry:
    for entry in entries.values():
        if _names(entry, name):
            return entry
    if not hint:  # the closest names or aliases, as in stacks.get_stack
        close = close_names(name, entries.values(), canonical=True)
        hint = f"did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    hint = f" ({hint})" if hint else ""
    raise MosaicInputError(f"unknown {kind} {shown(name)}{hint}: known {kind}s are "
                           f"{', '.join(entries)} "
                           f"(details: `mosaic hardware list`; add your own with --catalog FILE, "
                           f"docs/hardware.md)")


def load_catalog(*extra_yaml_paths: str | Path, override: bool = False) -> Catalog:
    """The shipped catalog plus the devices and systems of each extra YAML file.

    Extra files use the shipped schema (docs/hardware.md). Their systems may use shipped or
    newly added devices. A name or alias that is already taken is an error, unless
    ``override``: then a later entry whose name or alias matches an earlier one replaces
    it (a user catalog merged over the shipped one).
    """
    data = resources.files("mosaic.hardware").joinpath("data")
    files: list[tuple[str, CatalogFile]] = []
    for file_name in _SHIPPED_FILES:
        with resources.as_file(data.joinpath(file_name)) as path:
            files.append((f"{SHIPPED_ORIGIN}{file_name}", read_catalog_file(path)))
    files += [(str(p), _read_user_file(Path(p))) for p in extra_yaml_paths]
    return _build(files, override)


def _read_user_file(path: Path) -> CatalogFile:
    """A user catalog file, its errors naming where it was given when that was not the
    command line (a MOSAIC_CATALOG left set made `mosaic perf job.yaml` fail on a catalog
    file the command never named)."""
    try:
        return read_catalog_file(path)
    except MosaicInputError as exc:
        named_by = _NAMED_BY.get(path)
        if named_by is None:
            raise
        raise MosaicInputError(f"{exc} (named by {named_by})") from None


_ACTIVE: list[Catalog] = []  # the catalog set by use_catalog (empty: the shipped one)
_ACTIVE_PATHS: list[Path] = []  # the user files merged into it
_DEFERRED: list[bool] = []  # [True]: _ACTIVE_PATHS are read at the first use of the catalog
_NAMED_BY: dict[Path, str] = {}  # user files given other than on the command line -> by what


def use_catalog(*user_yaml_paths: str | Path) -> Catalog:
    """Make the shipped catalog merged with these files (later wins) the one that
    :func:`get_device`, :func:`get_system` and :func:`active_catalog` use; no paths
    restores the shipped catalog. Meant for one command-line run (``--catalog``)."""
    if not user_yaml_paths:
        _NAMED_BY.clear()
    catalog = load_catalog(*user_yaml_paths, override=True) if user_yaml_paths else None
    install_catalog(catalog)
    _ACTIVE_PATHS.clear()
    _ACTIVE_PATHS.extend(Path(p) for p in user_yaml_paths)
    return active_catalog()


def defer_catalog(*user_yaml_paths: str | Path, named_by: str | None = None) -> None:
    """:func:`use_catalog` at the first use of the catalog, not now: a command that never
    looks at hardware (a law fit, the geometry calculator) does not read or validate a
    catalog file it was given for every command (``mosaic --catalog``, MOSAIC_CATALOG).
    ``named_by``: what named the files when not the command line (``MOSAIC_CATALOG``),
    which their errors then say."""
    install_catalog(None)
    _NAMED_BY.clear()
    if named_by is not None:
        _NAMED_BY.update(dict.fromkeys((Path(p) for p in user_yaml_paths), named_by))
    _ACTIVE_PATHS.clear()
    _ACTIVE_PATHS.extend(Path(p) for p in user_yaml_paths)
    _DEFERRED[:] = [True] if user_yaml_paths else []


def install_catalog(catalog: Catalog | None) -> None:
    """Make ``catalog`` (already merged, e.g. a driver's sent to a worker process) the one
    in use; None restores the shipped catalog."""
    _DEFERRED.clear()
    _ACTIVE.clear()
    if catalog is not None:
        _ACTIVE.append(catalog)


def active_catalog_paths() -> tuple[Path, ...]:
    """The user catalog files merged into the catalog in use (none: the shipped one)."""
    return tuple(_ACTIVE_PATHS)


def active_catalog() -> Catalog:
    """The catalog in use: the shipped one, or the one set by :func:`use_catalog` (or
    :func:`defer_catalog`, read now)."""
    if _DEFERRED:  # a file that fails to load fails again at the next use
        return use_catalog(*_ACTIVE_PATHS)
    return _ACTIVE[0] if _ACTIVE else shipped_catalog()


@functools.cache
def shipped_catalog() -> Catalog:
    """The catalog shipped with mosaic (loaded and validated once)."""
    return load_catalog()


def get_device(name: str) -> Device:
    """A device by name or alias, e.g. get_device("b200") (active catalog)."""
    return active_catalog().device(name)


def device_for_reported_name(reported_name: str, catalog: Catalog | None = None
                             ) -> Device | None:
    """The catalog device whose name or alias appears in a driver-reported name, longest
    match ("NVIDIA H100 80GB HBM3" -> H100-SXM-80GB, "NVIDIA A100-SXM4-80GB" ->
    A100-SXM-80GB); None when nothing matches (a CPU, a GPU the catalog lacks). ``catalog``
    defaults to the active one."""
    catalog = catalog or active_catalog()
    try:
        return catalog.device(reported_name)
    except MosaicInputError:
        pass
    key = name_key(reported_name)
    best: tuple[int, Device] | None = None
    for device in catalog.devices.values():
        for name in (device.name, *device.aliases):
            alias = name_key(name)
            if alias in key and (best is None or len(alias) > best[0]):
                best = (len(alias), device)
    return best[1] if best else None


def get_system(name: str) -> System:
    """A system by name or alias, e.g. get_system("p6-b200.48xlarge") (active catalog)."""
    return active_catalog().system(name)


def list_devices() -> tuple[str, ...]:
    """Canonical names of the devices (active catalog)."""
    return tuple(active_catalog().devices)


def list_systems() -> tuple[str, ...]:
    """Canonical names of the systems (active catalog)."""
    return tuple(active_catalog().systems)


def _build(files: list[tuple[str, CatalogFile]], override: bool = False) -> Catalog:
    """Convert validated files to frozen objects; names must be unique across all files
    (with ``override``, a later entry replaces the earlier one it names)."""
    device_names: dict[str, tuple[str, str]] = {}
    devices: dict[str, Device] = {}
    device_origin: dict[str, str] = {}  # the file each device entry came from
    for origin, content in files:
        added = []
        for entry in content.devices:
            if override:
                inherited, replaced = _release_names("device", entry.name, entry.aliases,
                                                     origin, device_names, devices)
                # the node type the replaced entry's bare name meant stays what it means,
                # unless the new entry names another (a user's H100 keeps p5.48xlarge)
                earlier_default = next((d.default_system for d in replaced if d.default_system),
                                       None)
                entry = entry.model_copy(update={
                    "aliases": [*entry.aliases, *inherited],
                    "default_system": entry.default_system or earlier_default})
            _claim_names("device", entry.name, entry.aliases, origin, device_names)
            devices[entry.name] = _device(entry)
            device_origin[entry.name] = origin
            added.append(entry.name)
        # A file's kernel_fit names resolve among the devices known when it is read: a
        # later file replacing H100 leaves the shipped H800's H100 fits as they were.
        known = Catalog(devices=MappingProxyType(dict(devices)), systems=MappingProxyType({}))
        for name in added:
            if devices[name].kernel_fit is not None:
                devices[name] = _with_fit_named_as_in_catalog(devices[name], known, origin)
            if not origin.startswith(SHIPPED_ORIGIN):
                _warn_datasheet_capacity(devices[name], origin)
    catalog_devices = Catalog(devices=MappingProxyType(devices), systems=MappingProxyType({}))

    system_names: dict[str, tuple[str, str]] = {}
    systems: dict[str, System] = {}
    replacements: set[str] = set()  # systems a later file put in place of an earlier entry
    for origin, content in files:
        for entry in content.systems:
            if override:
                inherited, replaced = _release_names("system", entry.name, entry.aliases,
                                                     origin, system_names, systems)
                if replaced:
                    replacements.add(entry.name)
                entry = entry.model_copy(update={"aliases": [*entry.aliases, *inherited]})
            _claim_names("system", entry.name, entry.aliases, origin, system_names)
            try:
                device = catalog_devices.device(entry.device)
            except MosaicInputError as exc:
                raise MosaicInputError(
                    f"{origin}: system {shown(entry.name)}: field 'device': {exc}"
                ) from None
            systems[entry.name] = _system(entry, device)
    catalog = Catalog(devices=MappingProxyType(devices), systems=MappingProxyType(systems))
    for name, device in devices.items():
        if device.default_system is not None:
            devices[name] = _with_default_system_checked(device, catalog, device_origin[name],
                                                         replacements)
    # the node types hold the devices as resolved (one object per device, as before)
    systems = {name: replace(system, device=devices[system.device.name])
               for name, system in systems.items()}
    return Catalog(devices=MappingProxyType(devices), systems=MappingProxyType(systems))


def _with_default_system_checked(device: Device, catalog: Catalog, origin: str,
                                 replacements: set[str]) -> Device:
    """``device`` with its ``default_system`` named canonically; it must be a catalog node
    type holding this device (``origin``: the file the device entry came from). A node type
    a later file replaced (``replacements``) with one holding another device drops the
    default (the bare name then means the first node type holding the device), rather than
    failing on a shipped entry the user cannot edit."""
    assert device.default_system is not None
    where = f"{origin}: device {shown(device.name)}: field 'default_system'"
    try:
        system = catalog.system(device.default_system)
    except MosaicInputError as exc:
        raise MosaicInputError(f"{where}: {exc}") from None
    if system.device.name != device.name:
        if system.name in replacements:
            return replace(device, default_system=None)
        raise MosaicInputError(f"{where}: {system.name} holds {system.device.name}, not "
                               f"{device.name}")
    return replace(device, default_system=system.name)


SHIPPED_ORIGIN = "shipped "  # the origin of the shipped files' entries, before the file name
# A user's figure this many times the one of the device whose kernel fits it borrows reads as
# a datasheet's doubled figure: dense tensor peaks are half the "with sparsity" ones, and an
# NVLink rate per direction half the bidirectional total (docs/hardware.md, "Units").
DOUBLED_FIGURE_RATIO = 1.8


def _warn_doubled_figures(device: Device, fit: Device, origin: str) -> None:
    """Warn of a peak or NVLink rate about twice the ``kernel_fit`` device's (a trial gave a
    'with sparsity' peak and a bidirectional NVLink rate; both were taken, the MFU halved
    and the all-to-all ran twice as fast)."""
    where = f"{origin}: device {shown(device.name)}"
    for dtype, peak in device.peak_flops_per_s.items():
        borrowed = fit.peak_flops_per_s.get(dtype)
        if borrowed and peak >= DOUBLED_FIGURE_RATIO * borrowed:
            warnings.warn(
                f"{where}: peak_flops_per_s.{dtype} {peak:.4g} is {peak / borrowed:.2g}x that "
                f"of {fit.name}, whose kernel fits it borrows: a datasheet's 'with sparsity' "
                "figure? mosaic wants the dense peak, half of it (docs/hardware.md)",
                MosaicWarning, stacklevel=2)
    scale_up, borrowed_up = device.scale_up_bw_bytes_per_s, fit.scale_up_bw_bytes_per_s
    if scale_up >= DOUBLED_FIGURE_RATIO * borrowed_up:
        warnings.warn(
            f"{where}: scale_up_bw_bytes_per_s {scale_up:.4g} is {scale_up / borrowed_up:.2g}x "
            f"that of {fit.name}: a bidirectional NVLink total? mosaic wants one direction, "
            "half of it (docs/hardware.md)", MosaicWarning, stacklevel=2)


def _warn_datasheet_capacity(device: Device, origin: str) -> None:
    """Warn of a memory capacity in whole decimal GB: the datasheet's figure, where the
    model wants what CUDA reports (the budget every memory verdict is judged against)."""
    if device.hbm_bytes % 1e9 == 0:
        warnings.warn(
            f"{origin}: device {shown(device.name)}: hbm_bytes {device.hbm_bytes:.4g} is a whole "
            f"number of decimal GB ({device.hbm_bytes / 1e9:g} GB): a datasheet capacity? "
            "give what CUDA reports (torch.cuda.get_device_properties(0).total_memory; an "
            "80 GB H100 reports 8.49e10, docs/hardware.md)", MosaicWarning, stacklevel=2)


def _with_fit_named_as_in_catalog(device: Device, catalog: Catalog, origin: str) -> Device:
    """``device`` with its ``kernel_fit`` resolved to the fits the named catalog device
    uses: that device's own ``kernel_fit``, else its name (names and aliases match
    case-insensitively, docs/hardware.md: ``b200``, ``B200-SXM`` and ``gb200`` all give the
    B200's fits); a fit naming no catalog device is an error, not a silent analytical
    fallback."""
    assert device.kernel_fit is not None
    try:
        fit = catalog.device(device.kernel_fit)
    except MosaicInputError as exc:
        raise MosaicInputError(f"{origin}: device {shown(device.name)}: field 'kernel_fit': "
                               f"{exc}") from None
    if not origin.startswith(SHIPPED_ORIGIN):  # a user's figures, checked against the fit's
        _warn_doubled_figures(device, fit, origin)
    return replace(device, kernel_fit=fit.kernel_fit or fit.name)


def _release_names(kind: str, name: str, aliases: Iterable[str], origin: str,
                   taken: dict[str, tuple[str, str]], entries: dict[str, _Entry]
                   ) -> tuple[tuple[str, ...], list[_Entry]]:
    """Drop every earlier entry that one of ``name``/``aliases`` refers to (override) and
    return the names and aliases it had, which the replacing entry answers to from then on
    (a user's ``H100`` replaces the shipped H100-SXM-80GB, and the shipped systems that name
    it by its full name then run on the user's entry), with the entries dropped. An entry of
    the same file is not replaced: one file naming an entry twice is an error."""
    spelled = {name_key(n): n for n in (*aliases, name)}
    keys = set(spelled)
    for key, text in spelled.items():
        if key in taken and taken[key][1] == origin:
            raise MosaicInputError(
                f"{origin}: {kind} {shown(name)}: name {shown(text)} is already used by {kind} "
                f"{shown(taken[key][0])} in the same file; one file names each entry once")
    replaced = {taken[key][0] for key in keys if key in taken}
    inherited: list[str] = []
    dropped: list[_Entry] = []
    for old in replaced:
        entry = entries.pop(old, None)
        if entry is not None:
            inherited += [n for n in (entry.name, *entry.aliases) if name_key(n) not in keys]
            dropped.append(entry)
        for key in [k for k, (owner, _) in taken.items() if owner == old]:
            del taken[key]
    return tuple(inherited), dropped


def _claim_names(
    kind: str,
    name: str,
    aliases: Iterable[str],
    origin: str,
    taken: dict[str, tuple[str, str]],
) -> None:
    """Record the lookup keys of one entry; a key already taken by an earlier entry is an error."""
    own = {name_key(alias): alias for alias in (*aliases, name)}
    for key, alias in own.items():
        if key in taken:
            other, other_origin = taken[key]
            raise MosaicInputError(
                f"{origin}: {kind} {shown(name)}: name {shown(alias)} is already used by {kind} "
                f"{shown(other)} ({other_origin}); choose another name"
            )
    taken.update(dict.fromkeys(own, (name, origin)))


def _device(entry: DeviceEntry) -> Device:
    sources = {
        "hbm_bytes": entry.hbm_bytes.source,
        "hbm_bw_bytes_per_s": entry.hbm_bw_bytes_per_s.source,
        "scale_up_bw_bytes_per_s": entry.scale_up_bw_bytes_per_s.source,
    }
    for field in ("peak_flops_per_s", "achievable_flops_per_s"):
        for dtype, sourced in getattr(entry, field).items():
            sources[f"{field}.{dtype}"] = sourced.source
    for optional in ("sfu_exp2_per_s", "host_link_bw_bytes_per_s", "sm_count",
                     "scale_up_link_bw_bytes_per_s"):
        sourced = getattr(entry, optional)
        if sourced is not None:
            sources[optional] = sourced.source
    return Device(
        name=entry.name,
        aliases=tuple(entry.aliases),
        vendor=entry.vendor,
        description=entry.description.strip(),
        peak_flops_per_s=MappingProxyType({d: v.value for d, v in entry.peak_flops_per_s.items()}),
        achievable_flops_per_s=MappingProxyType(
            {d: v.value for d, v in entry.achievable_flops_per_s.items()}
        ),
        hbm_bytes=entry.hbm_bytes.value,
        hbm_bw_bytes_per_s=entry.hbm_bw_bytes_per_s.value,
        scale_up_bw_bytes_per_s=entry.scale_up_bw_bytes_per_s.value,
        sources=MappingProxyType(sources),
        architecture=entry.architecture,
        kernel_fit=entry.kernel_fit,
        default_system=entry.default_system,
        sfu_exp2_per_s=None if entry.sfu_exp2_per_s is None else entry.sfu_exp2_per_s.value,
        host_link_bw_bytes_per_s=(None if entry.host_link_bw_bytes_per_s is None
                                  else entry.host_link_bw_bytes_per_s.value),
        sm_count=None if entry.sm_count is None else entry.sm_count.value,
        scale_up_link_bw_bytes_per_s=(None if entry.scale_up_link_bw_bytes_per_s is None
                                      else entry.scale_up_link_bw_bytes_per_s.value),
    )


def _system(entry: SystemEntry, device: Device) -> System:
    numbers = [
        "gpus_per_node",
        "scale_up_domain_gpus",
        "nics_per_node",
        "nic_bw_bytes_per_s",
        *(f for f in ("scale_up_latency_s", "scale_out_latency_s")
          if getattr(entry, f) is not None),  # unstated: the model's fitted defaults
    ]
    return System(
        name=entry.name,
        aliases=tuple(entry.aliases),
        description=entry.description.strip(),
        device=device,
        scale_out_fabric=entry.scale_out_fabric,
        sources=MappingProxyType({f: getattr(entry, f).source for f in numbers}
                                 | {"nccl_low_latency_protocols":
                                    entry.nccl_low_latency_protocols.source}),
        nccl_low_latency_protocols=entry.nccl_low_latency_protocols.value,
        **{f: getattr(entry, f).value for f in numbers},
    )
