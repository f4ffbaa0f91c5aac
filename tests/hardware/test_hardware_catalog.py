"""Catalog lookups, dtypes, clusters, and user YAML files (good and bad)."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest

from mosaic.errors import MosaicInputError
from mosaic.hardware import (
    Cluster,
    get_device,
    get_system,
    list_devices,
    list_systems,
    load_catalog,
    normalize_dtype,
)


def test_shipped_catalog_lists_every_device_and_system_of_the_issue() -> None:
    assert set(list_devices()) >= {
        "A100-SXM-80GB",
        "H100-SXM-80GB",
        "H200-SXM-141GB",
        "H800-SXM-80GB",
        "B200",
        "GB200",
        "B300",
        "GB300",
        "MI300X",
    }
    assert set(list_systems()) >= {
        "DGX-A100",
        "DGX-H100",
        "DGX-H200",
        "DGX-B200",
        "H800-node",
        "p5.48xlarge",
        "p5en.48xlarge",
        "p6-b200.48xlarge",
        "GB200-NVL72",
        "GB300-NVL72",
    }


@pytest.mark.parametrize(
    ("alias", "name"),
    [
        ("B200", "B200"),
        ("b200", "B200"),
        ("H200", "H200-SXM-141GB"),
        ("h100 sxm5", "H100-SXM-80GB"),
        ("h100_sxm_80gb", "H100-SXM-80GB"),
    ],
)
def test_device_aliases(alias: str, name: str) -> None:
    assert get_device(alias).name == name


@pytest.mark.parametrize(
    "alias",
    ["p6-b200.48xlarge", "p6-b200.48 xlarge", "P6-B200.48XLARGE", "p6-b200", " p6-b200 "],
)
def test_the_papers_node_type_resolves_however_it_is_written(alias: str) -> None:
    assert get_system(alias).name == "p6-b200.48xlarge"


def test_rack_aliases() -> None:
    assert get_system("GB200-NVL72").name == "GB200-NVL72"
    assert get_system("gb200 nvl72").name == "GB200-NVL72"


def test_unknown_names_list_the_known_ones() -> None:
    with pytest.raises(MosaicInputError, match=r"unknown device 'X9'.*H100-SXM-80GB.*MI300X"):
        get_device("X9")
    with pytest.raises(MosaicInputError, match=r"unknown system 'p7'.*p6-b200\.48xlarge"):
        get_system("p7")


def test_missing_dtype_is_a_clear_error() -> None:
    with pytest.raises(MosaicInputError, match=r"'A100-SXM-80GB' has no fp8 peak: it lists"):
        get_device("A100").peak_flops_per_s_for("fp8")
    with pytest.raises(MosaicInputError, match=r"unknown dtype 'int3': allowed are fp32"):
        get_device("A100").peak_flops_per_s_for("int3")


def test_dtype_spellings() -> None:
    assert normalize_dtype("BF16") == "bf16"
    assert normalize_dtype("bfloat16") == "bf16"
    assert normalize_dtype("float16") == "fp16"
    assert get_device("H100").peak_flops_per_s_for("BFloat16") == 989.4e12


def test_device_data_is_read_only() -> None:
    h100 = get_device("H100")
    with pytest.raises(TypeError):
        h100.peak_flops_per_s["bf16"] = 1.0  # type: ignore[index]
    assert {h100: 1}[get_device("H100-SXM-80GB")] == 1  # hashable, usable as a key


def test_cluster_sizes() -> None:
    nvl72 = get_system("GB200-NVL72")
    rack = nvl72.cluster(n_nodes=18)
    assert rack.n_devices == 72
    # an NVL72 node is a 4-GPU tray: 18 of them are one rack, not 18 racks (a trial read
    # '72 x GB200-NVL72' as 72 racks)
    assert rack.description == (
        "72 GPUs: 18 × GB200-NVL72 trays of 4 GPUs (1 NVLink domain of 72)")
    assert nvl72.cluster(n_nodes=72).description.endswith("(4 NVLink domains of 72)")
    # 128 GPUs run as 2 racks x 64, as the step is costed (perf job_domain_gpus): the text
    # says that placement (a trial read '7 NVLink domains of 72 and 8 GPUs of one more'
    # for 512 GPUs costed as 8 racks of 64)
    assert nvl72.cluster(n_nodes=32).description.endswith(
        "(16 trays in each of 2 NVLink domains of 72)")
    assert nvl72.cluster(n_nodes=128).description.endswith(
        "(16 trays in each of 8 NVLink domains of 72)")
    assert nvl72.cluster(n_nodes=2).description.endswith("(part of one NVLink domain of 72)")
    assert rack.scale_up_domain_gpus == 72
    assert nvl72.cluster(n_nodes=2).scale_up_domain_gpus == 8  # part of one domain
    assert Cluster.from_n_devices(get_system("p6-b200"), 512).n_nodes == 64
    with pytest.raises(MosaicInputError, match=r"multiple of 8 GPUs per node .* got 12"):
        Cluster.from_n_devices(get_system("p6-b200"), 12)
    with pytest.raises(MosaicInputError, match="on part of one host, one of 1, 2, 4; got 6"):
        Cluster.from_n_devices(get_system("p6-b200"), 6)
    # fewer GPUs than a host holds: part of one host (a single-GPU baseline; a trial)
    part = Cluster.from_n_devices(get_system("DGX-H100"), 4)
    assert (part.n_nodes, part.n_devices, part.scale_up_domain_gpus) == (1, 4, 4)
    assert part.description == "4 GPUs of one DGX-H100 (8)"
    with pytest.raises(MosaicInputError, match="part of a host means one node and a divisor"):
        Cluster(get_system("DGX-H100"), 2, gpus_used=4)
    with pytest.raises(MosaicInputError, match="n_nodes must be an integer >= 1, got 0"):
        get_system("DGX-H100").cluster(n_nodes=0)


_MY_DEVICE = """
devices:
  - name: MyAccel-1
    aliases: [myaccel]
    vendor: Acme
    peak_flops_per_s:
      bf16: {value: 1.0e+15, source: "Acme datasheet rev 3"}
    achievable_flops_per_s:
      bf16: {value: 0.7e+15, source: "our GEMM sweep, 2026-01"}
    hbm_bytes: {value: 128.0e+9, source: "Acme datasheet rev 3"}
    hbm_bw_bytes_per_s: {value: 4.0e+12, source: "Acme datasheet rev 3"}
    scale_up_bw_bytes_per_s: {value: 400.0e+9, source: "Acme datasheet rev 3"}
"""

_MY_SYSTEM_ENTRY = """
  - name: my-{device}-node
    device: {device}
    gpus_per_node: {{value: 8, source: "rack drawing"}}
    scale_up_domain_gpus: {{value: 8, source: "rack drawing"}}
    nics_per_node: {{value: 4, source: "rack drawing"}}
    nic_bw_bytes_per_s: {{value: 50.0e+9, source: "400 Gb/s NIC"}}
    scale_out_fabric: RoCE 400 Gb/s
    scale_up_latency_s: {{value: 3.0e-6, source: "nccl-tests"}}
    scale_out_latency_s: {{value: 1.5e-5, source: "nccl-tests"}}
"""


def _systems(*devices: str) -> str:
    return "\nsystems:" + "".join(_MY_SYSTEM_ENTRY.format(device=d) for d in devices)


def _write(tmp_path: Path, text: str, name: str = "hw.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_user_yaml_adds_devices_and_systems(tmp_path: Path) -> None:
    path = _write(tmp_path, _MY_DEVICE + _systems("myaccel", "H200"))
    catalog = load_catalog(path)
    mine = catalog.device("MYACCEL")
    assert mine.name == "MyAccel-1"
    assert mine.achievable_flops_per_s_for("bf16") == 0.7e15
    assert mine.source("hbm_bytes") == "Acme datasheet rev 3"
    node = catalog.system("my-myaccel-node")
    assert node.device is mine
    assert node.scale_out_bw_bytes_per_s == 4 * 50e9 / 8
    assert catalog.system("my-H200-node").device.name == "H200-SXM-141GB"
    assert catalog.device("B200").name == "B200"  # shipped entries stay
    assert "MyAccel-1" not in list_devices()  # the shipped catalog is untouched


def _error(tmp_path: Path, text: str) -> str:
    path = _write(tmp_path, text)
    with pytest.raises(MosaicInputError) as info:
        load_catalog(path)
    message = str(info.value)
    assert str(path) in message
    return message


def test_malformed_yaml_names_the_file_and_line(tmp_path: Path) -> None:
    message = _error(tmp_path, "devices:\n  - name: [unclosed\n")
    assert "malformed YAML at line" in message


def test_a_catalog_that_is_not_text_or_nests_without_end_is_one_line(tmp_path: Path) -> None:
    """A catalog file is read as every input is (bounded, UTF-8, nesting limit): a Latin-1
    byte was an internal error and ``--catalog /dev/zero`` read without end (a review)."""
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"devices:\n  - name: caf\xe9\n")
    with pytest.raises(MosaicInputError, match=r"not UTF-8 text \(byte 0xe9 at offset 22\)"):
        load_catalog(path)
    assert "nested deeper than 64 levels" in _error(tmp_path, "devices: " + "[" * 100 + "]" * 100)


def test_missing_field_names_entry_and_field(tmp_path: Path) -> None:
    message = _error(tmp_path, _MY_DEVICE.replace("    hbm_bytes:", "    # hbm_bytes:"))
    assert "device 'MyAccel-1' (entry 1): field 'hbm_bytes': missing: a number in bytes" in message


@pytest.mark.parametrize("edit, expected", [
    # pydantic's "Field required" named neither the unit nor the {value, source} form (a
    # trial); the units are those of docs/hardware.md's field table
    (("    hbm_bw_bytes_per_s: {value: 4.0e+12, source: \"Acme datasheet rev 3\"}\n", ""),
     "field 'hbm_bw_bytes_per_s': missing: a number in bytes/s, written {value: NUMBER, "
     "source: \"where it comes from\"} (900 GB/s is 9e11)"),
    (("bf16: {value: 1.0e+15, source", "bf16: {source"),
     "field 'peak_flops_per_s.bf16.value': missing: a number in FLOP/s"),
    (("    peak_flops_per_s:\n      bf16: {value: 1.0e+15, source: \"Acme datasheet rev 3\"}\n",
      ""), "field 'peak_flops_per_s': missing: the dense peak FLOP/s of each precision"),
    # a key left empty is as good as missing
    (("      bf16: {value: 1.0e+15, source: \"Acme datasheet rev 3\"}\n", ""),
     "field 'peak_flops_per_s': missing: the dense peak FLOP/s of each precision"),
    (("    hbm_bytes: {value: 128.0e+9, source: \"Acme datasheet rev 3\"}", "    hbm_bytes:"),
     "field 'hbm_bytes': missing: a number in bytes, written {value: NUMBER"),
    (("{value: 128.0e+9, source:", "{value: 128.0e+9, sorce:"),
     "field 'hbm_bytes.sorce': Extra inputs are not permitted; did you mean 'source'?"),
    (("{value: 128.0e+9, source:", "{value: 128.0e+9, sorce:"),
     "field 'hbm_bytes.source': missing: where the number comes from"),
    (("    nics_per_node: {value: 4, source: \"rack drawing\"}\n", ""),
     "system 'my-myaccel-node' (entry 1): field 'nics_per_node': missing: an integer count"),
    # an empty value or source (YAML's null) too: pydantic said 'Input should be a valid
    # number (got None)'
    (("{value: 128.0e+9, source:", "{value: , source:"),
     "field 'hbm_bytes.value': missing: a number in bytes, written {value: NUMBER"),
    (("{value: 128.0e+9, source: \"Acme datasheet rev 3\"}", "{value: 128.0e+9, source: }"),
     "field 'hbm_bytes.source': missing: where the number comes from"),
    (("    nics_per_node: {value: 4,", "    nics_per_node: {value: ,"),
     "field 'nics_per_node.value': missing: an integer count"),
])
def test_a_missing_field_says_its_unit_and_form(tmp_path: Path, edit: tuple[str, str],
                                                expected: str) -> None:
    text = _MY_DEVICE + _systems("myaccel")
    assert edit[0] in text
    # achievable needs its dtype's peak: drop it with the peak table
    if "peak_flops_per_s'" in expected:
        text = text.replace("      bf16: {value: 0.7e+15, source: \"our GEMM sweep, 2026-01\"}\n",
                            "").replace("    achievable_flops_per_s:\n", "")
    assert expected in _error(tmp_path, text.replace(*edit))


def test_negative_value_names_entry_and_field(tmp_path: Path) -> None:
    message = _error(tmp_path, _MY_DEVICE.replace("value: 128.0e+9", "value: -128.0e+9"))
    assert "device 'MyAccel-1' (entry 1): field 'hbm_bytes.value'" in message
    assert "greater than 0" in message


def test_missing_source_is_rejected(tmp_path: Path) -> None:
    message = _error(tmp_path, _MY_DEVICE.replace('"our GEMM sweep, 2026-01"', '""'))
    assert "field 'achievable_flops_per_s.bf16.source'" in message


def test_misspelled_field_and_unknown_dtype_are_rejected(tmp_path: Path) -> None:
    text = _MY_DEVICE.replace("hbm_bw_bytes_per_s", "hbm_bw_bytes")
    text = text.replace("bf16: {value: 1.0", "bf17: {value: 1.0")
    message = _error(tmp_path, text)
    assert "field 'hbm_bw_bytes': Extra inputs are not permitted" in message
    assert "field 'peak_flops_per_s.bf17 (key)'" in message


def test_achievable_above_peak_is_rejected(tmp_path: Path) -> None:
    message = _error(tmp_path, _MY_DEVICE.replace("value: 0.7e+15", "value: 1.7e+15"))
    assert "achievable_flops_per_s.bf16 = 1.7e+15 exceeds peak_flops_per_s.bf16" in message


def test_mesh_link_is_read_and_may_not_exceed_the_gpus_scale_up_rate(tmp_path: Path) -> None:
    """A switchless mesh states its per-peer link: 7 links of 50 GB/s make 350 GB/s; one link
    faster than all of a GPU's links together is a unit or entry error."""
    link = ('    scale_up_link_bw_bytes_per_s: {value: 50.0e+9, source: "Acme mesh, 7 peers"}\n')
    mesh = _MY_DEVICE.replace("value: 400.0e+9", "value: 350.0e+9") + link
    device = load_catalog(_write(tmp_path, mesh + _systems("myaccel"))).device("myaccel")
    assert device.scale_up_link_bw_bytes_per_s == 50e9
    assert device.source("scale_up_link_bw_bytes_per_s") == "Acme mesh, 7 peers"
    message = _error(tmp_path, _MY_DEVICE + link.replace("50.0e+9", "500.0e+9"))
    assert ("scale_up_link_bw_bytes_per_s = 5e+11 (one link to one peer) exceeds "
            "scale_up_bw_bytes_per_s = 4e+11") in message


def test_fractional_gpu_count_is_rejected(tmp_path: Path) -> None:
    message = _error(tmp_path, _systems("H200").replace("value: 8,", "value: 8.5,", 1))
    assert "system 'my-H200-node' (entry 1): field 'gpus_per_node.value'" in message


@pytest.mark.parametrize(("field", "old"), [("gpus_per_node", "value: 8,"),
                                             ("nics_per_node", "value: 4,")])
def test_a_count_beyond_any_node_is_rejected(tmp_path: Path, field: str, old: str) -> None:
    """A 10^30-NIC node was taken, 1.6e39 B/s of scale-out per GPU (a fuzz trial)."""
    text = _systems("H200")
    start = text.index(field)
    text = text[:start] + text[start:].replace(old, "value: " + "1" + "0" * 40 + ",", 1)
    message = _error(tmp_path, text)
    assert f"field '{field}': {field} = a huge integer; allowed: an integer in 1..576" in message


def test_system_with_unknown_device_lists_devices(tmp_path: Path) -> None:
    message = _error(tmp_path, _systems("Z100"))
    assert "system 'my-Z100-node': field 'device': unknown device 'Z100'" in message
    assert "H100-SXM-80GB" in message


def test_a_shipped_name_cannot_be_overridden(tmp_path: Path) -> None:
    message = _error(tmp_path, _MY_DEVICE.replace("aliases: [myaccel]", "aliases: [h-100]"))
    assert (
        "name 'h-100' is already used by device 'H100-SXM-80GB' (shipped devices.yaml)" in message
    )


@pytest.mark.parametrize(("old", "new", "fragment"), [
    ("bf16: {value: 1.0e+15", "bf16: {value: 1000",
     "'peak_flops_per_s.bf16': 1000 FLOP/s is outside 1e+12..1e+18 FLOP/s; give it in FLOP/s"),
    ("hbm_bw_bytes_per_s: {value: 4.0e+12", "hbm_bw_bytes_per_s: {value: 4000",
     "'hbm_bw_bytes_per_s': 4000 bytes/s is outside"),
    ("hbm_bytes: {value: 128.0e+9", "hbm_bytes: {value: 128", "'hbm_bytes': 128 bytes"),
])
def test_a_value_in_the_wrong_unit_is_refused(tmp_path, old, new, fragment):
    """A peak in TFLOP/s (2250) predicted a 3.8e10 s step and 1e-300 gave NaN results, both
    with exit 0 (a trial): catalog values must lie in physical ranges, named with the unit."""
    path = tmp_path / "mine.yaml"
    path.write_text(_MY_DEVICE.replace(old, new))
    with pytest.raises(MosaicInputError, match=re.escape(fragment)):
        load_catalog(path)


def test_a_stated_latency_is_the_one_the_model_uses(tmp_path: Path) -> None:
    """A system's own per-step latencies reach the collective model (they were shown by
    `hardware show` and never used): a 16-rank all-to-all across two nodes has 15 steps,
    so 1 ms more a step is 15 ms more a call."""
    from mosaic.hardware import Cluster
    from mosaic.perf.collectives import all_to_all_time_s
    from mosaic.perf.machine import machine_for

    fast = load_catalog(_write(tmp_path, _MY_DEVICE + _systems("myaccel"), "a.yaml"))
    slow = load_catalog(_write(tmp_path, (_MY_DEVICE + _systems("myaccel")).replace(
        "1.5e-5", "1.015e-3"), "b.yaml"))
    times = []
    for catalog in (fast, slow):
        system = catalog.system("my-myaccel-node")
        assert system.scale_out_latency_s in (1.5e-5, 1.015e-3)
        machine = machine_for(Cluster(system=system, n_nodes=2), "bf16")
        assert machine.interconnect.scale_up_latency_s == 3.0e-6
        times.append(float(all_to_all_time_s(1e6, 16, 1, machine.interconnect)))
    assert times[1] - times[0] == pytest.approx(15 * 1e-3, rel=1e-6)


def test_one_file_naming_an_entry_twice_is_refused(tmp_path: Path) -> None:
    """Merged over the shipped catalog, a later entry replaces an earlier one of another
    file; two of the same file sharing a name or alias crashed (KeyError), or the last won."""
    second = _MY_DEVICE.replace("devices:\n", "").replace("MyAccel-1", "MyAccel-2")
    twice = _MY_DEVICE + second
    path = _write(tmp_path, twice)
    with pytest.raises(MosaicInputError, match="name 'myaccel' is already used by device "
                                               "'MyAccel-1' in the same file"):
        load_catalog(path, override=True)
    systems = _write(tmp_path, _MY_DEVICE + _systems("myaccel", "myaccel"), "s.yaml")
    with pytest.raises(MosaicInputError, match=r"system 'my-myaccel-node'.*in the same file"):
        load_catalog(systems, override=True)


def test_a_nic_rate_in_bits_is_refused(tmp_path: Path) -> None:
    """400 Gb/s typed as 400e9 'bytes/s' gave 400 GB/s of scale-out a GPU, near NVLink."""
    text = (_MY_DEVICE + _systems("myaccel")).replace("50.0e+9", "400.0e+9")
    with pytest.raises(MosaicInputError, match=r"is 3\.2 Tb/s per NIC, above the fastest NIC "
                                               r"announced \(1\.6 Tb/s\): bits typed as bytes"):
        load_catalog(_write(tmp_path, text), override=True)


def test_a_stated_sm_count_sets_the_gemm_waves(tmp_path: Path) -> None:
    """An H20 costed with the H100's fits ran its wave quantisation on 132 SMs: a stated
    count is used (here 78), an unstated one stays the fitted device's."""
    from mosaic.hardware import Cluster
    from mosaic.perf.machine import machine_for

    h20 = _MY_DEVICE.replace("    vendor: Acme\n", "    vendor: Acme\n    kernel_fit: H100\n"
                             "    sm_count: {value: 78, source: \"H20 datasheet\"}\n")
    catalog = load_catalog(_write(tmp_path, h20 + _systems("myaccel")), override=True)
    device = catalog.device("myaccel")
    assert device.sm_count == 78 and device.source("sm_count") == "H20 datasheet"
    machine = machine_for(Cluster(system=catalog.system("my-myaccel-node"), n_nodes=1), "bf16")
    assert machine.sm_count == 78
    assert machine_for(Cluster(system=get_system("p5.48xlarge"), n_nodes=1),
                       "bf16").sm_count == 132


def test_a_device_names_the_node_type_its_bare_name_means(tmp_path: Path) -> None:
    """default_system is catalog data (a Python table before): a user's device names its own
    node type, which `--gpu MyAccel` then plans on; one that does not hold the device, or
    that does not exist, is refused naming the field."""
    from mosaic.hardware import use_catalog
    from mosaic.hardware.default_systems import resolve_system

    with_default = _MY_DEVICE.replace(
        "    aliases: [myaccel]\n", "    aliases: [myaccel]\n    default_system: My-MyAccel-Node\n")
    catalog = load_catalog(_write(tmp_path, with_default + _systems("myaccel")))
    assert catalog.device("myaccel").default_system == "my-myaccel-node"  # canonical name
    use_catalog(_write(tmp_path, with_default + _systems("myaccel"), "mine.yaml"))
    try:
        assert resolve_system("MyAccel").name == "my-myaccel-node"
        assert resolve_system("H100").name == "p5.48xlarge"  # the shipped device's own
    finally:
        use_catalog()
    wrong = with_default.replace("default_system: My-MyAccel-Node", "default_system: DGX-H100")
    assert "field 'default_system': DGX-H100 holds H100-SXM-80GB" in _error(
        tmp_path, wrong + _systems("myaccel"))
    missing = with_default.replace("My-MyAccel-Node", "no-such-node")
    assert "field 'default_system'" in _error(tmp_path, missing + _systems("myaccel"))


def test_overrides_keep_a_bare_name_meaning_what_it_did_or_fall_back(tmp_path: Path) -> None:
    """A user file replacing the shipped p5.48xlarge with a node of its own device leaves the
    shipped H100 no node type to mean (it falls back to the first node type holding it)
    instead of failing on the shipped devices.yaml; a user entry replacing the shipped H100
    without a default_system keeps the shipped one (p5.48xlarge), as its aliases are kept
    (a review found both)."""
    ours = _MY_DEVICE.replace("MyAccel-1", "H100-ours").replace("[myaccel]", "[h100-ours]")
    node = ("\nsystems:" + _MY_SYSTEM_ENTRY.format(device="h100-ours")
            .replace("my-h100-ours-node", "p5.48xlarge"))
    catalog = load_catalog(_write(tmp_path, ours + node, "ours.yaml"), override=True)
    assert catalog.system("p5.48xlarge").device.name == "H100-ours"
    h100 = catalog.device("H100")
    assert h100.default_system is None
    assert any(s.device is h100 for s in catalog.systems.values())  # one object per device
    from mosaic.errors import MosaicNote
    from mosaic.hardware import use_catalog
    from mosaic.hardware.default_systems import resolve_system

    use_catalog(tmp_path / "ours.yaml")
    try:  # the bare name's new meaning is said, not silent
        with pytest.warns(MosaicNote, match="means node type p5.48xlarge in the shipped"):
            assert resolve_system("H100").device.name == "H100-SXM-80GB"
    finally:
        use_catalog()
    renamed = _MY_DEVICE.replace("MyAccel-1", "H100-SXM-80GB").replace("[myaccel]", "[h100]")
    kept = load_catalog(_write(tmp_path, renamed, "h100.yaml"), override=True)
    assert kept.device("H100").default_system == "p5.48xlarge"
    assert kept.system("p5.48xlarge").device is kept.device("H100")


def test_an_empty_peak_table_names_the_precisions_it_may_hold(tmp_path: Path) -> None:
    """pydantic's 'Dictionary should have at least 1 item' (a fuzz trial)."""
    path = tmp_path / "mine.yaml"
    path.write_text(_MY_DEVICE.replace(
        '    peak_flops_per_s:\n      bf16: {value: 1.0e+15, source: "Acme datasheet rev 3"}\n',
        "    peak_flops_per_s: {}\n"))
    with pytest.raises(MosaicInputError, match="'peak_flops_per_s': needs the dense peak of "
                                               "one precision at least, of fp32, tf32"):
        load_catalog(path)


def _fitted_h200(tmp_path: Path, **changes: str) -> Path:
    """A user's H200 borrowing the shipped H200's kernel fits, its figures as CUDA and the
    datasheet's dense, per-direction values give them, with ``changes`` (old -> new)."""
    text = """
devices:
  - name: acme-H200
    vendor: NVIDIA
    kernel_fit: H200
    peak_flops_per_s:
      bf16: {value: 989.5e+12, source: "H200 datasheet: 1,979 TFLOPS with sparsity / 2"}
    hbm_bytes: {value: 1.5011e+11, source: "torch total_memory on our nodes"}
    hbm_bw_bytes_per_s: {value: 4.8e+12, source: "H200 datasheet"}
    scale_up_bw_bytes_per_s: {value: 450.0e+9, source: "NVLink4 900 GB/s bidirectional / 2"}
"""
    for old, new in changes.items():
        assert old in text
        text = text.replace(old, new)
    return _write(tmp_path, text, "h200.yaml")


@pytest.mark.parametrize(("changes", "words"), [
    ({"989.5e+12": "1979.0e+12"}, "peak_flops_per_s.bf16 1.979e+15 is 2x that of "
                                  "H200-SXM-141GB, whose kernel fits it borrows: a datasheet's "
                                  "'with sparsity' figure?"),
    ({"450.0e+9": "900.0e+9"}, "scale_up_bw_bytes_per_s 9e+11 is 2x that of H200-SXM-141GB: a "
                               "bidirectional NVLink total?"),
    ({"1.5011e+11": "141.0e+9"}, "hbm_bytes 1.41e+11 is a whole number of decimal GB (141 GB): "
                                 "a datasheet capacity?"),
])
def test_a_datasheet_figure_in_the_wrong_convention_is_warned_of(tmp_path, changes, words):
    """A trial's user catalog took the 'with sparsity' peak (MFU halved), the bidirectional
    NVLink total (the all-to-all twice as fast) and the datasheet's 141 GB (memory verdicts
    against 131 GiB): each is accepted, with a warning naming the convention."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_catalog(_fitted_h200(tmp_path, **changes), override=True)
    assert [str(w.message) for w in caught if words in str(w.message)], \
        [str(w.message) for w in caught]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the figures as documented: no warning
        load_catalog(_fitted_h200(tmp_path), override=True)


def test_a_node_total_typed_as_one_nic_names_the_field_and_both_causes(tmp_path: Path) -> None:
    """3.2 Tb/s of 4 NICs given as one NIC: the message named '(whole entry)' and only bits
    typed as bytes (a trial)."""
    text = (_MY_DEVICE + _systems("myaccel")).replace("50.0e+9", "400.0e+9").replace(
        "nics_per_node: {value: 4", "nics_per_node: {value: 1")
    with pytest.raises(MosaicInputError, match=r"field 'nic_bw_bytes_per_s': .* or the node's "
                                               r"NICs summed\? give one NIC's rate"):
        load_catalog(_write(tmp_path, text), override=True)


@pytest.mark.parametrize(("text", "words"), [
    ("schema_version: 1\nruns: []\n", "a run-record file (validate and calibrate read it), not "
                                      "a hardware catalog"),
    ("model: {layers: 2}\nbatch: {global_seqs: 8}\n", "a job file (perf, layouts and explain "
                                                      "read it), not a hardware catalog"),
    # a plan's JSON answered "Extra inputs are not permitted" once for each key (a trial)
    ('{"envelope": {}, "search_space": {}, "candidates": [], "optimum": {}}',
     "the file that `mosaic plan --json` writes, not a hardware catalog"),
    ('{"step_time_s": 1.0, "breakdown_s": {}, "memory_breakdown_bytes": {}}',
     "the file that `mosaic perf --json` writes, not a hardware catalog"),
])
def test_another_input_given_as_a_catalog_is_named(tmp_path: Path, text: str, words: str) -> None:
    """A run-record file given as --catalog said "field 'schema_version': Extra inputs are
    not permitted" (a trial)."""
    with pytest.raises(MosaicInputError, match=re.escape(words)):
        load_catalog(_write(tmp_path, text), override=True)


@pytest.mark.parametrize(("text", "words"), [
    # a HuggingFace config.json said "Extra inputs are not permitted" once for each key
    ('{"architectures": ["X"], "model_type": "llama", "hidden_size": 4096, "vocab_size": 8}',
     "has neither a 'devices:' nor a 'systems:' list, so it is not a hardware catalog"),
    ("foo: 1\n", "has neither a 'devices:' nor a 'systems:' list"),
])
def test_a_mapping_with_neither_list_is_said_in_one_line(tmp_path: Path, text: str,
                                                         words: str) -> None:
    with pytest.raises(MosaicInputError, match=re.escape(words)) as refused:
        load_catalog(_write(tmp_path, text, "config.json"), override=True)
    assert "Extra inputs" not in str(refused.value)


@pytest.mark.parametrize("change", [
    ("vendor: Acme", "vendor: Acme\n    architecture: " + "x" * 5000),  # (got {input})
    ("name: MyAccel-1", "name: " + "x" * 5000 + "\n    architecture: nope"),  # its label
])
def test_a_long_catalog_value_is_shown_by_its_start_and_length(tmp_path: Path,
                                                               change: tuple[str, str]) -> None:
    """The schema echoed a bad value and an entry's name whole (mosaic.errors.shown)."""
    with pytest.raises(MosaicInputError) as refused:
        load_catalog(_write(tmp_path, _MY_DEVICE.replace(*change)), override=True)
    message = str(refused.value)
    assert "(5,000 characters)" in message and len(message) < 600, message[:300]


def test_a_misspelt_list_alone_is_still_told_the_list_it_means(tmp_path: Path) -> None:
    """'device:' with no other key is a misspelling, not another file: the suggestion stays."""
    with pytest.raises(MosaicInputError, match="did you mean 'devices'"):
        load_catalog(_write(tmp_path, "device: []\n"), override=True)


@pytest.mark.parametrize(("text", "words"), [
    ("devices: [1]\n", "device (entry 1): field '(whole entry)': each device must be a "
                       "mapping of fields (name, vendor, peak_flops_per_s, ...; "
                       "docs/hardware.md) (got 1)"),
    ("systems:\n  - [x]\n", "each system must be a mapping of fields (name, device, "
                            "gpus_per_node, ...; docs/hardware.md) (got a list)"),
])
def test_an_entry_that_is_no_mapping_is_said_without_pydantic_class_names(
        tmp_path: Path, text: str, words: str) -> None:
    """`devices: [1]` answered "Input should be a valid dictionary or instance of
    DeviceEntry (got 1)", naming a class of the code (a trial)."""
    with pytest.raises(MosaicInputError, match=re.escape(words)) as refused:
        load_catalog(_write(tmp_path, text), override=True)
    assert "Entry" not in str(refused.value)


def test_the_docs_python_examples_run_on_the_docs_catalog_file(tmp_path: Path,
                                                               monkeypatch) -> None:
    """docs/hardware.md's Python blocks run as written against its my_hardware.yaml (the
    first looked up a node type 'my-node' the file does not define; a trial)."""
    docs = (Path(__file__).resolve().parents[2] / "docs" / "hardware.md").read_text()
    start = docs.index("# my_hardware.yaml")
    (tmp_path / "my_hardware.yaml").write_text(docs[start:docs.index("```", start)])
    blocks = re.findall(r"```python\n(.*?)```", docs, flags=re.S)
    assert len(blocks) >= 2
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, "docs/hardware.md", "exec"), namespace)
    assert namespace["cluster"].n_devices == 16 * 8  # the last block: our-b300-pod x 16
    assert namespace["mine"].system("our-b300-pod").device.name == "B300-capped-1100W"
