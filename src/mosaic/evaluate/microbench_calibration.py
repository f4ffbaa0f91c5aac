"""``mosaic calibrate --microbench DIR``: a calibration file from ``mosaic bench`` tables.

The tables of one run (one ``metadata_id``: the newest in the directory unless named) are
turned into the column vocabulary of :mod:`mosaic.evaluate.microbench_fit` and fitted with
the same functions that derive the built-in constants from the ScalePlan tables. Fractions
(GEMM plateau, HBM and attention efficiencies) are relative to *reference rates*: the
datasheet peak, HBM bandwidth and SM count of the catalog device the run measured
(matched from the metadata, or ``device``); for a device outside the catalog the measured
achievable peak (best GEMM of the peak sweep) and the best streaming bandwidth. Constants of
a GPU outside the catalog then apply to any job ("applies_to: [any]"); a CPU test run's to
that CPU alone. Collective
efficiencies need the link bandwidths of the measured system (``system`` from the
catalog); without it only the collective latencies are fitted and applied.

The result is the base calibration (default profile unless given) with ``dispatch_gap_s``
(t_gap of paper Eq. 11) replaced by the measured launch gap and a ``microbench`` block
(:mod:`mosaic.perf.microbench_constants`) that ``predict_step`` applies.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from mosaic.bench.metadata import busy_host_warning, is_cpu_device_name
from mosaic.bench.store import (
    FAMILIES,
    families_present,
    ok_rows,
    read_family,
    read_metadata,
)
from mosaic.errors import MosaicInputError
from mosaic.evaluate.microbench_fit import (
    GEMM_LATENCY_CEILING_S,
    TRAINING_SHAPES_MIN,
    DeviceRates,
    fit_attention,
    fit_collectives,
    fit_gemm,
    fit_grouped_host_floor,
    fit_streaming,
    fit_te_grouped_host_floor,
    grouped_gpu_times,
    mape,
    training_gemm_rows,
)
from mosaic.perf.attention_kernels import gpu_generation
from mosaic.perf.calibration import Calibration
from mosaic.perf.collectives import Interconnect
from mosaic.perf.fitted_constants import fitted
from mosaic.perf.kernels import (
    DEFAULT_GEMM,
    FLASH_ATTENTION_EFFICIENCY,
    SM_COUNT,
    device_fit_key,
    flash_attention_time_s,
    te_grouped_linear_host_floor_s,
)
from mosaic.perf.machine import DEFAULT_SM_COUNT
from mosaic.perf.microbench_constants import ANY_DEVICE
from mosaic.perf.workload import precision_lane

MIN_ATTENTION_ROWS = 4  # fewer: fit the plateau only (three parameters need more shapes)
MIN_GEMM_ROWS = 8  # fewer training-shape rows than this: fit every row of its dtype instead
BACKEND_PREFERENCE = ("cudnn", "flash", "efficient", "math")
# SDPA backend -> the kernel family of perf.attention_kernels whose relative throughput
# converts its fit into the cuDNN-equivalent efficiency the model multiplies per job.
BACKEND_FAMILY = {"cudnn": "cudnn", "flash": "fa2"}


@dataclass(frozen=True)
class Reference:
    """Rates the fitted fractions are relative to, and where they come from."""

    rates: DeviceRates
    device: str  # catalog device name, or the measured device's own name
    in_catalog: bool
    source: str


def _nothing_measured(directory: Path) -> str:
    """Why ``directory`` gives no rows to fit: no bench table at all (the shipped ScalePlan
    tables were read as one, a trial), or tables whose every case was skipped."""
    present = list(families_present(directory))
    if present:
        return (f"{directory}: the {', '.join(present)} tables hold no row with status ok "
                "(no case measured on this machine; their status column says why)")
    other = sorted(p.name for p in directory.iterdir()
                   if p.suffix in (".csv", ".parquet"))[:3]
    foreign = (f" ({', '.join(other)} are not bench tables; the ScalePlan reference tables "
               "are fitted by benchmarks/fit_microbench_constants.py)" if other else "")
    return (f"{directory}: no `mosaic bench` table ({', '.join(f + '.parquet' for f in FAMILIES)})"
            f"{foreign}; run `mosaic bench` first")


def _newest_id(directory: Path, frames: dict[str, pd.DataFrame]) -> str:
    runs = read_metadata(directory).get("runs", {})
    ids = {str(i) for f in frames.values() if not f.empty for i in f["metadata_id"].unique()}
    kernel_ids = {str(i) for name, f in frames.items() if name != "collectives" and not f.empty
                  for i in f["metadata_id"].unique()}
    pool = kernel_ids or ids
    if not pool:
        raise MosaicInputError(_nothing_measured(directory))
    return max(pool, key=lambda i: runs.get(i, {}).get("created_utc", ""))


def _built_in_floor(backward: bool) -> tuple[float, float]:
    """(fixed_s, per_group_s) of the built-in GroupedLinear host floor (BF16, TE 2.4, B200)."""
    fixed_s = float(te_grouped_linear_host_floor_s(0, backward))
    return fixed_s, float(te_grouped_linear_host_floor_s(1, backward)) - fixed_s


def _floor_constants(floors: dict[str, dict[str, Any]]) -> dict[str, float]:
    """{"fp8.fwd.fixed_s": ..., "fp8.fwd.per_group_s": ...}: host-floor lines as the named
    constants of the fitted-vs-built-in table."""
    return {f"{precision}.{name}.{part}": float(value)
            for precision, lines in floors.items() for name, line in lines.items()
            for part, value in zip(("fixed_s", "per_group_s"), line, strict=True)}


def load_tables(directory: Path, metadata_id: str | None = None
                ) -> tuple[dict[str, pd.DataFrame], dict[str, Any], dict[str, Any] | None]:
    """(OK rows per family of one kernel run, its metadata, the collectives' metadata).

    Kernel families use ``metadata_id`` (default: the newest kernel run); collectives,
    measured by a torchrun job with its own metadata, use their newest run.
    """
    if not directory.is_dir():
        raise MosaicInputError(f"--microbench {directory}: not a directory")
    frames = {f: ok_rows(read_family(directory, f, for_fit=True)) for f in FAMILIES}
    runs = read_metadata(directory).get("runs", {})
    chosen = metadata_id or _newest_id(directory, frames)
    if chosen not in runs:
        raise MosaicInputError(f"{directory}: metadata id {chosen!r} not in metadata.json; "
                               f"known: {', '.join(runs) or 'none'}")
    out = {}
    for family, frame in frames.items():
        if frame.empty:
            out[family] = frame
        elif family == "collectives":
            newest = max((str(i) for i in frame["metadata_id"].unique()),
                         key=lambda i: runs.get(i, {}).get("created_utc", ""))
            out[family] = frame[frame["metadata_id"].astype(str) == newest]
        else:
            out[family] = frame[frame["metadata_id"].astype(str) == chosen].reset_index(
                drop=True)
    collective_meta = None
    if not out["collectives"].empty:
        collective_meta = runs.get(str(out["collectives"]["metadata_id"].iloc[0]))
    return out, runs[chosen], collective_meta


def achievable_peak_flops_per_s(gemm: pd.DataFrame, dtype: str = "bf16") -> float | None:
    """Best sustained rate of the square-GEMM sweep (GUIDE.md: the achievable peak)."""
    if gemm.empty:
        return None
    rows = gemm[(gemm["pass"] == "peak") & (gemm["dtype"] == dtype)]
    if rows.empty:
        return None
    return float((2.0 * rows["m"] * rows["n"] * rows["k"] / rows["time_s"]).max())


def reference_dtype(gemm: pd.DataFrame, metadata: dict[str, Any]) -> str:
    """The GEMM precision the fractions are fitted in: bf16, the training precision the
    model prices; on a CPU without a bf16 peak sweep, fp32, what a CPU run computes in and
    measures by default (``mosaic.bench.device.default_dtypes``; a CPU's bf16 without native
    instructions is ~50x slower, docs/bench.md), so the documented CPU run calibrates."""
    if (measured_on_cpu(metadata) and achievable_peak_flops_per_s(gemm, "bf16") is None
            and achievable_peak_flops_per_s(gemm, "fp32") is not None):
        return "fp32"
    return "bf16"


def _catalog_device(name: str) -> Any:
    from mosaic.hardware import get_device

    for candidate in (name, name.removeprefix("NVIDIA ").strip(), device_fit_key(name)):
        try:
            return get_device(candidate)
        except MosaicInputError:
            continue
    return None


def reference(tables: dict[str, pd.DataFrame], metadata: dict[str, Any],
              device: str | None) -> Reference:
    """The reference rates of the run (see the module docstring)."""
    measured_name = str(metadata.get("device_name") or "unknown")
    catalog = _catalog_device(device or measured_name)
    if device is not None and catalog is None:
        raise MosaicInputError(f"--device {device!r}: not in the hardware catalog")
    if device is not None:
        _require_measured_on(device, catalog.name, metadata)
    if catalog is not None:
        sm = (metadata.get("sm_count") or catalog.sm_count
              or SM_COUNT.get(device_fit_key(catalog.name), DEFAULT_SM_COUNT))
        rates = DeviceRates(catalog.peak_flops_per_s_for("bf16"), catalog.hbm_bw_bytes_per_s,
                            int(sm))
        return Reference(rates, catalog.name, True,
                         f"datasheet rates of catalog device {catalog.name}")
    dtype = reference_dtype(tables["gemm"], metadata)
    peak = achievable_peak_flops_per_s(tables["gemm"], dtype)
    streams = tables["kernels"]
    bandwidth = (float(streams["bandwidth_bytes_per_s"].max())
                 if not streams.empty and "bandwidth_bytes_per_s" in streams else None)
    if peak is None or bandwidth is None or not np.isfinite(bandwidth):
        # name what is missing: a trial's fp32 sweep was there, the bf16 one was not
        # (a CPU is referenced to the fp32 sweep `bench gemm` measures there by default;
        # told to measure bf16, it ran ~50x slower for a reference it does not need)
        sweep = ("a gemm peak sweep (`mosaic bench gemm`, fp32 on a CPU)"
                 if measured_on_cpu(metadata) else
                 "a bf16 gemm peak sweep (`mosaic bench gemm --dtypes bf16`)")
        missing = [what for what, absent in (
            (sweep, peak is None),
            ("the kernels family's streaming rows (`mosaic bench kernels`)",
             bandwidth is None or not np.isfinite(bandwidth))) if absent]
        # (--device names a GPU the tables were measured on: a CPU's are refused under it)
        either = "" if measured_on_cpu(metadata) else "give --device NAME, or "
        raise MosaicInputError(
            f"device {measured_name!r} is not in the catalog: {either}measure "
            f"{' and '.join(missing)} so the measured rates can serve as the reference")
    return Reference(DeviceRates(peak, bandwidth, 1), measured_name, False,
                     f"measured reference rates of {measured_name} (achievable {dtype} peak "
                     f"{peak:.4g} FLOP/s from the square-GEMM sweep, best streaming bandwidth "
                     f"{bandwidth:.4g} B/s; one SM: no tile-wave quantisation)")


def measured_on_cpu(metadata: dict[str, Any]) -> bool:
    """Whether the bench tables were measured on a CPU (``mosaic bench`` names it cpu:ARCH)."""
    return is_cpu_device_name(str(metadata.get("device_name", "")))


def _require_measured_on(device: str, catalog_name: str, metadata: dict[str, Any]) -> None:
    """Refuse a --device the tables were not measured on: their times are the measured
    device's, so fractions of another's datasheet peak describe neither (a trial: CPU tables
    with --device H100 wrote a GEMM fraction of 1e-5 and a 161,814 s step)."""
    measured_name = str(metadata.get("device_name") or "unknown")
    measured = _catalog_device(measured_name)
    if measured_on_cpu(metadata) or (measured is not None and device_fit_key(measured.name)
                                     != device_fit_key(catalog_name)):
        raise MosaicInputError(
            f"--device {device!r}: the tables were measured on {measured_name!r} (the bench "
            "directory's metadata), not on it; fractions of its peak would describe neither "
            "device. --device names the catalog entry of the GPU the tables were measured on "
            "when the metadata's name is not in the catalog; omit it to use the measured "
            "rates")


def _peaks(gemm: pd.DataFrame, ref: Reference) -> dict[str, dict[str, float | None]]:
    """Per GEMM dtype: the achievable peak (square sweep) and the catalog datasheet peak
    (fp8 for mxfp8: same tensor-core rate; None outside the catalog)."""
    if gemm.empty:
        return {}
    device = _catalog_device(ref.device) if ref.in_catalog else None
    out = {}
    for dtype in sorted(set(gemm["dtype"].astype(str))):
        achievable = achievable_peak_flops_per_s(gemm, dtype)
        if achievable is None:
            continue
        datasheet = None
        if device is not None:
            datasheet = device.peak_flops_per_s.get(precision_lane(dtype))
        out[dtype] = {"achievable": achievable, "datasheet": datasheet}
    return out


def _attention_rows(attention: pd.DataFrame, device: str) -> tuple[pd.DataFrame, str | None]:
    """Wide fwd/bwd rows of the preferred backend that measured both passes."""
    if attention.empty:
        return attention, None
    for backend in BACKEND_PREFERENCE:
        rows = attention[attention["backend"] == backend]
        if rows.empty:
            continue
        keys = ["batch", "heads", "seq", "head_dim"]
        wide = rows.pivot_table(index=keys, columns="pass", values="time_s",
                                aggfunc="median").reset_index()
        if {"fwd", "bwd"} <= set(wide.columns):
            wide = wide.rename(columns={"fwd": "fwd_time_s", "bwd": "bwd_time_s"})
            wide["device"] = device
            return wide.dropna(subset=["fwd_time_s", "bwd_time_s"]), backend
    return attention.iloc[0:0], None


def _attention_plateau(rows: pd.DataFrame, peak_flops_per_s: float
                       ) -> dict[str, tuple[list[float], int, float]]:
    """max_fraction per pass (geometric mean over rows) with the generic fit's
    seq_half_tokens and head_dim_half held; the error is 0 for one row by construction."""
    out = {}
    for backward, label in ((False, "fwd"), (True, "bwd")):
        held = FLASH_ATTENTION_EFFICIENCY["generic"][label]
        unit = replace(held, max_fraction=1.0)
        t_unit = flash_attention_time_s(rows["batch"], rows["heads"], rows["seq"], rows["seq"],
                                        rows["head_dim"], True, peak_flops_per_s,
                                        backward=backward, efficiency=unit,
                                        kernel_latency_s=0.0)
        measured = rows[f"{label}_time_s"].to_numpy(float)
        fraction = float(np.exp(np.mean(np.log(t_unit / measured))))
        predicted = t_unit / fraction
        out[label] = ([fraction, held.seq_half_tokens, held.head_dim_half], len(rows),
                      mape(predicted, measured))
    return out


def _grouped_wide(grouped: pd.DataFrame) -> pd.DataFrame:
    """Balanced rows as groups, m_per_group, n, k, fwd_time_s, bwd_time_s (dgrad + wgrad)."""
    rows = grouped[grouped["distribution"] == "balanced"]
    keys = ["groups", "m_per_group", "n", "k"]
    wide = rows.pivot_table(index=keys, columns="pass", values="time_s",
                            aggfunc="median").reset_index()
    if not {"fwd", "dgrad", "wgrad"} <= set(wide.columns):
        return wide.iloc[0:0]
    wide["fwd_time_s"] = wide["fwd"]
    wide["bwd_time_s"] = wide["dgrad"] + wide["wgrad"]
    return wide.dropna(subset=["fwd_time_s", "bwd_time_s"])


def _interconnect(system: str | None, collectives: pd.DataFrame) -> tuple[Interconnect, bool]:
    """The measured system's links (catalog) or, without one, the best measured bus
    bandwidths as stand-ins (then only latencies are fitted)."""
    if system is not None:
        from mosaic.hardware import get_system

        s = get_system(system)
        return Interconnect(
            scale_up_domain_gpus=s.scale_up_domain_gpus, gpus_per_node=s.gpus_per_node,
            scale_up_bw_bytes_per_s=s.scale_up_bw_bytes_per_s,
            scale_up_link_bw_bytes_per_s=s.device.scale_up_link_bw_bytes_per_s,
            scale_out_bw_bytes_per_s=s.scale_out_bw_bytes_per_s,
            low_latency_protocols=s.nccl_low_latency_protocols), True
    world = int(collectives["world_size"].max()) if "world_size" in collectives else 2
    domain = int(collectives["ranks_per_domain"].max()) if "ranks_per_domain" in collectives \
        else world
    intra = collectives[collectives["scope"] == "intra"]["bus_bw_bytes_per_s"]
    inter = collectives[collectives["scope"] == "inter"]["bus_bw_bytes_per_s"]
    up = float(intra.max()) if not intra.empty else float(collectives["bus_bw_bytes_per_s"].max())
    out = float(inter.max()) if not inter.empty else up
    return Interconnect(scale_up_domain_gpus=max(domain, 1), gpus_per_node=max(domain, 1),
                        scale_up_bw_bytes_per_s=up, scale_out_bw_bytes_per_s=out,
                        low_latency_protocols=False), False


def _fit_collective_block(collectives: pd.DataFrame, system: str | None
                          ) -> tuple[dict[str, float], dict[str, Any]]:
    rows = collectives[collectives["pattern"] == "even"].reset_index(drop=True)
    rows = rows[rows["collective"] != "send_recv"].reset_index(drop=True)
    if rows.empty:
        return {}, {}
    ic, links_known = _interconnect(system, rows)
    has_inter = bool((rows["scope"] == "inter").any())
    names = ["launch_latency_s", "scale_up_latency_s"]
    if has_inter:
        names.append("scale_out_latency_s")
    if links_known:
        names += ["ring_scale_up_efficiency", "p2p_scale_up_efficiency"]
        if has_inter:
            names += ["ring_scale_out_efficiency", "p2p_scale_out_efficiency"]
    fit = fit_collectives(rows, ic, names)
    builtin = {n: float(fitted("collectives", n)) for n in names}
    report = {"rows": fit.rows, "mape_percent": fit.mape_percent, "fitted": fit.values,
              "built_in": builtin,
              "links": (f"catalog system {system}" if links_known else
                        "best measured bus bandwidth per scope (no --system: only latencies "
                        "are applied)")}
    return fit.values, report


def calibrate_from_microbench(directory: Path, base: Calibration, *,
                              device: str | None = None, system: str | None = None,
                              metadata_id: str | None = None, name: str | None = None
                              ) -> tuple[dict[str, Any], dict[str, Any]]:
    """(calibration document, fit report with per-family error) from a bench directory."""
    tables, metadata, collective_meta = load_tables(directory, metadata_id)
    if any(not tables[f].empty for f in ("gemm", "grouped", "attention", "kernels")):
        ref = reference(tables, metadata, device)
    else:  # collectives or host floors only: no kernel fractions, so no reference rates
        catalog = _catalog_device(device or str(metadata.get("device_name")))
        ref = Reference(DeviceRates(float("nan"), float("nan"), 1),
                        catalog.name if catalog else str(metadata.get("device_name")),
                        catalog is not None,
                        "no kernel rates needed (collectives or te_grouped host floors only)")
    rates = ref.rates
    # constants measured on a CPU apply to that CPU only: as "any" they rewrote every GPU
    # job's kernels (a trial: a 41 s step became 174 s, and a plan's pick changed)
    block: dict[str, Any] = {"applies_to": [
        ref.device if ref.in_catalog or measured_on_cpu(metadata) else ANY_DEVICE]}
    report: dict[str, Any] = {"metadata_id": metadata["metadata_id"],
                              "device": metadata.get("device_name"),
                              "reference": ref.source, "families": {}}
    block["reference"] = {"peak_flops_per_s": rates.peak_flops_per_s,
                          "hbm_bw_bytes_per_s": rates.hbm_bw_bytes_per_s,
                          "sm_count": rates.sm_count, "source": ref.source}
    errors: dict[str, float] = {}
    gemm_params = DEFAULT_GEMM

    gemm = tables["gemm"]
    report["peaks_flops_per_s"] = _peaks(gemm, ref)
    if not gemm.empty:
        dtype = reference_dtype(gemm, metadata)
        rows = training_gemm_rows(gemm, dtype)
        min_dim = TRAINING_SHAPES_MIN
        if len(rows) < MIN_GEMM_ROWS:
            rows, min_dim = training_gemm_rows(gemm, dtype, min_dim=1), 1
        if len(rows) >= 4:
            rows = rows.assign(device="measured")
            fit, latency = fit_gemm(rows, {"measured": rates})
            values = {"max_fraction_of_peak": fit.values["gemm_max_fraction_of_peak"],
                      "k_half": fit.values["gemm_k_half"],
                      "hbm_efficiency": fit.values["gemm_hbm_efficiency"],
                      "kernel_latency_s": float(latency[0])}
            block["gemm"] = values
            gemm_params = replace(DEFAULT_GEMM, **values)
            errors["gemm"] = fit.mape_percent
            report["families"]["gemm"] = {
                "rows": fit.rows, "min_dim": min_dim, "dtype": dtype,
                "mape_percent": fit.mape_percent,
                # a copy: implausible_constants drops values from the block, not the report
                "fitted": dict(values),
                "built_in": {f: getattr(DEFAULT_GEMM, f) for f in values}}

    grouped = tables["grouped"]
    if not grouped.empty:
        wide = _grouped_wide(grouped)
        if not wide.empty:
            fwd_gpu, bwd_gpu = grouped_gpu_times(wide, rates, gemm_params)
            floor = fit_grouped_host_floor(wide, rates, gemm_params)
            measured = np.concatenate([wide["fwd_time_s"], wide["bwd_time_s"]])
            predicted = np.concatenate([fwd_gpu, bwd_gpu])
            errors["grouped"] = mape(predicted, measured)
            impl = sorted(set(grouped.get("impl", pd.Series(["?"])).astype(str)))
            report["families"]["grouped"] = {
                "rows": len(wide), "mape_percent": errors["grouped"], "impl": impl,
                "host_floor": {k: {"fixed_s": v[0], "per_group_s": v[1], "rows": v[2]}
                               for k, v in floor.items()},
                "note": "model GPU time with the fitted GEMM constants vs measured "
                        "(fwd and dgrad + wgrad); host floor reported, not applied "
                        "(the model's floor is Transformer Engine's)"}

    if not tables["te_grouped"].empty:
        floors, floor_report = fit_te_grouped_host_floor(tables["te_grouped"])
        if floors:
            block["grouped_host_floor"] = floors
        impl = sorted(set(tables["te_grouped"].get("impl", pd.Series(["?"])).astype(str)))
        # each fitted number next to the built-in BF16 floor any precision gets unmeasured
        built_in = {precision: {name: _built_in_floor(name == "bwd") for name in lines}
                    for precision, lines in floors.items()}
        report["families"]["te_grouped"] = {
            "impl": impl, "per_precision": floor_report,
            "fitted": _floor_constants(floors), "built_in": _floor_constants(built_in),
            "note": "host floor of Transformer Engine's GroupedLinear (fixed_s + per_group_s "
                    "x local experts), applied to MoE jobs of that precision on the measured "
                    "device; the built-in floor is TE 2.4's BF16 on a B200 host"}

    attention, backend = _attention_rows(tables["attention"], "measured")
    if backend is not None and not attention.empty:
        if len(attention) >= MIN_ATTENTION_ROWS:
            fits = fit_attention(attention, {"measured": rates.peak_flops_per_s})
        else:  # too few shapes for three parameters: fit the plateau, hold the ramps
            fits = _attention_plateau(attention, rates.peak_flops_per_s)
        generation = gpu_generation(ref.device) if ref.in_catalog else None
        family = BACKEND_FAMILY.get(backend)
        relative_table = fitted("kernels", "attention_kernel_relative_throughput")
        triples = {}
        for direction, (triple, _rows, error) in fits.items():
            relative = 1.0
            if family and generation:
                relative = relative_table.get(family, {}).get(generation, {}).get(direction, 1.0)
            triples[direction] = [triple[0] / relative, triple[1], triple[2]]
            # one shape is fitted exactly: its 0% says nothing of the fit (a trial read it so)
            errors[f"attention_{direction}"] = error if len(attention) > 1 else None
        block["attention"] = triples
        builtin = FLASH_ATTENTION_EFFICIENCY.get(device_fit_key(ref.device),
                                                 FLASH_ATTENTION_EFFICIENCY["generic"])
        report["families"]["attention"] = {
            "backend": backend, "rows": len(attention),
            "mape_percent": {d: fits[d][2] for d in fits}, "fitted": dict(triples),
            "built_in": {d: [builtin[d].max_fraction, builtin[d].seq_half_tokens,
                             builtin[d].head_dim_half] for d in ("fwd", "bwd")},
            "note": f"{backend} backend, max_fraction as cuDNN-equivalent"}

    streams = tables["kernels"]
    if not streams.empty:
        adds = streams[(streams["op"] == "add")]
        try:
            fit = fit_streaming(adds, rates.hbm_bw_bytes_per_s)
        except MosaicInputError as exc:
            report["families"]["elementwise"] = {"not_fitted": str(exc)}
            fit = None
        if fit is not None:
            block["elementwise_hbm_efficiency"] = fit.values["elementwise_hbm_efficiency"]
            errors["elementwise"] = fit.mape_percent
            per_op = (streams[streams["moved_bytes"] > 0].groupby("op")["bandwidth_bytes_per_s"]
                      .max() / rates.hbm_bw_bytes_per_s).to_dict()
            report["families"]["elementwise"] = {
                "rows": fit.rows, "mape_percent": fit.mape_percent, "fitted": fit.values,
                "built_in": {"elementwise_hbm_efficiency":
                             float(fitted("kernels", "elementwise_hbm_efficiency"))},
                "best_fraction_of_reference_bw_per_op": per_op}
        launch = streams[streams["op"] == "launch"]
        if not launch.empty:
            # written where the launch gap is a GPU's (a CPU's is not: below)
            on_cpu = measured_on_cpu(metadata)
            report["dispatch_gap_s"] = {"fitted": float(launch["time_s"].median()),
                                        "built_in": base.dispatch_gap_s,
                                        "written": not on_cpu,
                                        **({"kept_because": "launched on a CPU, not a GPU"}
                                           if on_cpu else {})}
        sync = streams[streams["op"] == "host_sync"]
        if not sync.empty:
            report["host_sync_s"] = float(sync["time_s"].median())

    if not tables["collectives"].empty:
        values, collective_report = _fit_collective_block(tables["collectives"], system)
        if values:
            applied = {k: v for k, v in values.items()
                       if system is not None or k.endswith("_latency_s")}
            block["collectives"] = applied
            errors["collectives"] = collective_report["mape_percent"]
            report["families"]["collectives"] = {
                **collective_report,
                "metadata_id": collective_meta["metadata_id"] if collective_meta else None}

    if len(block) <= 2:  # applies_to and reference only
        raise MosaicInputError(f"{directory}: nothing to fit (no gemm, attention, kernels, "
                               "te_grouped or collectives rows)")
    block["fit_error_percent"] = errors
    provenance = (f"mosaic calibrate --microbench on {directory.name} (metadata "
                  f"{metadata['metadata_id']}, device {metadata.get('device_name')}, torch "
                  f"{metadata.get('torch_version')}, CUDA {metadata.get('cuda_version')}, "
                  f"driver {metadata.get('driver_version')}"
                  + ("" if collective_meta is None else
                     f"; collectives: metadata {collective_meta['metadata_id']}, "
                     f"{collective_meta.get('world_size')} ranks")
                  + "); fractions against the "
                  f"{ref.source}; base calibration {base.name}")
    block["provenance"] = provenance
    document = base.to_document()
    document["name"] = name or f"microbench-{ref.device}".replace(" ", "-")
    document["provenance"] = f"{base.provenance}; kernel constants: {provenance}"
    if report.get("dispatch_gap_s", {}).get("written"):
        # (a profile constant, read for every job: a CPU's launch gap is not a GPU's)
        document["constants"]["dispatch_gap_s"] = {
            "value": report["dispatch_gap_s"]["fitted"],
            "source": "t_gap of Eq. 11: measured wall time per kernel of a chain of tiny eager "
                      f"kernels (mosaic bench kernels, launch), {directory.name}"}
    document["microbench"] = block
    if not ref.in_catalog and document.get("coverage") and not measured_on_cpu(metadata):
        # Constants measured on a GPU the catalog lacks apply to any job; the envelope then
        # holds only that device, so a B200 job's prediction says it is outside it (the base
        # profile's envelope would call it 'inside'). A CPU test run's constants apply to
        # that CPU only: a GPU job keeps the base constants, and so the base envelope (a
        # trial saw a CPU profile call every GPU plan 'outside' while changing nothing).
        document["coverage"]["devices"] = [str(metadata.get("device_name") or ref.device)]
        document["coverage"]["source"] = (f"{document['coverage'].get('source', '')}; devices: "
                                          f"the device the kernel constants were measured on")
    report["fit_error_percent"] = errors
    busy = busy_host_warning(metadata)
    report["warnings"] = [*([busy] if busy else []), *implausible_constants(block, metadata)]
    return document, report


# The least fraction of the reference peak or bandwidth a fitted constant may claim: the
# built-in fits on GPU tables sit at 0.3-0.9 (perf/data/microbench_fits.yaml: attention
# plateaus, GEMM and streaming efficiencies), so 0.05 is a table of another device, not a
# slow GPU.
MIN_PLAUSIBLE_FRACTION = 0.05
# A kernel launch and a collective step take tenths of a microsecond at the least (CUDA launch
# latency is ~2-5 us, NCCL's per-step latencies 0.6-14 us: nccl src/graph/tuning.cc); a
# fitted latency under a sixth of the least of them is the fit's floor, not a measurement.
MIN_PLAUSIBLE_LATENCY_S = 1e-7
# a fitted value this close (relatively) to its fit bound sits on the bound
FIT_BOUND_TOLERANCE = 1e-3
# Fit error (MAPE, %) above which a family's table does not follow the model's shape and its
# constants are not written: about twice the worst the same fits reach on real GPU tables
# (benchmarks/bench_kernel_accuracy.py on the B200/H100 reference tables: dense GEMM
# 28.6-64.1% over 2..262144 per dimension, collectives 12.8% over all sizes). A busy CPU's
# 8 ms stalls gave a GEMM fit of 296% and collectives of 81%, whose constants made a B200
# job 3.65x slower (a trial).
MAX_FIT_ERROR_PERCENT = {"gemm": 130.0, "collectives": 40.0}


def implausible_constants(block: dict[str, Any], metadata: dict[str, Any]) -> list[str]:
    """Drop from ``block`` the fitted constants that cannot describe a GPU a job runs on, and
    say why: fractions of the reference peak or of HBM bandwidth above 1, latencies at the
    fit's floor, a GEMM K ramp below one element. The model keeps its built-in value for
    each (a CPU run wrote attention max_fraction 452 and perf applied it: a 3.2 s attention
    term became 0.01 s; a trial). Tables measured on a CPU are named too."""
    warnings: list[str] = []
    device = str(metadata.get("device_name", ""))
    if measured_on_cpu(metadata):
        warnings.append(f"the tables were measured on {device or 'a CPU'}: the constants "
                        "describe that CPU, so the file applies them to it alone (applies_to), "
                        "never to a GPU job; measure on the GPUs you plan for")
    errors = block.get("fit_error_percent") or {}
    for family, limit in MAX_FIT_ERROR_PERCENT.items():
        error = errors.get(family)
        if family in block and error is not None and error > limit:
            del block[family]
            warnings.append(f"{family} fit error {error:.0f}% MAPE is above {limit:.0f}% (about "
                            "twice the fit's error on real GPU tables): the table does not "
                            "follow the model's shape (a busy host's stalls?), so none of its "
                            "constants is written (the built-ins are kept); measure again on "
                            "an idle host")
    gemm = block.get("gemm") or {}
    collectives = block.get("collectives") or {}
    attention = block.get("attention") or {}
    # (label, container, key, why it is not physical) of every constant to check
    checks: list[tuple[str, dict[str, Any], str, str]] = [
        ("gemm max_fraction_of_peak", gemm, "max_fraction_of_peak", "above"),
        ("gemm max_fraction_of_peak", gemm, "max_fraction_of_peak", "below"),
        ("gemm hbm_efficiency", gemm, "hbm_efficiency", "above"),
        ("elementwise_hbm_efficiency", block, "elementwise_hbm_efficiency", "above"),
        ("elementwise_hbm_efficiency", block, "elementwise_hbm_efficiency", "below"),
        ("gemm k_half", gemm, "k_half", "k_ramp"),
        ("gemm kernel_latency_s", gemm, "kernel_latency_s", "floor"),
        *((f"collectives {k}", collectives, k, "floor")
          for k in list(collectives) if k.endswith("_latency_s")),
        *((f"collectives {k}", collectives, k, "above")
          for k in list(collectives) if k.endswith("_efficiency"))]
    gemm_dropped = False
    for label, container, key, rule in checks:
        value = container.get(key)
        if value is None:
            continue
        if rule == "above" and value > 1.0:
            why = f"{label} = {value:.3g} is above 1, faster than the reference peak"
        elif rule == "above" and value >= 1.0 - FIT_BOUND_TOLERANCE:
            why = f"{label} = {value:.6g} is at the fit's ceiling of 1, not a measured fraction"
        elif rule == "below" and value < MIN_PLAUSIBLE_FRACTION:
            why = (f"{label} = {value:.3g} is below {MIN_PLAUSIBLE_FRACTION:g} of the reference "
                   "rate, far under any GPU's measured fraction (the tables were not measured "
                   "on the reference device?)")
        elif rule == "floor" and value < MIN_PLAUSIBLE_LATENCY_S:
            why = f"{label} = {value:.3g} s is at the fit's floor (too few small shapes)"
        elif (key == "kernel_latency_s"
              and value >= GEMM_LATENCY_CEILING_S * (1.0 - FIT_BOUND_TOLERANCE)):
            why = (f"{label} = {value:.3g} s is at the fit's ceiling "
                   f"({GEMM_LATENCY_CEILING_S:g} s): the small GEMMs took far longer than any "
                   "launch (a busy host?)")
        elif rule == "k_ramp" and value < 1.0:
            why = f"{label} = {value:.3g} is a reduction shorter than one element"
        else:
            continue
        del container[key]
        gemm_dropped = gemm_dropped or container is gemm
        warnings.append(f"{why}: not a physical constant, not written (the built-in is kept)")
    # The GEMM constants are one least-squares fit (microbench_fit.fit_gemm): with one
    # dropped, the others absorbed its error, and a trial's file mixed three fitted values
    # with the built-in plateau. All or none are written.
    if gemm_dropped and gemm:
        warnings.append(f"gemm {', '.join(sorted(gemm))}: fitted jointly with the dropped "
                        "constant, so not written either (the built-ins are kept)")
        gemm.clear()
    for direction in list(attention):
        max_fraction, seq_half, head_dim_half = attention[direction]
        if max_fraction > 1.0:
            why = f"max_fraction = {max_fraction:.3g} is above 1, faster than the reference peak"
        elif max_fraction < MIN_PLAUSIBLE_FRACTION:
            why = (f"max_fraction = {max_fraction:.3g} is below {MIN_PLAUSIBLE_FRACTION:g} of "
                   "the reference peak, far under any GPU's measured fraction")
        elif min(seq_half, head_dim_half) < 1.0:  # a fit collapsed onto its bounds
            why = (f"half-points {seq_half:.3g} tokens and {head_dim_half:.3g} head dims are "
                   "shorter than one element")
        else:
            continue
        warnings.append(f"attention {direction} {why}: not a physical constant, not written "
                        "(the built-in is kept)")
        del attention[direction]
    for name in ("gemm", "collectives", "attention"):
        if name in block and not block[name]:
            del block[name]
    return warnings


def is_written(block: dict[str, Any], family: str, constant: str,
               report: dict[str, Any] | None = None) -> bool:
    """Whether a fitted constant of the report made it into the written file
    (:func:`implausible_constants` leaves some out of the ``microbench`` block): e.g.
    ('gemm', 'k_half'), ('attention', 'fwd.max_fraction'), ('elementwise',
    'elementwise_hbm_efficiency'); ('host', 'dispatch_gap_s') goes to the profile's
    constants where the report says so (not from a CPU)."""
    if family == "elementwise":
        return constant in block
    if family == "attention":
        return constant.split(".")[0] in (block.get("attention") or {})
    if family == "host":
        return bool((report or {}).get(constant, {}).get("written"))
    if family == "te_grouped":  # "fp8.fwd.fixed_s": the precision's lines
        return constant.split(".")[0] in (block.get("grouped_host_floor") or {})
    return constant in (block.get(family) or {})


def comparison_rows(report: dict[str, Any]) -> list[tuple[str, str, float, float]]:
    """(family, constant, built-in, fitted) for every constant with both values."""
    rows = []
    for family, entry in report.get("families", {}).items():
        fitted_values, builtin = entry.get("fitted", {}), entry.get("built_in", {})
        for key, value in fitted_values.items():
            if key not in builtin:
                continue
            if isinstance(value, list):
                for i, label in enumerate(("max_fraction", "seq_half_tokens", "head_dim_half")):
                    rows.append((family, f"{key}.{label}", float(builtin[key][i]),
                                 float(value[i])))
            else:
                rows.append((family, key, float(builtin[key]), float(value)))
    if "dispatch_gap_s" in report:
        rows.append(("host", "dispatch_gap_s", float(report["dispatch_gap_s"]["built_in"]),
                     float(report["dispatch_gap_s"]["fitted"])))
    return rows

