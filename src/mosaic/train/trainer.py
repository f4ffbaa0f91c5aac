"""The training loop: the paper's recipe (Appendix A) on one process or under torchrun.

One optimizer step = ``global_batch_seqs`` sequences, split into micro-batches of
``micro_batch_seqs``; rank r runs micro-batches r·A ... r·A + A - 1 (A accumulation steps)
so a run's numbers do not depend on how the global batch is spread over processes. All
randomness (initialisation, data order, Gumbel noise) derives from (seed, step,
micro-batch, layer), so a resumed run repeats the uninterrupted one exactly on CPU.

Per step: lr from the WSD schedule, forward/backward with cross-entropy + z-loss (Eq. 23) +
balance loss summed over MoE layers, AdamW, then the bias controller (Eq. 19) once on the
per-expert counts summed over the whole global batch. Metrics go to ``metrics.jsonl``.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import shutil
import sys
import time
import warnings
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812 - the PyTorch convention

from mosaic.arch import count_parameters
from mosaic.errors import MosaicInputError, MosaicWarning
from mosaic.io_atomic import write_text_atomic
from mosaic.train.config import TrainConfig
from mosaic.train.data import TokenStream
from mosaic.train.distributed import (
    DistContext,
    all_reduce_max,
    all_reduce_sum,
    barrier,
    init_distributed,
    shard_model,
    shutdown,
)
from mosaic.train.expert_parallel import (
    ExpertParallel,
    build_expert_parallel,
    expert_grad_sq_norm,
    gather_full,
    local_slice,
    reduce_expert_gradients,
    split_experts,
)
from mosaic.train.folder_lock import training_lock
from mosaic.train.interrupt import StepAbandoned, StopRequest
from mosaic.train.metrics import (
    FlopsAccounting,
    MetricsLog,
    SmoothedLoss,
    achievable_from_bench,
    resolve_device,
)
from mosaic.train.model import MoETransformer
from mosaic.train.preflight import (
    available_memory_bytes,
    check_training_memory,
    estimate_training_memory,
    processes_sharing_memory,
)
from mosaic.train.result_files import (
    CHECKPOINT_FILE,
    METRICS_FILE,
    RESULT_FILE,
    RESULT_FINGERPRINT,
    RUN_INFO_FILE,
    read_run_json,
)
from mosaic.train.router_health import final_window_steps
from mosaic.train.routing import load_statistics, update_bias
from mosaic.train.schedule import WSDSchedule, default_peak_lr
from mosaic.units import GIB, MIB, counted

# Fields that may change between a run and its resumption without changing the numbers.
_RESUMABLE_FIELDS = ("log_every", "checkpoint_every", "plot", "device_name",
                     "achievable_flops_per_s", "bench_dir", "cpu_threads", "expert_parallel",
                     "memory_check")


@dataclass(frozen=True)
class TrainResult:
    """Summary of a finished (or stopped) run; ``result.json`` holds the same fields."""

    steps: int
    total_steps: int
    tokens: int
    final_loss: float
    smoothed_loss: float
    peak_lr: float
    n_total: int
    n_active: int
    sparsity: float
    split_factor: float
    experts: int
    top_k: int
    layers: int
    d_model: int
    wall_s: float
    tokens_per_s: float
    world_size: int
    complete: bool
    # mean starved experts per MoE layer over the final steps (router_health); None if dense
    starved_experts: float | None = None
    # at the median step's tokens/s: 6·N_act against the dense bf16 datasheet peak, and
    # against the measured GEMM peak (run.bench_dir / achievable); None without a device peak
    mfu_paper: float | None = None
    mfu_paper_vs_achievable: float | None = None
    # the tokenizer's vocabulary: the loss is in nats per token of it (None: older files)
    vocab: int | None = None
    # the caching allocator's peak (torch.cuda.max_memory_reserved) of the process that
    # finished the run, the largest over its ranks, GiB; None on CPU (and in older files)
    peak_memory_gib: float | None = None

    @property
    def state(self) -> str:
        """'finished', or how far a stopped run got. Steps count from 0, so after 7 steps
        the last one run is step 6 (a trial read "stopped at step 7" as one more)."""
        if self.complete:
            return "finished"
        if self.steps == 0:
            return "stopped before its first step"
        return (f"stopped after {counted(self.steps, 'step')} "
                f"(the last one run: step {self.steps - 1})")


def _seed_of(*parts: int) -> int:
    """A 63-bit seed derived from integers (numpy SeedSequence hashing)."""
    return int(np.random.SeedSequence(list(parts)).generate_state(2, np.uint64)[0] >> 1)


def _fingerprint(config: TrainConfig) -> str:
    """The job as a resumed run must repeat it: every setting but the resumable ones."""
    payload = json.loads(config.model_dump_json())
    for name in _RESUMABLE_FIELDS:
        payload["run"].pop(name, None)
    return json.dumps(payload, sort_keys=True)


def _comparable(fingerprint: str) -> dict[str, Any]:
    """A fingerprint as two runs of one job compare it: data files by name, not by the
    folder they were read from (a ladder copied to another machine or mount is the same
    job; whether the data itself changed is checked by its token count on resume)."""
    payload = json.loads(fingerprint)
    data = payload.get("data")
    if isinstance(data, dict) and data.get("path") is not None:
        raw = data["path"]
        data["path"] = ([Path(str(p)).name for p in raw] if isinstance(raw, list)
                        else Path(str(raw)).name)
    return payload


def _run_info_fingerprint(path: Path) -> str | None:
    """The fingerprint of the job a ``run.json`` records (its config less the resumable
    fields, as :func:`_fingerprint`); None when there is none to read. A run stopped before
    its first checkpoint leaves only run.json and metrics: another job started in that
    folder overwrote them without a word (a trial), its metrics kept as an 'earlier start'."""
    try:
        info = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    config = info.get("config") if isinstance(info, dict) else None
    if not isinstance(config, dict) or not isinstance(config.get("run"), dict):
        return None
    run = {k: v for k, v in config["run"].items() if k not in _RESUMABLE_FIELDS}
    return json.dumps({**config, "run": run}, sort_keys=True)


def _same_job(saved: str, config: TrainConfig) -> bool:
    """Whether a saved fingerprint is ``config``'s job (:func:`_comparable`)."""
    return _comparable(saved) == _comparable(_fingerprint(config))


def _differing_fields(saved: str, current: str) -> list[str]:
    """Dotted names of the settings two fingerprints disagree on (e.g. ``optim.lr``)."""
    def walk(a: Any, b: Any, prefix: str) -> list[str]:
        if isinstance(a, dict) and isinstance(b, dict):
            return [name for key in sorted(set(a) | set(b))
                    for name in walk(a.get(key), b.get(key), f"{prefix}{key}.")]
        return [] if a == b else [prefix.rstrip(".")]

    return walk(_comparable(saved), _comparable(current), "")


def different_job_error(where: Path, saved: str, config: TrainConfig) -> MosaicInputError:
    """The error for output written by another job: which settings differ, what to do."""
    fields = _differing_fields(saved, _fingerprint(config)) or ["the job"]
    shown = ", ".join(fields[:6]) + (f" and {len(fields) - 6} more" if len(fields) > 6 else "")
    verb = "differs" if len(fields) == 1 else "differ"
    return MosaicInputError(f"{where} belongs to a different job ({shown} {verb}); use a "
                            "new output folder, or remove it to train again")


def read_finished_result(out_dir: str | Path, config: TrainConfig,
                         require_fingerprint: bool = False) -> TrainResult | None:
    """The finished run's result in ``out_dir`` (None when there is none), after checking
    that ``config`` is the job that wrote it (MosaicInputError naming the differing settings
    otherwise). Result files written before the job's fingerprint was recorded are taken as
    they are, unless ``require_fingerprint`` (nothing else, such as a checkpoint, vouched
    for the job): then they are refused."""
    path = Path(out_dir) / RESULT_FILE
    if not path.exists():
        return None
    remedy = "remove it to finish the run again from its checkpoint"
    try:
        payload = read_run_json(path, "mosaic train result")
        saved = payload.pop(RESULT_FINGERPRINT, None)
        result = TrainResult(**payload)
    except MosaicInputError as exc:
        raise MosaicInputError(f"{exc}; {remedy}") from None
    except (TypeError, AttributeError) as exc:
        raise MosaicInputError(f"{path} is not a readable mosaic result ({type(exc).__name__}); "
                               f"{remedy}") from None
    if saved is None and require_fingerprint:
        raise MosaicInputError(f"{path} holds a finished run that records no job fingerprint "
                               "(an older mosaic), so it cannot tell whether it is this job; "
                               "use a new output folder, or remove it to train again")
    try:
        same = saved is None or _same_job(saved, config)
    except (TypeError, ValueError, AttributeError, RecursionError):  # a hand-edited file
        raise MosaicInputError(f"{path}: its {RESULT_FINGERPRINT} is not the JSON text of a "
                               f"job, as mosaic writes it; {remedy}") from None
    if not same:
        raise different_job_error(path.parent, saved, config)  # the folder is the other job's
    return result


def _precision(config: TrainConfig, device: torch.device) -> torch.dtype | None:
    """Autocast dtype: bf16 on CUDA by default, none (fp32) on CPU (fp32 master weights)."""
    choice = config.run.precision
    if choice == "auto":
        choice = "bf16" if device.type == "cuda" else "fp32"
    return torch.bfloat16 if choice == "bf16" else None


def _optimizer(model: torch.nn.Module, config: TrainConfig,
               experts: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
    """AdamW (A.2); weight decay on matrices only (norm gains/biases excluded, as nanoGPT).

    Expert-parallel experts (plain tensors beside FSDP's DTensors) get their own group.
    """
    held = {id(p) for p in experts}
    params = [p for p in model.parameters() if p.requires_grad and id(p) not in held]
    decay = [p for p in params if p.ndim >= 2]
    no_decay = [p for p in params if p.ndim < 2]
    o = config.optim
    groups = [{"params": decay, "weight_decay": o.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    if experts:
        groups.append({"params": experts, "weight_decay": o.weight_decay})
    return torch.optim.AdamW(groups, lr=0.0, betas=(o.beta1, o.beta2), eps=o.eps)


def _write_checkpoint(payload: dict[str, Any], path: Path) -> None:
    """Write ``payload`` beside ``path`` and rename it over ``path`` (atomic: a crash keeps
    the old checkpoint; an interrupted write removes its partial file). A write that fails
    (a full disk: a trial's torch.save raised 'enforce fail at inline_container.cc ...
    unexpected pos', an internal error, and left its partial file on the full disk) removes
    the partial file and says so in one line."""
    partial = path.with_suffix(".tmp")
    try:
        torch.save(payload, partial)
    except (OSError, RuntimeError) as exc:
        partial.unlink(missing_ok=True)
        free_bytes = shutil.disk_usage(path.parent).free
        reason = (exc.strerror if isinstance(exc, OSError) and exc.strerror
                  else f"{free_bytes / MIB:.0f} MiB free on its disk" if free_bytes < GIB
                  else str(exc).splitlines()[0][:120])
        kept = f"; {path} from the last checkpoint is kept" if path.exists() else ""
        raise MosaicInputError(f"{path}: the checkpoint could not be written ({reason}){kept}; "
                               "free space or use another --out, then rerun to resume") from None
    except BaseException:  # a second Ctrl-C or SIGTERM mid-write (interrupt.py): stop at once
        partial.unlink(missing_ok=True)  # without a checkpoint-sized partial file left behind
        raise
    os.replace(partial, path)


def _state_dicts(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> tuple[dict, dict]:
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        get_optimizer_state_dict,
    )

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return (get_model_state_dict(model, options=options),
            get_optimizer_state_dict(model, optimizer, options=options))


def _load_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                model_state: dict, optim_state: dict) -> None:
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    options = StateDictOptions(full_state_dict=True)
    set_model_state_dict(model, model_state, options=options)
    set_optimizer_state_dict(model, optimizer, optim_state, options=options)


class Trainer:
    """Builds the model, data, optimiser and schedule of one job and runs its steps."""

    def __init__(self, config: TrainConfig, out_dir: str | Path,
                 context: DistContext | None = None) -> None:
        self.config = config
        self.out_dir = Path(out_dir)
        self.context = context or init_distributed(config.run.device)
        self.stop_request = StopRequest()  # Ctrl-C, SIGTERM: stop with a checkpoint
        self.stop_agreed = False  # some rank asked to stop; every rank saw it this step
        run = config.run
        world = self.context.world_size
        if run.global_batch_seqs % (run.micro_batch_seqs * world):
            raise MosaicInputError(
                f"run.global_batch_seqs {run.global_batch_seqs} must be a multiple of "
                f"run.micro_batch_seqs x processes = {run.micro_batch_seqs} x {world}")
        self.accumulation = run.global_batch_seqs // (run.micro_batch_seqs * world)
        self.geometry = config.geometry()
        self.counts = count_parameters(self.geometry)
        self.total_steps = config.total_steps
        if config.optim.lr is not None:
            self.peak_lr, self.peak_lr_source = config.optim.lr, "optim.lr"
        else:
            self.peak_lr, self.peak_lr_source = default_peak_lr(float(self.counts.n_active),
                                                                float(run.tokens))
        self.schedule = WSDSchedule.build(self.peak_lr, self.total_steps,
                                          config.tokens_per_step, config.optim.warmup_tokens,
                                          config.optim.decay_fraction)
        self.data = TokenStream(config.data.paths, config.data.format, run.seq_len, run.seed,
                                config.data.vocab_size)
        self.device = self.context.device
        self.autocast_dtype = _precision(config, self.device)
        if run.memory_check:  # before allocating anything large (issue: silent OOM kill)
            element = 2 if self.autocast_dtype is torch.bfloat16 else 4
            estimate = estimate_training_memory(self.geometry, run.micro_batch_seqs,
                                                run.seq_len, element, world)
            check_training_memory(estimate, available_memory_bytes(self.device.type,
                                                                    self.device.index),
                                  str(self.device), run.micro_batch_seqs, run.seq_len,
                                  processes_sharing_memory(self.device.type))
        torch.manual_seed(run.seed)
        model = MoETransformer(self.geometry, config.routing, run.expert_compute).to(self.device)
        self.ep: ExpertParallel | None = None
        self.expert_params: list[torch.nn.Parameter] = []
        if run.expert_parallel > 1:
            if self.geometry.moe is None:
                raise MosaicInputError("run.expert_parallel needs an MoE model")
            if run.expert_parallel > world:
                launch = ("launch more processes (torchrun --nproc_per_node)" if world > 1
                          else "launch with torchrun")
                raise MosaicInputError(f"run.expert_parallel {run.expert_parallel} exceeds the "
                                       f"{world} process(es); lower it or {launch}")
            self.ep = build_expert_parallel(world, self.context.rank, run.expert_parallel,
                                            self.geometry.moe.experts)
            self.expert_params = split_experts(model, self.ep)
        self.model = shard_model(model, model.blocks, self.context,
                                 set(self.expert_params) or None)
        self.optimizer = _optimizer(self.model, config, self.expert_params)
        self.smoother = SmoothedLoss(run.smoothing_beta)
        # mean starved experts per MoE layer of each step run so far in the final window
        # (router_health); checkpointed, so a resume inside the window keeps its earlier steps
        self.final_starved: list[float] = []
        self.step = 0
        self._saved_step = 0  # the step of the last checkpoint written or loaded
        self._wall_s_before = 0.0
        self._started = time.perf_counter()
        device = None
        if run.device_name is not None:
            from mosaic.hardware import get_device

            device = get_device(run.device_name)
            if self.device.type != "cuda":  # a GPU's peak read against a CPU's throughput
                warnings.warn(
                    f"run.device_name {device.name}: the run is on {self.device}, so its MFU "
                    f"against {device.name}'s peak measures nothing of either; leave "
                    "device_name unset on CPU (or give run.bench_dir: this CPU's measured "
                    "GEMM peak)", MosaicWarning, stacklevel=2)
        elif self.device.type == "cuda":
            device = resolve_device(torch.cuda.get_device_name(self.device))
        dtype_name = "bf16" if self.autocast_dtype is torch.bfloat16 else "fp32"
        achievable = run.achievable_flops_per_s
        if run.bench_dir is not None:
            achievable = achievable_from_bench(run.bench_dir, dtype_name)
        self.flops = FlopsAccounting.build(self.geometry, run.seq_len, device, dtype_name,
                                           achievable)

    # ----------------------------------------------------------------- checkpointing
    @property
    def checkpoint_path(self) -> Path:
        return self.out_dir / CHECKPOINT_FILE

    def _expert_names(self) -> dict[str, torch.nn.Parameter]:
        held = {id(p) for p in self.expert_params}
        return {n: p for n, p in self.model.named_parameters() if id(p) in held}

    def save_checkpoint(self) -> None:
        model_state, optim_state = _state_dicts(self.model, self.optimizer)
        if self.ep is not None:  # full (E, ...) expert tensors from the expert group
            for name, param in self._expert_names().items():
                model_state[name] = gather_full(param.detach(), self.ep)
                state = self.optimizer.state[param]
                full = {k: (gather_full(v, self.ep) if k != "step" else v.cpu())
                        for k, v in state.items()}
                if self.context.is_main:
                    optim_state["state"][name] = full
        if self.context.is_main:
            payload = {"step": self.step, "model": model_state, "optimizer": optim_state,
                       "smoother": self.smoother.state(), "final_starved": self.final_starved,
                       "fingerprint": _fingerprint(self.config),
                       "wall_s": self.wall_s, "data_tokens": self.data.n_tokens}
            _write_checkpoint(payload, self.checkpoint_path)
        barrier(self.context)
        self._saved_step = self.step

    def load_checkpoint(self) -> bool:
        """Resume from ``checkpoint.pt`` in the output folder if there is one."""
        if not self.checkpoint_path.exists():
            return False
        try:
            payload = torch.load(self.checkpoint_path, map_location="cpu", weights_only=False)
            fingerprint = payload["fingerprint"]
        except (RuntimeError, EOFError, ValueError, KeyError, TypeError, OSError,
                pickle.UnpicklingError) as exc:
            # (OSError: a trial's checkpoint cut to 50,000 bytes failed a seek, EINVAL)
            raise MosaicInputError(
                f"{self.checkpoint_path} is not a readable mosaic checkpoint ({type(exc).__name__}"
                "; truncated or overwritten?): remove it to start the run again, or use a new "
                "output folder") from None
        if not _same_job(fingerprint, self.config):
            raise different_job_error(self.checkpoint_path, fingerprint, self.config)
        saved_tokens = payload.get("data_tokens")  # absent from older checkpoints
        finished = int(payload["step"]) >= self.total_steps  # nothing left to read
        if saved_tokens is not None and saved_tokens != self.data.n_tokens and not finished:
            raise MosaicInputError(
                f"{self.checkpoint_path}: the data files hold {self.data.n_tokens:,} tokens, "
                f"{saved_tokens:,} when the checkpoint was written; a resumed run would read "
                "other windows than the uninterrupted one. Restore the data, or use a new "
                "output folder")
        model_state, optim_state = payload["model"], payload["optimizer"]
        if self.ep is not None:
            for name in self._expert_names():
                model_state[name] = local_slice(model_state[name], self.ep)
                optim_state["state"][name] = {
                    k: (local_slice(v, self.ep) if k != "step" else v)
                    for k, v in optim_state["state"][name].items()}
        _load_state(self.model, self.optimizer, model_state, optim_state)
        self.step = self._saved_step = int(payload["step"])
        self.smoother = SmoothedLoss(self.config.run.smoothing_beta,
                                     payload["smoother"]["value"], payload["smoother"]["steps"])
        # absent from checkpoints written before router health was recorded
        self.final_starved = list(payload.get("final_starved", []))
        self._wall_s_before = float(payload.get("wall_s", 0.0))  # time of earlier processes
        return True

    @property
    def wall_s(self) -> float:
        """Training-loop seconds so far: this process's, plus the earlier processes' saved
        in the checkpoint it resumed from (each up to its last checkpoint: time a killed
        process spent after it, all of it before its first, is not counted; docs/train.md)."""
        return self._wall_s_before + time.perf_counter() - self._started

    # ----------------------------------------------------------------- one step
    def _micro_batch(self, micro: int) -> tuple[torch.Tensor, torch.Tensor]:
        for layer_index, layer in enumerate(self.model.moe_layers):
            generator = torch.Generator(device=self.device)
            generator.manual_seed(_seed_of(self.config.run.seed, self.step, micro, layer_index))
            layer.generator = generator
        run = self.config.run
        inputs, targets = self.data.batch(self.step, micro, run.micro_batch_seqs,
                                          run.global_batch_seqs, self.device)
        autocast = (torch.autocast(self.device.type, dtype=self.autocast_dtype)
                    if self.autocast_dtype is not None else nullcontext())
        with autocast:
            logits, aux = self.model(inputs)
        ce = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))
        return ce, aux

    def train_step(self) -> dict[str, Any]:
        """One optimizer step over the global batch; returns its metrics record."""
        config, context = self.config, self.context
        routing = config.routing
        balance_coef = (routing.lbl_coef if routing.kind == "softmax_topk"
                        else routing.seq_aux_coef)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        start = time.perf_counter()
        lr = self.schedule(self.step)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        moe_layers = self.model.moe_layers
        experts = self.geometry.moe.experts if self.geometry.moe else 0
        step_counts = torch.zeros(len(moe_layers), max(experts, 1), dtype=torch.float64,
                                  device=self.device)
        # ce, z, balance, and the ranks asking to stop (StopRequest): one all-reduce
        sums = torch.zeros(4, dtype=torch.float64, device=self.device)
        common = torch.zeros(len(moe_layers), dtype=torch.float64, device=self.device)
        # One process drops the step on a stop signal until here (StopRequest); under
        # torchrun the ranks agree at the all-reduce below, after the step.
        with self.stop_request.abandonable(not context.distributed):
            for i in range(self.accumulation):
                if context.distributed:
                    self.model.set_requires_gradient_sync(i == self.accumulation - 1)
                ce, aux = self._micro_batch(context.rank * self.accumulation + i)
                z = torch.stack([a.z_loss for a in aux]).sum() if aux else ce.new_zeros(())
                balance = torch.stack([a.balance_loss for a in aux]).sum() if aux else z
                loss = ce + routing.z_loss_coef * z + balance_coef * balance
                (loss / self.accumulation).backward()
                sums[:3] += torch.stack([ce.detach(), z.detach(), balance.detach()]).double()
                for row, a in enumerate(aux):
                    step_counts[row] += a.counts.double()
                    if a.input_common is not None:
                        common[row] += a.input_common.double()
        grad_norm = self._clip_gradients(config.optim.grad_clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        sums[3] = float(self.stop_request.requested)
        all_reduce_sum(sums, context)
        self.stop_agreed = bool(sums[3] > 0)
        all_reduce_sum(step_counts, context)
        all_reduce_sum(common, context)
        if routing.kind == "lflb_gumbel" and routing.mu_b > 0:
            with torch.no_grad():  # Eq. 19 once per optimizer step (A.3)
                for layer, counts in zip(moe_layers, step_counts, strict=True):
                    update_bias(layer.bias, counts, routing.mu_b, routing.eps)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        step_time_s = time.perf_counter() - start
        micro_total = self.accumulation * context.world_size
        ce_mean, z_mean, balance_mean = (sums[:3] / micro_total).tolist()
        if not all(math.isfinite(v) for v in (ce_mean, z_mean, balance_mean, float(grad_norm))):
            # every rank holds the same reduced sums, so every rank stops here together
            raise MosaicInputError(
                f"training diverged at step {self.step}: loss {ce_mean}, z-loss {z_mean}, "
                f"balance loss {balance_mean}, gradient norm {float(grad_norm)} at lr "
                f"{lr:.3g}; lower optim.lr or the loss coefficients, or set optim.grad_clip "
                "(checkpoints written before this step are kept)")
        self.step += 1
        smoothed = self.smoother.update(ce_mean)
        tokens_per_s = config.tokens_per_step / step_time_s
        record: dict[str, Any] = {
            "step": self.step - 1,
            "tokens": self.step * config.tokens_per_step,
            "loss": ce_mean,
            "smoothed_loss": smoothed,
            "z_loss": z_mean,
            "balance_loss": balance_mean,
            "lr": lr,
            "grad_norm": float(grad_norm),
            "step_time_s": step_time_s,
            "tokens_per_s": tokens_per_s,
            **self.flops.mfu(tokens_per_s, context.world_size),
        }
        if moe_layers:
            stats = [load_statistics(c) for c in step_counts]
            biases = [layer.bias for layer in moe_layers]
            record["router"] = {
                "load_max_over_mean": [s["load_max_over_mean"] for s in stats],
                "starved_experts": [s["starved_experts"] for s in stats],
                "empty_experts": [s["empty_experts"] for s in stats],
                "dropped_tokens": 0,  # dropless (Appendix A.2: infinite capacity)
                "bias_norm": [float(b.norm()) for b in biases],
                "bias_range": [float(b.max() - b.min()) for b in biases],
                # 1.0: every token reaches the router identical (see MoEAux.input_common)
                "input_common": (common / (self.accumulation * context.world_size)).tolist(),
            }
        return record

    def _clip_gradients(self, max_norm: float | None) -> torch.Tensor:
        """Global gradient norm (optionally clipped); expert-parallel experts included."""
        if self.ep is None:
            norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm or math.inf)
            return norm.full_tensor() if hasattr(norm, "full_tensor") else norm
        reduce_expert_gradients(self.expert_params, self.ep, self.context.world_size)
        held = {id(p) for p in self.expert_params}
        others = [p for p in self.model.parameters() if id(p) not in held]
        norm = torch.nn.utils.clip_grad_norm_(others, math.inf)
        norm = norm.full_tensor() if hasattr(norm, "full_tensor") else norm
        total = torch.sqrt(norm.float() ** 2 + expert_grad_sq_norm(self.expert_params, self.ep))
        if max_norm is not None:
            scale = torch.clamp(max_norm / (total + 1e-6), max=1.0)
            for param in self.model.parameters():
                if param.grad is not None:
                    param.grad.mul_(scale.to(param.grad.dtype) if not hasattr(
                        param.grad, "full_tensor") else float(scale))
        return total

    # ----------------------------------------------------------------- the run
    def run(self, stop_after_steps: int | None = None, log: Any = None,
            started: Callable[[], None] | None = None) -> TrainResult:
        """Train to the end (or until ``stop_after_steps`` total steps), checkpointing;
        ``started`` is called once the run's checks have passed, before its first step."""
        if self.context.is_main:
            self.out_dir.mkdir(parents=True, exist_ok=True)
        barrier(self.context)
        with training_lock(self.out_dir, self.context):  # one trainer per folder
            return self._run(stop_after_steps, log, started)

    def _run(self, stop_after_steps: int | None, log: Any,
             started: Callable[[], None] | None) -> TrainResult:
        run = self.config.run
        resumed = self.load_checkpoint()
        # A finished run's result.json guards the folder even when its checkpoint was
        # deleted (it holds 16 B per parameter): another job is refused, the same job is done.
        if self.step >= self.total_steps or not resumed:
            done = read_finished_result(self.out_dir, self.config,
                                        require_fingerprint=not resumed)
            if done is not None:  # nothing left to do; its run.json stays as it trained
                if not resumed and log is not None and self.context.is_main:
                    print(f"progress: {self.out_dir} holds this job's finished run "
                          f"({RESULT_FILE}); nothing to train (remove the folder to train "
                          "again)", file=sys.stderr, flush=True)
                return done
        if not resumed:  # no checkpoint: a partial run.json must be this job's own start
            saved = _run_info_fingerprint(self.out_dir / RUN_INFO_FILE)
            if saved is not None and not _same_job(saved, self.config):
                raise different_job_error(self.out_dir, saved, self.config)
        if resumed and log is not None and self.context.is_main:  # said, not just continued
            print(f"progress: resuming from the checkpoint at step {self.step} of "
                  f"{self.total_steps} in {self.out_dir}", file=sys.stderr, flush=True)
        metrics = MetricsLog(self.out_dir / METRICS_FILE, self.step if resumed else 0,
                             enabled=self.context.is_main)
        if self.context.is_main:
            self._write_run_info()
        if started is not None:
            started()
        last = self.total_steps if stop_after_steps is None else min(stop_after_steps,
                                                                     self.total_steps)
        self._started = time.perf_counter()
        record: dict[str, Any] = {}
        steady_times: list[float] = []
        first_step = self.step  # this process's first step: its warm-up (allocation,
        # kernels, the process group's first collectives), not only step 0's
        window_start = self.total_steps - final_window_steps(self.total_steps)
        with self.stop_request.installed(announce=log is not None and self.context.is_main):
            while self.step < last:
                try:
                    record = self.train_step()
                except StepAbandoned:  # one process, before the step applied anything
                    self.optimizer.zero_grad(set_to_none=True)
                    if self.step > self._saved_step:  # the steps since the last checkpoint
                        self.save_checkpoint()
                    raise KeyboardInterrupt from None
                if record["step"] > first_step:  # a resumed process warms up too: a trial's
                    # torchrun resume with two steps left reported the median of a 0.265 s
                    # warm-up step and a 0.108 s one, tokens/s 1.7x too low
                    steady_times.append(record["step_time_s"])
                if "router" in record and record["step"] >= window_start:
                    self.final_starved.append(
                        float(np.mean(record["router"]["starved_experts"])))
                if record["step"] % run.log_every == 0 or self.step == self.total_steps:
                    metrics.write(record)
                    if log is not None and self.context.is_main:
                        log(record)
                if (self.step % run.checkpoint_every == 0 or self.step == last
                        or self.stop_agreed):
                    self.save_checkpoint()
                if self.stop_agreed and self.step < self.total_steps:
                    # every rank saved this step; the caller says how to resume
                    raise KeyboardInterrupt
        if not steady_times and metrics.records:
            # No step of this process past its warm-up: a run that had reached its last step
            # when its result was not yet written (a crash between the two) takes its last
            # loss from its metrics too; a resumed process that trained one step (its
            # warm-up) alone keeps its own. Either way the logged steps' times after the
            # run's first (every log_every-th step) estimate all by their median.
            record = record or metrics.records[-1]
            steady_times = [float(r["step_time_s"]) for r in metrics.records
                            if r["step"] > 0 and "step_time_s" in r]
        elif not record and self.context.is_main:
            warnings.warn(f"{self.out_dir / METRICS_FILE} holds no records: the result's last "
                          "loss and tokens/s are unknown (null); its smoothed loss comes from "
                          "the checkpoint", MosaicWarning, stacklevel=2)
        result = self._result(record, self.wall_s, steady_times)
        if self.context.is_main and result.complete:
            payload = {**{k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                          for k, v in asdict(result).items()},  # strict JSON: no NaN
                       RESULT_FINGERPRINT: _fingerprint(self.config)}
            # atomic: a ladder reads every rung's result, also while another job writes one
            write_text_atomic(self.out_dir / RESULT_FILE, json.dumps(payload, indent=2) + "\n")
            if run.plot:
                from mosaic.train.plot import write_metrics_plot

                write_metrics_plot(self.out_dir / METRICS_FILE, self.out_dir / "metrics.html")
        return result

    def _result(self, record: dict[str, Any], wall_s: float, steady_times: list[float]
                ) -> TrainResult:
        counts, geometry = self.counts, self.geometry
        moe = geometry.moe
        step_time = float(np.median(steady_times)) if steady_times else math.nan
        tokens_per_s = self.config.tokens_per_step / step_time if steady_times else math.nan
        return TrainResult(
            steps=self.step, total_steps=self.total_steps,
            tokens=self.step * self.config.tokens_per_step,
            final_loss=float(record.get("loss", math.nan)),
            smoothed_loss=float(self.smoother.current), peak_lr=self.peak_lr,
            n_total=int(counts.n_total), n_active=int(counts.n_active),
            sparsity=float(counts.sparsity), split_factor=float(geometry.split_factor),
            experts=moe.experts if moe else 0, top_k=moe.top_k if moe else 0,
            layers=geometry.layers, d_model=geometry.d_model, vocab=geometry.vocab,
            wall_s=wall_s,
            tokens_per_s=tokens_per_s,
            world_size=self.context.world_size, complete=self.step >= self.total_steps,
            starved_experts=(float(np.mean(self.final_starved)) if self.final_starved
                             else None),
            peak_memory_gib=self._peak_memory_gib(),
            **self._result_mfu(tokens_per_s))

    def _peak_memory_gib(self) -> float | None:
        """torch.cuda.max_memory_reserved, the largest over ranks (every rank calls it: a
        collective), in GiB; None on CPU. It is what torchtitan's and Megatron's logs print
        as peak memory (docs/run_records.md, measured.memory_measure 'allocator')."""
        if self.device.type != "cuda":
            return None
        peak = torch.tensor([float(torch.cuda.max_memory_reserved(self.device))],
                            device=self.device)
        return float(all_reduce_max(peak, self.context).item()) / GIB

    def _result_mfu(self, tokens_per_s: float) -> dict[str, float | None]:
        """The result's MFU fields at the median step's throughput (None where unknown)."""
        if not math.isfinite(tokens_per_s):
            return {}
        mfu = self.flops.mfu(tokens_per_s, self.context.world_size)
        against = mfu["mfu_paper_vs_achievable"]
        if against is not None and against > 1.0:  # not a measured peak of this run's device
            warnings.warn(
                f"MFU against the measured GEMM peak is {against:.0%}: the run delivered more "
                "than that peak (run.achievable_flops_per_s too low, or run.bench_dir "
                "measured with other threads or on another device), so the figure is not a "
                "fraction of anything", MosaicWarning, stacklevel=2)
        return {"mfu_paper": mfu["mfu_paper"], "mfu_paper_vs_achievable": against}

    def _write_run_info(self) -> None:
        epochs = self.data.epochs_for(self.total_steps * self.config.run.global_batch_seqs)
        if epochs > MAX_EPOCHS_LIKE_UNIQUE:
            warnings.warn(
                f"the run reads its data {epochs:.1f} times: beyond "
                f"{MAX_EPOCHS_LIKE_UNIQUE:g} epochs repeated tokens are worth less than new "
                "ones (Muennighoff et al. 2023), and the paper's law assumes unique tokens",
                MosaicWarning, stacklevel=2)
        synthetic = self.data.synthetic_vocab is not None
        info = {
            "geometry": asdict(self.geometry),
            "n_total": int(self.counts.n_total), "n_active": int(self.counts.n_active),
            "n_embedding": int(self.counts.n_embedding), "sparsity": float(self.counts.sparsity),
            "total_steps": self.total_steps, "tokens_per_step": self.config.tokens_per_step,
            "accumulation": self.accumulation, "world_size": self.context.world_size,
            "device": str(self.device), "autocast": str(self.autocast_dtype),
            "schedule": asdict(self.schedule), "peak_lr_source": self.peak_lr_source,
            "flops": asdict(self.flops),
            # synthetic ids come from no corpus: no size, no passes (were 0 and ~7e-17)
            "data_tokens": None if synthetic else self.data.n_tokens,
            "data_epochs": None if synthetic else epochs,
            "config": json.loads(self.config.model_dump_json()),
        }
        (self.out_dir / RUN_INFO_FILE).write_text(json.dumps(info, indent=2, default=str) + "\n")


# Up to about 4 epochs, repeated data trains nearly as well as unique data (Muennighoff et
# al. 2023, "Scaling Data-Constrained Language Models", Sec. 5: "up to 4 epochs ...
# negligible changes to loss compared to having unique data").
MAX_EPOCHS_LIKE_UNIQUE = 4.0


def train(config: TrainConfig, out_dir: str | Path, *, stop_after_steps: int | None = None,
          log: Any = None, context: DistContext | None = None,
          started: Callable[[], None] | None = None) -> TrainResult:
    """Train ``config`` into ``out_dir`` (resuming from its checkpoint if present).

    ``started``: called once the run's checks have passed, before its first step (the CLI
    prints the warnings it held then: a run whose first step takes minutes said nothing of
    its 16 epochs of data until it ended, a trial).

    ``context``: a process group the caller set up and will shut down (the ladder keeps one
    for all its rungs); by default the run joins torchrun's group and leaves it at the end.
    """
    if stop_after_steps is not None and stop_after_steps < 1:
        raise MosaicInputError(f"--stop-after: got {stop_after_steps}; allowed: a step count "
                               ">= 1 (leave it out to train to the end)")
    from mosaic.train.plot import require_plot_extra

    require_plot_extra(config.run.plot)
    threads = torch.get_num_threads()
    if config.run.cpu_threads is not None:
        cores = os.cpu_count() or 1
        if config.run.cpu_threads > cores:
            warnings.warn(f"run.cpu_threads {config.run.cpu_threads} exceeds this machine's "
                          f"{cores} CPU cores: the threads share cores and spin-wait, which "
                          "slows CPU training; set it to at most the cores", MosaicWarning,
                          stacklevel=2)
        torch.set_num_threads(config.run.cpu_threads)
    owned = context is None
    context = context or init_distributed(config.run.device)
    try:
        return Trainer(config, out_dir, context).run(stop_after_steps, log, started)
    except RuntimeError as exc:  # torch.OutOfMemoryError (CUDA) is one
        if not _out_of_memory(exc):
            raise
        raise out_of_memory_error(config, exc) from None
    finally:
        if owned:
            shutdown(context)
        torch.set_num_threads(threads)


# What torch's CPU allocator raises when malloc fails (c10/core/impl/alloc_cpu.cpp); CUDA's
# caching allocator raises torch.OutOfMemoryError.
_CPU_ALLOCATION_FAILED = "DefaultCPUAllocator: can't allocate memory"


def _out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is torch failing to allocate (CPU or CUDA)."""
    oom = getattr(torch, "OutOfMemoryError", None)
    return (oom is not None and isinstance(exc, oom)) or _CPU_ALLOCATION_FAILED in str(exc)


def out_of_memory_error(config: TrainConfig, exc: BaseException) -> MosaicInputError:
    """A run that ran out of memory after the pre-flight check let it start (the estimate
    leaves things out, or other processes took the memory) as one line, not the internal
    error it was: which settings to lower, and that the checkpoints are kept."""
    run = config.run
    torch_said = " ".join(str(exc).split())
    torch_said = torch_said[torch_said.find("DefaultCPUAllocator"):] if (
        _CPU_ALLOCATION_FAILED in torch_said) else torch_said
    checked = ("the pre-flight estimate (docs/train.md) let it start" if run.memory_check
               else "run.memory_check is false, so no estimate was checked")
    shorter = ("run.micro_batch_seqs" if run.micro_batch_seqs > 1 else "run.seq_len")
    return MosaicInputError(
        f"out of memory at run.micro_batch_seqs {run.micro_batch_seqs} x run.seq_len "
        f"{run.seq_len} ({torch_said[:160]}); {checked}: lower {shorter}, use a smaller "
        "model or free memory (checkpoints written before it are kept; a rerun resumes "
        "from the last)")


def format_record(record: dict[str, Any]) -> str:
    """One human line per logged step."""
    line = (f"step {record['step']:>6}  loss {record['loss']:.4f}  "
            f"smoothed {record['smoothed_loss']:.4f}  lr {record['lr']:.3e}  "
            f"{record['tokens_per_s']:.4g} tok/s")
    if record.get("mfu_paper") is not None:
        line += f"  MFU {100 * record['mfu_paper']:.1f}%"
    router = record.get("router")
    if router:
        line += f"  load max/mean {max(router['load_max_over_mean']):.2f}"
    return line
