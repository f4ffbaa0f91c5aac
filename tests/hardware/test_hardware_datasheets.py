"""Shipped numbers against the datasheets they cite: guards against sparse-for-dense,
bidirectional-for-unidirectional and bits-for-bytes data-entry errors."""

from __future__ import annotations

import pytest

from mosaic.hardware import DTYPES, get_device, get_system, list_devices, list_systems

PETA = 1e15


def test_h100_sxm_is_the_dense_whitepaper_peak_not_the_sparse_datasheet_figure() -> None:
    h100 = get_device("H100-SXM-80GB")
    # Datasheet: BF16 1,979 / FP8 3,958 / TF32 989 TFLOPS "with sparsity"; whitepaper dense.
    assert h100.peak_flops_per_s_for("bf16") == 989.4e12
    assert h100.peak_flops_per_s_for("fp16") == 989.4e12
    assert h100.peak_flops_per_s_for("fp8") == 1978.9e12
    assert h100.peak_flops_per_s_for("tf32") == 494.7e12
    assert h100.peak_flops_per_s_for("bf16") == pytest.approx(1979e12 / 2, rel=2e-4)
    # Capacity as CUDA reports it (torchtitan logs 79.10 GiB), not the datasheet's 80 GB.
    assert h100.hbm_bytes == pytest.approx(79.10 * 2**30, rel=1e-4)
    assert h100.hbm_bw_bytes_per_s == 3.35e12
    assert h100.scale_up_bw_bytes_per_s == 900e9 / 2  # NVLink 900 GB/s bidirectional


def test_h200_has_h100_compute_with_141_gb_at_4_8_tb_per_s() -> None:
    h100, h200 = get_device("H100"), get_device("H200")
    assert dict(h200.peak_flops_per_s) == dict(h100.peak_flops_per_s)
    # 141 GB on the datasheet; PyTorch reports a total capacity of 139.80 GiB.
    assert h200.hbm_bytes == pytest.approx(139.80 * 2**30, rel=1e-4)
    assert h200.hbm_bw_bytes_per_s == 4.8e12
    assert h200.scale_up_bw_bytes_per_s == h100.scale_up_bw_bytes_per_s


def test_h800_is_h100_compute_with_400_gb_per_s_nvlink() -> None:
    h100, h800 = get_device("H100"), get_device("H800")
    assert dict(h800.peak_flops_per_s) == dict(h100.peak_flops_per_s)
    assert h800.scale_up_bw_bytes_per_s == 400e9 / 2


def test_a100_has_no_fp8_lane() -> None:
    a100 = get_device("A100")
    assert a100.peak_flops_per_s_for("bf16") == 312e12
    assert a100.scale_up_bw_bytes_per_s == 600e9 / 2
    assert "fp8" not in a100.dtypes


@pytest.mark.parametrize(
    ("name", "bf16", "fp8", "fp4", "hbm_bytes", "hbm_bw"),
    [
        # HGX/DGX B200: 4.5 / 9 / 18 PFLOPS with sparsity; 180 GB (CUDA reports 178.36 GiB),
        # 7.7 TB/s.
        ("B200", 2.25 * PETA, 4.5 * PETA, 9 * PETA, 178.36 * 2**30, 7.7e12),
        # GB200 NVL72 per GPU: 5 / 10 / 20 PFLOPS with sparsity; 186 GB (torchtitan's memory
        # log: 110.95 GiB = 60.2% of the device, i.e. 184.3 GiB), 8 TB/s.
        ("GB200", 2.5 * PETA, 5 * PETA, 10 * PETA, 110.95 / 0.602 * 2**30, 8e12),
        # HGX B300: 36 / 72 PFLOPS sparse per 8 GPUs, FP4 105 PFLOPS dense per 8 GPUs; the
        # vendor's usable 270 GB read as the B200's 180 GB is (CUDA's 178.36 GiB)
        ("B300", 2.25 * PETA, 4.5 * PETA, 105 * PETA / 8, 270 * 178.36 / 180 * 2**30, 7.7e12),
        # GB300 NVL72: 360 / 720 PFLOPS sparse, FP4 1,080 dense, 576 TB/s per 72 GPUs; the
        # vendor's usable 279 GB read as the GB200's 186 GB is (CUDA's 184.3 GiB)
        ("GB300", 2.5 * PETA, 5 * PETA, 15 * PETA, 279 * 184.3 / 186 * 2**30, 8e12),
    ],
)
def test_blackwell_dense_peaks(
    name: str, bf16: float, fp8: float, fp4: float, hbm_bytes: float, hbm_bw: float
) -> None:
    device = get_device(name)
    assert device.peak_flops_per_s_for("bf16") == pytest.approx(bf16)
    assert device.peak_flops_per_s_for("fp8") == pytest.approx(fp8)
    assert device.peak_flops_per_s_for("fp4") == pytest.approx(fp4)
    assert device.hbm_bytes == pytest.approx(hbm_bytes, rel=1e-4)
    assert device.hbm_bw_bytes_per_s == hbm_bw
    assert device.scale_up_bw_bytes_per_s == 1.8e12 / 2  # NVLink5 1.8 TB/s bidirectional


def test_mi300x_datasheet() -> None:
    mi300x = get_device("MI300X")
    assert mi300x.peak_flops_per_s_for("bf16") == 1307.4e12
    assert mi300x.peak_flops_per_s_for("fp8") == 2614.9e12
    # HIP reports 191.98 GiB (vllm-project/vllm#7951), not the vendor's 192 GB as 192e9 B
    assert mi300x.hbm_bytes == pytest.approx(191.98 * 2**30, rel=1e-4)
    assert mi300x.scale_up_bw_bytes_per_s == 7 * 128e9 / 2  # 7 links x 128 GB/s bidirectional
    # a switchless mesh: one xGMI link to each peer, 64 GB/s each way (AMD ROCm blog on
    # RCCL and xGMI on MI300X), so the 448 GB/s is the sum over all seven peers
    assert mi300x.scale_up_link_bw_bytes_per_s == 128e9 / 2
    assert mi300x.scale_up_bw_bytes_per_s == 7 * mi300x.scale_up_link_bw_bytes_per_s
    # NVSwitch parts are switched: any group of the domain gets the whole NVLink rate
    assert get_device("H100").scale_up_link_bw_bytes_per_s is None


@pytest.mark.parametrize("name", list_devices())
def test_device_rates_are_internally_consistent(name: str) -> None:
    device = get_device(name)
    peak = device.peak_flops_per_s
    assert set(peak) <= set(DTYPES)
    assert peak["fp16"] == peak["bf16"]
    if "fp8" in peak:
        assert peak["fp8"] == pytest.approx(2 * peak["bf16"], rel=1e-3)
    # TF32 is half of BF16 (NVIDIA rounds B200's to 2.2 PFLOPS sparse, hence 3%).
    assert peak["tf32"] == pytest.approx(peak["bf16"] / 2, rel=0.03)
    assert peak["fp32"] < peak["tf32"]
    for dtype, achievable in device.achievable_flops_per_s.items():
        assert 0.45 * peak[dtype] < achievable < peak[dtype]
    # A link is never faster than the GPU's own memory; a per-direction NVLink5 is 900 GB/s.
    assert device.scale_up_bw_bytes_per_s <= 900e9 < device.hbm_bw_bytes_per_s
    for field in ("hbm_bytes", "hbm_bw_bytes_per_s", "scale_up_bw_bytes_per_s"):
        assert device.source(field)
    for dtype in device.dtypes:
        assert device.source(f"peak_flops_per_s.{dtype}")


def test_achievable_peaks_match_the_measurements_cited() -> None:
    # MAMF table (stas00/ml-engineering); the design guide quotes ~790 TFLOP/s on an H200.
    assert get_device("H200").achievable_flops_per_s_for("bf16") == pytest.approx(790e12, rel=0.01)
    assert get_device("B200").achievable_flops_per_s_for("bf16") == 1745.0e12
    assert get_device("GB300").achievable_flops_per_s_for("bf16") is None


@pytest.mark.parametrize(
    ("name", "device", "gpus_per_node", "domain", "scale_out_bw_per_gpu"),
    [
        ("DGX-A100", "A100-SXM-80GB", 8, 8, 200e9 / 8),  # 8x HDR 200 Gb/s
        ("DGX-H100", "H100-SXM-80GB", 8, 8, 400e9 / 8),  # 8x NDR 400 Gb/s
        ("DGX-H200", "H200-SXM-141GB", 8, 8, 400e9 / 8),
        ("H800-node", "H800-SXM-80GB", 8, 8, 400e9 / 8),
        ("DGX-B200", "B200", 8, 8, 400e9 / 8),
        ("DGX-B300", "B300", 8, 8, 800e9 / 8),  # 8x ConnectX-8 800 Gb/s
        ("p5.48xlarge", "H100-SXM-80GB", 8, 8, 3200e9 / 8 / 8),  # 3200 Gbps EFA per node
        ("p5en.48xlarge", "H200-SXM-141GB", 8, 8, 3200e9 / 8 / 8),
        ("p6-b200.48xlarge", "B200", 8, 8, 400e9 / 8),  # paper App. F.3: 400 Gbps per GPU
        ("GB200-NVL72", "GB200", 4, 72, 400e9 / 8),
        ("GB300-NVL72", "GB300", 4, 72, 800e9 / 8),
    ],
)
def test_system_presets(
    name: str, device: str, gpus_per_node: int, domain: int, scale_out_bw_per_gpu: float
) -> None:
    system = get_system(name)
    assert system.device.name == device
    assert system.gpus_per_node == gpus_per_node
    assert system.scale_up_domain_gpus == domain
    assert system.scale_out_bw_bytes_per_s == pytest.approx(scale_out_bw_per_gpu)


@pytest.mark.parametrize("name", list_systems())
def test_shipped_systems_leave_latencies_to_the_fitted_defaults(name: str) -> None:
    """No shipped entry states a per-step latency: the model's fitted ones (3.4 us NVLink,
    6.965 us network, microbench_fits.yaml) hold, not NCCL's tuning-table 14 us."""
    system = get_system(name)
    assert system.scale_up_latency_s is None and system.scale_out_latency_s is None
    assert system.scale_out_bw_bytes_per_s < system.scale_up_bw_bytes_per_s


def test_p6_b200_node_matches_the_paper_appendix_f3() -> None:
    # 8 B200 with "up to 14.4 TB/s of bidirectional intra-node NVLink".
    p6 = get_system("p6-b200.48xlarge")
    assert p6.gpus_per_node * p6.scale_up_bw_bytes_per_s * 2 == pytest.approx(14.4e12)
    assert p6.nics_per_node * p6.nic_bw_bytes_per_s * 8 == pytest.approx(3.2e12)  # 3.2 Tbps


def test_paper_table3_raw_hardware_ceiling() -> None:
    # Table 3: 32 p6 nodes (256 B200), F_peak 2.25 PFLOP/s bf16 dense, 20 days -> 9.95e23.
    cluster = get_system("p6-b200.48 xlarge").cluster(n_nodes=32)
    assert cluster.n_devices == 256
    c_peak = cluster.peak_flops_per_s_for("bf16") * 20 * 86400
    assert c_peak == pytest.approx(9.95e23, rel=1e-3)
