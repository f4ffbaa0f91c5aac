"""Pre-flight memory check: will a training job fit on this device before we allocate it?

A deliberately simple, conservative estimate per process (the planner's full memory model,
``mosaic.perf.memory``, needs a parallel plan and a software stack; the trainer's own
layout is fixed and simple):

* model states: fp32 parameters (4 B), fp32 gradients (4 B) and AdamW's two fp32 moments
  (8 B) = 16 B per parameter (Rajbhandari et al. 2020, ZeRO, Sec. 3.1, counts the same
  states; the trainer keeps fp32 master weights, paper Appendix A.1), divided over the
  processes by FSDP2, plus one all-gathered block per process;
* activations kept for the backward pass at ``run.micro_batch_seqs`` x ``run.seq_len``
  tokens, counted tensor by tensor for this trainer's blocks (method of Korthikanti et al.
  2022, "Reducing Activation Recomputation", Sec. 4.1), in the autocast element size;
* the logits: the LM head output plus its fp32 copy and the cross-entropy gradient.

It is compared with the free device memory (``torch.cuda.mem_get_info``) or, on CPU, the
``MemAvailable`` of ``/proc/meminfo`` (Linux; ``os.sysconf`` elsewhere), lowered to what the
limits on this process leave: its memory cgroup's (a container's, a Slurm job's ``--mem``,
whose excess the kernel's OOM killer ends without a message, while MemAvailable reads the
whole host's) and its address-space and data rlimits (``ulimit -v`` / ``-d``: torch then
fails to allocate mid-step; a trial's job under ``ulimit -v 4000000`` passed against 21 GiB
of MemAvailable and died after 30 s as an internal error). Each process builds
the whole fp32 model before FSDP2 shards it, so its peak is at least that; on CPU the
processes torchrun starts on one host (``LOCAL_WORLD_SIZE``) share its memory, so the host
must hold all of them (a trial's two processes passed one by one and together needed more
than the host had).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from mosaic.arch import count_parameters
from mosaic.arch.geometry import Geometry
from mosaic.errors import MosaicInputError
from mosaic.units import FP32_BYTES, GIB

try:
    import resource  # POSIX only
except ImportError:  # Windows: no rlimits to read
    resource = None  # type: ignore[assignment]

MODEL_STATE_BYTES_PER_PARAM = 16  # fp32 weight + fp32 grad + AdamW m and v (ZeRO Sec. 3.1)
# Headroom for what the estimate leaves out (allocator fragmentation, temporaries of the
# optimizer step, the CUDA context or the Python process itself).
SAFETY_FACTOR = 1.2
_MEMINFO = Path("/proc/meminfo")
_PROC_STATUS = Path("/proc/self/status")
_PROC_CGROUP = Path("/proc/self/cgroup")
_CGROUP_ROOT = Path("/sys/fs/cgroup")
# rlimits on this process's memory and the /proc/self/status line of what it already uses
# (getrlimit(2): RLIMIT_AS bounds the virtual address space, VmSize; RLIMIT_DATA, since
# Linux 4.7, the data segment and private anonymous mappings, VmData; proc(5))
_RLIMITS = ((getattr(resource, "RLIMIT_AS", None), "VmSize", "ulimit -v (RLIMIT_AS)"),
            (getattr(resource, "RLIMIT_DATA", None), "VmData", "ulimit -d (RLIMIT_DATA)"))
# cgroup files: (limit, usage, the memory.stat key of reclaimable inactive page cache) for
# cgroup v2 (Documentation/admin-guide/cgroup-v2.rst) and v1 (cgroup-v1/memory.rst)
_CGROUP_FILES = {2: ("memory.max", "memory.current", "inactive_file"),
                 1: ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")}


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes one process needs for a job, by part."""

    params: int
    model_state_bytes: float
    activation_bytes: float
    logits_bytes: float

    @property
    def total_bytes(self) -> float:
        return self.model_state_bytes + self.activation_bytes + self.logits_bytes

    @property
    def init_bytes(self) -> float:
        """The whole fp32 model each process builds before FSDP2 shards it."""
        return FP32_BYTES * self.params

    @property
    def peak_bytes(self) -> float:
        """The larger of the training step's bytes and the unsharded model at start-up."""
        return max(self.total_bytes, self.init_bytes)


def _layer_activation_elements(geometry: Geometry, moe_layer: bool) -> float:
    """Elements saved for backward per token in one block (tensors of model.py's Block)."""
    d, heads, kv, hd = geometry.d_model, geometry.heads, geometry.kv_heads, geometry.head_dim
    # Attention: norm input and output, q/k before and after RoPE, v, SDPA output and the
    # o_proj input (a reshaped copy), the head gate.
    attention = 2 * d + 2 * (heads + kv) * hd + kv * hd + 2 * heads * hd
    attention += heads if geometry.gated_attention else 0
    if not moe_layer or geometry.moe is None:
        # SwiGLU: norm input and output, W1 x, W3 x, silu(W1 x), their product (W2 input).
        return attention + 2 * d + 4 * geometry.ffn
    moe = geometry.moe
    k, width = moe.top_k, moe.expert_ffn
    routed = 3 * k * d + 4 * k * width  # gathered inputs, outputs, weighted outputs; SwiGLU
    shared = 4 * moe.shared_total_width
    return attention + 2 * d + routed + shared


def estimate_training_memory(geometry: Geometry, micro_batch_seqs: int, seq_len: int,
                             element_bytes: int, world_size: int = 1) -> MemoryEstimate:
    """Per-process training memory of ``geometry`` at one micro-batch (see module doc)."""
    counts = count_parameters(geometry)
    params = int(counts.n_total + counts.n_embedding)
    world = max(1, world_size)
    per_block = counts.n_total / max(1, geometry.layers)
    gathered = 0 if world == 1 else per_block * FP32_BYTES
    states = MODEL_STATE_BYTES_PER_PARAM * params / world + gathered
    tokens = micro_batch_seqs * seq_len
    per_token = sum(_layer_activation_elements(geometry, geometry.is_moe_layer(i))
                    for i in range(geometry.layers)) * element_bytes
    # Router logits and sigmoid scores, fp32 (Algorithm 1), per MoE layer.
    experts = geometry.moe.experts if geometry.moe is not None else 0
    moe_layers = sum(geometry.is_moe_layer(i) for i in range(geometry.layers))
    per_token += moe_layers * 2 * experts * FP32_BYTES
    per_token += geometry.d_model * element_bytes * 3  # embedding output, final norm in/out
    activations = per_token * tokens
    # LM head output (autocast dtype), its fp32 copy for the loss, the softmax gradient.
    logits = tokens * geometry.vocab * (element_bytes + 2 * FP32_BYTES)
    return MemoryEstimate(params, states, activations, logits)


def available_memory_bytes(device_type: str, device_index: int | None = None
                           ) -> tuple[float, str] | None:
    """(free bytes, where it was read) for a device, or None when it cannot be read; on
    CPU the host's available memory lowered to what this process's cgroup and rlimits
    leave it (see the module doc)."""
    if device_type == "cuda":
        import torch

        free, _ = torch.cuda.mem_get_info(device_index)
        return float(free), "free CUDA memory (torch.cuda.mem_get_info)"
    found = [one for one in (_host_available(), _cgroup_headroom(), *_rlimit_headroom())
             if one is not None]
    return min(found, key=lambda one: one[0]) if found else None


def _host_available() -> tuple[float, str] | None:
    """The host's available memory: MemAvailable (Linux), else sysconf's free pages."""
    available = _proc_kb_line(_MEMINFO, "MemAvailable")
    if available is not None:
        return available, "MemAvailable in /proc/meminfo"
    try:
        pages = os.sysconf("SC_AVPHYS_PAGES")
        size = os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return None
    return float(pages * size), "available physical pages (sysconf)"


def _proc_kb_line(path: Path, key: str) -> float | None:
    """The ``key:  N kB`` line of a /proc file (meminfo's MemAvailable, status's VmSize and
    VmData; proc(5)) in bytes; None where the file or the line cannot be read."""
    try:
        for line in path.read_text().splitlines():
            if line.startswith(f"{key}:"):
                return float(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _rlimit_headroom() -> list[tuple[float, str]]:
    """What each finite memory rlimit leaves this process: the limit less what it uses."""
    found = []
    for limit_kind, status_key, name in _RLIMITS:
        if limit_kind is None or resource is None:
            continue
        soft, _ = resource.getrlimit(limit_kind)
        used = _proc_kb_line(_PROC_STATUS, status_key)
        if soft == resource.RLIM_INFINITY or used is None:
            continue
        found.append((max(0.0, soft - used),
                      f"{name} {_gb(soft)} less the process's {status_key}"))
    return found


def _cgroup_number(path: Path) -> float | None:
    """A cgroup file's byte count; None for 'max' (no limit) or an unreadable file."""
    try:
        text = path.read_text().strip()
        return None if text == "max" else float(text)
    except (OSError, ValueError):
        return None


def _cgroup_headroom() -> tuple[float, str] | None:
    """The least any memory cgroup holding this process leaves it: limit less the working
    set, usage less inactive page cache (the kernel reclaims that before its OOM killer;
    Kubernetes' kubelet evicts on the same working set). The process's cgroup and each
    ancestor visible under /sys/fs/cgroup are read (a container sees its own at the root)."""
    try:
        lines = _PROC_CGROUP.read_text().splitlines()
    except OSError:
        return None
    best: tuple[float, str] | None = None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            version, mount = 2, _CGROUP_ROOT
        elif "memory" in parts[1].split(","):
            version, mount = 1, _CGROUP_ROOT / "memory"
        else:
            continue
        limit_file, usage_file, inactive_key = _CGROUP_FILES[version]
        relative = Path(parts[2].lstrip("/"))
        for folder in [mount / relative, *(mount / p for p in relative.parents)]:
            limit = _cgroup_number(folder / limit_file)
            usage = _cgroup_number(folder / usage_file)
            if limit is None or usage is None:
                continue
            working = usage - _memory_stat(folder / "memory.stat", inactive_key)
            headroom = max(0.0, limit - max(0.0, working))
            if best is None or headroom < best[0]:
                best = (headroom, f"{folder / limit_file} {_gb(limit)} less the cgroup's "
                                  "working set")
    return best


def _memory_stat(path: Path, key: str) -> float:
    """One counter of a cgroup's memory.stat (bytes); 0 when absent."""
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return float(value)
    except (OSError, ValueError):
        pass
    return 0.0


def _gb(value: float) -> str:
    """Bytes in GiB, as every other memory figure of mosaic prints them."""
    return f"{value / GIB:.3g} GiB"


def processes_sharing_memory(device_type: str) -> int:
    """Processes whose memory this one's device shares: on CPU every process torchrun
    started on this host (``LOCAL_WORLD_SIZE``), on a GPU none but itself."""
    if device_type != "cpu":
        return 1
    try:
        return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    except ValueError:
        return 1


def check_training_memory(estimate: MemoryEstimate, available: tuple[float, str] | None,
                          device: str, micro_batch_seqs: int, seq_len: int,
                          processes: int = 1) -> None:
    """Raise a one-line MosaicInputError when the job cannot fit (exit status 2):
    ``processes`` (:func:`processes_sharing_memory`) each at the estimate's peak."""
    if available is None:
        return
    free, source = available
    per_process = estimate.peak_bytes * SAFETY_FACTOR
    if per_process * processes <= free:
        return
    shared = (f" x {processes} processes on this host (they share its memory)"
              if processes > 1 else "")
    start_up = (f"; the whole model, {_gb(estimate.init_bytes)}, is built before sharding"
                if estimate.init_bytes > estimate.total_bytes else "")
    # more processes shard the states of GPUs, each with its own memory, not a CPU host's
    more = "" if device.startswith("cpu") else ", more processes (torchrun shards the states)"
    # one sequence a micro-batch already: only a shorter one takes less (a trial's
    # seq_len 10**7 was told to lower micro_batch_seqs 1)
    shorter = ("a smaller run.micro_batch_seqs" if micro_batch_seqs > 1
               else "a shorter run.seq_len")
    raise MosaicInputError(
        f"the job does not fit in memory: estimated {_gb(per_process)} per process"
        f"{shared} ({_gb(estimate.model_state_bytes)} fp32 weights, gradients and AdamW "
        f"state for {estimate.params / 1e9:.3g} B parameters, "
        f"{_gb(estimate.activation_bytes)} activations and {_gb(estimate.logits_bytes)} "
        f"logits at run.micro_batch_seqs {micro_batch_seqs} x run.seq_len {seq_len}"
        f"{start_up}, x{SAFETY_FACTOR} headroom) > {_gb(free)} available on {device} "
        f"({source}); use a smaller model (e.g. examples/ladder_tiny.yaml), "
        f"{shorter}, a GPU{more}, or set run.memory_check: false")
