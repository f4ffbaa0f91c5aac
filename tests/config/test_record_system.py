"""A run record may name the catalog node type it ran on (its network differs from the
GPU's reference system); the node type must hold the record's GPU and host sizes."""

from copy import deepcopy
from pathlib import Path

import pytest
import yaml

from mosaic.config.run_records import _validate_entry, run_record_from_entry
from mosaic.errors import MosaicInputError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "runs_example.yaml"


def _dense_record() -> dict:
    record = deepcopy(yaml.safe_load(EXAMPLES.read_text())["runs"][0])
    record["gpu"] = "H100-SXM-80GB"
    return record


def test_a_named_node_type_sets_the_network_the_model_uses():
    reference = run_record_from_entry(_validate_entry(_dense_record(), "t"))
    raw = _dense_record()
    raw["system"] = "HGX-H100-800G"
    named = run_record_from_entry(_validate_entry(raw, "t"))
    assert named.system.name == "HGX-H100-800G"
    # 800 Gb/s per node against the reference DGX's 8 x 400 Gb/s: a quarter per GPU.
    assert named.system.scale_out_bw_bytes_per_s == pytest.approx(
        reference.system.scale_out_bw_bytes_per_s / 4)


def test_a_node_type_of_another_gpu_is_refused():
    raw = _dense_record()
    raw["system"] = "HGX-A100-400G"
    with pytest.raises(MosaicInputError, match="not the record's gpu H100-SXM-80GB"):
        run_record_from_entry(_validate_entry(raw, "t"))
