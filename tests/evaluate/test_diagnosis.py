"""Diagnosis: what bounds a step, gap attribution checked by hand, and ranked levers."""

import math
from dataclasses import fields, replace
from pathlib import Path

import numpy as np
import pytest

from mosaic.arch import ladder_geometry
from mosaic.config.job_schema import load_job
from mosaic.errors import MosaicInputError
from mosaic.evaluate.diagnosis import (
    GIB,
    WORKLOAD_LEVERS,
    MemoryStatus,
    attribute_gap,
    classify_term,
    diagnose,
    effective_class_times_s,
    measured_step_time,
    memory_overshoot_text,
    plan_candidates,
    plans_from_rows,
    rank_levers,
)
from mosaic.evaluate.job import predict_job
from mosaic.hardware import Cluster, get_system
from mosaic.perf.calibration import default_calibration
from mosaic.perf.machine import machine_for
from mosaic.perf.plan import Checkpointing, Sharding, single_plan
from mosaic.perf.step_time import StepPrediction, predict_step
from mosaic.perf.workload import Dispatcher, Workload

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
COMM_BOUND = EXAMPLES / "fsdp_moe_comm_bound.yaml"
# Drop-and-pad routing: no MoE layer waits on the host for its 128 local experts' counts,
# which leaves the FSDP communication the largest cost (the example's header)
DROP_AND_PAD = ("performance.routing=token_drop", "performance.pad_to_capacity=true")
CALIBRATION = default_calibration()


def job(path: Path = COMM_BOUND, *overrides: str):
    return predict_job(load_job(path, list(overrides)), CALIBRATION)


def hand_prediction(breakdown_s: dict[str, float]) -> StepPrediction:
    """A one-plan StepPrediction with a hand-made breakdown (other fields zero)."""
    values = {f.name: np.zeros(1) for f in fields(StepPrediction)}
    analytic = {name: s for name, s in breakdown_s.items() if name != "calibration"}
    analytic_s = sum(analytic.values())
    values["analytic_breakdown_s"] = {name: np.array([s]) for name, s in analytic.items()}
    values["labels"] = {name: "analytical" for name in (*analytic, "calibration")}
    values["memory_breakdown_bytes"] = {}
    # a "calibration" term is the calibrated multiplier's excess over the analytic step
    values["step_multiplier"] = np.array([1 + breakdown_s.get("calibration", 0.0) / analytic_s])
    values["analytic_step_time_s"] = np.array([analytic_s])
    values["step_time_s"] = np.array([sum(breakdown_s.values())])
    return StepPrediction(**values)


@pytest.fixture(scope="module")
def comm_bound():
    return diagnose(job(COMM_BOUND, *DROP_AND_PAD), CALIBRATION)


def test_example_predicts_a_few_percent_mfu(comm_bound):
    assert 0.02 <= comm_bound.result.prediction.mfu[0] <= 0.05


def test_example_is_bound_by_exposed_fsdp_communication(comm_bound):
    bound = comm_bound.bound
    assert bound.limiter == "communication"
    assert bound.time_class == "communication"
    assert bound.part == "dp/fsdp"
    assert bound.classes_s["communication"] == max(bound.classes_s.values())
    assert bound.time_share > 0.4
    assert sum(bound.classes_s.values()) == pytest.approx(
        comm_bound.result.prediction.step_time_s[0], rel=1e-12)
    assert bound.summary.startswith("communication-bound")


def test_dropless_the_example_waits_on_the_host_first():
    """As shipped (dropless), every MoE layer synchronises with the host and the grouped
    GEMMs of its 128 local experts are host-bound: the sync outweighs the FSDP traffic."""
    diagnosis = diagnose(job(), CALIBRATION)
    breakdown = diagnosis.result.prediction.breakdown_s
    assert diagnosis.bound.limiter == "dispatch"
    assert max(breakdown, key=lambda name: breakdown[name][0]) == "moe_host_sync"


def test_top_lever_is_a_real_feasible_fix(comm_bound):
    top = comm_bound.levers[0]
    assert top.feasible and top.reason is None
    assert top.gain > 1.4
    assert top.name == "ep_in_domain"
    assert top.plan["ep"] == 8  # one p5 node: the EP group stays on NVLink


def test_rule_breaking_lever_is_reported_with_its_rule(comm_bound):
    lever = next(x for x in comm_bound.levers if x.name == "micro_batch_double")
    assert not lever.feasible
    assert "dp·micro_batch=256·2 must divide global_batch=256" in lever.reason
    assert math.isnan(lever.step_time_s) and math.isnan(lever.gain)
    assert comm_bound.levers[-1] is lever or math.isnan(comm_bound.levers[-1].gain)


def test_out_of_memory_lever_says_by_how_much(comm_bound):
    lever = next(x for x in comm_bound.levers if x.name == "sharding_none")
    assert not lever.feasible
    assert lever.reason.startswith("out of memory: needs")
    assert math.isfinite(lever.gain)


def test_levers_ranked_feasible_first_then_by_gain(comm_bound):
    tiers = [0 if x.feasible else (2 if math.isnan(x.gain) else 1) for x in comm_bound.levers]
    assert tiers == sorted(tiers)
    feasible_gains = [x.gain for x in comm_bound.levers if x.feasible]
    assert feasible_gains == sorted(feasible_gains, reverse=True)


def test_vectorised_levers_match_one_plan_predictions(comm_bound):
    result = comm_bound.result
    for lever in comm_bound.levers:
        if math.isnan(lever.step_time_s) or lever.name in WORKLOAD_LEVERS:
            continue
        alone = predict_step(result.spec.workload, plans_from_rows([lever.plan]),
                             result.machine, CALIBRATION)
        assert alone.step_time_s[0] == pytest.approx(lever.step_time_s, rel=1e-12)


def test_global_batch_lever_changes_only_the_batch(comm_bound):
    lever = next(x for x in comm_bound.levers if x.name == "global_batch_double")
    assert lever.global_batch == 2 * comm_bound.result.spec.workload.global_batch
    assert lever.plan == comm_bound.result.spec.plan.row(0)


DENSE_HF_JOB = (
    "model: {layers: 8, d_model: 4096, heads: 32, kv_heads: 8, head_dim: 128, ffn: 12288,"
    " vocab: 151936}\n"
    "parallelism: {tp: 2, pp: 1, dp: 4, sharding: fsdp}\n"
    "batch: {global_seqs: 32, seq_len: 4096}\n"
    "performance: {stack: hf-transformers, checkpointing: full}\n"
    "hardware: {system: p5.48xlarge, nodes: 1}\n")


@pytest.mark.parametrize(("micro", "doubled_micro", "how"),
                         [(4, 4, "more micro-batches per step"),
                          (None, 16, "the whole local batch in one step")])
def test_a_doubled_batch_on_a_whole_local_batch_stack_follows_the_jobs_accumulation(
        micro, doubled_micro, how, tmp_path):
    """hf-transformers runs the whole local batch in one step unless told to accumulate: a
    job stating micro 4 of a local batch of 8 accumulates, and its doubled batch runs more
    micro-batches of 4 (a review: it was described, and run, as the whole local batch in
    one step, micro-batch doubled); a job stating none runs its whole local batch of 16."""
    path = tmp_path / "dense.yaml"
    path.write_text(DENSE_HF_JOB)
    overrides = [] if micro is None else [f"batch.micro_seqs={micro}"]
    levers = {lever.name: lever for lever in diagnose(
        predict_job(load_job(path, overrides), CALIBRATION), CALIBRATION).levers}
    lever = levers["global_batch_double"]
    assert lever.global_batch == 64
    assert how in lever.description
    assert lever.plan["micro_batch"] == doubled_micro
    if math.isfinite(lever.step_time_s):
        applied = predict_job(load_job(path, [*overrides, *lever.overrides]), CALIBRATION)
        assert applied.prediction.step_time_s[0] == pytest.approx(lever.step_time_s,
                                                                   rel=1e-12)


def test_plans_from_rows_inverts_row():
    plan = job().spec.plan
    assert plans_from_rows([plan.row(0)]).row(0) == plan.row(0)


def test_every_model_term_is_classified():
    for path in (COMM_BOUND, EXAMPLES / "appendix_e.yaml"):
        for name in job(path).prediction.breakdown_s:
            assert classify_term(name)[0] != "other", name


def test_gap_equal_to_communication_needs_communication_twice_as_slow():
    # compute 0.2 + vocab 0.05 + optimizer 0.05 = 0.3 s of kernels; 0.5 s communication;
    # 0.2 s launch floor. Step 1.0 s; measured 1.5 s = predicted + all communication.
    prediction = hand_prediction({"compute_experts": 0.2, "vocab_stage": 0.05,
                                  "optimizer": 0.05, "fsdp_all_gather": 0.3,
                                  "ep_all_to_all": 0.2, "dispatch_floor": 0.2})
    gap = attribute_gap(prediction, 1.5)
    assert gap.gap_s == pytest.approx(0.5)
    assert gap.ratio == pytest.approx(1.5)
    assert gap.communication_s == pytest.approx(0.5)
    assert gap.compute_kernel_s == pytest.approx(0.3)
    assert gap.communication_scale == pytest.approx(2.0)  # 1 + 0.5/0.5
    assert gap.compute_scale == pytest.approx(1 + 0.5 / 0.3)
    assert gap.more_plausible == "communication"
    text = " ".join(gap.findings)
    assert "communication alone would have to take 2.00x" in text
    assert "compute kernels alone would have to take 2.67x" in text
    assert "larger than all predicted compute kernels time" in text
    assert "lower bounds" in text  # the 0.2 s launch floor
    assert gap.findings[-1].startswith("inference: slower communication")


def test_a_moe_host_sync_is_not_a_launch_floor():
    """The host work a dropless MoE's sync exposes adds to the GPU time; it hides nothing,
    so it does not make the factors lower bounds (only the launch floor does)."""
    prediction = hand_prediction({"compute_experts": 0.5, "ep_all_to_all": 0.3,
                                  "moe_host_sync": 0.2})
    gap = attribute_gap(prediction, 1.5)
    assert gap.launch_floor_s == 0.0
    assert "lower bounds" not in " ".join(gap.findings)
    with_floor = attribute_gap(hand_prediction({"compute_experts": 0.5, "ep_all_to_all": 0.3,
                                                "moe_host_sync": 0.2,
                                                "dispatch_floor": 0.1}), 1.5)
    assert with_floor.launch_floor_s == pytest.approx(0.1)


def test_host_side_work_and_imbalance_are_gap_sources_too():
    """A step a third of which is a dropless MoE's host sync was only ever blamed on compute
    or communication (a trial). Compute 0.3 s, communication 0.3 s, host sync 0.3 s,
    imbalance 0.1 s; measured 1.3 s: compute and communication would need 2x, the host
    1 + 0.3/0.3 = 2x too, the imbalance 4x; with a 0.4 s host sync the host needs the least
    (1.75x)."""
    even = attribute_gap(hand_prediction({"compute_experts": 0.3, "ep_all_to_all": 0.3,
                                          "moe_host_sync": 0.3,
                                          "expert_load_imbalance": 0.1}), 1.3)
    assert even.host_scale == pytest.approx(2.0) and even.imbalance_scale == pytest.approx(4.0)
    text = " ".join(even.findings)
    assert "host-side work alone would have to take 2.00x the predicted 0.300 s" in text
    assert "expert load imbalance alone would have to take 4.00x" in text
    host_heavy = attribute_gap(hand_prediction({"compute_experts": 0.3, "ep_all_to_all": 0.3,
                                                "moe_host_sync": 0.4}), 1.3)
    assert host_heavy.host_scale == pytest.approx(1.75)
    assert host_heavy.more_plausible == "host"
    assert host_heavy.findings[-1].startswith("inference: slower host-side work")
    # a dense step without host sync or imbalance lists neither
    dense = attribute_gap(hand_prediction({"compute_mlp": 0.8, "tp_all_reduce": 0.2}), 1.3)
    assert "host-side" not in " ".join(dense.findings)
    assert "imbalance" not in " ".join(dense.findings)


def test_gap_that_needs_negative_time_cannot_be_explained():
    prediction = hand_prediction({"compute_experts": 0.8, "tp_all_reduce": 0.2})
    gap = attribute_gap(prediction, 0.5)  # 0.5 s faster than predicted
    assert gap.communication_scale is None  # would need -1.5x the communication
    assert gap.compute_scale == pytest.approx(1 - 0.5 / 0.8)
    assert gap.more_plausible == "compute"


def test_measurement_within_tolerance_is_not_attributed():
    prediction = hand_prediction({"compute_experts": 0.8, "tp_all_reduce": 0.2})
    gap = attribute_gap(prediction, 1.02)
    assert gap.more_plausible is None
    assert gap.findings == ["measured is within 5% of predicted (1.02x): the model accounts "
                            "for the step"]


def test_bubble_and_overhead_are_shared_out_by_hand():
    # Block terms 0.4 + 0.2 = 0.6 s, bubble 0.15 s = 0.25 of the block; dp 0.1 s outside the
    # block; calibrated overhead 0.1 s on an analytic 0.85 s.
    prediction = hand_prediction({"compute_experts": 0.4, "ep_all_to_all": 0.2,
                                  "pipeline_bubble": 0.15, "dp_all_reduce": 0.1,
                                  "calibration": 0.1})
    effective = effective_class_times_s(prediction)
    assert effective["compute"] == pytest.approx(0.4 * 1.25 * 0.95 / 0.85)
    assert effective["communication"] == pytest.approx((0.2 * 1.25 + 0.1) * 0.95 / 0.85)
    assert sum(effective.values()) == pytest.approx(0.95)


def test_effective_times_partition_a_pipelined_step():
    prediction = job(EXAMPLES / "appendix_e.yaml").prediction
    assert prediction.breakdown_s["pipeline_bubble"][0] > 0
    total = sum(effective_class_times_s(prediction).values())
    assert total == pytest.approx(prediction.step_time_s[0], rel=1e-12)


def test_real_job_gap_of_all_communication_doubles_it():
    prediction = job().prediction
    communication = effective_class_times_s(prediction)["communication"]
    gap = attribute_gap(prediction, prediction.step_time_s[0] + communication)
    assert gap.communication_scale == pytest.approx(2.0)


def test_measured_tokens_per_s_becomes_a_step_time():
    assert measured_step_time(1_000_000, measured_tokens_per_s=250_000) == pytest.approx(4.0)
    assert measured_step_time(1_000_000, measured_step_time_s=3.0) == 3.0
    assert measured_step_time(1_000_000) is None


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"measured_tokens_per_s": 1.0, "measured_step_time_s": 1.0}, "not both"),
        ({"measured_step_time_s": -2.0}, "--measured-step-time-s must be a positive number"),
        ({"measured_tokens_per_s": 0.0}, "--measured-tokens-per-s must be a positive number"),
        ({"measured_step_time_s": math.nan}, "must be a positive number"),
    ],
)
def test_bad_measurements_are_rejected(kwargs, fragment):
    with pytest.raises(MosaicInputError, match=fragment):
        measured_step_time(1000, **kwargs)


def test_memory_status_thresholds():
    assert MemoryStatus(50 * GIB, 100 * GIB, 0.0).status == "fits"
    assert MemoryStatus(95 * GIB, 100 * GIB, 0.0).status == "near capacity"
    assert MemoryStatus(120 * GIB, 100 * GIB, 20 * GIB).status == "out of memory"
    # over the usable 90% but under the device: said as such, still not fitting
    over_headroom = MemoryStatus(95 * GIB, 100 * GIB, 5 * GIB, usable_fraction=0.9)
    assert over_headroom.status == "over the planning headroom" and not over_headroom.fits
    # against the usable budget, not the device: 85 GiB of 90 usable is near capacity
    assert MemoryStatus(85 * GIB, 100 * GIB, 0.0, usable_fraction=0.9).status == (
        "near capacity")
    assert MemoryStatus(85 * GIB, 100 * GIB, 0.0).status == "fits"


def test_out_of_memory_job_is_memory_limited():
    result = job(COMM_BOUND, "parallelism.sharding=none")
    diagnosis = diagnose(result, CALIBRATION)
    assert diagnosis.bound.limiter == "memory"
    assert diagnosis.bound.summary.startswith("does not fit")


def test_pipeline_levers_report_layer_divisibility():
    diagnosis = diagnose(job(EXAMPLES / "appendix_e.yaml"), CALIBRATION)
    names = {lever.name for lever in diagnosis.levers}
    assert {"vpp_2", "pp_halve", "pp_double"} <= names
    assert "ep_in_domain" not in names  # ep=8 already fills the 8-GPU domain
    vpp = next(x for x in diagnosis.levers if x.name == "vpp_2")
    assert vpp.reason == "breaks a rule: pp·vpp=16·2 must divide layers=48"


def test_dense_model_gets_no_expert_lever(tmp_path):
    dense = tmp_path / "dense.yaml"
    dense.write_text(
        "model: {n_layers: 16, hidden_sz: 2048, inter_sz: 8192, n_q_heads: 16}\n"
        "data: {global_batch: 64, seq_len: 2048}\n"
        "hardware: {system: p5.48xlarge, nodes: 2}\n"
        "parallelism: {dp: 16}\n"
    )
    diagnosis = diagnose(job(dense), CALIBRATION)
    assert diagnosis.levers
    assert all(lever.plan["ep"] == 1 for lever in diagnosis.levers)


def test_fa2_job_on_hopper_gets_the_cudnn_attention_lever():
    machine = machine_for(Cluster(system=get_system("DGX-H100"), n_nodes=1), "bf16")
    geometry = ladder_geometry(8)
    plan = single_plan(dp=8, checkpointing=Checkpointing.FULL)
    torchtitan = Workload(geometry=geometry, global_batch=8, seq_len=32768, stack="torchtitan")
    levers = {lever.name: lever
              for lever in rank_levers(torchtitan, plan, machine, CALIBRATION)}
    cudnn = levers["attention_cudnn"]
    # Long-context attention dominates: running it at cuDNN's rate (1/0.571 forward,
    # 1/0.615 backward faster than FA2) must help, by less than the kernel ratio itself.
    assert cudnn.feasible and 1.1 < cudnn.gain < 1 / 0.571
    # Kernels already at cuDNN's rate get no such lever (Megatron's cuDNN, FA3 on Hopper).
    for as_fast in (replace(torchtitan, stack="megatron-core"),
                    replace(torchtitan, attention_kernel="fa3")):
        assert "attention_cudnn" not in {lever.name for lever in
                                         rank_levers(as_fast, plan, machine, CALIBRATION)}


def test_zero2_is_a_lever_where_the_stack_offers_it(tmp_path):
    """Qwen3-30B-A3B on 256 H100s at zero1 is out of memory; ZeRO-2 also shards the fp32
    gradients (4 B/param over dp) and fits at the same speed, so it is the best feasible
    lever (new-user review: it was never proposed). The paper's stack offers only zero1."""
    import yaml

    document = {
        "model": {"layers": 48, "d_model": 2048, "heads": 32, "kv_heads": 4, "head_dim": 128,
                  "vocab": 151936, "norm": "rmsnorm", "qk_norm": True,
                  "moe": {"experts": 128, "top_k": 8, "expert_ffn": 768}},
        "parallelism": {"tp": 1, "pp": 1, "ep": 8, "sharding": "zero1"},
        "batch": {"global_seqs": 1024, "seq_len": 4096, "micro_seqs": 2},
        "performance": {"precision": "bf16", "checkpointing": "selective",
                        "stack": "megatron-core"},
        "hardware": {"system": "DGX-H100", "nodes": 32},
    }
    path = tmp_path / "qwen3.yaml"
    path.write_text(yaml.safe_dump(document))
    diagnosis = diagnose(job(path), CALIBRATION)
    assert not diagnosis.result.prediction.feasible[0]
    zero2 = next(lever for lever in diagnosis.levers if lever.name == "sharding_zero2")
    assert zero2.feasible and zero2.gain == pytest.approx(1.0, abs=0.01)
    # it ranks among the feasible levers, ahead of every infeasible one; reducing gradients
    # in bf16 is offered too and halves the gradient bytes (it lands within a GiB of the
    # line: the busiest EP rank's routed copies, perf/routing_load.py, keep it just over)
    feasible = [lever.name for lever in diagnosis.levers if lever.feasible]
    assert diagnosis.levers.index(zero2) < len(feasible)
    bf16 = next(lever for lever in diagnosis.levers if lever.name == "grad_reduce_bf16")
    assert bf16.memory_bytes < diagnosis.result.prediction.memory_bytes[0]
    paper = diagnose(job(path, "performance.stack=paper-nemo"), CALIBRATION)
    assert "sharding_zero2" not in {lever.name for lever in paper.levers}


def test_software_setting_levers_are_the_job_with_that_setting_on(comm_bound):
    """Each software-setting lever predicts the same plan with only that setting changed."""
    result = comm_bound.result
    workload = result.spec.workload
    settings = {"grad_reduce_bf16": {"grad_reduce_in_fp32": False},
                "tp_comm_overlap": {"tp_comm_overlap": True},
                "ep_overlap": {"ep_overlap": True},
                "full_iteration_cuda_graph": {"full_iteration_cuda_graph": True}}
    offered = [lever for lever in comm_bound.levers if lever.name in settings]
    assert offered  # the comm-bound MoE job leaves some of them off
    for lever in offered:
        changed = replace(workload, **settings[lever.name])
        alone = predict_step(changed, plans_from_rows([lever.plan]), result.machine,
                             CALIBRATION)
        assert alone.step_time_s[0] == pytest.approx(lever.step_time_s, rel=1e-12)
        assert lever.plan == result.spec.plan.row(0)


def test_the_ep_overlap_lever_is_offered_only_where_the_stack_has_it():
    """A torchtitan MoE job was offered Megatron's --overlap-moe-expert-parallel-comm (a
    trial): the lever follows the stack's ep_comm_overlap trait (stacks.yaml)."""
    names = {}
    for stack, sharding in (("megatron-core", "zero1"), ("torchtitan", "fsdp")):
        moe = job(EXAMPLES / "appendix_e.yaml", f"performance.stack={stack}",
                  "parallelism.vpp=1", f"parallelism.sharding={sharding}")
        machine = machine_for(moe.cluster, moe.spec.workload.precision)
        names[stack] = {lever.name for lever in rank_levers(
            moe.spec.workload, moe.spec.plan, machine, CALIBRATION)}
    assert "ep_overlap" in names["megatron-core"]
    assert "ep_overlap" not in names["torchtitan"]


def test_eager_torch_job_gets_a_compile_lever_and_no_megatron_flags():
    """An eager torchtitan job is offered torch.compile, predicted with the Inductor-fused
    element-wise kernels; the same job compiled is not; torchtitan, whose FSDP reduces in
    float32 only (training.mixed_precision_reduce Literal["float32"]), gets no bf16-reduce
    lever, and DeepSpeed's names no Megatron flag; a run without DP overlap is offered it."""
    eager = job(EXAMPLES / "appendix_e.yaml", "performance.stack=torchtitan",
                "performance.torch_compile=false", "parallelism.vpp=1",
                "parallelism.sharding=fsdp")
    machine = machine_for(eager.cluster, eager.spec.workload.precision)
    levers = {lever.name: lever for lever in rank_levers(
        eager.spec.workload, eager.spec.plan, machine, CALIBRATION)}
    assert levers["torch_compile"].gain > 1.0
    assert "grad_reduce_bf16" not in levers
    deepspeed = replace(eager.spec.workload, stack="deepspeed")
    assert "Megatron" not in {lever.name: lever for lever in rank_levers(
        deepspeed, eager.spec.plan, machine, CALIBRATION)}["grad_reduce_bf16"].description
    compiled = replace(eager.spec.workload, torch_compile=True)
    assert "torch_compile" not in {lever.name for lever in rank_levers(
        compiled, eager.spec.plan, machine, CALIBRATION)}
    no_overlap = replace(compiled, dp_comm_overlap=False)
    assert "dp_comm_overlap" in {lever.name for lever in rank_levers(
        no_overlap, eager.spec.plan, machine, CALIBRATION)}


def test_a_dropless_host_wait_is_offered_drop_and_pad_and_whole_step_graphs():
    """The example as shipped (dropless) waits on the host per MoE layer: dropping and
    padding to capacity is the only all-to-all routing without that wait, and predicts the
    same plan with only the routing changed. A whole-step graph replaces per-layer graphs
    (the two are exclusive) instead of failing."""
    dropless = diagnose(job(COMM_BOUND, "performance.layer_cuda_graphs=true",
                            "performance.checkpointing=selective"), CALIBRATION)
    levers = {lever.name: lever for lever in dropless.levers}
    pad = levers["drop_and_pad"]
    assert pad.feasible and pad.gain > 1.0 and pad.plan == dropless.result.spec.plan.row(0)
    workload = replace(dropless.result.spec.workload, routing="token_drop",
                       pad_to_capacity=True)
    alone = predict_step(workload, plans_from_rows([pad.plan]), dropless.result.machine,
                         CALIBRATION)
    assert alone.step_time_s[0] == pytest.approx(pad.step_time_s, rel=1e-12)
    assert alone.breakdown_s["moe_host_sync"][0] == 0.0
    # a dropless step is captured whole only with HybridEP's static per-rank buffers (the
    # lever said so, and costed the all-to-all: a trial); the lever costs what it says
    graph = levers["full_iteration_cuda_graph"]
    assert graph.feasible and "HybridEP with --moe-expert-rank-capacity-factor" in \
        graph.description
    graphed = replace(dropless.result.spec.workload, full_iteration_cuda_graph=True,
                      layer_cuda_graphs=False, dispatcher=Dispatcher.HYBRIDEP)
    alone = predict_step(graphed, plans_from_rows([graph.plan]), dropless.result.machine,
                         CALIBRATION)
    assert alone.step_time_s[0] == pytest.approx(graph.step_time_s, rel=1e-12)
    # a stack without HybridEP is not offered it for a dropless MoE
    torchtitan = diagnose(job(COMM_BOUND, "performance.stack=torchtitan",
                              "performance.checkpointing=selective"), CALIBRATION)
    assert "full_iteration_cuda_graph" not in {lever.name for lever in torchtitan.levers}
    assert "drop_and_pad" not in {lever.name for lever in diagnose(
        job(COMM_BOUND, *DROP_AND_PAD), CALIBRATION).levers}


def test_expert_parallelism_is_tried_both_ways_where_it_divides():
    """EP 64 on 64 GPUs: halving is a lever, doubling is not (128 does not divide the 64-rank
    expert mesh, Eq. 24); with 512 experts both 32 and 16 divide them."""
    from mosaic.evaluate.job import cluster_for, load_job_spec
    from mosaic.perf.machine import machine_for

    spec = load_job_spec(EXAMPLES / "qwen3_next_80b_b200.yaml", [])
    machine = machine_for(cluster_for(spec), spec.workload.precision)
    names = {c.name: c for c in plan_candidates(spec.workload, machine, spec.plan.row(0))}
    assert names["ep_halve"].plan["ep"] == 32 and "ep_double" not in names
    halved = load_job_spec(EXAMPLES / "qwen3_next_80b_b200.yaml",
                           ["parallelism.ep=16"])
    eps = {c.plan["ep"] for c in plan_candidates(halved.workload, machine, halved.plan.row(0))}
    assert {8, 32} <= eps  # (ep 8 is also the NVLink-domain lever: one candidate)


def test_a_pipeline_paced_by_its_vocabulary_gets_the_balanced_layout_lever():
    # Appendix E (pp=16, 48 blocks): the LM head rides on a full last stage; the lever counts
    # the embedding and the loss as slots, 50 slots over 16 chunks, and predicts it as a job
    # stating that layout would be predicted.
    from mosaic.perf.pipeline_layout import balanced_layout, parse_pipeline_layout

    result = predict_job(load_job(EXAMPLES / "appendix_e.yaml"), CALIBRATION)
    spec = result.spec
    levers = {lever.name: lever for lever in rank_levers(spec.workload, spec.plan,
                                                         result.machine, CALIBRATION)}
    lever = levers["balanced_pipeline_layout"]
    text = balanced_layout(48, 0, 16, 1)
    assert f"'{text}'" in lever.description
    layout = parse_pipeline_layout(text, 16, 1, 48, 0)
    alone = predict_step(replace(spec.workload, pipeline_layouts=(layout,)), spec.plan,
                         result.machine, CALIBRATION)
    assert lever.step_time_s == pytest.approx(float(alone.step_time_s[0]))
    assert lever.feasible and lever.gain > 1.0


def test_an_all_to_all_moe_job_is_offered_the_stacks_deduplicating_dispatchers():
    """Appendix E (Megatron-Core, all-to-all, ep 8): DeepEP and HybridEP levers, each the
    same plan predicted with only the dispatcher changed; on GB200 NVL72 (NVLink across
    nodes) HybridEP alone (Megatron-Core: "the only backend that supports the MNNVL case");
    the paper's stack (no DeepEP, Appendix F.3) gets none and torchtitan DeepEP (its
    expert_parallel_comm_backend; a trial found no lever on a torchtitan all-to-all run)."""
    def dispatcher_levers(*overrides: str) -> dict:
        result = job(EXAMPLES / "appendix_e.yaml", *overrides)
        spec = result.spec
        levers = rank_levers(spec.workload, spec.plan, result.machine, CALIBRATION)
        return result, {lever.name: lever for lever in levers
                        if lever.name.startswith("dispatcher_")}

    result, levers = dispatcher_levers()  # megatron-core, the default stack
    assert set(levers) == {"dispatcher_deepep", "dispatcher_hybridep"}
    for name, lever in levers.items():
        changed = replace(result.spec.workload, dispatcher=name.removeprefix("dispatcher_"))
        alone = predict_step(changed, result.spec.plan, result.machine, CALIBRATION)
        assert lever.step_time_s == pytest.approx(float(alone.step_time_s[0]), rel=1e-12)
        assert lever.plan == result.spec.plan.row(0)
    _, nvl72 = dispatcher_levers("hardware.system=GB200-NVL72")
    assert set(nvl72) == {"dispatcher_hybridep"}
    assert not dispatcher_levers("performance.stack=paper-nemo")[1]
    assert set(dispatcher_levers("performance.stack=torchtitan", "parallelism.vpp=1",
                                 "parallelism.sharding=fsdp")[1]) == {"dispatcher_deepep"}


def test_a_dispatcher_lever_is_held_to_the_stacks_rules_for_a_stated_dispatcher():
    """torchtitan runs DeepEP with etp 1 only (NotImplementedError "DeepEP with Expert
    Tensor Parallelism (ETP) is not supported yet", models/deepseek_v3/infra/parallelize.py
    @ 1a36996b8): on an all-to-all job at etp 2 that left its dispatcher unstated, explain
    ranked the DeepEP lever feasible, and its `set parallelism.dispatcher=deepep` is refused.
    The lever states the dispatcher, so it breaks the rule; at etp 1 it stays feasible."""
    def deepep_lever(etp: int):
        result = job(EXAMPLES / "appendix_e.yaml", "performance.stack=torchtitan",
                     "parallelism.vpp=1", "parallelism.sharding=fsdp", "parallelism.tp=2",
                     f"parallelism.etp={etp}")
        assert not result.spec.workload.dispatcher_stated
        spec = result.spec
        return next(lever for lever in rank_levers(spec.workload, spec.plan, result.machine,
                                                   CALIBRATION)
                    if lever.name == "dispatcher_deepep")

    refused = deepep_lever(2)
    assert not refused.feasible and math.isnan(refused.step_time_s)
    assert "torchtitan runs DeepEP with etp 1 only" in refused.reason
    assert deepep_lever(1).step_time_s > 0


def test_hybridep_needs_a_gpu_with_the_tensor_memory_accelerator():
    """HybridEP's NVLink kernels use the TMA of Hopper and Blackwell (DeepEP
    docs/README_Hybrid-EP.md), DeepEP's V1 kernels list Ampere: on DGX A100 a job stating
    HybridEP is refused with the reason, explain offers DeepEP alone, and the whole-step
    graph lever (which needs HybridEP on a dropless MoE) is not offered."""
    def lever_names(system: str) -> set[str]:
        result = job(EXAMPLES / "appendix_e.yaml", f"hardware.system={system}")
        spec = result.spec
        return {lever.name for lever in rank_levers(spec.workload, spec.plan, result.machine,
                                                    CALIBRATION)}

    needs_hybridep = {"dispatcher_hybridep", "full_iteration_cuda_graph"}
    assert needs_hybridep | {"dispatcher_deepep"} <= lever_names("DGX-H100")
    a100 = lever_names("DGX-A100")
    assert "dispatcher_deepep" in a100 and not a100 & needs_hybridep
    a100_system = ("hardware.system=DGX-A100",)
    with pytest.raises(MosaicInputError, match=r"hybridep on A100-SXM-80GB.*Tensor Memory"):
        job(EXAMPLES / "appendix_e.yaml", *a100_system, "parallelism.dispatcher=hybridep")
    hopper = job(EXAMPLES / "appendix_e.yaml", "hardware.system=DGX-H100",
                 "parallelism.dispatcher=hybridep")
    assert hopper.prediction.step_time_s[0] > 0


def test_a_dispatcher_lever_says_why_by_where_the_ep_group_runs():
    """Inside one NVLink domain a deduplicating dispatcher saves no network copies (a trial
    read 'one network copy per remote node' for ep 8 on one node)."""
    from mosaic.evaluate.diagnosis import _dispatcher_what_ifs

    def reasons(*overrides: str) -> list[str]:
        result = job(EXAMPLES / "appendix_e.yaml", *overrides)
        return [text for _, text, _ in _dispatcher_what_ifs(
            result.spec.workload, result.machine, result.spec.plan.row(0))]

    inside = reasons()  # ep 8 on 8-GPU p6-b200 nodes
    assert inside and all("stays in one NVLink domain" in text for text in inside)
    spanning = reasons("parallelism.ep=16", "parallelism.pp=8")
    assert spanning and all("one network copy per remote node" in text for text in spanning)


def test_a_whole_step_graph_on_a_dropless_all_to_all_moe_is_noted():
    """`perf --set performance.full_iteration_cuda_graph=true` on a dropless all-to-all MoE
    was costed without a word (a trial): Megatron captures that step whole only with
    HybridEP's rank capacity factor, and the job's assumptions say so; with HybridEP, no."""
    def noted(*overrides: str) -> bool:
        spec = job(COMM_BOUND, "performance.full_iteration_cuda_graph=true",
                   "performance.checkpointing=selective", *overrides).spec
        return any("--moe-expert-rank-capacity-factor" in note for note in spec.assumptions)

    assert noted()
    assert not noted("parallelism.dispatcher=hybridep")


def test_the_hsdp_lever_says_when_the_routed_experts_get_no_shard():
    """Appendix E on 256 GPUs, pp 16: dp 32, ep 8, so edp = 4; HSDP over the 8 ranks of a
    node shards the experts over edp·8/dp = 1 rank, none at all, which is why that lever
    can need more memory than ZeRO-1 (a trial saw 92 against 66 GiB unexplained)."""
    diagnosis = diagnose(job(EXAMPLES / "appendix_e.yaml"), CALIBRATION)
    hsdp = next(lever for lever in diagnosis.levers if lever.name == "sharding_hsdp")
    assert hsdp.plan["hsdp_shard"] * 4 // hsdp.plan["dp"] == 1
    assert "routed experts, split over ep 8, get no HSDP shard" in hsdp.description


def test_an_unstated_routing_imbalance_that_weighs_is_named_with_its_balanced_step(tmp_path):
    """Mixtral-8x7B at ep 8 (one expert a rank): the derived imbalance of the stack's
    router puts a quarter of a trial's step on the busiest rank; explain called the step
    compute-bound without a word on that assumption. The diagnosis now carries the share
    and the step predicted with imbalance 1 (an evenly loaded router), and a stated
    imbalance is not singled out."""
    path = tmp_path / "mixtral.yaml"
    path.write_text(
        "model: {layers: 32, d_model: 4096, heads: 32, kv_heads: 8, vocab: 32000,\n"
        "        moe: {experts: 8, top_k: 2, expert_ffn: 14336}}\n"
        "parallelism: {tp: 2, ep: 8, etp: 1}\n"
        "batch: {global_seqs: 256, micro_seqs: 1, seq_len: 4096}\n"
        "hardware: {system: DGX-H100, nodes: 8}\n")
    result = job(path)
    assumed = diagnose(result, CALIBRATION).imbalance
    prediction = result.prediction
    assert assumed.share == pytest.approx(float(
        prediction.breakdown_s["expert_load_imbalance"][0] / prediction.step_time_s[0]))
    assert assumed.share > 0.05
    balanced = job(path, "performance.routing_imbalance=1.0").prediction
    assert assumed.balanced_step_time_s == pytest.approx(float(balanced.step_time_s[0]))
    assert assumed.balanced_step_time_s < float(prediction.step_time_s[0])
    stated = diagnose(job(path, "performance.routing_imbalance=1.3"), CALIBRATION)
    assert stated.imbalance is None


def test_overshoot_text_reads_the_need_and_the_budget_apart():
    """A 0.06 GiB overshoot of a 71.18 GiB budget: one decimal would print 'needs 71.2 GiB
    of 71.2 usable' (a trial read it as no overshoot), so two are given."""
    capacity = 79.1 * GIB
    assert memory_overshoot_text(71.24 * GIB, 0.06 * GIB, capacity) == (
        "needs 71.24 GiB of 71.18 usable (90% of 79.1 GiB), over by 0.06 GiB")
    assert memory_overshoot_text(80.0 * GIB, 8.8 * GIB, capacity).startswith(
        "needs 80.0 GiB of 71.2 usable")
    # the overshoot itself reads above zero (71.28 of 71.24: 'over by 0.0' at one decimal)
    assert memory_overshoot_text(71.28 * GIB, 0.04 * GIB, capacity).endswith("over by 0.04 GiB")
    assert memory_overshoot_text(71.2001 * GIB, 0.0001 * GIB, capacity).endswith(
        "over by 0.1 MiB")


def test_a_fitted_residual_as_the_largest_part_is_said_to_have_no_lever():
    """A trial read 'its largest part calibrated_elementwise_residual (19% of the step)' and
    looked for a lever: a fitted residual is said to be one; a modelled part is not."""
    from mosaic.evaluate.diagnosis import Bound

    memory = MemoryStatus(50 * GIB, 100 * GIB, 0.0)
    residual = Bound("compute", "compute", 0.7, "calibrated_elementwise_residual", 0.19,
                     {}, {}, memory)
    assert "a fitted residual, time the model attributes to no mechanism" in residual.summary
    experts = Bound("compute", "compute", 0.7, "experts", 0.4, {}, {}, memory)
    assert "fitted residual" not in experts.summary


def test_a_run_records_unstated_split_holds_for_its_levers():
    """A trial: every lever of a torchtitan run of 61 blocks on pp 2 x vpp 2 (torchtitan
    splits any layer count) broke 'pp·vpp must divide layers=61', the rule its own split
    does not obey. A run's split at another pipeline shape than its recorded layout's is
    unstated, so its levers' splits are too."""
    runs = Path(__file__).parents[2] / "src/mosaic/evaluate/data/extra_runs.yaml"
    run = f"{runs}#nebius2603-deepseek-v3-b200-256-tp2pp2ep32-bf16-standard-ep"
    diagnosis = diagnose(predict_job(load_job(Path(run)), CALIBRATION), CALIBRATION)
    assert diagnosis.result.spec.workload.geometry.layers % 4  # pp·vpp does not divide 61
    assert not [lever.name for lever in diagnosis.levers
                if lever.reason and "must divide layers" in lever.reason]
    pp_double = next(x for x in diagnosis.levers if x.name == "pp_double")
    assert pp_double.plan["pp"] == 4 and not math.isnan(pp_double.step_time_s)
    # a job of the same layout keeps the rule where its layer split is stated by the rule:
    # every pipeline shape but the record's own (pp 2 x vpp 2), which its layout splits
    workload = diagnosis.result.spec.workload
    stated = {(layout.pp, layout.vpp) for layout in workload.pipeline_layouts}
    assert stated == {(2, 2)}
    job_levers = [lever for lever in rank_levers(workload, diagnosis.result.spec.plan,
                                                 diagnosis.result.machine, CALIBRATION)
                  if lever.plan["pp"] > 1
                  and (lever.plan["pp"], lever.plan["vpp"]) not in stated]
    assert job_levers and all(lever.reason and "must divide layers=61" in lever.reason
                              for lever in job_levers)


def test_a_bf16_job_gets_its_fp8_what_ifs_each_the_job_at_that_precision(tmp_path):
    """A bf16 MoE job on B200s gets FP8 with the stack's default recipe (one lever: the
    recipes cost alike) and, on torchtitan, the routed experts alone in MXFP8: each lever's
    step is `mosaic perf` of the job with that precision set, on the machine of that
    precision (its GEMM lane)."""
    path = tmp_path / "job.yaml"
    path.write_text(
        "model: {layers: 8, d_model: 2048, heads: 16, ffn: 8192,\n"
        "        moe: {experts: 32, top_k: 4, expert_ffn: 1024}}\n"
        "batch: {global_seqs: 256, seq_len: 4096, micro_seqs: 2}\n"
        "parallelism: {ep: 8, sharding: fsdp}\n"
        "performance: {precision: bf16, stack: torchtitan}\n"
        "hardware: {system: DGX-B200, nodes: 2}\n")
    levers = {lever.name: lever for lever in diagnose(job(path), CALIBRATION).levers}
    # torchtitan's default FP8 recipe is tensorwise (current) scaling
    settings = {"precision_current": ["performance.precision=fp8",
                                      "performance.fp8_recipe=current"],
                "routed_experts_mxfp8": ["performance.precision=mxfp8",
                                         "performance.quantised_gemms=routed_experts"]}
    assert set(settings) <= set(levers) and set(settings) <= WORKLOAD_LEVERS
    assert not [name for name in levers if name.startswith("precision_")
                and name != "precision_current"]
    for name, overrides in settings.items():
        alone = job(path, *overrides)
        assert alone.prediction.step_time_s[0] == pytest.approx(levers[name].step_time_s,
                                                                rel=1e-12)
        assert "numerics change" in levers[name].description
    assert ("torchtitan converters quantize.linear.float8 and quantize.grouped_mm.float8"
            in levers["precision_current"].description)
    # the experts alone sit between bf16 and every GEMM in FP8
    current = job(path).prediction.step_time_s[0]
    assert (levers["precision_current"].step_time_s
            < levers["routed_experts_mxfp8"].step_time_s < current)


def test_no_fp8_what_if_where_the_gpu_or_the_job_has_none(comm_bound, tmp_path):
    """An FP8 job gets no precision lever; on an A100 (no FP8 peak) neither does a bf16
    job; on Hopper there is no MXFP8 (Blackwell's block scaling), and a Megatron stack's
    lever names its flag."""
    fp8 = diagnose(job(COMM_BOUND, "performance.precision=fp8"), CALIBRATION)
    assert not [lever for lever in fp8.levers if lever.name.startswith("precision_")]
    hopper = {lever.name: lever for lever in comm_bound.levers}
    assert "precision_mxfp8" not in hopper and "routed_experts_mxfp8" not in hopper
    recipe = next(name for name in hopper if name.startswith("precision_"))
    assert "Megatron --fp8-recipe" in hopper[recipe].description
    a100 = diagnose(job(COMM_BOUND, "hardware.system=DGX-A100"), CALIBRATION)
    assert not [lever for lever in a100.levers
                if lever.name.startswith(("precision_", "routed_experts"))]


def test_a_source_with_almost_no_predicted_time_is_not_named_for_a_gap():
    """A balanced router's 1e-9 s of expert imbalance 'would have to take 8e7x the
    predicted' (a report's finding): a part under a thousandth of the step is left out."""
    gap = attribute_gap(hand_prediction({"compute_experts": 1.0, "ep_all_to_all": 1.0,
                                         "expert_load_imbalance": 1e-9}), 3.0)
    assert gap.imbalance_s == pytest.approx(1e-9)
    assert not any("expert load imbalance" in finding for finding in gap.findings)
    assert any(finding.startswith("communication alone") for finding in gap.findings)


def test_the_bound_names_a_larger_part_of_another_class():
    """Compute kernels (55%) bound the step, but the host sync alone (30%) outweighs its
    largest part (experts, 20%): the summary names it too (a trial read a compute-bound
    summary while the largest single term was the host sync its top levers removed)."""
    from mosaic.evaluate.diagnosis import classify_bound

    step = hand_prediction({"compute_experts": 0.2, "compute_attention_core": 0.19,
                            "compute_mlp": 0.16, "moe_host_sync": 0.3,
                            "ep_all_to_all": 0.15})
    summary = classify_bound(step, 80 * GIB).summary
    assert summary.startswith("compute-bound")
    assert summary.endswith("the largest single part is moe_host_sync (30% of the step, "
                            "dispatch)")
    balanced = hand_prediction({"compute_experts": 0.5, "moe_host_sync": 0.3,
                                "ep_all_to_all": 0.2})
    assert "largest single part" not in classify_bound(balanced, 80 * GIB).summary
    # a class without parts is its own part: no smaller part of another class is 'larger'
    # (a review: 'dispatch-bound ... 46%; the largest single part is dp/fsdp (42%)')
    floored = hand_prediction({"dispatch_floor": 0.46, "dp_reduce_scatter": 0.42,
                               "compute_experts": 0.12})
    summary = classify_bound(floored, 80 * GIB).summary
    assert summary.startswith("dispatch-bound") and "largest single part" not in summary
    # a class that is its own part is named once ('vocab_stage (38% of the step,
    # vocab_stage)', a report review)
    vocab = hand_prediction({"vocab_stage": 0.38, "compute_experts": 0.32,
                             "compute_mlp": 0.30})
    summary = classify_bound(vocab, 80 * GIB).summary
    assert summary.endswith("the largest single part is vocab_stage (38% of the step)"), summary


@pytest.mark.parametrize(("stack", "current", "offered"), [
    # hf-transformers' gradient_checkpointing wraps whole decoder layers: its "selective" is
    # full under another name, and was offered as a second lever with full's numbers
    ("hf-transformers", "none", {"full"}),
    ("hf-transformers", "full", {"none"}),
    ("hf-transformers", "selective", {"none"}),
    ("megatron-core", "none", {"selective", "full"}),
])
def test_a_block_level_stack_is_offered_full_checkpointing_once(stack, current, offered):
    workload = Workload(ladder_geometry(6), global_batch=64, seq_len=2048, stack=stack)
    machine = machine_for(Cluster(get_system("DGX-H100"), 1), "bf16")
    row = single_plan(dp=8, sharding=Sharding.FSDP,
                      checkpointing=Checkpointing.parse(current)).row(0)
    levers = {candidate.plan["checkpointing"] for candidate
              in plan_candidates(workload, machine, row)
              if candidate.name.startswith("checkpointing_")}
    assert levers == offered


def test_a_tp_lever_moving_the_expert_tp_to_one_the_stack_does_not_offer_breaks_its_rule():
    """NeMo AutoModel offers etp 1 only (trait layout_etp). A plan at tp = etp = 2 (a run
    record's, which keeps its recorded layout) has a tp_double lever that moves etp with tp
    to 4: listed as breaking the stack's rule, not ranked feasible; tp_halve moves it to the
    offered 1 and is predicted."""
    result = job(COMM_BOUND, "performance.stack=nemo-automodel", "parallelism.sharding=fsdp",
                 "parallelism.tp=2", "parallelism.dp=128", *DROP_AND_PAD)
    row = {**result.spec.plan.row(0), "etp": 2}
    levers = {lever.name: lever for lever in rank_levers(
        result.spec.workload, plans_from_rows([row]), result.machine, CALIBRATION)}
    doubled, halved = levers["tp_double"], levers["tp_halve"]
    assert (doubled.plan["etp"], halved.plan["etp"]) == (4, 1)
    assert not doubled.feasible
    assert "etp: stack 'nemo-automodel' offers only etp 1" in doubled.reason
    assert math.isfinite(halved.step_time_s)


def test_a_deeper_pipeline_lever_keeps_the_chunk_count_of_an_interleaved_job():
    """DeepSeek-V3 on its recipe's 8x4 layout (32 chunks of 61 blocks): the pp-doubling
    lever asked for 16x4, 64 chunks of 61 blocks, and was refused by the split rule (a
    review); it now moves to 16x2, the same 32 chunks, and its overrides reproduce it."""
    example = EXAMPLES / "deepseek_v3_h100.yaml"
    diagnosis = diagnose(job(example), CALIBRATION)
    deeper = [lever for lever in diagnosis.levers if "pp 8 -> 16" in lever.description]
    assert len(deeper) == 1 and "vpp 4 -> 2" in deeper[0].description
    lever = deeper[0]
    assert math.isfinite(lever.step_time_s) and "must divide" not in (lever.reason or "")
    again = job(example, *lever.overrides)
    assert float(again.prediction.step_time_s[0]) == pytest.approx(lever.step_time_s, rel=1e-9)
