"""What a run measured on: device, software versions, clocks, power, topology.

``fingerprint`` keeps the fields that change what a kernel or collective costs (device,
driver, CUDA/ROCm, cuDNN, NCCL, torch, host, world size, power limit); its hash is the
``metadata_id`` every result row carries, so a rerun with the same fingerprint skips the
rows it already has and a run after a driver upgrade measures anew. Clocks, temperatures
and power draw are recorded but vary from run to run, so they are not in the fingerprint.
nvidia-smi query fields: ``nvidia-smi --help-query-gpu``
(https://docs.nvidia.com/deploy/nvidia-smi/index.html).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import socket
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

SMI_FIELDS = ("name", "driver_version", "clocks.sm", "clocks.max.sm", "clocks.mem",
              "clocks.max.mem", "power.limit", "power.draw", "temperature.gpu",
              "persistence_mode", "pstate")
FINGERPRINT_FIELDS = ("device_name", "device_count", "driver_version", "cuda_version",
                      "hip_version", "cudnn_version", "nccl_version", "torch_version",
                      "hostname_hash", "world_size", "power_limit_w", "backend")


# How the bench names a CPU it measured on: cpu:MODEL, the processor's model name where the
# system gives one, else its architecture (no catalog device has such a name)
CPU_DEVICE_PREFIX = "cpu:"
CPUINFO = Path("/proc/cpuinfo")


def is_cpu_device_name(name: str) -> bool:
    """Whether a bench device name is a CPU's: it begins with 'cpu' (the bench writes
    :data:`CPU_DEVICE_PREFIX` and the CPU's model, :func:`cpu_model`)."""
    return name.lower().startswith("cpu")


def cpu_model(cpuinfo_text: str | None = None) -> str:
    """The processor's model name: Linux's /proc/cpuinfo 'model name' (x86) or 'Model'
    (Arm boards), else what Python's platform module gives (often only the architecture,
    'x86_64': a trial found two different CPUs' tables under that one name)."""
    if cpuinfo_text is None:
        try:
            cpuinfo_text = CPUINFO.read_text(errors="replace")
        except OSError:
            cpuinfo_text = ""
    for key in ("model name", "Model"):
        match = re.search(rf"^{key}\s*:\s*(\S.*?)\s*$", cpuinfo_text, flags=re.M)
        if match:
            return re.sub(r"\s+", " ", match.group(1))
    return platform.processor() or platform.machine() or "unknown"


def hostname_hash(name: str | None = None) -> str:
    """First 12 hex digits of SHA-256 of the host name (identifies a host, reveals nothing)."""
    return hashlib.sha256((name or socket.gethostname()).encode()).hexdigest()[:12]


def _run(command: list[str], timeout_s: float = 20.0) -> str | None:
    if shutil.which(command[0]) is None:
        return None
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s,
                              check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def nvidia_smi(index: int = 0) -> dict[str, str]:
    """The SMI_FIELDS of GPU ``index`` as strings, {} without nvidia-smi."""
    out = _run(["nvidia-smi", f"--id={index}", f"--query-gpu={','.join(SMI_FIELDS)}",
                "--format=csv,noheader,nounits"])
    if not out:
        return {}
    values = [v.strip() for v in out.strip().splitlines()[0].split(",")]
    return dict(zip(SMI_FIELDS, values, strict=False))


def topology() -> str | None:
    """``nvidia-smi topo -m`` (NVLink/PCIe/NIC matrix), or ``rocm-smi --showtopo``."""
    return _run(["nvidia-smi", "topo", "-m"]) or _run(["rocm-smi", "--showtopo"])


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text not in (None, "", "[N/A]", "N/A") else None
    except ValueError:
        return None


def collect(device: Any, world_size: int = 1, backend: str | None = None) -> dict[str, Any]:
    """Metadata of the current process's device and software (torch imported here)."""
    import torch

    from mosaic import __version__

    meta: dict[str, Any] = {
        "created_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "mosaic_version": __version__,
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "platform": platform.platform(),
        "hostname_hash": hostname_hash(),
        "cpu": platform.processor() or platform.machine(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "load_average_1m": _load_average(),
        "torch_threads": torch.get_num_threads(),
        "device_type": device.type,
        "world_size": world_size,
        "backend": backend,
        "cuda_version": torch.version.cuda,
        "hip_version": getattr(torch.version, "hip", None),
        "cudnn_version": None,
        "nccl_version": None,
        "driver_version": None,
        "power_limit_w": None,
    }
    if device.type == "cuda":
        index = device.index or 0
        props = torch.cuda.get_device_properties(index)
        meta.update({
            "device_name": props.name,
            "device_count": torch.cuda.device_count(),
            "compute_capability": f"{props.major}.{props.minor}",
            "sm_count": props.multi_processor_count,
            "device_memory_bytes": props.total_memory,
            "cudnn_version": torch.backends.cudnn.version(),
        })
        try:
            version = torch.cuda.nccl.version()
            meta["nccl_version"] = ".".join(map(str, version)) if isinstance(
                version, tuple) else str(version)
        except (AttributeError, RuntimeError):
            pass
        smi = nvidia_smi(index)
        meta["nvidia_smi"] = smi
        meta["driver_version"] = smi.get("driver_version")
        meta["power_limit_w"] = _float(smi.get("power.limit"))
        meta["topology"] = topology()
    else:
        meta.update({"device_name": f"{CPU_DEVICE_PREFIX}{meta['cpu_model']}",
                     "device_count": 1})
    # a CPU's timings depend on the threads torch computes with (bench --threads): part of
    # what a rerun must match to skip measured cases
    fields = FINGERPRINT_FIELDS + (("torch_threads",) if device.type == "cpu" else ())
    meta["fingerprint"] = {k: meta.get(k) for k in fields}
    meta["metadata_id"] = metadata_id(meta["fingerprint"])
    return meta


def _load_average() -> float | None:
    """The host's 1-minute load average before the run (None where the OS has none)."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def busy_host_warning(metadata: dict[str, Any]) -> str | None:
    """A warning when other work kept every CPU core busy as the run started (load average
    at or above the core count): timings then vary from run to run (a trial's CPU element-
    wise kernels moved 100-1000x between runs on a loaded machine), which a fit takes as
    given."""
    load, cores = metadata.get("load_average_1m"), metadata.get("cpu_count")
    if load is None or not cores or load < cores:
        return None
    return (f"the host was busy when the bench started (load average {load:g} on {cores} "
            "cores): other processes share its CPUs, so timings may vary between runs")


def metadata_id(fingerprint: dict[str, Any]) -> str:
    """Stable 12-hex-digit id of a fingerprint (sorted JSON, SHA-256)."""
    text = json.dumps(fingerprint, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]
