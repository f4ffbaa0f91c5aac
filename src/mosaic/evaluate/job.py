"""One job end to end: resolve its hardware and predict its step."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from mosaic.config.job_schema import CALIBRATION_STACK_NOTE, JobSpec, blame_override, load_job
from mosaic.config.layout import VPP_DEFAULT_NOTE
from mosaic.errors import InvalidLayoutError, MosaicInputError, MosaicWarning
from mosaic.evaluate.plausibility import implausible_reason
from mosaic.hardware import Cluster, get_system
from mosaic.perf.calibration import Calibration
from mosaic.perf.constraints import first_reason, plan_violations
from mosaic.perf.headroom import memory_fit_text
from mosaic.perf.layouts import unoffered_layout
from mosaic.perf.machine import Machine, MeasuredTables, machine_for
from mosaic.perf.step_time import StepPrediction, predict_step
from mosaic.perf.terms import step_term
from mosaic.units import GIB


@dataclass(frozen=True)
class JobPrediction:
    """A job, the machine it runs on, and its predicted step (length-1 arrays)."""

    spec: JobSpec
    cluster: Cluster
    machine: Machine
    prediction: StepPrediction

    @property
    def implausible_measurement(self) -> str | None:
        """Why a run record's measured step looks mis-entered, in `validate`'s words
        (:func:`~mosaic.evaluate.plausibility.implausible_reason`), or None (a job, or a
        plausible measurement)."""
        measured_s = self.spec.measured_step_time_s
        if measured_s is None:
            return None
        tokens_per_s_per_gpu = self.spec.workload.tokens_per_step / (
            measured_s * self.cluster.n_devices)
        return implausible_reason(tokens_per_s_per_gpu,
                                  float(self.prediction.step_time_s[0]) / measured_s,
                                  float(self.prediction.mfu_with_attention_gemm_lane[0]))

    @property
    def memory_fit(self) -> str:
        """The memory verdict per GPU in the one wording of every command
        (:func:`~mosaic.perf.headroom.memory_fit_text`)."""
        p, machine = self.prediction, self.machine
        return memory_fit_text(float(p.memory_bytes[0] / GIB), machine.hbm_bytes / GIB,
                               machine.usable_memory_fraction,
                               float(p.overshoot_bytes[0] / GIB))


def load_job_spec(path: Path, overrides: list[str] | None = None,
                  model: dict[str, Any] | None = None,
                  default_stack: str | None = None) -> JobSpec:
    """A job file (its model replaced by ``model`` when given, see
    :func:`~mosaic.config.job_schema.load_job`), or a run record (``RUNS.yaml#ID``) with the
    settings ``mosaic validate`` applies to it (:mod:`mosaic.evaluate.record_settings`):
    what every command reads. ``default_stack``: a calibration profile's stack, for a job
    file that names none."""
    from mosaic.evaluate.record_settings import with_record_settings

    return load_job(path, overrides, adjust_record=with_record_settings, model=model,
                    default_stack=default_stack)


def searched_under_planning_headroom(spec: JobSpec,
                                     memory_fraction: float | None = None) -> JobSpec:
    """A run record's job as a layout search plans its next run: a record is read against
    its device (did the run fit?), a search under the planning headroom as a job file is
    (a trial found a record's search admitting layouts that `validate` says layouts and
    plan leave out), said in its assumptions. ``memory_fraction`` (--memory-fraction)
    replaces the stack's headroom."""
    from mosaic.perf.headroom import memory_headroom

    headroom = memory_headroom(memory_fraction, spec.workload.stack)
    note = (f"searched under the planning headroom: {headroom.usable_fraction:g} of device "
            f"memory ({headroom.source})")
    return replace(spec, usable_memory_fraction=headroom.usable_fraction,
                   assumptions=(*spec.assumptions, note))


def recorded_measurement(spec: JobSpec, record: JobSpec | None) -> float | None:
    """The run record's measured seconds per step when ``spec`` is the run it recorded (the
    same model, batch, layout, hardware and memory share), else None: an edited job is a
    what-if, and as `mosaic explain RUNS.yaml#ID --set ...` does, its step is not compared
    with the record's measurement."""
    from mosaic.config.layout import plan_row_document

    if record is None or record.measured_step_time_s is None:
        return None
    same = (spec.workload == record.workload and spec.system_name == record.system_name
            and spec.usable_memory_fraction == record.usable_memory_fraction
            and spec.tables == record.tables
            and cluster_for(spec).n_devices == cluster_for(record).n_devices
            and plan_row_document(spec.plan.row(0)) == plan_row_document(record.plan.row(0)))
    return record.measured_step_time_s if same else None


def cluster_for(spec: JobSpec) -> Cluster:
    """The catalog cluster a job names: nodes, devices filling whole nodes, or fewer devices
    than one node holds (part of one host)."""
    system = get_system(spec.system_name)
    if spec.nodes == 1 and spec.n_devices is not None and Cluster.is_part_of_host(
            system, spec.n_devices):
        return Cluster.from_n_devices(system, spec.n_devices)  # part of the one host
    if spec.nodes is not None:
        cluster = Cluster(system=system, n_nodes=spec.nodes)
        if spec.n_devices is not None and spec.n_devices != cluster.n_devices:
            row = spec.plan.row(0)
            if spec.n_devices == int(spec.plan.n_devices[0]):
                asked = (f"the layout uses tp·pp·cp·dp = {row['tp']}·{row['pp']}·{row['cp']}·"
                         f"{row['dp']} = {spec.n_devices}; make them equal (an unstated "
                         "parallelism.dp fills the nodes)")
            else:
                asked = (f"search.devices is {spec.n_devices}; state one of them, or make "
                         "them equal")
            raise MosaicInputError(
                f"hardware.nodes={spec.nodes} gives {cluster.n_devices} GPUs "
                f"({spec.nodes} x {system.gpus_per_node} per node) but {asked}")
        return cluster
    assert spec.n_devices is not None
    try:
        return Cluster.from_n_devices(system, spec.n_devices)
    except MosaicInputError as exc:  # it named neither field the count came from (a review)
        raise MosaicInputError(
            f"{spec.n_devices} GPUs (search.devices or --devices, else the layout's "
            f"tp·pp·cp·dp) and no hardware.nodes: {exc}") from None


# the one step term the grouped expert GEMMs (a grouped_gemm_table) are costed in
GROUPED_GEMM_TERM = "compute_experts"


def _label_measured_terms(prediction: StepPrediction, spec: JobSpec, cluster: Cluster,
                          calibration: Calibration) -> StepPrediction:
    """Label the breakdown terms that the measured tables changed as "measured"."""
    analytical = predict_step(spec.workload, spec.plan,
                              machine_for(cluster, spec.workload.precision,
                                          spec.usable_memory_fraction,
                                          fp8_recipe=spec.workload.fp8_recipe), calibration)
    # A kernel table measures compute terms, a collective table communication terms; a
    # term of the other kind that moved did so through overlap (an FSDP gather hidden
    # behind slower measured GEMMs), which is not a measurement of it.
    tables = spec.tables
    measured_groups = ({"compute", "vocab_stage"} if tables.gemm or tables.grouped_gemm
                       else set()) | (
        {"communication"} if tables.collectives else set())
    labels = dict(prediction.labels)
    for name, seconds in prediction.breakdown_s.items():
        if (labels[name] == "analytical" and step_term(name).group in measured_groups
                and not np.allclose(seconds, analytical.breakdown_s[name], rtol=1e-12,
                                    atol=0.0)):
            labels[name] = "measured"
    measured = [name for name, label in labels.items() if label == "measured"]
    covered = {
        "gemm_table": any(step_term(name).group in {"compute", "vocab_stage"}
                          and name != GROUPED_GEMM_TERM for name in measured),
        "grouped_gemm_table": GROUPED_GEMM_TERM in measured,
        "collective_table": any(step_term(name).group == "communication"
                                for name in measured)}
    for field_name, table in (("gemm_table", tables.gemm),
                              ("grouped_gemm_table", tables.grouped_gemm),
                              ("collective_table", tables.collectives)):
        if table is not None and not covered[field_name]:
            # a trial's table of 2-rank collectives on a dp=8 job changed nothing, and the
            # job's assumptions still said its times replaced the model's
            warnings.warn(f"hardware.{field_name} covers none of this job's shapes (outside "
                          "its measured sizes, group sizes or dtypes): those terms are "
                          "analytical", MosaicWarning, stacklevel=2)
    return replace(prediction, labels=labels)


def _uneven_stages_hint(spec: JobSpec, n_devices: int) -> str:
    """The ``performance.uneven_stages`` value that lets this layout place its layers: true
    (the stack's split, :attr:`Workload.stage_split`) or unstated (full first and last
    stages, as Megatron's --pipeline-model-parallel-layout places 61 layers in 32 chunks);
    none if neither does."""
    for value, workload, stated in (
            ("true", replace(spec.workload, uneven_pipeline_stages=True), True),
            ("unstated", spec.workload, False)):
        if first_reason(plan_violations(workload, spec.plan, n_devices, split_stated=stated),
                        spec.plan, 0) is None:
            why = ("" if value == "true" else
                   ": any split Megatron's --pipeline-model-parallel-layout places, costed with "
                   "full first and last stages; or state the split as "
                   "parallelism.pipeline_layout")
            return f" (or set performance.uneven_stages: {value}{why})"
    return ""


def _refuse_rules_the_change_breaks(spec: JobSpec, n_devices: int) -> None:
    """A run record changed by --set: MosaicInputError naming the first layout rule the
    changed job breaks and the record as it ran did not (the rules it already broke ran)."""
    assert spec.as_recorded is not None
    workload, plan = spec.as_recorded
    kept = {v.rule for v in plan_violations(workload, plan, n_devices, split_stated=False)
            if v.violated[0]}
    broken = [v for v in plan_violations(spec.workload, spec.plan, n_devices,
                                         split_stated=False)
              if v.violated[0] and v.rule not in kept]
    if broken:
        raise InvalidLayoutError("invalid parallel layout after --set: "
                               f"{broken[0].message(spec.plan, 0)}")


def predict_job(spec: JobSpec, calibration: Calibration,
                cluster: Cluster | None = None) -> JobPrediction:
    """Validate the job's layout against its cluster and predict its step.

    A run record's layout (``spec.recorded_layout``) ran as recorded: like ``mosaic
    validate``, mosaic's own layout rules are not applied to it; a record changed by
    ``--set`` is refused where the change breaks a rule the recorded run kept. ``cluster``:
    what :func:`check_job_layout` returned for this spec, when the caller checked already.
    """
    if cluster is None:
        cluster = check_job_layout(spec)
    machine = machine_for(cluster, spec.workload.precision, spec.usable_memory_fraction,
                          spec.tables, fp8_recipe=spec.workload.fp8_recipe)
    prediction = predict_step(spec.workload, spec.plan, machine, calibration)
    if spec.tables != MeasuredTables():
        prediction = _label_measured_terms(prediction, spec, cluster, calibration)
    return JobPrediction(spec=spec, cluster=cluster, machine=machine, prediction=prediction)


def predict_job_file(spec: JobSpec, calibration: Calibration, path: Path,
                     overrides: list[str]) -> JobPrediction:
    """:func:`predict_job` of a job loaded from ``path`` with ``overrides``: a layout the
    rules refuse names the file and the ``--set`` that made it (a fuzz trial read 'invalid
    parallel layout: ep=3 must divide experts=128' with neither)."""
    try:
        return predict_job(spec, calibration)
    except InvalidLayoutError as exc:
        raise blame_override(MosaicInputError(f"{path}: {exc}"), overrides) from None


def check_job_layout(spec: JobSpec) -> Cluster:
    """The job's cluster, once its layout passes the layout rules (MosaicInputError naming
    the first it breaks; a run record's as in :func:`predict_job`)."""
    cluster = cluster_for(spec)
    if spec.as_recorded is not None:
        _refuse_rules_the_change_breaks(spec, cluster.n_devices)
    if not spec.recorded_layout:
        # an unstated uneven split (a recorded layout as a job file): any split the stack
        # can place (perf.constraints.plan_violations)
        violations = plan_violations(spec.workload, spec.plan, cluster.n_devices,
                                     split_stated=not spec.unstated_stage_split)
        # a stack the calibration profile chose, not the job: said with every refusal (a
        # trial's torchtitan-fitted profile refused a Megatron job without naming it)
        stack_note = "".join(f"; {note}" for note in spec.assumptions
                             if note.startswith(CALIBRATION_STACK_NOTE))
        reason = first_reason(violations, spec.plan, 0)
        if reason is not None:
            if "must divide layers=" in reason and not spec.workload.uneven_pipeline_stages:
                reason += _uneven_stages_hint(spec, cluster.n_devices)
                # a vpp the stack's default chose, not the job: say so
                reason += "".join(f"; {note}" for note in spec.assumptions
                                  if note.startswith(VPP_DEFAULT_NOTE))
            raise InvalidLayoutError(f"invalid parallel layout: {reason}{stack_note}")
        # what `layouts` and `plan` would refuse to search (a trial: perf costed zero1 on
        # torchtitan, which offers none of it)
        unoffered = unoffered_layout(spec.workload, spec.plan)
        if unoffered is not None:
            # ('layout sharding: stack ... offers only': the heading says layout once)
            raise InvalidLayoutError(
                f"invalid parallel layout: {unoffered.removeprefix('layout ')}{stack_note}")
    return cluster
