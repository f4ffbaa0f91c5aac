"""A device costed with another device's kernel fits runs them at its measured rate, not its
datasheet ratio (perf/machine.py borrowed_fit_rate_scale). Expected values by hand from the
catalog's MAMF figures (stas00/ml-engineering MAMF table): GB200 bf16 1822.0 of 2500 TFLOP/s,
B200 1745.0 of 2250; FP8 3615.6 of 5000 and 3432.5 of 4500."""

from dataclasses import replace

import pytest

from mosaic.arch import ladder_geometry
from mosaic.hardware import Cluster, get_device, get_system
from mosaic.perf.calibration import load_calibration
from mosaic.perf.machine import borrowed_fit_rate_scale, machine_for, mfu_peak_text
from mosaic.perf.plan import single_plan
from mosaic.perf.step_time import predict_step
from mosaic.perf.workload import Workload

GB200_BF16 = (1822.0 / 2500.0) / (1745.0 / 2250.0)  # 0.93966
GB200_FP8 = (3615.6 / 5000.0) / (3432.5 / 4500.0)  # 0.94800


def test_a_gb200_runs_the_b200_fits_at_its_measured_rate():
    gb200 = get_device("GB200")
    assert gb200.kernel_fit == "B200"
    assert borrowed_fit_rate_scale(gb200, "bf16") == pytest.approx(GB200_BF16, rel=1e-12)
    assert borrowed_fit_rate_scale(gb200, "fp8") == pytest.approx(GB200_FP8, rel=1e-12)
    # no FP4 measurement on either part: the bf16 ratio (one clock for every lane)
    assert borrowed_fit_rate_scale(gb200, "fp4") == pytest.approx(GB200_BF16, rel=1e-12)


@pytest.mark.parametrize("name", ["B200", "H100-SXM-80GB", "A100-SXM-80GB", "GB300",
                                  "H800-SXM-80GB", "H100-SXM-96GB-500W"])
def test_devices_with_their_own_fits_or_no_measurement_keep_the_datasheet_ratio(name):
    """Own fits (B200, H100, A100), no MAMF of their own (GB300, the 500 W H100), or the same
    measured fraction as the fit device (H800 quotes the H100's)."""
    device = get_device(name)
    for lane in device.dtypes:
        assert borrowed_fit_rate_scale(device, lane) == pytest.approx(1.0, rel=1e-12)


def test_the_scale_reaches_gemms_but_not_attention_nor_the_mfu_peak():
    """Attention keeps the datasheet ratio: measured cuDNN SDPA (NVIDIA/cudnn-frontend
    artifacts, b=1, 128/8 heads, d=128, causal, s=8192) gives B200/GB300 fwd+bwd
    (1.877+5.833)/(1.470+4.865) = 1.217 (cuDNN 9.13) and GB200/GB300 (1.389+4.542)/
    (1.158+4.256) = 1.095 (cuDNN 9.17), so B200/GB200 ~1.11: the datasheet ratio, not the
    GEMM MAMF ratio 1.044."""
    cluster = Cluster(system=get_system("GB200-NVL72"), n_nodes=2)
    machine = machine_for(cluster, "bf16")
    assert machine.gemm_peak_flops_per_s == 2.5e15  # MFU and the lane's ratio: datasheet
    assert machine.mfu_peak_flops_per_s == 2.5e15
    assert machine.gemm_rate_flops_per_s == pytest.approx(2.5e15 * GB200_BF16, rel=1e-12)
    assert machine.attention_peak_flops_per_s == 2.5e15
    # bf16 GEMMs of any recipe (output layer, router) at the bf16 measured rate
    assert machine.bf16_gemm_rate_flops_per_s == pytest.approx(2.5e15 * GB200_BF16, rel=1e-12)
    fp8 = machine_for(cluster, "fp8")
    assert fp8.gemm_rate_flops_per_s == pytest.approx(5e15 * GB200_FP8, rel=1e-12)
    assert fp8.bf16_gemm_rate_flops_per_s == pytest.approx(2.5e15 * GB200_BF16, rel=1e-12)
    workload = Workload(geometry=ladder_geometry(8), global_batch=64, seq_len=4096,
                        precision="bf16", stack="megatron-core")
    plan, calibration = single_plan(dp=8), load_calibration("default")
    slowed = predict_step(workload, plan, machine, calibration)
    datasheet = predict_step(workload, plan, replace(
        machine, gemm_rate_scale=1.0, bf16_rate_scale=1.0), calibration)
    # compute-bound dense GEMMs: the plateau scales with the rate
    assert slowed.breakdown_s["compute_mlp"][0] > datasheet.breakdown_s["compute_mlp"][0]
    assert (slowed.breakdown_s["compute_mlp"][0] / datasheet.breakdown_s["compute_mlp"][0]
            <= 1 / GB200_BF16 + 1e-9)
    assert slowed.breakdown_s["vocab_stage"][0] > datasheet.breakdown_s["vocab_stage"][0]
    assert slowed.breakdown_s["compute_attention_core"][0] == pytest.approx(
        datasheet.breakdown_s["compute_attention_core"][0], rel=1e-12)
    assert slowed.breakdown_s["compute_elementwise"][0] == pytest.approx(
        datasheet.breakdown_s["compute_elementwise"][0], rel=1e-12)  # HBM-bound: unchanged


def test_the_mfu_peak_text_says_the_rate_the_gemms_are_costed_at():
    gb200 = machine_for(Cluster(system=get_system("GB200-NVL72"), n_nodes=1), "bf16")
    assert "GEMM efficiency x0.940: this device's measured large-GEMM share" in mfu_peak_text(gb200)
    b200 = machine_for(Cluster(system=get_system("DGX-B200"), n_nodes=1), "bf16")
    assert "GEMM efficiency" not in mfu_peak_text(b200)


# The analytical GEMM plateau was fitted on B200 and H100 SXM (data/microbench_fits.yaml):
# their measured fractions 1745.0 / 2250 and 794.5 / 989.4, averaged.
ANALYTICAL_FIT_FRACTION = (1745.0 / 2250.0 + 794.5 / 989.4) / 2  # 0.78928


def test_a_device_without_fits_runs_the_analytical_plateau_at_its_measured_rate():
    """MI300X (no kernel_fit: the analytical model) measures 668.4 of 1307.4 TFLOP/s bf16;
    before, its measured rate was ignored and its GEMMs ran at the fit devices' ratio."""
    mi300x = get_device("MI300X")
    assert mi300x.kernel_fit is None
    expected = (668.4 / 1307.4) / ANALYTICAL_FIT_FRACTION  # 0.6477
    assert borrowed_fit_rate_scale(mi300x, "bf16") == pytest.approx(expected, rel=1e-4)


# A power-capped H100 as a user's catalog entry: a measured 660 TFLOP/s, no kernel_fit,
# no architecture (a trial's file).
CAPPED_H100 = """devices:
  - name: {name}
    vendor: NVIDIA
    peak_flops_per_s:
      bf16: {{value: 9.894e+14, source: datasheet}}
    achievable_flops_per_s:
      bf16: {{value: 6.6e+14, source: our mamf-finder run}}
    hbm_bytes: {{value: 8.493e+10, source: nvidia-smi}}
    hbm_bw_bytes_per_s: {{value: 3.35e+12, source: datasheet}}
    scale_up_bw_bytes_per_s: {{value: 4.5e+11, source: datasheet}}
"""


def test_a_user_device_without_fits_is_costed_at_its_rate_and_says_so(tmp_path):
    """A trial's power-capped H100 (achievable 660 TFLOP/s, no kernel_fit, no architecture)
    was predicted at the stock GPU's step time with no word; now its GEMMs slow by its
    measured rate and the job's assumptions name both gaps."""
    from mosaic.hardware import use_catalog
    from mosaic.perf.machine import device_model_notes

    catalog = tmp_path / "hw.yaml"
    catalog.write_text(CAPPED_H100.format(name="H100-capped"))
    use_catalog(catalog)
    try:
        device = get_device("H100-capped")
        expected = (6.6e14 / 9.894e14) / ANALYTICAL_FIT_FRACTION  # 0.8452
        assert borrowed_fit_rate_scale(device, "bf16") == pytest.approx(expected, rel=1e-4)
        notes = device_model_notes(device)
    finally:
        use_catalog()
    assert "no kernel fits and names no kernel_fit" in notes[0]
    assert f"({expected:.3f}x)" in notes[0]
    assert "states no architecture" in notes[1]
    assert device_model_notes(get_device("H100-SXM-80GB")) == []


def test_an_ada_device_loads_and_says_it_takes_the_generic_defaults(tmp_path):
    """`architecture: ada` (an L40S) was refused, leaving "pick the nearest" of generations
    whose defaults do not fit it (a trial): it loads, and its notes say no kernel table or
    stack recipe has Ada entries, so the generic defaults apply."""
    from mosaic.hardware import use_catalog
    from mosaic.perf.machine import device_model_notes

    catalog = tmp_path / "hw.yaml"
    catalog.write_text(CAPPED_H100.format(name="L40S-like") + "    architecture: ada\n")
    use_catalog(catalog)
    try:
        device = get_device("L40S-like")
        notes = device_model_notes(device)
    finally:
        use_catalog()
    assert device.architecture == "ada"
    assert not any("states no architecture" in note for note in notes)
    assert any("no published attention-kernel rates or stack defaults for ada" in note
               for note in notes)


def test_replacing_a_fit_device_leaves_the_shipped_devices_that_use_its_fits(tmp_path):
    """A user catalog replacing H100-SXM-80GB had moved the shipped H800's and 500 W H100's
    kernel fits onto the user's device (a trial): they keep the shipped H100's, and the fits'
    reference rate stays the shipped H100's measurement."""
    from mosaic.hardware import use_catalog

    catalog = tmp_path / "hw.yaml"
    catalog.write_text(CAPPED_H100.format(name="H100-SXM-80GB"))
    shipped_h800 = get_device("H800-SXM-80GB")
    use_catalog(catalog)
    try:
        h800 = get_device("H800-SXM-80GB")
        assert h800 == shipped_h800
        assert borrowed_fit_rate_scale(h800, "bf16") == pytest.approx(1.0, rel=1e-12)
    finally:
        use_catalog()


@pytest.mark.parametrize("fit", ["MI300X", "H100-capped"])
def test_a_kernel_fit_naming_a_device_without_fits_borrows_no_fits(tmp_path, fit):
    """``kernel_fit: MI300X`` (no fits of its own) took the MI300X's measured fraction as the
    reference of fits that do not exist: a device at the MI300X's fraction ran at 1.0x, about
    1.5x the analytical plateau's rate. A fit naming the user's own fitless entry gave 1.0 and
    no note. Both are now the analytical plateau at the device's own rate, and say so."""
    from mosaic.hardware import use_catalog
    from mosaic.perf.machine import device_model_notes, has_own_kernel_fits

    catalog = tmp_path / "hw.yaml"
    catalog.write_text(CAPPED_H100.format(name="H100-capped") + CAPPED_H100.format(
        name="borrower").removeprefix("devices:\n") + f"    kernel_fit: {fit}\n")
    use_catalog(catalog)
    try:
        device = get_device("borrower")
        assert not has_own_kernel_fits(device)
        expected = (6.6e14 / 9.894e14) / ANALYTICAL_FIT_FRACTION
        assert borrowed_fit_rate_scale(device, "bf16") == pytest.approx(expected, rel=1e-4)
        notes = device_model_notes(device)
    finally:
        use_catalog()
    assert f"its kernel_fit ({device.kernel_fit}) has none" in notes[0]


def test_a_borrower_without_a_measured_rate_says_whose_share_of_peak_it_takes(tmp_path):
    """A user's H20 (kernel_fit H100, no achievable_flops_per_s) was costed at the H100's
    measured share of datasheet peak with no word in the job's assumptions (a trial); the
    line now names the fits and the share: MAMF 794.5 of 989.4 TFLOP/s = 0.803 (catalog,
    stas00/ml-engineering). With its own measured rate it is rescaled and needs no line."""
    from mosaic.hardware import use_catalog
    from mosaic.perf.machine import device_model_notes

    h20 = CAPPED_H100.format(name="H20-like").replace(
        "    achievable_flops_per_s:\n      bf16: {value: 6.6e+14, source: our mamf-finder run}\n",
        "") + "    kernel_fit: H100\n    architecture: hopper\n"
    measured = CAPPED_H100.format(name="H100-measured").removeprefix("devices:\n") + (
        "    kernel_fit: H100\n    architecture: hopper\n")
    catalog = tmp_path / "hw.yaml"
    catalog.write_text(h20 + measured)
    use_catalog(catalog)
    try:
        assert not get_device("H20-like").achievable_flops_per_s
        note, = device_model_notes(get_device("H20-like"))
        assert device_model_notes(get_device("H100-measured")) == []
    finally:
        use_catalog()
    assert "costed with H100-SXM-80GB's measured kernel fits (kernel_fit)" in note
    assert f"({794.5 / 989.4:.3f} in bf16, MAMF)" in note
    assert device_model_notes(get_device("H100-SXM-80GB")) == []
    assert device_model_notes(get_device("GB200")) == []  # states its own MAMF


@pytest.mark.parametrize(("precision", "quoted"), [
    ("bf16", f"({1745.0 / 2250.0:.3f} in bf16, MAMF)"),  # 0.776
    ("mxfp8", f"({3432.5 / 4500.0:.3f} in fp8, MAMF)"),  # 0.763: B200's FP8 MAMF share
    ("nvfp4", f"({1745.0 / 2250.0:.3f} in bf16, MAMF)"),  # no FP4 MAMF: the bf16 share
])
def test_a_borrowers_note_quotes_the_share_of_the_jobs_gemm_lane(precision, quoted):
    """A GB300 (kernel_fit B200, no MAMF of its own) runs its GEMMs at the B200's share of
    datasheet peak on the job's lane (borrowed_fit_rate_scale is 1, the B200 fits apply);
    an FP8 job's assumptions quoted the bf16 share, 0.776, where the B200 measures 3432.5 of
    4500 TFLOP/s FP8 (catalog, stas00/ml-engineering MAMF table): 0.763. A lane the B200 has
    no MAMF for keeps the bf16 share, the fallback borrowed_fit_rate_scale uses."""
    from mosaic.config.job_schema import job_from_document

    job = {"model": {"name": "q8", "layers": 8, "d_model": 1024, "heads": 8, "kv_heads": 8,
                     "ffn": 4096, "vocab": 32000,
                     "moe": {"experts": 8, "top_k": 2, "expert_ffn": 1024}},
           "parallelism": {"tp": 1, "pp": 1, "ep": 4},
           "batch": {"global_seqs": 64, "micro_seqs": 1, "seq_len": 4096},
           "performance": {"stack": "megatron-core", "precision": precision},
           "hardware": {"system": "GB300-NVL72", "nodes": 1}}
    note, = [line for line in job_from_document(job, "job").assumptions
             if "costed with B200's measured kernel fits" in line]
    assert quoted in note
