"""The scale-out what-if (`--scale-out-gbps`): a catalog system with another per-GPU NIC
rate, named for it, and found again by that name."""

from __future__ import annotations

import pytest

from mosaic.errors import MosaicInputError
from mosaic.hardware import get_system
from mosaic.hardware.system import with_gpus_per_node, with_scale_out_gbps


@pytest.mark.parametrize(("system", "nic_bytes_per_s"), [
    # 8 GPUs, 8 NICs: one 200 Gb/s NIC per GPU
    ("DGX-H100", 25e9),
    # 8 GPUs, 32 EFA devices: 200 Gb/s x 8 GPUs / 32 = 50 Gb/s = 6.25e9 B/s per device
    ("p5.48xlarge", 6.25e9),
    # a 4-GPU tray with 4 NICs
    ("GB200-NVL72", 25e9),
    # 8 GPUs behind one NIC: 1,600 Gb/s = 2e11 B/s
    ("HGX-A100-400G", 2e11),
])
def test_200_gbps_per_gpu_is_25e9_bytes_per_s_per_gpu(system, nic_bytes_per_s):
    """Decimal Gb/s per GPU, one direction: 200e9 / 8 = 25e9 B/s, whatever the host's NIC
    count; the per-GPU rate stays derived from one NIC's rate and the NIC count."""
    base = get_system(system)
    variant = with_scale_out_gbps(base, 200)
    assert variant.scale_out_bw_bytes_per_s == pytest.approx(25e9, rel=1e-15)
    assert variant.nic_bw_bytes_per_s == pytest.approx(nic_bytes_per_s, rel=1e-15)
    assert variant.name == f"{system} (scale-out 200 Gb/s per GPU)"
    # nothing else of the node changes
    assert (variant.device, variant.gpus_per_node, variant.nics_per_node,
            variant.scale_up_domain_gpus) == (base.device, base.gpus_per_node,
                                              base.nics_per_node, base.scale_up_domain_gpus)
    assert "200 Gb/s per GPU" in variant.network_text()
    assert "what-if" in variant.source("nic_bw_bytes_per_s")


def test_the_systems_own_rate_is_the_system():
    dgx = get_system("DGX-H100")  # 8 x 400 Gb/s for 8 GPUs
    assert with_scale_out_gbps(dgx, 400) is dgx


@pytest.mark.parametrize("gbps", [200, 312.5, 123.4567, 0.1 + 0.2])
def test_a_scale_out_variant_is_found_by_its_own_name(gbps):
    """A plan made with --scale-out-gbps names its node type for the rate; the catalog
    resolves that name to an equal variant (an exported plan, a job's hardware.system),
    alone or after a host-size variant, and a rate that :g would round keeps its digits."""
    for base in (get_system("DGX-H100"), with_gpus_per_node(get_system("DGX-H100"), 4)):
        variant = with_scale_out_gbps(base, gbps)
        found = get_system(variant.name)
        assert found == variant
        assert found.scale_out_bw_bytes_per_s == pytest.approx(gbps * 1e9 / 8, rel=1e-15)


@pytest.mark.parametrize("gbps", [0, -200, float("nan"), float("inf"), 2e11, True])
def test_a_bad_rate_is_one_line_naming_the_option(gbps):
    with pytest.raises(MosaicInputError) as caught:
        with_scale_out_gbps(get_system("DGX-H100"), gbps)
    message = str(caught.value)
    assert message.startswith("--scale-out-gbps: got ") and "\n" not in message


def test_a_bad_variant_name_is_refused():
    with pytest.raises(MosaicInputError, match="DGX-H100 \\(scale-out 0 Gb/s per GPU\\)'"):
        get_system("DGX-H100 (scale-out 0 Gb/s per GPU)")
    with pytest.raises(MosaicInputError, match="unknown system 'no-such-node'"):
        get_system("no-such-node (scale-out 200 Gb/s per GPU)")


@pytest.mark.parametrize(("typed", "canonical"), [
    ("DGX-H100 (Scale-out 200 Gb/s per GPU)", "DGX-H100 (scale-out 200 Gb/s per GPU)"),
    ("dgx h100 (SCALE OUT 200 gb/s per gpu)", "DGX-H100 (scale-out 200 Gb/s per GPU)"),
    ("dgx-h100 (4 gpus/node)", "DGX-H100 (4 GPUs/node)"),
    ("dgx_h100 (4 GPUs / node) (scale-out 100 Gb/s per GPU)",
     "DGX-H100 (4 GPUs/node) (scale-out 100 Gb/s per GPU)"),
])
def test_a_variant_name_is_found_as_loosely_as_a_catalog_name(typed, canonical):
    """Catalog names are found case-insensitively, spaces, '-' and '_' optional ('dgx h100'
    is DGX-H100); a what-if variant's name is found the same way and named canonically."""
    assert get_system("dgx h100") == get_system("DGX-H100")
    found = get_system(typed)
    assert found == get_system(canonical) and found.name == canonical


def test_a_variant_rate_in_gigabytes_is_refused_naming_the_unit():
    with pytest.raises(MosaicInputError) as caught:
        get_system("DGX-H100 (scale-out 200 GB/s per GPU)")
    message = str(caught.value)
    assert "Gb/s (gigabits)" in message and "GB/s" in message and "\n" not in message
