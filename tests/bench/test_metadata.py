"""Run metadata: versions and host recorded, a stable fingerprint id, no raw host name."""

import socket

import pytest

from mosaic.bench import metadata

torch = pytest.importorskip("torch")


def test_cpu_metadata_records_versions_and_a_stable_id():
    device = torch.device("cpu")
    first, second = metadata.collect(device), metadata.collect(device)
    assert first["torch_version"] == torch.__version__
    assert first["device_type"] == "cpu" and first["device_name"].startswith("cpu:")
    assert first["metadata_id"] == second["metadata_id"]  # same machine and software
    assert len(first["metadata_id"]) == 12
    assert first["fingerprint"]["torch_version"] == torch.__version__
    assert "created_utc" not in first["fingerprint"]  # timestamps do not split runs


def test_hostname_is_hashed_not_recorded():
    meta = metadata.collect(torch.device("cpu"))
    assert socket.gethostname() not in str(meta)
    assert meta["hostname_hash"] == metadata.hostname_hash(socket.gethostname())
    assert metadata.hostname_hash("a") != metadata.hostname_hash("b")


def test_a_software_change_changes_the_id():
    base = {"torch_version": "2.5.0", "driver_version": "550.54", "device_name": "H200"}
    upgraded = {**base, "driver_version": "570.86"}
    assert metadata.metadata_id(base) != metadata.metadata_id(upgraded)
    assert metadata.metadata_id(base) == metadata.metadata_id(dict(reversed(base.items())))


def test_without_nvidia_smi_there_is_nothing_to_query(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    assert metadata.nvidia_smi() == {}
    assert metadata.topology() is None


def test_a_cpu_is_named_by_its_model_not_only_its_architecture():
    """Two x86_64 CPUs were both 'cpu:x86_64' (a trial): the model name from /proc/cpuinfo
    ('model name' on x86, 'Model' on Arm boards) names the device, the architecture only
    where the system gives no model."""
    xeon = ("processor\t: 0\nvendor_id\t: GenuineIntel\n"
            "model name\t: Intel(R) Xeon(R)  Platinum 8480C\n")
    assert metadata.cpu_model(xeon) == "Intel(R) Xeon(R) Platinum 8480C"
    assert metadata.cpu_model("Hardware\t: BCM2835\nModel\t\t: Raspberry Pi 4 Model B\n") == (
        "Raspberry Pi 4 Model B")
    import platform

    assert metadata.cpu_model("") == (platform.processor() or platform.machine())
    meta = metadata.collect(torch.device("cpu"))
    assert meta["device_name"] == "cpu:" + meta["cpu_model"] == "cpu:" + metadata.cpu_model()
