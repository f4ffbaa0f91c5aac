"""Pre-flight memory check (issue: `mosaic train examples/train_q4_h200.yaml` on a CPU-only
machine was OOM-killed after 97 s with no message)."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from typer.testing import CliRunner  # noqa: E402

from mosaic.errors import MosaicInputError  # noqa: E402
from mosaic.train import preflight  # noqa: E402
from mosaic.train.config import load_train_config, train_config_from_mapping  # noqa: E402
from mosaic.train.model import MoETransformer  # noqa: E402
from mosaic.train.preflight import (  # noqa: E402
    check_training_memory,
    estimate_training_memory,
)

from .conftest import REPO, tiny_job  # noqa: E402

HUGE = REPO / "examples" / "train_q4_h200.yaml"  # q = 4 rung: 4.33 B parameters


def _saved_tensor_bytes(model: torch.nn.Module, tokens: torch.Tensor) -> tuple[int, int]:
    """Bytes autograd keeps for backward in one forward + loss (distinct storages), and the
    bytes of the logits."""
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logits, _ = model(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(
            logits.float().reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
    loss.backward()
    return sum(seen.values()), logits.numel() * logits.element_size()


def test_estimate_matches_the_model_it_describes():
    config = train_config_from_mapping(tiny_job(), "test")
    geometry = config.geometry()
    model = MoETransformer(geometry, config.routing)
    params = sum(p.numel() for p in model.parameters())
    batch, seq = 4, 32
    estimate = estimate_training_memory(geometry, batch, seq, element_bytes=4)
    assert estimate.params == params  # the arch count is the module's own count
    assert estimate.model_state_bytes == 16 * params  # fp32 weight, grad, AdamW m and v
    tokens = torch.randint(0, geometry.vocab, (batch, seq + 1),
                           generator=torch.Generator().manual_seed(0))
    saved, _ = _saved_tensor_bytes(model, tokens)
    # Tensors saved for backward (measured with autograd's saved-tensor hooks, parameters
    # included) against the estimate's activations + logits + fp32 weights.
    predicted = estimate.activation_bytes + estimate.logits_bytes + 4 * params
    assert 0.5 * saved <= predicted <= 2.0 * saved


def test_tiny_job_fits_and_huge_job_is_refused():
    tiny = train_config_from_mapping(tiny_job(), "test")
    small = estimate_training_memory(tiny.geometry(), 4, 32, 4)
    check_training_memory(small, (24e9, "test"), "cpu", 4, 32)  # no error
    huge = load_train_config(HUGE)
    big = estimate_training_memory(huge.geometry(), huge.run.micro_batch_seqs,
                                   huge.run.seq_len, 4)
    assert big.params > 4e9 and big.model_state_bytes > 64e9
    with pytest.raises(MosaicInputError, match=r"does not fit in memory: estimated .* GiB .*"
                                               r"> 24 GiB available on cpu"):
        check_training_memory(big, (24 * 2**30, "test"), "cpu", 2, 2048)
    check_training_memory(big, None, "cpu", 2, 2048)  # unknown free memory: no verdict


def test_processes_on_one_cpu_host_share_its_memory(monkeypatch):
    """Two torchrun processes on one CPU host each passed against the whole host's free
    memory, and together needed more (a trial): the check counts every process on the host,
    each at its peak, the unsharded fp32 model it builds before FSDP2 shards it included;
    a GPU process has its own memory."""
    gib = 2**30
    # 1e9 parameters on 2 ranks: 8 GiB-ish sharded states, but 4e9 bytes built whole first
    estimate = preflight.MemoryEstimate(params=10**9, model_state_bytes=2.0 * gib,
                                        activation_bytes=0.5 * gib, logits_bytes=0.5 * gib)
    assert estimate.total_bytes == 3 * gib and estimate.init_bytes == 4e9
    assert estimate.peak_bytes == 4e9
    free = (10 * gib, "test")
    preflight.check_training_memory(estimate, free, "cpu", 1, 256, processes=2)  # 9.6e9 fits
    with pytest.raises(MosaicInputError) as refused:
        preflight.check_training_memory(estimate, free, "cpu", 1, 256, processes=3)
    message = str(refused.value)
    assert "x 3 processes on this host" in message and "built before sharding" in message
    assert "more processes" not in message  # they share the host: no help on a CPU
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "3")
    assert preflight.processes_sharing_memory("cpu") == 3
    assert preflight.processes_sharing_memory("cuda") == 1


def test_trainer_refuses_before_allocating(monkeypatch, tmp_path):
    from mosaic.train import trainer

    calls = []
    monkeypatch.setattr(trainer, "available_memory_bytes",
                        lambda *a: (24e9, "MemAvailable in /proc/meminfo"))
    monkeypatch.setattr(trainer, "MoETransformer",
                        lambda *a, **k: calls.append(a) or pytest.fail("model allocated"))
    config = load_train_config(HUGE)
    with pytest.raises(MosaicInputError, match="does not fit in memory"):
        trainer.Trainer(config, tmp_path)
    assert not calls


def test_cli_exits_2_with_one_line(monkeypatch, tmp_path):
    from mosaic.cli.main import app
    from mosaic.train import trainer

    monkeypatch.setattr(trainer, "available_memory_bytes",
                        lambda *a: (24e9, "MemAvailable in /proc/meminfo"))
    result = CliRunner().invoke(app, ["train", str(HUGE), "--out", str(tmp_path / "q4"),
                                      "--stop-after", "1"])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: {HUGE}: the job does not fit in memory")
    assert "examples/ladder_tiny.yaml" in lines[0] and "GPU" in lines[0]
    assert not (Path(tmp_path) / "q4" / "checkpoint.pt").exists()


def test_available_memory_reads_proc_meminfo(monkeypatch, tmp_path):
    fake = tmp_path / "meminfo"
    fake.write_text("MemTotal:       32000000 kB\nMemAvailable:   1000000 kB\n")
    monkeypatch.setattr(preflight, "_MEMINFO", fake)
    monkeypatch.setattr(preflight, "_PROC_CGROUP", tmp_path / "no_cgroup")  # no limits
    monkeypatch.setattr(preflight, "_RLIMITS", ())
    assert preflight.available_memory_bytes("cpu") == (1024e6, "MemAvailable in /proc/meminfo")


def test_a_sliding_window_model_is_refused_not_trained_with_full_attention():
    """The trainer's attention is full causal: a model block with a window is refused
    instead of trained (and counted) as something it is not."""
    from mosaic.train.config import train_config_from_mapping

    from .conftest import tiny_job

    job = tiny_job()
    del job["ladder"]
    job["model"] = {"layers": 2, "d_model": 64, "heads": 8, "kv_heads": 2, "head_dim": 8,
                    "ffn": 128, "vocab": 50257, "sliding_window": 16}
    with pytest.raises(MosaicInputError, match="sliding_window not implemented by the trainer"):
        train_config_from_mapping(job, "job").geometry()


def test_a_router_other_than_the_papers_is_refused():
    """The trainer runs Alg. 1 (sigmoid scores, loss-free bias, renormalised, unscaled): a
    softmax or scaled router is refused; the paper's own, stated, trains."""
    from mosaic.train.config import train_config_from_mapping

    from .conftest import tiny_job

    job = tiny_job()
    del job["ladder"]
    moe = {"experts": 4, "top_k": 2, "expert_ffn": 32}
    job["model"] = {"layers": 2, "d_model": 64, "heads": 8, "kv_heads": 2, "head_dim": 8,
                    "ffn": 128, "vocab": 50257}
    for router in ({"score": "softmax"}, {"score": "sigmoid", "top_k_scaling": 2.5},
                   {"score": "sigmoid", "balancing": "aux_loss"}):
        job["moe"] = moe | {"router": router}
        with pytest.raises(MosaicInputError, match="the trainer runs the paper's router"):
            train_config_from_mapping(job, "job").geometry()
    job["moe"] = moe | {"router": {"score": "sigmoid", "balancing": "loss_free"}}
    assert train_config_from_mapping(job, "job").geometry().moe.router.score == "sigmoid"


def test_an_address_space_limit_lowers_the_memory_available():
    """Under `ulimit -v` the check compared with the host's MemAvailable (21 GiB) and a job
    estimated at 10.9 GiB started, then died mid-step as an internal error (torch's
    allocator failed, a trial): the limit less the process's VmSize is what it has."""
    import os
    import subprocess
    import sys

    if not Path("/proc/self/status").is_file():
        pytest.skip("reads VmSize from Linux's /proc/self/status")
    headroom = 512 * 2**20
    script = (
        "import resource\n"
        "from mosaic.train import preflight\n"
        "used = next(float(line.split()[1]) * 1024 for line in open('/proc/self/status')\n"
        "            if line.startswith('VmSize:'))\n"
        f"resource.setrlimit(resource.RLIMIT_AS, (int(used) + {headroom}, "
        "resource.getrlimit(resource.RLIMIT_AS)[1]))\n"
        "free, source = preflight.available_memory_bytes('cpu')\n"
        "print(free, source)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          check=True, env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    free, source = done.stdout.split(" ", 1)
    # the limit less what the process had mapped when it set it (VmSize grows a little)
    assert 0.9 * headroom <= float(free) <= headroom
    assert source.startswith("ulimit -v (RLIMIT_AS)")


def _fake_cgroup(tmp_path, monkeypatch, proc_line, files):
    """A /proc/self/cgroup line and the cgroup files under a fake /sys/fs/cgroup."""
    root = tmp_path / "cgroup"
    for relative, text in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)
    (tmp_path / "proc_cgroup").write_text(proc_line + "\n")
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemAvailable:   33554432 kB\n")  # the host: 32 GiB
    monkeypatch.setattr(preflight, "_MEMINFO", meminfo)
    monkeypatch.setattr(preflight, "_PROC_CGROUP", tmp_path / "proc_cgroup")
    monkeypatch.setattr(preflight, "_CGROUP_ROOT", root)
    monkeypatch.setattr(preflight, "_RLIMITS", ())


def test_a_cgroup_v2_limit_lowers_the_memory_available(tmp_path, monkeypatch):
    """A container or a Slurm job's --mem is a memory cgroup: past its memory.max the OOM
    killer ends the run without a word, while MemAvailable reads the whole host. Available
    = memory.max - (memory.current - inactive_file) (cgroup-v2.rst), the least over the
    process's cgroup and its ancestors."""
    gib = 2**30
    _fake_cgroup(tmp_path, monkeypatch, "0::/slurm/job_7", {
        "slurm/job_7/memory.max": f"{8 * gib}\n",
        "slurm/job_7/memory.current": f"{3 * gib}\n",
        "slurm/job_7/memory.stat": f"anon {2 * gib}\ninactive_file {gib}\n",
        "slurm/memory.max": "max\n", "slurm/memory.current": f"{50 * gib}\n"})
    free, source = preflight.available_memory_bytes("cpu")
    assert free == 8 * gib - (3 * gib - gib)  # 6 GiB, not the host's 32
    assert "slurm/job_7/memory.max" in source
    estimate = preflight.MemoryEstimate(params=1000, model_state_bytes=16e3,
                                        activation_bytes=6 * gib, logits_bytes=0)
    with pytest.raises(MosaicInputError, match=r"> 6 GiB available on cpu \(.*memory.max"):
        check_training_memory(estimate, (free, source), "cpu", 8, 2048)


def test_a_cgroup_v1_limit_seen_at_the_containers_root_counts(tmp_path, monkeypatch):
    """A v1 container sees its own memory cgroup at the mount's root while
    /proc/self/cgroup names the host's path, which does not exist inside: the root's
    limit_in_bytes - (usage_in_bytes - total_inactive_file) (cgroup-v1/memory.rst)."""
    gib = 2**30
    _fake_cgroup(tmp_path, monkeypatch, "4:memory:/docker/abc", {
        "memory/memory.limit_in_bytes": f"{4 * gib}\n",
        "memory/memory.usage_in_bytes": f"{gib}\n",
        "memory/memory.stat": f"total_inactive_file {gib // 2}\n"})
    assert preflight.available_memory_bytes("cpu")[0] == 4 * gib - gib // 2
    # no limit (v1 writes PAGE_COUNTER_MAX pages): the host's MemAvailable
    (tmp_path / "cgroup" / "memory" / "memory.limit_in_bytes").write_text(
        "9223372036854771712\n")
    assert preflight.available_memory_bytes("cpu") == (32 * gib,
                                                       "MemAvailable in /proc/meminfo")


def test_one_sequence_too_long_is_told_to_shorten_the_sequence():
    """seq_len 10**7 at one sequence per micro-batch was advised a smaller
    micro_batch_seqs, which cannot go below 1."""
    config = train_config_from_mapping(
        tiny_job(data={"format": "synthetic", "path": None, "vocab": 256},
                 run={"seq_len": 10**7, "tokens": 10**7, "global_batch_seqs": 1,
                      "micro_batch_seqs": 1}), "job")
    estimate = estimate_training_memory(config.geometry(), 1, 10**7, 4)
    with pytest.raises(MosaicInputError, match=r"a shorter run\.seq_len") as info:
        check_training_memory(estimate, (16 * 2**30, "test"), "cpu", 1, 10**7)
    assert "smaller run.micro_batch_seqs" not in str(info.value)


def test_running_out_of_memory_mid_run_is_one_line_naming_the_settings(tmp_path,
                                                                       monkeypatch):
    """A run the estimate let start and torch could not allocate for (a trial: under
    `ulimit -v` the CPU allocator's RuntimeError) ended as 'internal error ... this is a bug
    in mosaic'; it is an input error naming the micro-batch and sequence settings."""
    from mosaic.train import model as model_module
    from mosaic.train.trainer import train

    def forward(self, tokens):  # torch's own allocator failing, as it does at the limit
        torch.empty(1 << 50, dtype=torch.uint8)  # 1 PiB

    monkeypatch.setattr(model_module.MoETransformer, "forward", forward)
    config = train_config_from_mapping(tiny_job(), "job")
    with pytest.raises(MosaicInputError) as info:
        train(config, tmp_path / "run")
    message = str(info.value)
    assert message.startswith("out of memory at run.micro_batch_seqs 4 x run.seq_len 32 "
                              "(DefaultCPUAllocator: can't allocate memory")
    assert "lower run.micro_batch_seqs" in message and "\n" not in message
