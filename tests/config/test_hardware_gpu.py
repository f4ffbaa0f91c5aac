"""A job may name its accelerator (hardware.gpu) instead of a node type: it runs on that
GPU's usual node type, as `mosaic plan --gpu` does, and says so; a stated node type wins
and must hold the named GPU."""

from pathlib import Path

import pytest
import yaml

from mosaic.config.job_schema import job_from_document
from mosaic.errors import MosaicInputError
from mosaic.hardware import get_system

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fsdp_moe_comm_bound.yaml"


def _document(**hardware) -> dict:
    document = yaml.safe_load(EXAMPLE.read_text())
    document["hardware"] = {"nodes": 2, **hardware}
    del document["parallelism"]["dp"]  # from the nodes: all of their GPUs
    document["batch"]["global_seqs"] = 16
    return document


@pytest.mark.parametrize(("gpu", "system"), [("H100", "p5.48xlarge"),
                                             ("H200-SXM-141GB", "p5en.48xlarge"),
                                             ("GB200", "GB200-NVL72")])
def test_a_gpu_runs_on_its_usual_node_type_and_the_job_says_so(gpu, system):
    spec = job_from_document(_document(gpu=gpu), "job.yaml")
    assert spec.system_name == system
    # nodes x the node type's GPUs (8 on p5/p5en hosts, 4 per GB200 compute tray)
    assert spec.n_devices == 2 * get_system(system).gpus_per_node
    assert any(line.startswith(f"hardware.system unstated: {system}")
               for line in spec.assumptions)


def test_every_default_node_type_holds_its_gpu():
    from mosaic.hardware import get_device, list_devices

    named = [get_device(name) for name in list_devices()]
    defaults = {d.name: d.default_system for d in named if d.default_system is not None}
    assert len(defaults) >= 9  # every NVIDIA part the catalog ships
    for device, system in defaults.items():
        assert get_system(system).device.name == device


def test_a_stated_node_type_wins_and_must_hold_the_gpu():
    spec = job_from_document(_document(gpu="H100", system="DGX-H100"), "job.yaml")
    assert spec.system_name == "DGX-H100"
    assert not any(line.startswith("hardware.system unstated") for line in spec.assumptions)
    with pytest.raises(MosaicInputError, match=r"job.yaml: hardware.gpu B200 does not match "
                                               r"hardware.system DGX-H100"):
        job_from_document(_document(gpu="B200", system="DGX-H100"), "job.yaml")


def test_a_job_names_one_of_the_two():
    with pytest.raises(MosaicInputError, match=r"job.yaml: hardware: give system .* or gpu"):
        job_from_document(_document(), "job.yaml")
    with pytest.raises(MosaicInputError, match=r"job.yaml: .*H1OO"):
        job_from_document(_document(gpu="H1OO"), "job.yaml")


def test_a_gpu_that_a_stated_node_type_does_not_hold_names_the_ones_that_do():
    """A file naming its node type, its GPU overridden with --set hardware.gpu, was told to
    "drop one of them", which --set cannot do (a trial): the message names the node types
    holding that GPU: for an A100, DGX-A100 and fms-fsdp's HGX-A100-400G
    (docs/hardware.md "Shipped systems")."""
    with pytest.raises(MosaicInputError) as info:
        job_from_document(_document(gpu="A100", system="DGX-H100"), "job.yaml")
    assert str(info.value).endswith("or give hardware.system one holding A100-SXM-80GB: "
                                    "DGX-A100, HGX-A100-400G")
