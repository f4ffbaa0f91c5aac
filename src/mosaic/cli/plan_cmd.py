"""`mosaic plan` and `mosaic sweep days|nodes`: the MOSAIC co-design search (docs/plan.md).

Defaults are the paper's Table 3 envelope, so a bare `mosaic plan` runs the paper's setting
on the built-in law, hardware catalog and calibration.
"""

from __future__ import annotations

import warnings
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer

from mosaic.cli import plan_render as render
from mosaic.cli.catalog_option import CatalogFileOption, apply_catalog
from mosaic.cli.common import (
    CalibrationOption,
    JsonFlag,
    error_console,
    guarded,
    print_json,
    print_key_value_table,
)
from mosaic.cli.layout_options import (
    CheckpointingModes,
    Cp,
    Ep,
    Etp,
    MaxTp,
    MemoryFraction,
    Pp,
    ShardingModes,
    Tp,
    Vpp,
)
from mosaic.cli.progress import progress_reporter
from mosaic.cli.report_cmd import HtmlOption, check_html, write_html
from mosaic.config.layout import dispatcher_for
from mosaic.errors import MosaicInputError, MosaicWarning
from mosaic.io_atomic import prepare_output_dir
from mosaic.law import ScalingLaw
from mosaic.law.extrapolation import far_outside_messages
from mosaic.law.law import load_law_file, require_identified
from mosaic.limits import LIMITS, check_range
from mosaic.perf.calibration import Calibration, load_calibration
from mosaic.perf.layouts import LayoutLimits
from mosaic.perf.workload import QuantisedGemms
from mosaic.plan.analysis import (
    compare_model_flops,
    flop_cost_profile,
    sparsity_frontier,
)
from mosaic.plan.batch import (
    DEFAULT_RULE,
    check_rule_read,
    is_batch_search,
    parse_batch_rule,
    parse_global_batch,
    search_batch,
)
from mosaic.plan.cost import (
    cheapest_plan,
    check_price,
    check_target_reachable,
    plan_cost,
)
from mosaic.plan.envelope import (
    TABLE3_DAYS,
    TABLE3_GLOBAL_BATCH,
    TABLE3_NODES,
    TABLE3_S_MIN,
    TABLE3_SEQ_LEN,
    Envelope,
    SearchSpace,
    planning_stack,
)
from mosaic.plan.inputs import TABLE3_TPP_TEXT, build_inputs, dollar_budget_for, plan_limits
from mosaic.plan.peak_bound import peak_bound
from mosaic.plan.ray_backend import backend_from_options, execution_backend
from mosaic.plan.search import PlanResult, check_layout_limits, search
from mosaic.plan.sweep import SweepPoint, sweep_days, sweep_nodes
from mosaic.plan.uncertainty import check_samples_describe, load_samples
from mosaic.report import plan_report
from mosaic.report.plan_result import (
    calibration_document,
    optimum_extrapolation,
    plan_result_document,
)
from mosaic.report.stack_comparison import stack_comparison_document
from mosaic.text_values import parse_floats, parse_ints

SWEEP_DAYS = "10,20,30,40"  # Sec. 7.4, Fig. 11a (32 nodes)
SWEEP_NODES = "16,32,64,128"  # Sec. 7.4, Fig. 11b (30 days)
SWEEP_NODES_DAYS = 30.0  # the window of the node sweep (Sec. 7.4)
DEFAULT_TOP = 10

sweep_app = typer.Typer(name="sweep", no_args_is_help=True,
                        help="Budget sweeps of the MOSAIC optimum (paper Sec. 7.4, Fig. 11).")


# --- Shared options --------------------------------------------------------------------------
Gpu = Annotated[str | None, typer.Option(
    "--gpu", help="Accelerator (catalog name or alias): B200 -> p6-b200.48xlarge, H100 -> "
    "p5.48xlarge, H200 -> p5en.48xlarge, GB200 -> GB200-NVL72 (docs/plan.md). Default B200.")]
System = Annotated[str | None, typer.Option(
    "--system", help="Node type from the catalog; overrides the --gpu mapping.")]
Nodes = Annotated[int, typer.Option(
    "--nodes", help="Nodes (hosts) in the cluster; a GB200/GB300 NVL72 node is one 4-GPU "
                    "compute tray, 18 per 72-GPU rack.")]
GpusPerNode = Annotated[int | None, typer.Option(
    "--gpus-per-node", help="What-if host size (default: the system's; per-GPU links kept).")]
ScaleOutGbps = Annotated[float | None, typer.Option(
    "--scale-out-gbps", help="What-if scale-out (NIC) bandwidth in Gb/s per GPU, one "
    "direction, e.g. 200 (default: the system's; NVLink and NIC count kept).")]
Days = Annotated[float | None, typer.Option(
    "--days", help="Training window T_train in days (default 20, Table 3).")]
GoodputOpt = Annotated[float | None, typer.Option(
    "--goodput", help="Constant goodput η_good in (0, 1] (default 1.0, Table 3).")]
Mtbf = Annotated[float | None, typer.Option(
    "--mtbf-gpu-hours", help="MTBF of one GPU in hours: Young-Daly goodput (with "
    "--checkpoint-s).")]
CheckpointS = Annotated[float | None, typer.Option(
    "--checkpoint-s", help="Seconds to write one checkpoint (Young-Daly goodput).")]
CheckpointIntervalS = Annotated[float | None, typer.Option(
    "--checkpoint-interval-s", help="Seconds between checkpoints the job runs with (e.g. "
    "3600, hourly): Young-Daly goodput at this interval instead of the optimal one.")]
RestartS = Annotated[float, typer.Option(
    "--restart-s", help="Seconds lost per failure to restart and reload (Young-Daly).")]
GlobalBatch = Annotated[int, typer.Option("--global-batch", help="B_global, sequences/step.")]
GlobalBatchSearch = Annotated[str, typer.Option(
    "--global-batch", help="B_global in sequences/step: N (fixed, Table 3's 1024), MIN:MAX "
    "(MIN, 2·MIN, ... searched with the layout) or auto (64 ... 65536); a search keeps each "
    "batch under --batch-rule (docs/plan.md).")]
BatchRuleOpt = Annotated[str | None, typer.Option(
    "--batch-rule", help="Bound on tokens per step when the batch is searched (--global-batch "
    "auto or MIN:MAX): deepseek (the default; B_opt = 0.292·C^0.3271, DeepSeek LLM 2024), "
    "kaplan (B_crit = 2e8/L^(1/0.21), Kaplan et al. 2020) or tokens:N.")]
SeqLen = Annotated[int, typer.Option("--seq-len", help="T_seq, tokens per sequence.")]
PrecisionOpt = Annotated[str, typer.Option(
    "--precision", help="GEMM precision of every candidate: bf16, fp16, fp8 (the stack's "
    "default FP8 recipe), fp8-cs (current scaling), fp8-blockwise (128x128 / 1x128 blocks), "
    "mxfp8 (fp8 with MXFP8 block scales, costed on the fp8 lane) or nvfp4 (NVFP4 FP4 GEMMs, "
    "Blackwell; fp4 names it too).")]
StackVersionOpt = Annotated[str | None, typer.Option(
    "--stack-version", help="The stack's release, YY.MM (e.g. 26.06), or a point release "
    "YY.MM.0N (26.06.01): every candidate takes the release's recipes that hold for every "
    "MoE model (docs/stacks.md).")]
DispatcherOpt = Annotated[str | None, typer.Option(
    "--dispatcher", help="EP token dispatch of every candidate: alltoall, deepep or hybridep "
    "(default: the stack's on the cluster's GPU, e.g. megatron-bridge: deepep on Hopper, "
    "hybridep on Blackwell; else alltoall; docs/plan.md).")]
QuantisedGemmsOpt = Annotated[str, typer.Option(
    "--quantised-gemms", help="Which GEMMs of every candidate --precision runs: all (default), "
    "or routed_experts (the experts' grouped GEMMs alone, the rest bf16: torchtitan's "
    "quantize.grouped_mm converters; needs fp8 or mxfp8).")]
OptimizerOpt = Annotated[str, typer.Option(
    "--optimizer", help="Optimizer every candidate trains with: adam, adamw (default), muon or "
    "sgd (its state's memory and step time; a job's optimizer.kind).")]
OptimizerDtypeOpt = Annotated[str, typer.Option(
    "--optimizer-dtype", help="Dtype of every candidate's optimizer state: fp32 (default: fp32 "
    "master weights and moments), bf16 or bf16_moments (a job's "
    "performance.optimizer_dtype; docs/memory.md).")]
LawFile = Annotated[Path | None, typer.Option(
    "--law", help="Law JSON (`mosaic law fit --out`); default: Table 2 joint law.")]
QValues = Annotated[str | None, typer.Option(
    "--q", help="Ladder seeds q, comma-separated (default: Table 3's 8..18).")]
Experts = Annotated[str | None, typer.Option(
    "--experts", help="Expert counts E, comma-separated (default: Table 3's, or the "
    "backbone's own).")]
TopK = Annotated[str | None, typer.Option(
    "--top-k", help="Active experts K, comma-separated (default: Table 3's, or the "
    "backbone's own).")]
Split = Annotated[str | None, typer.Option(
    "--split-factor", help="Split factors G = d_ff/d_expert, comma-separated (default: "
    "Table 3's, or the backbone's own).")]
BackboneOpt = Annotated[Path | None, typer.Option(
    "--backbone", help="Search around your model: a HuggingFace config.json or a mosaic "
    "model YAML; keeps its attention, shared experts, dense layers and vocab (docs/plan.md). "
    "Default: the paper's ladder.")]
LayersOpt = Annotated[str | None, typer.Option(
    "--layers", help="With --backbone: depths L to search, comma-separated (default: its own).")]
DModelOpt = Annotated[str | None, typer.Option(
    "--d-model", help="With --backbone: widths d to search, comma-separated (default: its "
    "own; heads and d_ff scale with d).")]
Tpp = Annotated[str, typer.Option("--tpp", help="Tokens per active parameter MIN:MAX.")]
SMin = Annotated[float, typer.Option("--s-min", help="Sparsity guard S >= s_min.")]
Workers = Annotated[int | None, typer.Option(
    "--workers", help="Processes for the layout search (default: all CPUs); with --backend "
    "ray, the CPUs of the local Ray instance it starts")]
StackOpt = Annotated[str | None, typer.Option(
    "--stack", help="Software stack of every candidate (see docs/stacks.md; default: the "
    "calibration profile's, else megatron-core).")]
BackendOpt = Annotated[str, typer.Option(
    "--backend", help="Where the layout searches run: local processes, or ray tasks "
    "(pip install 'mosaic\\[ray]'; docs/ray.md).")]
AddressOpt = Annotated[str | None, typer.Option(
    "--address", help="With --backend ray: auto (the cluster of `ray start`) or HOST:PORT "
    "of a head node; default: the cluster RAY_ADDRESS names, else one this machine runs "
    "(`ray start`), else a new local instance (docs/ray.md).")]
BalancedPipelineOpt = Annotated[bool, typer.Option(
    "--balanced-pipeline", help="Split every pipelined layout by a balanced Megatron layout "
    "(embedding, loss and MTP modules as layer slots), as `mosaic layouts "
    "--balanced-pipeline` does; the optimum's layout string is in --json and its exports.")]
PlotDir = Annotated[Path | None, typer.Option(
    "--plot", help="Write figures (PNG and SVG) into this directory.")]
MaxTotalParams = Annotated[str | None, typer.Option(
    "--max-total-params", help="Cap on N_tot (non-embedding, as the table counts it), e.g. "
    "400B: what a serving node holds (docs/plan.md).")]
MaxActiveParams = Annotated[str | None, typer.Option(
    "--max-active-params", help="Cap on N_act (non-embedding), e.g. 20B: a per-token "
    "latency or cost budget.")]
SMax = Annotated[float | None, typer.Option(
    "--s-max", help="Sparsity cap S <= s_max (default: none).")]
UniqueTokens = Annotated[str | None, typer.Option(
    "--unique-tokens", help="Unique data you have, e.g. 5T: tokens beyond it are repeated "
    "and count as effective data D' (Muennighoff et al. 2023; docs/plan.md). Default: "
    "every token new.")]
BudgetUsd = Annotated[float | None, typer.Option(
    "--budget-usd", help="Dollar budget: the window is budget / (--price-per-gpu-hour x "
    "GPUs), or --days where that is shorter (the output says which binds).")]
PlanMbs = Annotated[str | None, typer.Option(
    "--mbs", help="Micro-batch sizes the layout search tries (default Table 3's 1,2,4).")]

def load_models(law_file: Path | None, calibration_file: str | None
                ) -> tuple[ScalingLaw, Calibration]:
    law = load_law_file(law_file)
    # each candidate's tokens are what its throughput delivers in the window
    require_identified(law, f"--law {law_file}", "a plan")
    if law.form.is_dense:
        raise MosaicInputError(
            f"--law {law_file}: form '{law.form.name}' is a dense law, with no sparsity "
            "term: it cannot rank the MoE geometries the planner searches (each N_tot at "
            "every sparsity); fit a joint or per-g law (`mosaic law fit --form joint`)")
    return law, load_calibration(calibration_file)


def require_physical_loss(result: PlanResult) -> None:
    """An optimum whose predicted loss is not physical comes from a broken law file."""
    loss = float(result.loss[result.optimum_index])
    high = LIMITS["loss"].high
    if not 0.0 < loss < high:
        raise MosaicInputError(
            f"the law predicts a loss of {loss:g} nats/token at the optimum, outside any "
            f"physical range (0, {high:g}); check the --law file's coefficients")


def require_window_at_peak(envelope: Envelope, space: SearchSpace, law: ScalingLaw) -> None:
    """A window too short for any geometry even at the GPUs' full peak is refused before the
    search (a trial waited 24 s for `--days 0.01` to say so), and first a cluster that
    fails faster than it checkpoints (goodput 0), with that reason."""
    envelope.goodput.require_progress(envelope.n_devices)
    grid = space.enumerate()
    bound = peak_bound(envelope, space, law, grid)
    if not bound.trainable.any():
        raise MosaicInputError(plan_report.window_untrainable_message(envelope, space, grid,
                                                                     bound))


def require_trainable(result: PlanResult) -> None:
    """A budget under which nothing can be trained is a user error with the reasons."""
    if result.optimum_index is not None:
        require_physical_loss(result)
        return
    raise MosaicInputError(plan_report.untrainable_message(result))


def _prepare_outputs(plot_dir: Path | None, html: Path | None, *inputs: object) -> None:
    """The plot folder and the --html file, before the search (the latter none of the
    command's ``inputs``)."""
    if plot_dir is not None:
        prepare_output_dir(plot_dir, "--plot")
    check_html(html, *inputs)


# --- mosaic plan ---------------------------------------------------------------------------
def _plots(result: PlanResult, law: ScalingLaw, plot_dir: Path | None) -> list[str]:
    """The frontier, sparsity trade-off and FLOP-cost figures in ``plot_dir`` (if given)."""
    if plot_dir is None:
        return []
    comparison = compare_model_flops(result, law)
    assert comparison.split_factor is not None
    frontier = sparsity_frontier(result, law, comparison.c_model_flops,
                                 comparison.split_factor)
    profiles = [flop_cost_profile(result, law, comparison.c_model_flops, "sparsity",
                                  split_factor=comparison.split_factor),
                flop_cost_profile(result, law, comparison.c_model_flops, "split_factor")]
    written: list[str] = []
    from mosaic.report import plots  # matplotlib: only when figures are written

    for paths in (plots.plot_frontier(result, plot_dir),
                  plots.plot_sparsity_tradeoff(
                      frontier, comparison, plot_dir,
                      cluster_optimum=_cluster_optimum_point(result, comparison)),
                  plots.plot_flop_cost(profiles, plot_dir)):
        written += [str(p) for p in paths]
    return written


def _cluster_optimum_point(result: PlanResult, comparison: Any
                           ) -> tuple[float, float] | None:
    """(S, loss) of the cluster optimum the comparison was made at, for its marker."""
    row = comparison.cluster_row
    return None if row is None else (float(result.grid.sparsity[row]), float(result.loss[row]))


def versus_envelope(envelope: Envelope, other: Calibration) -> Envelope:
    """The envelope on ``other``'s stack: a headroom the user gave holds for both;
    otherwise each stack takes its own (the paper's stack plans against the whole device,
    modern stacks against 90% of it)."""
    headroom = envelope.headroom if (envelope.headroom is not None
                                     and envelope.headroom.origin == "user") else None
    stack = planning_stack(other)
    # An unstated dispatcher is each stack's own default: megatron-bridge's HybridEP on
    # Blackwell is not the paper's stack's, which runs the all-to-all only (Appendix F.3).
    dispatcher = (envelope.dispatcher if envelope.dispatcher_stated else
                  dispatcher_for(None, stack, envelope.system.device.name, True, []))
    # A release's defaults belong to the first stack; the other plans without them.
    return replace(envelope, stack=stack, headroom=headroom, dispatcher=dispatcher,
                   stack_version=None, ep_overlap=False, full_iteration_cuda_graph=False,
                   fused_grouped_mlp=False, quantised_gemms=QuantisedGemms.ALL)


def _backend(backend: str, address: str | None, workers: int | None) -> Any:
    """The execution backend, after --workers is checked (a Ray instance starts in
    backend_from_options: a bad --workers should not wait for it)."""
    if workers is not None:
        check_range("--workers", workers, "workers", integer=True)
    return backend_from_options(backend, address, workers)


def _versus(envelope: Envelope, space: SearchSpace, law: ScalingLaw,
            other_calibration: Calibration, result: PlanResult, calibration: Calibration,
            limits: LayoutLimits, workers: int | None, as_json: bool) -> dict[str, Any]:
    """The same envelope planned under a second calibration, on that calibration's stack."""
    other_envelope = versus_envelope(envelope, other_calibration)
    with progress_reporter(as_json) as bar:
        other = search(other_envelope, space, law, other_calibration, limits,
                       progress=bar(f"geometries ({other_calibration.name})"), workers=workers)
    return stack_comparison_document(result, calibration, other, other_calibration)


def _cheapest_lists(envelope: Envelope, nodes_text: str | None, days_text: str | None
                    ) -> tuple[list[int], list[float]]:
    """Budgets of the cheapest-plan search: given lists, else n/2, n, 2n and d/4 ... 2d."""
    nodes = (list(parse_ints("--cheapest-nodes", nodes_text)) if nodes_text else
             sorted({max(1, envelope.n_nodes // 2), envelope.n_nodes, 2 * envelope.n_nodes}))
    days = (list(parse_floats("--cheapest-days", days_text)) if days_text else
            [envelope.days * f for f in (0.25, 0.5, 1.0, 2.0)])
    for value in nodes:
        check_range("--cheapest-nodes", value, "nodes", integer=True)
    for value in days:
        check_range("--cheapest-days", value, "days")
    return nodes, days


def plan(
    gpu: Gpu = None, system: System = None, nodes: Nodes = TABLE3_NODES,
    gpus_per_node: GpusPerNode = None, scale_out_gbps: ScaleOutGbps = None,
    days: Days = None, goodput: GoodputOpt = None,
    mtbf_gpu_hours: Mtbf = None, checkpoint_s: CheckpointS = None,
    checkpoint_interval_s: CheckpointIntervalS = None, restart_s: RestartS = 0.0,
    global_batch: GlobalBatchSearch = str(TABLE3_GLOBAL_BATCH),
    batch_rule: BatchRuleOpt = None, seq_len: SeqLen = TABLE3_SEQ_LEN,
    memory_fraction: MemoryFraction = None,
    law_file: LawFile = None, calibration_file: CalibrationOption = None,
    q: QValues = None, experts: Experts = None,
    top_k: TopK = None, split_factor: Split = None,
    tpp: Tpp = TABLE3_TPP_TEXT, s_min: SMin = TABLE3_S_MIN,
    top: Annotated[int, typer.Option("--top", help="Rows of the ranked table.")] = DEFAULT_TOP,
    price_per_gpu_hour: Annotated[float | None, typer.Option(
        "--price-per-gpu-hour", help="Price of one GPU-hour in USD; adds the cost.")] = None,
    target_loss: Annotated[float | None, typer.Option(
        "--target-loss", help="Also find the cheapest budget whose optimum reaches this loss.")
    ] = None,
    cheapest_nodes: Annotated[str | None, typer.Option(
        "--cheapest-nodes", help="Node counts for --target-loss (default n/2, n, 2n).")] = None,
    cheapest_days: Annotated[str | None, typer.Option(
        "--cheapest-days", help="Windows for --target-loss (default d/4, d/2, d, 2d).")] = None,
    bootstrap_samples: Annotated[Path | None, typer.Option(
        "--bootstrap-samples", help="Law coefficient samples (JSON or CSV, docs/plan.md).")
    ] = None,
    workers: Workers = None, backend: BackendOpt = "local", address: AddressOpt = None,
    as_json: JsonFlag = False, plot_dir: PlotDir = None,
    html: HtmlOption = None, stack: StackOpt = None,
    precision: PrecisionOpt = "bf16", dispatcher: DispatcherOpt = None,
    quantised_gemms: QuantisedGemmsOpt = "all",
    optimizer: OptimizerOpt = "adamw", optimizer_dtype: OptimizerDtypeOpt = "fp32",
    stack_version: StackVersionOpt = None,
    backbone: BackboneOpt = None, layers: LayersOpt = None, d_model: DModelOpt = None,
    balanced_pipeline: BalancedPipelineOpt = False,
    versus: Annotated[str | None, typer.Option(
        "--versus", help="Also plan the envelope under this calibration (profile or file) "
        "on its own stack and show both optima with why they differ.")] = None,
    catalog: CatalogFileOption = None,
    budget_usd: BudgetUsd = None,
    max_total_params: MaxTotalParams = None, max_active_params: MaxActiveParams = None,
    s_max: SMax = None, unique_tokens: UniqueTokens = None,
    max_tp: MaxTp = None, tp: Tp = None, pp: Pp = None, vpp: Vpp = None, cp: Cp = None,
    ep: Ep = None, etp: Etp = None, mbs: PlanMbs = None, sharding: ShardingModes = None,
    checkpointing: CheckpointingModes = None,
) -> None:
    """Jointly choose the MoE geometry, token budget and parallel layout for a cluster.

    Constraints a team plans under: --max-total-params/--max-active-params/--s-max on the
    model, the layout options (--tp, --pp, --ep, --sharding, ...) as `mosaic layouts`
    takes them, and --budget-usd for a dollar budget (docs/plan.md)."""
    apply_catalog(catalog)
    _prepare_outputs(plot_dir, html, law_file, calibration_file, backbone, catalog,
                     bootstrap_samples)
    check_range("--top", top, "top", integer=True, low=1)
    batches = parse_global_batch(global_batch)
    rule = parse_batch_rule(DEFAULT_RULE if batch_rule is None else batch_rule)
    batch_search = is_batch_search(global_batch)
    check_rule_read(batch_rule, global_batch)
    if target_loss is None and (cheapest_nodes or cheapest_days):
        raise MosaicInputError("--cheapest-nodes and --cheapest-days are the budgets of "
                               "--target-loss; give --target-loss with them")
    if batch_search and (target_loss is not None or versus is not None):
        raise MosaicInputError("--target-loss and --versus plan at a fixed batch; give "
                               "--global-batch N with them")
    dollar_budget = dollar_budget_for(budget_usd, price_per_gpu_hour, days)
    law, calibration = load_models(law_file, calibration_file)
    # every input is checked before the search: the --versus calibration too
    versus_calibration = None if versus is None else load_calibration(versus)
    envelope, space = build_inputs(
        gpu=gpu, system=system, nodes=nodes, gpus_per_node=gpus_per_node,
        scale_out_gbps=scale_out_gbps,
        days=TABLE3_DAYS if days is None else days,
        goodput=goodput, mtbf_gpu_hours=mtbf_gpu_hours, checkpoint_s=checkpoint_s,
        checkpoint_interval_s=checkpoint_interval_s,
        restart_s=restart_s, global_batch=batches[0], seq_len=seq_len,
        memory_fraction=memory_fraction, q=q, experts=experts,
        top_k=top_k, split_factor=split_factor, tpp=tpp, s_min=s_min,
        stack=planning_stack(calibration, stack), precision=precision,
        dispatcher=dispatcher, quantised_gemms=quantised_gemms, backbone=backbone,
        optimizer=optimizer, optimizer_dtype=optimizer_dtype,
        layers=layers, d_model=d_model,
        stack_version=stack_version, balanced_pipeline=balanced_pipeline,
        max_total_params=max_total_params, max_active_params=max_active_params, s_max=s_max,
        unique_tokens=unique_tokens)
    envelope = replace(envelope, dollar_budget=dollar_budget)  # its window, if given
    limits = plan_limits(envelope, space, max_tp=max_tp, tp=tp, pp=pp, vpp=vpp, cp=cp,
                          ep=ep, etp=etp, mbs=mbs, sharding=sharding,
                          checkpointing=checkpointing)
    if versus_calibration is not None:  # the other stack must offer the layouts too
        try:
            check_layout_limits(versus_envelope(envelope, versus_calibration), space, limits)
        except MosaicInputError as exc:
            raise MosaicInputError(f"--versus {versus}: {exc}") from None
    price_per_gpu_hour = check_price(price_per_gpu_hour, envelope.system.gpus_per_node)
    require_window_at_peak(envelope, space, law)
    if target_loss is not None:  # an unreachable target is refused before any search
        node_list, day_list = check_target_reachable(
            envelope, space, law, target_loss,
            *_cheapest_lists(envelope, cheapest_nodes, cheapest_days))
    samples = None if bootstrap_samples is None else load_samples(bootstrap_samples,
                                                                  law.form.name)
    if samples is not None:
        check_samples_describe(samples, law, f"--bootstrap-samples {bootstrap_samples}")
    runner = _backend(backend, address, workers)  # one-line error if ray is absent
    batch_choice = None
    with execution_backend(runner), progress_reporter(as_json) as bar:
        if batch_search:
            result, batch_choice = search_batch(
                envelope, space, law, calibration, batches, rule, limits,
                progress=lambda b: bar(f"geometries at batch {b}"), workers=workers)
        else:
            result = search(envelope, space, law, calibration, limits,
                            progress=bar("geometries"), workers=workers)
        require_trainable(result)
        cheapest = None
        if target_loss is not None:
            cheapest = cheapest_plan(envelope, space, law, calibration, target_loss, node_list,
                                     day_list, price_per_gpu_hour, limits,
                                     progress=lambda n: bar(f"{n} nodes"), workers=workers)
    extra: dict[str, Any] = {
        "batch": ({"mode": "fixed", "global_batch": envelope.global_batch}
                  if batch_choice is None else batch_choice.to_dict())}
    if versus_calibration is not None:  # on the same backend (a trial: it ran locally)
        with execution_backend(runner):
            extra["versus"] = _versus(envelope, space, law, versus_calibration, result,
                                      calibration, limits, workers, as_json)
    if cheapest is not None:
        extra["cheapest"] = plan_report.cheapest_document(cheapest)
    cost = plan_cost(result, price_per_gpu_hour)  # of the days the optimum trains
    document, uncertainty = plan_result_document(result, law, calibration, cost, samples,
                                                 extra)
    far = far_outside_messages(document["optimum"].get("extrapolation"))
    if far:
        warnings.warn("the loss law is far outside the runs it was fitted to at this "
                      f"optimum: {'; '.join(far)}", MosaicWarning, stacklevel=2)
    written = _plots(result, law, plot_dir)
    if written:
        document["plots"] = written
    write_html(document, html, "plan")
    if as_json:
        print_json(document)
        return
    render.print_envelope(result, cost, calibration.name)
    render.print_optimum(document["optimum"])
    render.print_model_notes(document["assumptions"])
    render.print_coverage(document["optimum"]["coverage_summary"])
    render.print_ranking(result, top, uncertainty)
    render.print_comparison(document["model_flops_comparison"])
    if "versus" in document:
        render.print_versus(document["versus"], result.grid.is_ladder)
    if "uncertainty" in document:
        render.print_uncertainty(document["uncertainty"])
    if "cheapest" in document:
        render.print_cheapest(document["cheapest"])
    for path in written:
        error_console.print(f"wrote {path}", markup=False, highlight=False)


# --- mosaic sweep ----------------------------------------------------------------------------
def _finish_sweep(points: list[SweepPoint], law: ScalingLaw, as_json: bool,
                  plot_dir: Path | None, html: Path | None = None,
                  calibration: Calibration | None = None,
                  price_per_gpu_hour: float | None = None) -> None:
    trainable = [p for p in points if p.result.optimum_index is not None]
    if not trainable:  # the same "nothing trainable" error (exit 2) as plan
        require_trainable(points[0].result)
    for point in trainable:
        require_physical_loss(point.result)
    document = plan_report.sweep_document(points, price_per_gpu_hour)
    vocab = plan_report.grid_vocab(points[0].result.space.to_dict())
    for entry in document["points"]:
        if entry["optimum"] is not None:
            entry["optimum"]["extrapolation"] = optimum_extrapolation(law, entry["optimum"],
                                                                      vocab)
    if calibration is not None:
        document["calibration"] = calibration_document(calibration)
    write_html(document, html, "sweep")
    if plot_dir is not None:
        from mosaic.report import plots

        document["plots"] = [str(p) for p in plots.plot_sweep(points, plot_dir)]
    if as_json:
        print_json(document)
        return
    render.print_sweep(points, document)
    flags = plan_report.sweep_extrapolation_rows(document)
    if flags:
        print_key_value_table("The loss law is extrapolating (its fitted data range)", flags)
    if calibration is not None:
        typer.echo(f"stack / calibration: {points[0].result.envelope.stack} / "
                   f"{calibration.name}")
    # the node type and links every point is costed on (a --scale-out-gbps or
    # --gpus-per-node what-if names itself here; the JSON's envelope says the same)
    node_type = points[0].result.envelope.system
    typer.echo(f"node type: {node_type.name}; network: {node_type.network_text()}")
    for label, text in (
            ("model and data limits", plan_report.model_limits_text(document["search_space"])),
            ("layouts allowed", plan_report.layout_limits_text(document["layout_limits"]))):
        if text:
            typer.echo(f"{label}: {text}")
    for path in document.get("plots", []):
        error_console.print(f"wrote {path}", markup=False, highlight=False)


@sweep_app.command("days")
@guarded
def sweep_days_command(
    values: Annotated[str, typer.Option("--values", help="Windows in days.")] = SWEEP_DAYS,
    gpu: Gpu = None, system: System = None, nodes: Nodes = TABLE3_NODES,
    gpus_per_node: GpusPerNode = None, scale_out_gbps: ScaleOutGbps = None,
    price_per_gpu_hour: Annotated[float | None, typer.Option(
        "--price-per-gpu-hour", help="Price of one GPU-hour in USD; adds each point's cost.")
    ] = None,
    goodput: GoodputOpt = None,
    mtbf_gpu_hours: Mtbf = None, checkpoint_s: CheckpointS = None,
    checkpoint_interval_s: CheckpointIntervalS = None, restart_s: RestartS = 0.0,
    global_batch: GlobalBatch = TABLE3_GLOBAL_BATCH, seq_len: SeqLen = TABLE3_SEQ_LEN,
    memory_fraction: MemoryFraction = None,
    law_file: LawFile = None, calibration_file: CalibrationOption = None,
    q: QValues = None, experts: Experts = None,
    top_k: TopK = None, split_factor: Split = None,
    tpp: Tpp = TABLE3_TPP_TEXT, s_min: SMin = TABLE3_S_MIN,
    workers: Workers = None, backend: BackendOpt = "local", address: AddressOpt = None,
    as_json: JsonFlag = False, plot_dir: PlotDir = None,
    html: HtmlOption = None, stack: StackOpt = None,
    precision: PrecisionOpt = "bf16", dispatcher: DispatcherOpt = None,
    quantised_gemms: QuantisedGemmsOpt = "all",
    optimizer: OptimizerOpt = "adamw", optimizer_dtype: OptimizerDtypeOpt = "fp32",
    stack_version: StackVersionOpt = None,
    backbone: BackboneOpt = None, layers: LayersOpt = None, d_model: DModelOpt = None,
    catalog: CatalogFileOption = None,
    max_total_params: MaxTotalParams = None, max_active_params: MaxActiveParams = None,
    s_max: SMax = None, unique_tokens: UniqueTokens = None,
    max_tp: MaxTp = None, tp: Tp = None, pp: Pp = None, vpp: Vpp = None, cp: Cp = None,
    ep: Ep = None, etp: Etp = None, mbs: PlanMbs = None, sharding: ShardingModes = None,
    checkpointing: CheckpointingModes = None,
) -> None:
    """Optimum per training window on a fixed cluster (layouts searched once)."""
    apply_catalog(catalog)
    _prepare_outputs(plot_dir, html, law_file, calibration_file, backbone, catalog)
    windows = parse_floats("--values", values)
    law, calibration = load_models(law_file, calibration_file)
    envelope, space = build_inputs(
        gpu=gpu, system=system, nodes=nodes, gpus_per_node=gpus_per_node,
        scale_out_gbps=scale_out_gbps, days=windows[0],
        goodput=goodput, mtbf_gpu_hours=mtbf_gpu_hours, checkpoint_s=checkpoint_s,
        checkpoint_interval_s=checkpoint_interval_s,
        restart_s=restart_s, global_batch=global_batch, seq_len=seq_len,
        memory_fraction=memory_fraction, q=q, experts=experts,
        top_k=top_k, split_factor=split_factor, tpp=tpp, s_min=s_min,
        stack=planning_stack(calibration, stack), precision=precision,
        dispatcher=dispatcher, quantised_gemms=quantised_gemms, backbone=backbone,
        optimizer=optimizer, optimizer_dtype=optimizer_dtype,
        layers=layers, d_model=d_model,
        stack_version=stack_version, max_total_params=max_total_params,
        max_active_params=max_active_params, s_max=s_max, unique_tokens=unique_tokens)
    # checked on the node type, so a per-node price is divided by its own GPUs (a trial's
    # GB200 sweep was told of 8-GPU HGX nodes, where `plan` names the tray's 4)
    price_per_gpu_hour = check_price(price_per_gpu_hour, envelope.system.gpus_per_node)
    limits = plan_limits(envelope, space, max_tp=max_tp, tp=tp, pp=pp, vpp=vpp, cp=cp,
                          ep=ep, etp=etp, mbs=mbs, sharding=sharding,
                          checkpointing=checkpointing)
    for window in windows:
        envelope.with_budget(days=window)  # validates every window up front
    runner = _backend(backend, address, workers)  # one-line error if ray is absent
    with execution_backend(runner), progress_reporter(as_json) as bar:
        points = sweep_days(envelope, space, law, calibration, windows, limits,
                            progress=bar("geometries"), workers=workers)
    _finish_sweep(points, law, as_json, plot_dir, html, calibration, price_per_gpu_hour)


@sweep_app.command("nodes")
@guarded
def sweep_nodes_command(
    values: Annotated[str, typer.Option("--values", help="Node counts.")] = SWEEP_NODES,
    gpu: Gpu = None, system: System = None, gpus_per_node: GpusPerNode = None,
    scale_out_gbps: ScaleOutGbps = None,
    days: Annotated[float | None, typer.Option(
        "--days", help="Training window in days (default 30, as Sec. 7.4).")] = None,
    budget_usd: Annotated[float | None, typer.Option(
        "--budget-usd", help="Dollar budget: every node count gets the window it buys, "
        "budget / (--price-per-gpu-hour x GPUs), an equal-cost sweep; with --days, the "
        "shorter of the two.")
    ] = None,
    price_per_gpu_hour: Annotated[float | None, typer.Option(
        "--price-per-gpu-hour", help="Price of one GPU-hour in USD: adds each point's cost, "
        "and with --budget-usd sets each node count's window.")
    ] = None,
    goodput: GoodputOpt = None, mtbf_gpu_hours: Mtbf = None, checkpoint_s: CheckpointS = None,
    checkpoint_interval_s: CheckpointIntervalS = None,
    restart_s: RestartS = 0.0, global_batch: GlobalBatch = TABLE3_GLOBAL_BATCH,
    seq_len: SeqLen = TABLE3_SEQ_LEN, memory_fraction: MemoryFraction = None,
    law_file: LawFile = None, calibration_file: CalibrationOption = None,
    q: QValues = None,
    experts: Experts = None, top_k: TopK = None,
    split_factor: Split = None, tpp: Tpp = TABLE3_TPP_TEXT,
    s_min: SMin = TABLE3_S_MIN, workers: Workers = None, backend: BackendOpt = "local",
    address: AddressOpt = None, as_json: JsonFlag = False,
    plot_dir: PlotDir = None, html: HtmlOption = None, stack: StackOpt = None,
    precision: PrecisionOpt = "bf16", dispatcher: DispatcherOpt = None,
    quantised_gemms: QuantisedGemmsOpt = "all",
    optimizer: OptimizerOpt = "adamw", optimizer_dtype: OptimizerDtypeOpt = "fp32",
    stack_version: StackVersionOpt = None,
    backbone: BackboneOpt = None, layers: LayersOpt = None, d_model: DModelOpt = None,
    catalog: CatalogFileOption = None,
    max_total_params: MaxTotalParams = None, max_active_params: MaxActiveParams = None,
    s_max: SMax = None, unique_tokens: UniqueTokens = None,
    max_tp: MaxTp = None, tp: Tp = None, pp: Pp = None, vpp: Vpp = None, cp: Cp = None,
    ep: Ep = None, etp: Etp = None, mbs: PlanMbs = None, sharding: ShardingModes = None,
    checkpointing: CheckpointingModes = None,
) -> None:
    """Optimum per cluster size at a fixed window (layouts searched per node count)."""
    apply_catalog(catalog)
    _prepare_outputs(plot_dir, html, law_file, calibration_file, backbone, catalog)
    node_counts = parse_ints("--values", values)
    dollar_budget = dollar_budget_for(budget_usd, price_per_gpu_hour, days)
    law, calibration = load_models(law_file, calibration_file)
    envelope, space = build_inputs(
        gpu=gpu, system=system, nodes=node_counts[0], gpus_per_node=gpus_per_node,
        scale_out_gbps=scale_out_gbps,
        days=SWEEP_NODES_DAYS if days is None else days,
        goodput=goodput, mtbf_gpu_hours=mtbf_gpu_hours, checkpoint_s=checkpoint_s,
        checkpoint_interval_s=checkpoint_interval_s,
        restart_s=restart_s, global_batch=global_batch, seq_len=seq_len,
        memory_fraction=memory_fraction, q=q, experts=experts,
        top_k=top_k, split_factor=split_factor, tpp=tpp, s_min=s_min,
        stack=planning_stack(calibration, stack), precision=precision,
        dispatcher=dispatcher, quantised_gemms=quantised_gemms, backbone=backbone,
        optimizer=optimizer, optimizer_dtype=optimizer_dtype,
        layers=layers, d_model=d_model,
        stack_version=stack_version, max_total_params=max_total_params,
        max_active_params=max_active_params, s_max=s_max, unique_tokens=unique_tokens)
    envelope = replace(envelope, dollar_budget=dollar_budget)  # its window, if given
    price_per_gpu_hour = check_price(price_per_gpu_hour, envelope.system.gpus_per_node)
    limits = plan_limits(envelope, space, max_tp=max_tp, tp=tp, pp=pp, vpp=vpp, cp=cp,
                          ep=ep, etp=etp, mbs=mbs, sharding=sharding,
                          checkpointing=checkpointing)
    for n in node_counts:
        envelope.with_budget(n_nodes=n)  # validates every node count (and its window)
    runner = _backend(backend, address, workers)  # one-line error if ray is absent
    with execution_backend(runner), progress_reporter(as_json) as bar:
        points = sweep_nodes(envelope, space, law, calibration, node_counts, limits,
                             progress=lambda n: bar(f"{n} nodes"), workers=workers)
    _finish_sweep(points, law, as_json, plot_dir, html, calibration, price_per_gpu_hour)


def register(app: typer.Typer) -> None:
    """Attach `mosaic plan` and `mosaic sweep` to the root command."""
    app.command("plan")(guarded(plan))
    app.add_typer(sweep_app, name="sweep")
