"""The hardware numbers the time model reads, resolved once from a catalog cluster."""

from __future__ import annotations

from dataclasses import dataclass, replace

from mosaic.errors import MosaicInputError
from mosaic.hardware import Cluster, Device, shipped_catalog
from mosaic.hardware.system import job_domain_gpus
from mosaic.perf.attention_kernels import gpu_generation, sfu_exp_time_ratio
from mosaic.perf.collectives import BusBandwidthTable, Interconnect, ll_max_bus_bw_bytes_per_s
from mosaic.perf.fitted_constants import fitted
from mosaic.perf.kernels import (
    DEFAULT_GEMM,
    FLASH_ATTENTION_EFFICIENCY,
    SM_COUNT,
    AttentionEfficiency,
    GemmParams,
    GemmTable,
    GroupedGemmTable,
    device_fit_key,
    exp_rescaled_attention_efficiency,
    fp8_attention_efficiency,
)
from mosaic.perf.workload import Dispatcher, Fp8Recipe, Precision, precision_lane
from mosaic.stacks import get_stack
from mosaic.stacks.registry import OTHER_STACK
from mosaic.units import GIB

# Streaming multiprocessors assumed for a device whose catalog entry states no count and
# whose kernel fits list none: the H100 SXM5's 132 (NVIDIA H100 Tensor Core GPU Architecture
# whitepaper; perf/data/microbench_fits.yaml sm_count). Only the tile-quantisation
# granularity of the GEMM model depends on it.
DEFAULT_SM_COUNT = 132


@dataclass(frozen=True)
class MeasuredTables:
    """Microbenchmark tables a user measured on their cluster (each optional)."""

    gemm: GemmTable | None = None
    grouped_gemm: GroupedGemmTable | None = None
    collectives: BusBandwidthTable | None = None


# A measured rate this far above the dense datasheet peak is not a timing (times in another
# unit, or a table of another device); a little above allows clock boost and timer noise.
MAX_MEASURED_FRACTION_OF_PEAK = 1.05
# A GEMM of at least this many FLOPs (a 4096^3 GEMM is 1.4e11) runs at well over a tenth of
# any GPU's peak (the built-in fits' plateaus are 0.7 of it, perf/data/microbench_fits.yaml);
# under 1% of the peak at that size, the times are likely milliseconds read as seconds.
LARGE_GEMM_FLOPS = 1e11
MIN_LARGE_GEMM_FRACTION_OF_PEAK = 0.01


def check_measured_rates(tables: MeasuredTables, device: Device, fields: dict[str, str],
                         dtypes: set[str]) -> list[str]:
    """MosaicInputError for a measured GEMM table whose times imply FLOP/s above the
    device's dense datasheet peak (a trial's table with times divided by 1e6 was used as
    'measured'); warning lines for one whose large GEMMs run under 1% of it (times in
    milliseconds?). Only the rows of ``dtypes``, those the job reads, are judged (fp32 rows
    timed with TF32 on run above the fp32 peak, and no job reads them). ``fields`` names
    each table as the job does, by its field (gemm_table, grouped_gemm_table)."""
    warnings_out = []
    for key, table in (("gemm_table", tables.gemm),
                       ("grouped_gemm_table", tables.grouped_gemm)):
        if table is None:
            continue
        for dtype, (rate, row, flops) in table.fastest_flops_per_s().items():
            if dtype not in dtypes:
                continue
            lane = precision_lane(dtype)
            if lane not in device.peak_flops_per_s:
                continue
            fraction = rate / device.peak_flops_per_s[lane]
            if fraction > MAX_MEASURED_FRACTION_OF_PEAK:
                raise MosaicInputError(
                    f"{fields[key]} row {row}: {dtype} at {rate:.3g} FLOP/s, {fraction:.3g}x "
                    f"the {device.name}'s dense {lane} datasheet peak; time_s must be seconds "
                    "measured on this GPU")
            if flops >= LARGE_GEMM_FLOPS and fraction < MIN_LARGE_GEMM_FRACTION_OF_PEAK:
                warnings_out.append(
                    f"{fields[key]}: its fastest large {dtype} GEMM (row {row}) runs at "
                    f"{fraction:.2%} of the {device.name}'s datasheet peak: are its times in "
                    "seconds?")
    return warnings_out


# Generations the catalog accepts that no kernel table or stack recipe has entries for.
GENERIC_DEFAULT_ARCHITECTURES = frozenset({"ada"})


@dataclass(frozen=True)
class Machine:
    """Per-GPU peak rates, memory and links of the cluster a job runs on.

    Attributes:
        gemm_peak_flops_per_s: dense datasheet peak of the GEMM precision.
        mfu_peak_flops_per_s: dense bf16 datasheet peak, the MFU denominator (GUIDE.md).
        attention_peak_flops_per_s: dense bf16 peak (attention runs in bf16). Not scaled by
            :func:`borrowed_fit_rate_scale`: measured cuDNN attention keeps the datasheet
            ratio across Blackwell parts (docs/evidence/borrowed_kernel_fits.md).
        gemm_rate_scale: :func:`borrowed_fit_rate_scale` of the GEMM lane; the fitted GEMM
            efficiency applies to ``gemm_rate_flops_per_s``.
        bf16_rate_scale: the same in bf16, for the GEMMs that stay in bf16 whatever the
            recipe (the output layer, the router): ``bf16_gemm_rate_flops_per_s``.
        host_link_bw_bytes_per_s: the device's link to its host, one direction (catalog);
            None where the catalog does not state it.
    """

    device_name: str
    n_devices: int
    gpus_per_node: int
    hbm_bytes: float
    hbm_bw_bytes_per_s: float
    sm_count: int
    gemm_peak_flops_per_s: float
    mfu_peak_flops_per_s: float
    attention_peak_flops_per_s: float
    attention_fwd: AttentionEfficiency
    attention_bwd: AttentionEfficiency
    interconnect: Interconnect
    usable_memory_fraction: float = 1.0  # share of HBM a plan may fill (policy, not physics)
    gemm_table: GemmTable | None = None  # measured dense GEMM times, used where they cover
    grouped_gemm_table: GroupedGemmTable | None = None  # measured grouped expert GEMMs
    gemm_params: GemmParams = DEFAULT_GEMM  # GEMM model constants (measured: microbench)
    gemm_rate_scale: float = 1.0
    bf16_rate_scale: float = 1.0
    host_link_bw_bytes_per_s: float | None = None

    @property
    def gemm_rate_flops_per_s(self) -> float:
        """The rate the fitted GEMM efficiency applies to: the GEMM lane's datasheet peak
        times ``gemm_rate_scale``."""
        return self.gemm_peak_flops_per_s * self.gemm_rate_scale

    @property
    def bf16_gemm_rate_flops_per_s(self) -> float:
        """The rate the fitted GEMM efficiency applies to for a bf16 GEMM: the dense bf16
        datasheet peak times ``bf16_rate_scale``."""
        return self.mfu_peak_flops_per_s * self.bf16_rate_scale

    @property
    def gemm_lane_peak_ratio(self) -> float:
        """The GEMM lane's dense datasheet peak over the bf16 one MFU counts against (2 for
        FP8, 4-6 for NVFP4 on Blackwell, 1 for bf16): the most MFU can reach."""
        return self.gemm_peak_flops_per_s / self.mfu_peak_flops_per_s


# Architectures whose tensor cores run MXFP8 and NVFP4 block-scaled GEMMs: Transformer
# Engine's check_mxfp8_support and check_nvfp4_support need compute capability 10.0
# (transformer_engine/pytorch/quantization.py @ v2.9: "Device compute capability 10.0 or
# higher required for MXFP8").
BLOCK_SCALED_ARCHITECTURES = frozenset({"blackwell"})


def check_precision_on_device(device: Device, precision: Precision,
                              fp8_recipe: Fp8Recipe | None = None) -> None:
    """Refuse a GEMM precision the device cannot run: block-scaled NVFP4 and MXFP8 need
    Blackwell; any other lane needs the device's peak for it."""
    if precision is Precision.FP4 and device.architecture not in BLOCK_SCALED_ARCHITECTURES:
        raise MosaicInputError(
            f"precision nvfp4 needs a Blackwell GPU (NVFP4 block-scaled GEMMs need compute "
            f"capability 10.0, Transformer Engine check_nvfp4_support); {device.name} is "
            f"{device.architecture or 'not Blackwell'}")
    if str(precision) not in device.dtypes:
        # led by the setting, as the block-scaled refusals above are: the studio and the
        # plan form show a message beside the field it names first (a trial found this one
        # above the form, beside no field)
        raise MosaicInputError(f"precision {precision}: device {device.name} has no "
                               f"{precision} peak; it supports {', '.join(device.dtypes)}")
    if fp8_recipe is Fp8Recipe.MXFP8 and device.architecture not in BLOCK_SCALED_ARCHITECTURES:
        raise MosaicInputError(
            f"precision mxfp8 needs a Blackwell GPU (MXFP8 block-scaled GEMMs need compute "
            f"capability 10.0, Transformer Engine check_mxfp8_support); {device.name} is "
            f"{device.architecture or 'not Blackwell'}: use fp8 (per-tensor or blockwise "
            "scaling) there")


# Architectures with the Tensor Memory Accelerator that HybridEP's NVLink kernels move
# tokens with: deepseek-ai/DeepEP docs/README_Hybrid-EP.md @ 5fbafce ("NVLink-optimized data
# transfer using Tensor Memory Accelerator (TMA) instructions", built for
# TORCH_CUDA_ARCH_LIST "9.0 10.0"); TMA first shipped with Hopper (compute capability 9.0).
# DeepEP's own kernels need no gate: its V1 lists Ampere (SM80) among its requirements
# (docs/legacy.md @ 0297fc8).
TMA_ARCHITECTURES = frozenset({"hopper", "blackwell"})


def dispatcher_refusal(device_name: str, dispatcher: Dispatcher,
                       named: str = "dispatcher") -> str | None:
    """Why ``dispatcher`` cannot run on the catalog device ``device_name``, or None: HybridEP
    needs a GPU with TMA. A device that states no architecture is not refused. ``named``:
    the setting as the user gave it (a job's dispatcher, a plan's --dispatcher)."""
    if dispatcher is not Dispatcher.HYBRIDEP:
        return None
    architecture = gpu_generation(device_name)
    if architecture is None or architecture in TMA_ARCHITECTURES:
        return None
    return (f"{named} hybridep on {device_name} ({architecture}): HybridEP's kernels use "
            "the Tensor Memory Accelerator of Hopper and Blackwell GPUs (DeepEP "
            "docs/README_Hybrid-EP.md); use deepep or alltoall there")


def stack_dispatcher_refusal(stack: str, dispatcher: Dispatcher,
                             named: str = "dispatcher") -> str | None:
    """Why ``stack`` cannot run ``dispatcher``, or None: a deduplicating dispatcher (DeepEP,
    HybridEP) the stack has no path to (trait ``moe_flex_dispatchers``: torchtitan's
    expert_parallel_comm_backend offers "standard" or "deepep" only, config/job_config.py @
    1a36996b8). The 'other' stack, an unknown one, is not refused."""
    if dispatcher is Dispatcher.ALLTOALL or stack == OTHER_STACK:
        return None
    runs = get_stack(stack).moe_flex_dispatchers
    if dispatcher.value in runs:
        return None
    offered = ", ".join(("alltoall", *runs))
    return (f"{named} {dispatcher.value} on stack {stack}: the stack has no "
            f"{dispatcher.value} path (docs/stacks.md, trait moe_flex_dispatchers); it "
            f"runs {offered}")


def check_dispatcher_runs(device_name: str, stack: str, dispatcher: Dispatcher, moe: bool,
                          named: str = "dispatcher") -> None:
    """Refuse an MoE's EP dispatcher the device (:func:`dispatcher_refusal`) or the stack
    (:func:`stack_dispatcher_refusal`) cannot run; a dense model dispatches no tokens. One
    check for a job, its export and a plan."""
    if not moe:
        return
    refusal = (dispatcher_refusal(device_name, dispatcher, named)
               or stack_dispatcher_refusal(stack, dispatcher, named))
    if refusal is not None:
        raise MosaicInputError(refusal)


def _achieved_fraction(device: Device, dtype: str) -> float | None:
    """Measured best large-GEMM rate over the datasheet peak (the catalog's MAMF), or None."""
    achieved = device.achievable_flops_per_s_for(dtype)
    return None if achieved is None else achieved / device.peak_flops_per_s_for(dtype)


# The devices the analytical GEMM plateau (kernels.gemm_max_fraction_of_peak) was fitted on
# (data/microbench_fits.yaml gemm_plateau_fit_devices). A device with no kernel fits of its
# own and no kernel_fit borrows that plateau from them.
ANALYTICAL_GEMM_FIT_DEVICES: tuple[str, ...] = tuple(fitted("kernels",
                                                            "gemm_plateau_fit_devices"))


def _analytical_fit_fraction(dtype: str) -> float | None:
    """Mean measured large-GEMM rate over datasheet peak of the analytical plateau's fit
    devices in ``dtype`` (None where either lacks the measurement)."""
    fractions = []
    for name in ANALYTICAL_GEMM_FIT_DEVICES:
        fraction = _achieved_fraction(_fitted_device(name), dtype)
        if fraction is None:
            return None
        fractions.append(fraction)
    return sum(fractions) / len(fractions)


def least_step_multiplier(dtype: str = "bf16") -> float:
    """The smallest stack step multiplier that keeps the analytical GEMM plateau
    (kernels.gemm_max_fraction_of_peak of the datasheet peak) at or below the best measured
    GEMM rate (the catalog's ``achievable_flops_per_s``, stas00/ml-engineering MAMF) of every
    device it was fitted on: a multiplier scales every term, the GEMMs too, so one below
    this runs them faster than any measured GEMM (a trial's two-run fit of 0.80 put an
    H200's shared-expert GEMMs at 105% of MAMF). 0 where no fit device states the rate."""
    fractions = [fraction for name in ANALYTICAL_GEMM_FIT_DEVICES
                 if (fraction := _achieved_fraction(_fitted_device(name), dtype)) is not None]
    return DEFAULT_GEMM.max_fraction_of_peak / min(fractions) if fractions else 0.0


def _fitted_device(name: str) -> Device:
    """The shipped device whose measurements a kernel fit was made on: a user catalog that
    replaces, say, H100 does not change what the H100 fits were measured on."""
    return shipped_catalog().device(name)


def has_own_kernel_fits(device: Device) -> bool:
    """Whether ``device`` runs measured kernel fits: its own (a fitted device) or, through
    ``kernel_fit``, another's; else the analytical kernel model and generic attention. A
    ``kernel_fit`` naming a device without fits (an MI300X, a user's own entry) gives none."""
    return (device.kernel_fit or device.name).upper() in SM_COUNT


def borrowed_fit_rate_scale(device: Device, dtype: str) -> float:
    """How fast ``device`` runs compute-bound kernels costed with another device's fits
    (``kernel_fit``, e.g. a GB200 with the B200's), relative to the datasheet-peak ratio the
    fits would otherwise carry over: its measured large-GEMM rate over its datasheet peak,
    divided by the same for the fit device (stas00/ml-engineering MAMF table, the catalog's
    ``achievable_flops_per_s``). A GB200's datasheet bf16 peak is 1.11x a B200's, its
    measured rate 1.044x (1822 vs 1745 TFLOP/s): the part runs at clocks its datasheet
    figure does not reach. A lane measured on neither device takes the bf16 ratio (one
    clock for all tensor-core lanes); 1 for a device with its own fits, or where either
    device has no measurement.

    A device with no fits at all (no ``kernel_fit``, e.g. a user's power-capped part or an
    MI300X) borrows the analytical plateau, fitted on :data:`ANALYTICAL_GEMM_FIT_DEVICES`:
    its measured fraction over theirs (their mean), so a measured rate is never ignored."""
    if not has_own_kernel_fits(device):
        def reference_fraction(lane: str) -> float | None:
            return _analytical_fit_fraction(lane)
    elif device.kernel_fit is None or device.kernel_fit.upper() == device.name.upper():
        return 1.0
    else:
        reference = _fitted_device(device.kernel_fit)

        def reference_fraction(lane: str) -> float | None:
            return _achieved_fraction(reference, lane)
    for lane in (dtype, "bf16"):
        own, fitted_on = _achieved_fraction(device, lane), reference_fraction(lane)
        if own is not None and fitted_on is not None:
            return own / fitted_on
    return 1.0


def device_model_notes(device: Device, dtype: str = "bf16") -> list[str]:
    """What the model takes for a device that states neither fits nor a generation: one
    line each, for the job's assumptions (a user catalog entry without ``kernel_fit`` or
    ``architecture`` was costed on generic defaults without a word; a trial). ``dtype``: the
    job's GEMM lane, whose rate the lines quote (:func:`machine_for` costs the GEMMs at
    ``borrowed_fit_rate_scale(device, dtype)``; an FP8 job on a GB300 was told the B200's
    bf16 share, 0.776, where its GEMMs run at the FP8 one, 0.763: a review)."""
    notes = []
    if not has_own_kernel_fits(device):
        scale = borrowed_fit_rate_scale(device, dtype)
        fit_devices = " and ".join(ANALYTICAL_GEMM_FIT_DEVICES)
        rate = (f"at the analytical plateau of {fit_devices} (no achievable_flops_per_s "
                "to scale it)" if scale == 1.0 else
                f"at the analytical plateau of {fit_devices} scaled by its measured "
                f"achievable rate ({scale:.3f}x)")
        named = ("names no kernel_fit" if device.kernel_fit is None else
                 f"its kernel_fit ({device.kernel_fit}) has none")
        notes.append(f"device {device.name} has no kernel fits and {named}: "
                     f"GEMMs {rate}, attention at the generic flash-attention efficiency; "
                     f"set kernel_fit ({', '.join(SM_COUNT)}) in its catalog entry to use the "
                     "nearest device's measured fits (docs/hardware.md)")
    elif not device.achievable_flops_per_s:
        fit = _fitted_device(device.kernel_fit or device.name)
        # the lane the GEMMs run on, else bf16 where the fit device has no measurement in
        # it (borrowed_fit_rate_scale's fallback: one clock for every tensor-core lane)
        lane, fraction = next(((lane, fraction) for lane in (dtype, "bf16")
                               if (fraction := _achieved_fraction(fit, lane)) is not None),
                              (dtype, None))
        if fit.name != device.name and fraction is not None:
            notes.append(
                f"device {device.name} is costed with {fit.name}'s measured kernel fits "
                f"(kernel_fit) and states no achievable_flops_per_s: its GEMMs are taken to "
                f"reach the share of its datasheet peak that {fit.name}'s do ({fraction:.3f} "
                f"in {lane}, MAMF); state its measured large-GEMM rate to rescale them "
                "(docs/hardware.md)")
    if device.architecture is None:
        notes.append(f"device {device.name} states no architecture: the generic defaults "
                     "for the attention kernel and its rate, NCCL protocol caps and a stack's "
                     "MoE dispatcher; set architecture (ampere, ada, hopper, blackwell, cdna3) "
                     "in its catalog entry")
    elif device.architecture in GENERIC_DEFAULT_ARCHITECTURES:
        notes.append(f"device {device.name}: no published attention-kernel rates or stack "
                     f"defaults for {device.architecture} GPUs, so the generic ones (the "
                     "attention kernel at cuDNN's rate, Hopper's NCCL protocol caps, the "
                     "pairwise all-to-all)")
    return notes


def machine_for(cluster: Cluster, precision: Precision,
                usable_memory_fraction: float = 1.0,
                tables: MeasuredTables | None = None, *,
                fp8_recipe: Fp8Recipe | None = None) -> Machine:
    """Resolve a :class:`Machine` from a catalog cluster and the GEMM precision, with the
    user's measured tables where given (paper Sec. 5.3); ``fp8_recipe`` is checked against
    the device (MXFP8 needs Blackwell)."""
    tables = tables or MeasuredTables()
    if not 0.0 < usable_memory_fraction <= 1.0:
        raise MosaicInputError(
            f"usable memory fraction must be in (0, 1], got {usable_memory_fraction}")
    device = cluster.device
    system = cluster.system
    gemm_dtype = str(precision)  # the device's peak-FLOP/s lane of that name
    check_precision_on_device(device, precision, fp8_recipe)
    key = device_fit_key(device.name)
    attention = FLASH_ATTENTION_EFFICIENCY.get(key, FLASH_ATTENTION_EFFICIENCY["generic"])
    attention_fwd, attention_bwd = attention["fwd"], attention["bwd"]
    exp_ratio = sfu_exp_time_ratio(device.name)  # Blackwell Ultra: softmax exps twice as fast
    if exp_ratio != 1.0 and key in FLASH_ATTENTION_EFFICIENCY:
        attention_fwd, attention_bwd = exp_rescaled_attention_efficiency(
            attention_fwd, attention_bwd, exp_ratio)
    interconnect = Interconnect(
        scale_up_domain_gpus=job_domain_gpus(
            system.scale_up_domain_gpus, system.gpus_per_node, cluster.n_devices
        ),
        gpus_per_node=system.gpus_per_node,
        scale_up_bw_bytes_per_s=system.scale_up_bw_bytes_per_s,
        scale_up_link_bw_bytes_per_s=device.scale_up_link_bw_bytes_per_s,
        scale_out_bw_bytes_per_s=system.scale_out_bw_bytes_per_s,
        ll_max_bus_bw_bytes_per_s=ll_max_bus_bw_bytes_per_s(gpu_generation(device.name)),
        low_latency_protocols=system.nccl_low_latency_protocols,
        measured=tables.collectives,
        # a catalog entry's stated per-step latencies, else the fitted defaults
        **{name: value for name in ("scale_up_latency_s", "scale_out_latency_s")
           if (value := getattr(system, name)) is not None},
    )
    bf16_peak = device.peak_flops_per_s_for("bf16")
    return Machine(
        device_name=device.name,
        n_devices=cluster.n_devices,
        gpus_per_node=system.gpus_per_node,
        hbm_bytes=device.hbm_bytes,
        hbm_bw_bytes_per_s=device.hbm_bw_bytes_per_s,
        # the device's own count where its entry states one (a user's H20: 78, not the
        # H100 fits' 132), else the count of the device whose fits it uses
        sm_count=(device.sm_count if device.sm_count is not None
                  else SM_COUNT.get(key, DEFAULT_SM_COUNT)),
        gemm_peak_flops_per_s=device.peak_flops_per_s_for(gemm_dtype),
        gemm_rate_scale=borrowed_fit_rate_scale(device, gemm_dtype),
        bf16_rate_scale=borrowed_fit_rate_scale(device, "bf16"),
        mfu_peak_flops_per_s=device.mfu_peak_flops_per_s,
        attention_peak_flops_per_s=bf16_peak,
        attention_fwd=attention_fwd,
        attention_bwd=attention_bwd,
        interconnect=interconnect,
        usable_memory_fraction=usable_memory_fraction,
        gemm_table=tables.gemm,
        grouped_gemm_table=tables.grouped_gemm,
        host_link_bw_bytes_per_s=device.host_link_bw_bytes_per_s,
    )


def mfu_peak_text(machine: Machine) -> str:
    """What MFU is counted against on ``machine``, said once for every command: the dense bf16
    datasheet peak, and where the GEMMs run on a faster lane (FP8, NVFP4) that lane's
    multiple of it, up to which MFU can rise; and, on a device costed with another's kernel
    fits, the share of the datasheet rate its GEMMs are costed at (borrowed_fit_rate_scale)."""
    text = (f"dense bf16 datasheet peak of {machine.device_name} "
            f"({machine.mfu_peak_flops_per_s / 1e12:.1f} TFLOP/s)")
    if machine.gemm_lane_peak_ratio > 1.0:
        text += (f"; the GEMMs run on a lane with {machine.gemm_lane_peak_ratio:.3g}x that "
                 "peak, so MFU can exceed 100% (mfu_gemm_lane counts against the lane's peak)")
    if machine.gemm_rate_scale != 1.0:
        text += (f"; GEMM efficiency x{machine.gemm_rate_scale:.3f}: this device's measured "
                 "large-GEMM share of its datasheet peak over that of the device(s) whose "
                 "kernel fits cost it")
    return text


def usable_gib(machine: Machine) -> float:
    """Device memory a plan may fill on ``machine``, GiB (capacity x usable fraction)."""
    return machine.hbm_bytes * machine.usable_memory_fraction / GIB


def with_fp8_attention(machine: Machine) -> Machine:
    """``machine`` running its attention score GEMMs on the FP8 lane
    (:func:`~mosaic.perf.kernels.fp8_attention_efficiency`; Workload.fp8_dot_product_attention):
    the lane's speed-up is the device's FP8 over bf16 tensor peak."""
    speedup = machine.gemm_peak_flops_per_s / machine.attention_peak_flops_per_s
    return replace(machine,
                   attention_fwd=fp8_attention_efficiency(machine.attention_fwd, speedup),
                   attention_bwd=fp8_attention_efficiency(machine.attention_bwd, speedup))


def with_attention_efficiency(machine: Machine, fwd_multiplier: float,
                              bwd_multiplier: float) -> Machine:
    """``machine`` with its flash-attention efficiency scaled per pass (the kernel family's
    rate relative to cuDNN times a calibrated per-stack factor)."""
    if fwd_multiplier == 1.0 and bwd_multiplier == 1.0:
        return machine
    return replace(
        machine,
        attention_fwd=replace(machine.attention_fwd,
                              max_fraction=machine.attention_fwd.max_fraction * fwd_multiplier),
        attention_bwd=replace(machine.attention_bwd,
                              max_fraction=machine.attention_bwd.max_fraction * bwd_multiplier),
    )
