"""The Table 3 envelope, the --gpu mapping and the search space guards."""

from types import SimpleNamespace

import pytest

from mosaic.errors import MosaicInputError
from mosaic.plan import Envelope, SearchSpace, resolve_system, with_gpus_per_node


def test_table3_envelope_c_peak():
    envelope = Envelope(resolve_system("B200"))
    assert envelope.system.name == "p6-b200.48xlarge"
    assert envelope.n_devices == 256
    assert envelope.c_peak_flops == pytest.approx(9.95e23, rel=1e-3)  # Table 3
    assert envelope.gpu_hours == pytest.approx(256 * 20 * 24)


@pytest.mark.parametrize(("gpu", "system"), [
    ("B200", "p6-b200.48xlarge"), ("H100", "p5.48xlarge"), ("h200", "p5en.48xlarge"),
    ("GB200", "GB200-NVL72"), ("A100", "DGX-A100"),
])
def test_gpu_maps_to_a_catalog_system(gpu, system):
    assert resolve_system(gpu).name == system


def test_system_overrides_and_must_agree_with_gpu(monkeypatch):
    assert resolve_system("H100", "DGX-H100").name == "DGX-H100"
    with pytest.raises(MosaicInputError, match="does not match"):
        resolve_system("B200", "DGX-H100")
    assert resolve_system("MI300X").name == "ND-MI300X-v5"  # the catalog's one MI300X node
    with pytest.raises(MosaicInputError, match="unknown device"):
        resolve_system("X100")
    import mosaic.hardware.default_systems as default_systems

    monkeypatch.setattr(default_systems, "active_catalog", lambda: SimpleNamespace(systems={}))
    with pytest.raises(MosaicInputError, match="no node type in the catalog holds MI300X"):
        resolve_system("MI300X")


def test_gpus_per_node_variant_keeps_per_gpu_links():
    p6 = resolve_system("B200")
    four = with_gpus_per_node(p6, 4)
    assert (four.gpus_per_node, four.scale_up_domain_gpus) == (4, 4)
    assert four.scale_out_bw_bytes_per_s == pytest.approx(p6.scale_out_bw_bytes_per_s)
    with pytest.raises(MosaicInputError, match="must divide"):
        with_gpus_per_node(resolve_system("GB200"), 5)



def test_a_host_size_variant_is_found_by_its_own_name():
    """A plan made with --gpus-per-node names its node type 'p6-b200.48xlarge (4
    GPUs/node)'; the catalog resolves that name to the same variant, so the plan exports
    and predicts as a job (a trial: "unknown system"), and a variant's typo still fails."""
    from mosaic.hardware import get_system

    p6 = resolve_system("B200")
    four = with_gpus_per_node(p6, 4)
    assert get_system(four.name) == four
    with pytest.raises(MosaicInputError, match="must divide"):
        get_system("GB200-NVL72 (5 GPUs/node)")
    with pytest.raises(MosaicInputError, match="unknown system"):
        get_system("no-such-node (4 GPUs/node)")


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"days": 0.0}, "days: got 0.0; allowed: a number in 1e-06..3650"),
    ({"days": float("nan")}, "days: got nan"),
    ({"n_nodes": 0}, "nodes: got 0; allowed: an integer in 1..1048576"),
    ({"n_nodes": 10**12}, "more nodes than any cluster built"),
    ({"global_batch": 0}, "global_batch: got 0; allowed: an integer"),
])
def test_bad_budgets(kwargs, message):
    with pytest.raises(MosaicInputError, match=message):
        Envelope(resolve_system("B200"), **kwargs)


def test_search_space_guards():
    with pytest.raises(MosaicInputError, match="grid axis experts is empty"):
        SearchSpace(experts=())
    with pytest.raises(MosaicInputError, match="TPP range"):
        SearchSpace(tpp_min=150, tpp_max=40)
    with pytest.raises(MosaicInputError, match="architecture grid is empty"):
        SearchSpace(experts=(4,), top_k=(8,)).enumerate()
    assert len(SearchSpace().enumerate()) == 1092  # Table 3 grid after the S >= 0.7 guard
