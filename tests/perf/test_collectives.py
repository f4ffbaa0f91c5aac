"""Alpha-beta collective model: hand-computed cases, placement, tables, vectorisation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mosaic.errors import MosaicInputError
from mosaic.perf.collectives import (
    BusBandwidthTable,
    Interconnect,
    all_gather_time_s,
    all_reduce_time_s,
    all_to_all_time_s,
    collective_estimate,
    ep_and_pp_nodes_spanned,
    group_placement,
    reduce_scatter_time_s,
    send_recv_estimate,
    send_recv_time_s,
)

MICROBENCH = Path(__file__).resolve().parents[2].parent / "shared" / "reference" / "microbench"

# Round numbers so every expected time below is computed by hand:
# NVLink 100 GB/s, NIC 10 GB/s per GPU, alpha 2 us (NVLink) / 10 us (network), launch 5 us.
IC = Interconnect(
    scale_up_domain_gpus=8, gpus_per_node=8, scale_up_bw_bytes_per_s=100e9,
    scale_out_bw_bytes_per_s=10e9, scale_up_latency_s=2e-6, scale_out_latency_s=10e-6,
    launch_latency_s=5e-6, ring_scale_up_efficiency=1.0, ring_scale_out_efficiency=1.0,
    p2p_scale_up_efficiency=1.0, p2p_scale_out_efficiency=1.0)
NO_LATENCY = Interconnect(8, 8, 100e9, 10e9, scale_up_latency_s=0.0, scale_out_latency_s=0.0,
                          launch_latency_s=0.0)
P6_B200 = Interconnect(8, 8, 900e9, 50e9)
MB800 = 800e6


@pytest.mark.parametrize(("n", "stride", "domain", "per_domain", "domains"), [
    (8, 1, 8, 8, 1),     # TP=8 inside an HGX node
    (16, 1, 8, 8, 2),    # contiguous group over two nodes
    (2, 8, 8, 1, 2),     # one rank per node (e.g. expert-DP with EP=8)
    (4, 2, 8, 4, 1),     # ranks 0,2,4,6
    (8, 2, 8, 4, 2),     # ranks 0..14 step 2
    (16, 1, 72, 8, 2),   # blocks of 16 straddle the 72-GPU edge at 64..79
    (8, 9, 72, 8, 1),    # ranks 0..63 step 9 inside one NVL72 domain
    (3, 1, 8, 1, 3),     # block 6..8 straddles: thinnest part has one rank
])
def test_group_placement(n, stride, domain, per_domain, domains):
    p = group_placement(n, stride, domain)
    assert int(p.ranks_per_domain) == per_domain
    assert int(p.domains_spanned) == domains
    assert bool(p.inside_domain) == (domains == 1)


def test_nodes_spanned_uses_host_size_not_nvlink_domain():
    nvl72 = Interconnect(72, 4, 900e9, 50e9)
    ep_nodes, _ = ep_and_pp_nodes_spanned(16, 1, 1, 1, 1, 16, nvl72.gpus_per_node)
    assert int(ep_nodes) == 4
    assert bool(group_placement(16, 1, nvl72.scale_up_domain_gpus).inside_domain) is False


def test_ring_all_gather_inside_node_by_hand():
    # 5 us + 7 x 2 us + 7/8 x 800 MB / 100 GB/s
    assert float(all_gather_time_s(MB800, 8, 1, IC)) == pytest.approx(5e-6 + 14e-6 + 7e-3,
                                                                       rel=1e-12)


def test_ring_all_gather_across_nodes_is_nic_bound_by_hand():
    # 16 contiguous ranks, 8 per node: ring bandwidth min(100, 8 x 10) = 80 GB/s
    contiguous = 5e-6 + 15 * 10e-6 + 15 / 16 * MB800 / 80e9
    assert float(all_gather_time_s(MB800, 16, 1, IC)) == pytest.approx(contiguous, rel=1e-12)
    # one rank per node: a single 10 GB/s NIC
    strided = 5e-6 + 10e-6 + 0.5 * MB800 / 10e9
    assert float(all_gather_time_s(MB800, 2, 8, IC)) == pytest.approx(strided, rel=1e-12)


def test_reduce_scatter_matches_all_gather():
    n, stride = np.array([8, 16, 2]), np.array([1, 1, 8])
    np.testing.assert_allclose(reduce_scatter_time_s(MB800, n, stride, IC),
                               all_gather_time_s(MB800, n, stride, IC), rtol=1e-15)


@pytest.mark.parametrize(("n", "stride"), [(8, 1), (4, 2), (2, 8), (4, 8)])
def test_all_reduce_is_twice_reduce_scatter_in_bandwidth_regime(n, stride):
    ar = float(all_reduce_time_s(MB800, n, stride, NO_LATENCY))
    assert ar == pytest.approx(2 * float(reduce_scatter_time_s(MB800, n, stride, NO_LATENCY)),
                               rel=1e-12)
    huge = 1e12
    ratio = all_reduce_time_s(huge, n, stride, P6_B200) / reduce_scatter_time_s(
        huge, n, stride, P6_B200)
    assert float(ratio) == pytest.approx(2.0, rel=1e-3)


def test_all_reduce_across_nodes_is_hierarchical_by_hand():
    # 16 ranks = 2 nodes x 8: max(intra 2*7/8*F/100 GB/s, inter 2*1/2*F/(8 x 10 GB/s))
    bandwidth_s = max(2 * 7 / 8 * MB800 / 100e9, 2 * 0.5 * MB800 / 80e9)
    expected = 5e-6 + 2 * 15 * 10e-6 + bandwidth_s
    assert float(all_reduce_time_s(MB800, 16, 1, IC)) == pytest.approx(expected, rel=1e-12)


def test_tiny_messages_are_latency_bound_and_run_nccl_ll():
    # LL's per-step latency is 0.6/3.4 of Simple's on NVLink (NCCL tuning model): 14 steps
    # of 2 us x 0.176 after the 5 us launch; the bandwidth term is ~1e-10 s.
    t8 = float(all_reduce_time_s(8, 8, 1, IC))
    assert t8 == pytest.approx(5e-6 + 2 * 7 * 2e-6 * 0.176, rel=1e-4)
    assert float(all_reduce_time_s(16, 8, 1, IC)) == pytest.approx(t8, rel=1e-4)
    assert float(all_reduce_time_s(MB800, 8, 1, IC)) > 100 * t8


def test_protocol_crossover_by_hand():
    # 8-rank all-gather inside a node; Simple: 7 x 2 us + 7/8 F / 100 GB/s. LL: 7 x 0.352 us
    # + 7/8 F / min(50 GB/s, 141 GB/s cap). LL128: 7 x 1.118 us + 7/8 F / 92 GB/s.
    def by_hand(full_bytes: float) -> float:
        wire = 7 / 8 * full_bytes
        simple = 7 * 2e-6 + wire / 100e9
        ll128 = 7 * 2e-6 * 0.559 + wire / 92e9
        ll = 7 * 2e-6 * 0.176 + wire / 50e9
        return 5e-6 + min(simple, ll128, ll)

    for size in (1e3, 64e3, 1e6, 64e6):
        assert float(all_gather_time_s(size, 8, 1, IC)) == pytest.approx(by_hand(size),
                                                                         rel=1e-12)
    # Small messages take LL, large ones Simple (the fitted regime, unchanged).
    assert by_hand(1e3) < 5e-6 + 7 * 2e-6
    assert float(all_gather_time_s(64e6, 8, 1, IC)) == pytest.approx(
        5e-6 + 7 * 2e-6 + 7 / 8 * 64e6 / 100e9, rel=1e-12)


def test_all_to_all_inside_vs_across_node_by_hand():
    inside = 5e-6 + 7 * 2e-6 + 7 / 8 * MB800 / 100e9     # all 7/8 over NVLink
    across = 5e-6 + 7 * 10e-6 + 7 / 8 * MB800 / 10e9     # one rank per node: all via NIC
    t_in = float(all_to_all_time_s(MB800, 8, 1, IC))
    t_out = float(all_to_all_time_s(MB800, 8, 8, IC))
    assert t_in == pytest.approx(inside, rel=1e-12)
    assert t_out == pytest.approx(across, rel=1e-12)
    # bandwidth terms differ by exactly NVLink / NIC = 10
    assert (t_out - 75e-6) / (t_in - 19e-6) == pytest.approx(10.0, rel=1e-12)


def test_all_to_all_over_two_nodes_by_hand():
    # 16 ranks, 8 per node: 7/16 of the buffer over NVLink, 8/16 through the NIC, concurrent
    expected = 5e-6 + 15 * 10e-6 + max(7 / 16 * MB800 / 100e9, 8 / 16 * MB800 / 10e9)
    assert float(all_to_all_time_s(MB800, 16, 1, IC)) == pytest.approx(expected, rel=1e-12)


def test_expert_parallel_inside_node_much_cheaper_on_p6():
    dispatch = 256e6
    inside = float(all_to_all_time_s(dispatch, 8, 1, P6_B200))
    across = float(all_to_all_time_s(dispatch, 8, 8, P6_B200))
    assert across > 5 * inside


def test_single_rank_group_costs_nothing():
    t, source = collective_estimate("all_reduce", [MB800, MB800], [1, 8], 1, IC)
    assert t[0] == 0.0 and t[1] > 0.0
    assert list(source) == ["analytical", "analytical"]


def test_send_recv_by_hand():
    t = send_recv_time_s([1e9, 1e9], [False, True], IC)
    np.testing.assert_allclose(t, [5e-6 + 2e-6 + 1e9 / 100e9, 5e-6 + 10e-6 + 1e9 / 10e9],
                               rtol=1e-12)


# A switchless full mesh of 8 (MI300X-like, round numbers): 70 GB/s per GPU over 7 links of
# 10 GB/s, one to each peer; otherwise IC's constants.
MESH = Interconnect(
    scale_up_domain_gpus=8, gpus_per_node=8, scale_up_bw_bytes_per_s=70e9,
    scale_out_bw_bytes_per_s=10e9, scale_up_latency_s=2e-6, scale_out_latency_s=10e-6,
    launch_latency_s=5e-6, ring_scale_up_efficiency=1.0, ring_scale_out_efficiency=1.0,
    p2p_scale_up_efficiency=1.0, p2p_scale_out_efficiency=1.0,
    scale_up_link_bw_bytes_per_s=10e9)


def test_mesh_groups_move_over_their_own_links_only_by_hand():
    """On a switchless mesh a GPU reaches its k-1 group peers of the node over k-1 direct
    links: a pair gets one link (10 GB/s), four ranks three (30), all eight the whole 70;
    a switch (IC) gives any group the full rate."""
    pair = 5e-6 + 2e-6 + 0.5 * MB800 / 10e9  # ring all-gather, n = 2
    assert float(all_gather_time_s(MB800, 2, 1, MESH)) == pytest.approx(pair, rel=1e-12)
    four = 5e-6 + 3 * 2e-6 + 0.75 * MB800 / 30e9  # ranks 0, 2, 4, 6
    assert float(reduce_scatter_time_s(MB800, 4, 2, MESH)) == pytest.approx(four, rel=1e-12)
    eight = 5e-6 + 7 * 2e-6 + 7 / 8 * MB800 / 70e9
    assert float(all_gather_time_s(MB800, 8, 1, MESH)) == pytest.approx(eight, rel=1e-12)
    a2a_pair = 5e-6 + 2e-6 + 0.5 * MB800 / 10e9
    assert float(all_to_all_time_s(MB800, 2, 1, MESH)) == pytest.approx(a2a_pair, rel=1e-12)
    # a pipeline hand-off inside the node: the one link to the next stage
    assert float(send_recv_time_s(1e9, False, MESH)) == pytest.approx(
        5e-6 + 2e-6 + 1e9 / 10e9, rel=1e-12)
    # the switch: a pair moves at the whole 100 GB/s
    assert float(all_gather_time_s(MB800, 2, 1, IC)) == pytest.approx(
        5e-6 + 2e-6 + 0.5 * MB800 / 100e9, rel=1e-12)
    # one rank a node: the NICs bound it as on a switch
    assert float(all_gather_time_s(MB800, 2, 8, MESH)) == pytest.approx(
        float(all_gather_time_s(MB800, 2, 8, IC)), rel=1e-12)


def test_mi300x_pair_gets_one_xgmi_link_all_eight_get_seven():
    """The shipped MI300X node: a TP pair's ring moves at one 64 GB/s xGMI link, an 8-GPU
    group at all seven (448 GB/s); before, the pair was costed at 448 GB/s too."""
    from mosaic.hardware import Cluster, get_system
    from mosaic.perf.machine import machine_for

    mi300x = machine_for(Cluster(system=get_system("ND-MI300X-v5"), n_nodes=1),
                         "bf16").interconnect
    size = 8e9  # bandwidth-bound: tens of microseconds of latency against 16-110 ms

    def bus_bw(n: int) -> float:
        return (n - 1) / n * size / float(all_gather_time_s(size, n, 1, mi300x))

    assert bus_bw(2) == pytest.approx(64e9 * mi300x.ring_scale_up_efficiency, rel=5e-3)
    assert bus_bw(8) == pytest.approx(448e9 * mi300x.ring_scale_up_efficiency, rel=5e-3)


def test_vectorised_equals_scalar_calls():
    rng = np.random.default_rng(7)
    size = rng.uniform(1e3, 1e10, 40)
    n = rng.choice([1, 2, 4, 8, 16, 32, 64], 40)
    stride = rng.choice([1, 2, 8, 16], 40)
    for fn in (all_gather_time_s, reduce_scatter_time_s, all_reduce_time_s, all_to_all_time_s):
        vector = fn(size, n, stride, P6_B200)
        scalar = [float(fn(s, int(k), int(d), P6_B200)) for s, k, d in zip(size, n, stride,
                                                                           strict=True)]
        np.testing.assert_allclose(vector, scalar, rtol=1e-15)
    crosses = rng.random(40) < 0.5
    np.testing.assert_allclose(send_recv_time_s(size, crosses, P6_B200),
                               [float(send_recv_time_s(s, c, P6_B200))
                                for s, c in zip(size, crosses, strict=True)], rtol=1e-15)


def test_broadcasting_keeps_shape():
    t = all_gather_time_s(np.array([[1e6], [1e9]]), np.array([2, 8, 16]), 1, P6_B200)
    assert t.shape == (2, 3)


def test_interconnect_rejects_bad_values():
    with pytest.raises(MosaicInputError, match="ring_scale_up_efficiency"):
        Interconnect(8, 8, 900e9, 50e9, ring_scale_up_efficiency=1.5)
    with pytest.raises(MosaicInputError, match="scale_out_bw_bytes_per_s"):
        Interconnect(8, 8, 900e9, 0.0)
    with pytest.raises(MosaicInputError, match="stride"):
        all_gather_time_s(1e6, 8, 0, P6_B200)


# --- measured bus-bandwidth tables ---------------------------------------------------------

def _table() -> BusBandwidthTable:
    rows = [
        # all-gather inside a node, 8 ranks: 10 GB/s at 1 MB, 100 GB/s at 100 MB
        ("all_gather", 8, 1e6, 10e9, "intra", 8),
        ("all_gather", 8, 1e8, 100e9, "intra", 8),
        # all-to-all over nodes, 8 ranks per node: 16 and 32 ranks
        ("all_to_all", 16, 1e6, 20e9, "inter", 8),
        ("all_to_all", 16, 1e8, 40e9, "inter", 8),
        ("all_to_all", 32, 1e6, 10e9, "inter", 8),
        ("all_to_all", 32, 1e8, 20e9, "inter", 8),
    ]
    columns = ["collective", "group_size", "message_bytes", "bus_bw_bytes_per_s", "scope",
               "ranks_per_domain"]
    return BusBandwidthTable(pd.DataFrame(rows, columns=columns))


def test_table_exact_at_measured_points():
    t, source = collective_estimate("all_gather", [1e6, 1e8], 8, 1, IC, _table())
    np.testing.assert_allclose(t, [7 / 8 * 1e6 / 10e9, 7 / 8 * 1e8 / 100e9], rtol=1e-12)
    assert list(source) == ["measured", "measured"]


def test_table_log_log_interpolation_between_sizes():
    t, source = collective_estimate("all_gather", 1e7, 8, 1, IC, _table())
    busbw = np.sqrt(10e9 * 100e9)  # log-midpoint of the two measured sizes
    assert float(t) == pytest.approx(7 / 8 * 1e7 / busbw, rel=1e-12)
    assert str(source) == "measured"


def test_table_log_n_interpolation_between_group_sizes():
    # n = 24 (3 nodes x 8) between measured 16 and 32, weight log(24/16)/log(2)
    w = np.log(1.5) / np.log(2.0)
    busbw = np.exp((1 - w) * np.log(20e9) + w * np.log(10e9))
    t, source = collective_estimate("all_to_all", 1e6, 24, 1, IC, _table())
    assert float(t) == pytest.approx(23 / 24 * 1e6 / busbw, rel=1e-12)
    assert str(source) == "measured"


def test_table_falls_back_to_analytical_and_labels_it():
    table = _table()
    cases = [
        ("all_gather", 1e9, 8, 1),    # above the measured sizes
        ("all_gather", 1e5, 8, 1),    # below
        ("all_gather", 1e7, 4, 1),    # unmeasured group size
        ("all_to_all", 1e7, 64, 1),   # group size beyond the measured 16..32
        ("all_to_all", 1e7, 16, 8),   # same n but one rank per node: another layout
        ("all_reduce", 1e7, 8, 1),    # collective not in the table
    ]
    for op, size, n, stride in cases:
        t, source = collective_estimate(op, size, n, stride, IC, table)
        assert str(source) == "analytical", (op, size, n, stride)
        assert float(t) == float(collective_estimate(op, size, n, stride, IC)[0])


def test_table_without_layout_column_matches_any_layout():
    frame = pd.DataFrame({"collective": ["send_recv", "send_recv"], "group_size": [2, 2],
                          "message_bytes": [1e6, 1e8], "bus_bw_bytes_per_s": [5e9, 25e9],
                          "scope": ["inter", "inter"]})
    t, source = send_recv_estimate([1e8, 1e8], [True, False], IC, BusBandwidthTable(frame))
    assert t[0] == pytest.approx(1e8 / 25e9, rel=1e-12)
    assert list(source) == ["measured", "analytical"]


def test_table_from_csv_and_validation(tmp_path):
    path = tmp_path / "busbw.csv"
    pd.DataFrame({"collective": ["all_gather"], "group_size": [8], "message_bytes": [1e6],
                  "bus_bw_bytes_per_s": [1e10], "scope": ["intra"]}).to_csv(path, index=False)
    t, source = collective_estimate("all_gather", 1e6, 8, 1, IC,
                                    BusBandwidthTable.from_file(path))
    assert float(t) == pytest.approx(7 / 8 * 1e6 / 1e10) and str(source) == "measured"
    with pytest.raises(MosaicInputError, match="scope"):
        BusBandwidthTable(pd.DataFrame({"collective": ["all_gather"], "group_size": [8],
                                        "message_bytes": [1e6], "bus_bw_bytes_per_s": [1e10],
                                        "scope": ["rack"]}))
    with pytest.raises(MosaicInputError, match="lacks columns"):
        BusBandwidthTable(pd.DataFrame({"collective": ["all_gather"]}))


# --- against the ScalePlan p6-b200 measurements ------------------------------------------

def _scaleplan_collectives() -> pd.DataFrame:
    if not MICROBENCH.is_dir():
        pytest.skip(f"ScalePlan microbenchmarks not found at {MICROBENCH} (../shared absent)")
    frames = []
    for name, stride in (("dp_collectives_b200_4node", 1), ("dp_collectives_b200_stride8", 8)):
        d = pd.read_parquet(MICROBENCH / f"{name}.parquet")
        frames.append(d.assign(stride=stride, message_bytes=d["payload_bytes"]))
    a2a = pd.read_parquet(MICROBENCH / "a2a_b200_4node.parquet")
    frames.append(a2a.assign(stride=1, collective="all_to_all", message_bytes=a2a["buffer_bytes"],
                             busbw_gbps_p50=a2a["egress_gbps_p50"]))
    rows = pd.concat(frames, ignore_index=True)
    rows = rows[rows["status"] == "OK"].reset_index(drop=True)
    placement = group_placement(rows["group_size"], rows["stride"], 8)
    return rows.assign(time_s=rows["time_ms_p50"] * 1e-3,
                       bus_bw_bytes_per_s=rows["busbw_gbps_p50"] * 1e9,
                       scope=np.where(placement.inside_domain, "intra", "inter"),
                       ranks_per_domain=placement.ranks_per_domain)


def test_scaleplan_table_reproduces_measurements_and_model_error_is_bounded():
    rows = _scaleplan_collectives()
    table = BusBandwidthTable(rows)
    for op, g in rows.groupby("collective"):
        args = (g["message_bytes"], g["group_size"], g["stride"], P6_B200)
        measured_t, source = collective_estimate(op, *args, table)
        np.testing.assert_allclose(measured_t, g["time_s"], rtol=1e-9)
        assert set(source) == {"measured"}
        analytical_t = collective_estimate(op, *args)[0]
        mape = np.mean(np.abs(analytical_t / g["time_s"].to_numpy() - 1))
        assert mape < 0.2, f"{op}: analytical MAPE {mape:.1%} vs ScalePlan"


def test_node_deduplicated_dispatch_by_hand():
    # 16 ranks over 2 nodes, 8 experts (4 per node), top-2: a token hits the remote node
    # with probability 1 - C(4,2)/C(8,2) = 1 - 6/28, so 22/28 of its bytes cross the NIC
    # instead of the pairwise all-to-all's K·(n-k)/n = 1.
    from mosaic.perf.collectives import DEEPEP_NVLINK_EFFICIENCY, node_deduplicated_dispatch_time_s

    # NVLink legs run at DeepEP's measured 153 of H800's 200 GB/s per direction.
    assert pytest.approx(0.765) == DEEPEP_NVLINK_EFFICIENCY
    token_bytes = 80e6
    inter = (22 / 28) * token_bytes / 10e9
    intra = 2 * 15 / 16 * token_bytes / (100e9 * 0.765)
    expected = 5e-6 + 15 * 10e-6 + max(inter, intra)
    got = float(node_deduplicated_dispatch_time_s(token_bytes, 2, 8, 16, 1, IC))
    assert got == pytest.approx(expected, rel=1e-12)
    assert got < float(all_to_all_time_s(2 * token_bytes, 16, 1, IC))
    # Inside one node nothing crosses the network: K copies, (n-1)/n of them over NVLink.
    inside = float(node_deduplicated_dispatch_time_s(token_bytes, 2, 8, 8, 1, IC))
    assert inside == pytest.approx(5e-6 + 7 * 2e-6 + 2 * 7 / 8 * token_bytes / (100e9 * 0.765),
                                   rel=1e-12)


def test_efa_systems_run_only_the_simple_protocol():
    from dataclasses import replace

    from mosaic.hardware import Cluster, get_system
    from mosaic.perf.machine import machine_for

    efa = machine_for(Cluster(system=get_system("p6-b200.48xlarge"), n_nodes=1), "bf16")
    infiniband = machine_for(Cluster(system=get_system("DGX-B200"), n_nodes=1), "bf16")
    assert not efa.interconnect.low_latency_protocols
    assert infiniband.interconnect.low_latency_protocols
    # Same links otherwise: a tiny all-gather pays Simple's full per-step latency on EFA.
    simple_only = replace(IC, low_latency_protocols=False)
    assert float(all_gather_time_s(1e3, 8, 1, simple_only)) == pytest.approx(
        5e-6 + 7 * 2e-6 + 7 / 8 * 1e3 / 100e9, rel=1e-12)
    assert float(all_gather_time_s(1e3, 8, 1, IC)) < float(
        all_gather_time_s(1e3, 8, 1, simple_only))
