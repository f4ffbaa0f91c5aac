"""`mosaic hardware list|show`: the device and system catalog, with your own entries."""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Any

import typer

from mosaic.cli.catalog_option import CatalogFileOption, apply_catalog
from mosaic.cli.common import JsonFlag, guarded, print_json, print_key_value_table, print_table
from mosaic.errors import MosaicInputError, shown
from mosaic.hardware import Catalog, Device, System, shipped_catalog
from mosaic.hardware.catalog import close_names
from mosaic.units import GIB

hardware_app = typer.Typer(
    name="hardware",
    help="The hardware catalog: list devices and node types, show one with its sources.",
    no_args_is_help=True,
)


def _origin(entry: Device | System, shipped: dict[str, Any]) -> str:
    """'shipped', 'user' (new) or 'user (replaces shipped)' (also under a shipped alias:
    the user entry answers to the replaced entry's names)."""
    old = next((shipped[n] for n in (entry.name, *entry.aliases) if n in shipped), None)
    if old is None:
        return "user"
    if old == entry:
        return "shipped"
    if isinstance(entry, System) and replace(entry, device=old.device) == old:
        return "shipped (with your device)"
    return "user (replaces shipped)"


# what the model does where a device leaves an optional figure unstated (docs/hardware.md)
_UNSTATED = {
    "host_link_bw_bytes_per_s": "a job that offloads activations on it is refused",
    "sfu_exp2_per_s": "its attention softmax share is its kernel_fit device's, not rescaled",
    "scale_up_link_bw_bytes_per_s": ("a switched scale-up fabric (NVSwitch): any group of "
                                     "its domain moves at the whole scale-up rate"),
}


def device_document(device: Device, origin: str) -> dict[str, Any]:
    unstated = [f"{name} ({effect})" for name, effect in _UNSTATED.items()
                if getattr(device, name) is None]
    return {
        "name": device.name, "aliases": list(device.aliases), "vendor": device.vendor,
        "description": device.description, "origin": origin,
        "peak_flops_per_s": dict(device.peak_flops_per_s),
        "achievable_flops_per_s": dict(device.achievable_flops_per_s),
        "hbm_bytes": device.hbm_bytes, "hbm_bw_bytes_per_s": device.hbm_bw_bytes_per_s,
        "scale_up_bw_bytes_per_s": device.scale_up_bw_bytes_per_s,
        "scale_up_link_bw_bytes_per_s": device.scale_up_link_bw_bytes_per_s,
        "host_link_bw_bytes_per_s": device.host_link_bw_bytes_per_s,
        "sfu_exp2_per_s": device.sfu_exp2_per_s, "sm_count": device.sm_count,
        "architecture": device.architecture, "kernel_fit": device.kernel_fit,
        "sources": dict(device.sources),
        # why a number above is null (a --json reader saw bare nulls)
        **({"unstated_note": "not stated in the catalog: " + "; ".join(unstated)}
           if unstated else {}),
    }


def _latencies(system: System) -> tuple[dict[str, float], dict[str, str]]:
    """The per-step latencies the performance model uses for ``system``: the entry's own,
    else the model's fitted defaults, with where each comes from."""
    from mosaic.perf.collectives import Interconnect
    from mosaic.perf.fitted_constants import fitted_source

    values, sources = {}, {}
    for name in ("scale_up_latency_s", "scale_out_latency_s"):
        stated = getattr(system, name)
        values[name] = stated if stated is not None else getattr(Interconnect, name)
        if stated is None:  # the default's own provenance: NCCL's table or a fit
            sources[name] = ("not stated: the performance model's default "
                             f"(perf/data/microbench_fits.yaml: "
                             f"{' '.join(fitted_source('collectives', name).split())})")
    return values, sources


def system_document(system: System, origin: str) -> dict[str, Any]:
    latencies, default_sources = _latencies(system)
    return {
        "name": system.name, "aliases": list(system.aliases),
        "description": system.description, "origin": origin, "device": system.device.name,
        "gpus_per_node": system.gpus_per_node,
        "scale_up_domain_gpus": system.scale_up_domain_gpus,
        "nics_per_node": system.nics_per_node,
        "nic_bw_bytes_per_s": system.nic_bw_bytes_per_s,
        "scale_out_bw_bytes_per_s_per_gpu": system.scale_out_bw_bytes_per_s,
        "scale_out_fabric": system.scale_out_fabric,
        **latencies,
        "nccl_low_latency_protocols": system.nccl_low_latency_protocols,
        "sources": dict(system.sources) | default_sources,
    }


def catalog_document(catalog: Catalog) -> dict[str, Any]:
    shipped = shipped_catalog()
    return {
        "devices": [device_document(d, _origin(d, dict(shipped.devices)))
                    for d in catalog.devices.values()],
        "systems": [system_document(s, _origin(s, dict(shipped.systems)))
                    for s in catalog.systems.values()],
    }


def _tflops(value: float | None) -> str:
    return "-" if value is None else f"{value / 1e12:,.0f}"


def list_command(catalog: CatalogFileOption = None, json_output: JsonFlag = False) -> None:
    """List the devices and node types (systems) of the catalog, yours included."""
    document = catalog_document(apply_catalog(catalog))
    if json_output:
        print_json(document)
        return
    print_table(
        "Devices (dense datasheet peaks, per GPU)",
        ["name", "vendor", "bf16 TFLOP/s", "fp8 TFLOP/s", "fp4 TFLOP/s", "HBM GiB",
         "HBM TB/s", "scale-up GB/s", "host link GB/s", "kernel fit", "origin"],
        [[d["name"], d["vendor"], _tflops(d["peak_flops_per_s"].get("bf16")),
          _tflops(d["peak_flops_per_s"].get("fp8")),
          _tflops(d["peak_flops_per_s"].get("fp4")), f"{d['hbm_bytes'] / GIB:,.1f}",
          f"{d['hbm_bw_bytes_per_s'] / 1e12:.2f}", f"{d['scale_up_bw_bytes_per_s'] / 1e9:,.0f}",
          "-" if d["host_link_bw_bytes_per_s"] is None
          else f"{d['host_link_bw_bytes_per_s'] / 1e9:,.0f}",
          d["kernel_fit"] or "-", d["origin"]] for d in document["devices"]])
    print_table(
        "Systems (node types; use with --system, or hardware.system in a job)",
        ["name", "device", "GPUs/node", "NVLink domain", "scale-out GB/s per GPU", "fabric",
         "origin"],
        [[s["name"], s["device"], str(s["gpus_per_node"]), str(s["scale_up_domain_gpus"]),
          f"{s['scale_out_bw_bytes_per_s_per_gpu'] / 1e9:,.1f}", s["scale_out_fabric"],
          s["origin"]] for s in document["systems"]])


def show_command(
    name: Annotated[str, typer.Argument(help="device or system name (or alias)")],
    catalog: CatalogFileOption = None,
    json_output: JsonFlag = False,
) -> None:
    """Show one device or system with every number and its source."""
    active = apply_catalog(catalog)
    shipped = shipped_catalog()
    found: list[dict[str, Any]] = []
    for kind, lookup, make, pool in (
            ("device", active.device, device_document, shipped.devices),
            ("system", active.system, system_document, shipped.systems)):
        try:
            entry = lookup(name)
        except MosaicInputError:
            continue
        found.append({"kind": kind} | make(entry, _origin(entry, dict(pool))))
    if not found:
        close = close_names(name, (*active.devices.values(), *active.systems.values()))
        hint = f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""
        raise MosaicInputError(
            f"unknown device or system {shown(name)}{hint}; `mosaic hardware list` shows the "
            f"catalog")
    if json_output:
        print_json(found[0] if len(found) == 1 else {"matches": found})
        return
    for document in found:
        rows = [("kind", document["kind"]), ("aliases", ", ".join(document["aliases"]) or "-"),
                ("origin", document["origin"]), ("description", document["description"])]
        rows += [(key, _value_with_source(key, value, document["sources"]))
                 for key, value in document.items()
                 if key not in ("kind", "name", "aliases", "origin", "description", "sources")]
        print_key_value_table(document["name"], rows)


def _reading(key: str, value: float) -> str:
    """The number in the unit people read it in, beside the catalog's SI value ('1.501e+11
    = 139.8 GiB', '5e+10 = 400 Gb/s'; a trial read raw bytes)."""
    if key == "hbm_bytes":
        return f" = {value / GIB:,.1f} GiB"
    if key.startswith(("nic_bw", "scale_out_bw")):
        return f" = {value * 8 / 1e9:,.0f} Gb/s"
    if key.endswith("_bytes_per_s"):
        return f" = {value / 1e9:,.0f} GB/s"
    if key.endswith("flops_per_s"):
        return f" = {value / 1e12:,.0f} TFLOP/s"
    if key.endswith("latency_s"):
        return f" = {value * 1e6:g} us"
    return ""


def _value_with_source(key: str, value: Any, sources: dict[str, str]) -> str:
    if isinstance(value, dict):
        return "; ".join(f"{dtype} {v:.4g}{_reading(key, v)} "
                         f"({sources.get(f'{key}.{dtype}', '')})"
                         for dtype, v in value.items()) or "-"
    if value is None:
        return "-"
    text = f"{value:.4g}{_reading(key, value)}" if isinstance(value, float) else str(value)
    source = sources.get(key)
    return f"{text} ({source})" if source else text


hardware_app.command("list")(guarded(list_command))
hardware_app.command("show")(guarded(show_command))


def register(app: typer.Typer) -> None:
    """Attach the `hardware` sub-command group to the top-level app."""
    app.add_typer(hardware_app, name="hardware")
