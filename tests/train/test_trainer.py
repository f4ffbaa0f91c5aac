"""The training loop: loss falls on text, exact resume, schedule, data, MFU, config errors."""

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml

torch = pytest.importorskip("torch")

from mosaic.errors import MosaicInputError, MosaicWarning  # noqa: E402
from mosaic.hardware import get_device  # noqa: E402
from mosaic.train.config import train_config_from_mapping  # noqa: E402
from mosaic.train.data import TokenStream, write_token_file  # noqa: E402
from mosaic.train.metrics import FlopsAccounting, read_metrics, resolve_device  # noqa: E402
from mosaic.train.schedule import WSDSchedule, eq17_peak_lr  # noqa: E402
from mosaic.train.trainer import read_finished_result, train  # noqa: E402

from .conftest import CORPUS, REPO, tiny_job  # noqa: E402


def test_loss_falls_on_real_text(tmp_path):
    config = train_config_from_mapping(tiny_job(run={"tokens": 40 * 8 * 32}), "job")
    result = train(config, tmp_path)
    records = read_metrics(tmp_path / "metrics.jsonl")
    assert len(records) == 40 and result.complete
    # Uniform over 256 bytes is ln 256 = 5.55 nats; English bytes have far less entropy.
    assert records[0]["loss"] == pytest.approx(math.log(256), abs=0.1)
    assert result.smoothed_loss < 3.7
    assert records[-1]["lr"] < records[20]["lr"]  # decay phase
    router = records[-1]["router"]
    assert len(router["load_max_over_mean"]) == 3  # blocks 2..4 are MoE
    assert router["dropped_tokens"] == 0
    saved = json.loads((tmp_path / "result.json").read_text())
    assert saved["n_active"] == result.n_active and saved["tokens"] == 40 * 8 * 32


def test_resume_reproduces_the_uninterrupted_run(tmp_path, capsys):
    config = train_config_from_mapping(tiny_job(run={"tokens": 8 * 8 * 32,
                                                     "checkpoint_every": 100}), "job")
    whole = train(config, tmp_path / "whole")
    stopped = train(config, tmp_path / "split", stop_after_steps=3)
    assert not stopped.complete and stopped.steps == 3
    # steps count from 0: after 3 the last one run is step 2 (a trial read 'at step 3')
    assert stopped.state == "stopped after 3 steps (the last one run: step 2)"
    # one step is one step (a trial: 'stopped after 1 steps')
    assert replace(stopped, steps=1).state == "stopped after 1 step (the last one run: step 0)"
    assert whole.state == "finished" and whole.peak_memory_gib is None  # CPU: no allocator
    assert not (tmp_path / "split" / "result.json").exists()
    capsys.readouterr()
    resumed = train(config, tmp_path / "split", log=lambda record: None)
    assert resumed.complete
    # a resume says so (it continued at 'step 3' without a word; a trial)
    assert "progress: resuming from the checkpoint at step 3 of 8" in capsys.readouterr().err
    losses = [r["loss"] for r in read_metrics(tmp_path / "whole" / "metrics.jsonl")]
    again = [r["loss"] for r in read_metrics(tmp_path / "split" / "metrics.jsonl")]
    assert losses == again  # bit-identical on CPU
    assert whole.smoothed_loss == resumed.smoothed_loss
    a = torch.load(tmp_path / "whole" / "checkpoint.pt", weights_only=False)["model"]
    b = torch.load(tmp_path / "split" / "checkpoint.pt", weights_only=False)["model"]
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)  # includes the controller biases
    before = (tmp_path / "whole" / "result.json").read_text()
    assert train(config, tmp_path / "whole") == whole  # finished: nothing re-run
    assert (tmp_path / "whole" / "result.json").read_text() == before


@pytest.mark.parametrize("signal_name", ["SIGINT", "SIGTERM"])
def test_ctrl_c_between_steps_writes_a_checkpoint_and_resumes_exactly(tmp_path, capsys,
                                                                      signal_name):
    """The first SIGINT (Ctrl-C) or SIGTERM (how Slurm and Kubernetes stop a job; a trial's
    rung lost its steps since the last checkpoint) that lands after a step (here while it is
    logged) stops before the next one, with a checkpoint of the steps done (checkpoint_every
    100 would otherwise lose them all); the rerun matches a whole run."""
    import os
    import signal

    number = getattr(signal, signal_name)
    config = train_config_from_mapping(tiny_job(run={"tokens": 8 * 8 * 32,
                                                     "checkpoint_every": 100}), "job")
    whole = train(config, tmp_path / "whole")

    def press_ctrl_c(record):
        if record["step"] == 2:
            os.kill(os.getpid(), number)

    handler = signal.getsignal(number)
    with pytest.raises(KeyboardInterrupt):
        train(config, tmp_path / "split", log=press_ctrl_c)
    assert signal.getsignal(number) is handler  # the usual meaning is back
    assert (f"interrupted ({signal_name}); stopping after this step to write a checkpoint"
            in capsys.readouterr().err)
    saved = torch.load(tmp_path / "split" / "checkpoint.pt", weights_only=False)
    assert saved["step"] == 3  # steps 0, 1, 2 done; no step started after the request
    assert not (tmp_path / "split" / "result.json").exists()
    resumed = train(config, tmp_path / "split")
    assert resumed.complete and resumed.smoothed_loss == whole.smoothed_loss
    losses = [r["loss"] for r in read_metrics(tmp_path / "whole" / "metrics.jsonl")]
    assert [r["loss"] for r in read_metrics(tmp_path / "split" / "metrics.jsonl")] == losses


def test_sigterm_inside_a_step_drops_it_and_keeps_the_steps_before(tmp_path, capsys,
                                                                   monkeypatch):
    """A SIGTERM in a step's forward/backward passes stopped only when the step ended (a
    trial: a 60 s CPU step outlived Slurm's 30 s grace, and the SIGKILL lost every step since
    the last checkpoint). Nothing of the step is applied before its optimizer step, so it is
    dropped at once: the checkpoint holds the steps before it, the metrics end at the last of
    them, and the rerun repeats the dropped step exactly."""
    import os
    import signal

    from mosaic.train.trainer import Trainer

    config = train_config_from_mapping(tiny_job(run={"tokens": 8 * 8 * 32,
                                                     "checkpoint_every": 100}), "job")
    whole = train(config, tmp_path / "whole")
    micro_batch = Trainer._micro_batch
    reached: list[tuple[int, int]] = []

    def signalled_in_step_2(self, micro):  # the second micro-batch of step 2 (of 2 per step)
        reached.append((self.step, micro))
        if (self.step, micro) == (2, 1):
            os.kill(os.getpid(), signal.SIGTERM)
        return micro_batch(self, micro)

    monkeypatch.setattr(Trainer, "_micro_batch", signalled_in_step_2)
    with pytest.raises(KeyboardInterrupt):
        train(config, tmp_path / "split", log=lambda record: None)
    assert reached[-1] == (2, 1)  # stopped inside that micro-batch, not at the step's end
    assert "interrupted (SIGTERM); stopping now: the step under way is dropped" in (
        capsys.readouterr().err)
    saved = torch.load(tmp_path / "split" / "checkpoint.pt", weights_only=False)
    assert saved["step"] == 2  # steps 0 and 1
    assert not (tmp_path / "split" / "checkpoint.tmp").exists()
    assert not (tmp_path / "split" / "result.json").exists()
    assert [r["step"] for r in read_metrics(tmp_path / "split" / "metrics.jsonl")] == [0, 1]
    monkeypatch.setattr(Trainer, "_micro_batch", micro_batch)
    resumed = train(config, tmp_path / "split")
    assert resumed.complete and resumed.smoothed_loss == whole.smoothed_loss
    losses = [r["loss"] for r in read_metrics(tmp_path / "whole" / "metrics.jsonl")]
    assert [r["loss"] for r in read_metrics(tmp_path / "split" / "metrics.jsonl")] == losses
    a = torch.load(tmp_path / "whole" / "checkpoint.pt", weights_only=False)["model"]
    b = torch.load(tmp_path / "split" / "checkpoint.pt", weights_only=False)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)  # includes the controller biases


def test_resume_inside_the_final_window_keeps_its_router_health(tmp_path):
    # 11 steps: router health averages the last ceil(0.1 x 11) = 2 (steps 9 and 10). A run
    # stopped after step 9 and resumed must average both, as the uninterrupted run does.
    config = train_config_from_mapping(tiny_job(run={"tokens": 11 * 8 * 32,
                                                     "checkpoint_every": 100}), "job")
    whole = train(config, tmp_path / "whole")
    train(config, tmp_path / "split", stop_after_steps=10)
    resumed = train(config, tmp_path / "split")
    assert resumed.complete and whole.starved_experts is not None
    assert resumed.starved_experts == whole.starved_experts


def test_resume_refuses_a_different_job(tmp_path):
    train(train_config_from_mapping(tiny_job(run={"tokens": 2 * 8 * 32}), "job"), tmp_path)
    other = train_config_from_mapping(tiny_job(run={"tokens": 2 * 8 * 32, "seed": 5}), "job")
    with pytest.raises(MosaicInputError, match="different job"):
        train(other, tmp_path)


@pytest.mark.parametrize("fingerprint", ["not json", {"job": 1}, "[" * 100_000])
def test_a_hand_edited_fingerprint_is_one_line(tmp_path, fingerprint):
    """A finished run's result.json whose job fingerprint is not JSON text of a job (edited,
    damaged) raised JSONDecodeError/TypeError out of the resume check."""
    config = train_config_from_mapping(tiny_job(run={"tokens": 2 * 8 * 32}), "job")
    train(config, tmp_path)
    path = tmp_path / "result.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | {"job_fingerprint": fingerprint}))
    with pytest.raises(MosaicInputError, match=r"result\.json: its job_fingerprint is not"):
        read_finished_result(tmp_path, config)
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(MosaicInputError, match="nested too deeply to read; remove it"):
        read_finished_result(tmp_path, config)


def test_wsd_schedule_by_hand():
    schedule = WSDSchedule.build(1.0, total_steps=10, tokens_per_step=100,
                                 warmup_tokens=250, decay_fraction=0.2)
    assert (schedule.warmup_steps, schedule.decay_steps) == (3, 2)
    values = [schedule(s) for s in range(10)]
    assert values == pytest.approx([1 / 3, 2 / 3, 1, 1, 1, 1, 1, 1, 1.0, 0.5])
    with pytest.raises(MosaicInputError, match="warmup_tokens"):
        WSDSchedule.build(1.0, 10, 100, warmup_tokens=900, decay_fraction=0.2)


def test_peak_lr_is_eq_17():
    # C = 6·1e8·1e10 = 6e18 FLOPs -> 3.30·C^-0.199.
    assert eq17_peak_lr(1e8, 1e10) == pytest.approx(3.30 * 6e18 ** -0.199)


def test_token_file_windows_are_one_pass_and_deterministic(tmp_path):
    path = write_token_file(np.arange(1001) % 60000, tmp_path / "train.bin", "uint16")
    stream = TokenStream(path, "uint16", seq_len=10, seed=3)
    assert stream.windows == 100
    starts = [int(stream.sequence(i)[0]) for i in range(100)]
    assert sorted(starts) == list(range(0, 1000, 10))  # each window once per epoch
    x, y = stream.batch(2, 1, 4, 8, torch.device("cpu"))
    assert x.shape == (4, 10) and torch.equal(x[:, 1:], y[:, :-1])
    again = TokenStream(path, "uint16", seq_len=10, seed=3).batch(2, 1, 4, 8,
                                                                  torch.device("cpu"))
    assert torch.equal(x, again[0])
    assert int(stream.sequence(100)[0]) in starts  # second epoch reuses windows
    with pytest.raises(MosaicInputError, match="whole number"):
        TokenStream(path, "uint32", seq_len=10, seed=0)


def test_mfu_against_the_datasheet_peak():
    config = train_config_from_mapping(tiny_job(), "job")
    geometry = config.geometry()
    h100 = get_device("H100")
    flops = FlopsAccounting.build(geometry, 32, h100, "bf16", None)
    from mosaic.arch import count_parameters

    n_active = count_parameters(geometry).n_active
    assert flops.paper_flops_per_token == 6 * n_active
    assert flops.with_attention_flops_per_token > flops.paper_flops_per_token
    mfu = flops.mfu(tokens_per_s=1e6, world_size=2)
    peak = h100.peak_flops_per_s["bf16"]
    assert mfu["mfu_paper"] == pytest.approx(1e6 * 6 * n_active / (2 * peak))
    assert resolve_device("NVIDIA H100 80GB HBM3").name == h100.name
    assert resolve_device("NVIDIA H200").name == get_device("H200").name
    assert resolve_device("Some CPU") is None
    cpu = FlopsAccounting.build(geometry, 32, None, "fp32", None).mfu(1e6, 1)
    assert cpu["mfu_paper"] is None
    # an fp32 run is still measured against the bf16 peak (the paper's convention, and
    # what `mosaic perf` reports); it was read against the H100's 66.9 TFLOP/s fp32 peak
    fp32 = FlopsAccounting.build(geometry, 32, h100, "fp32", None)
    assert fp32.peak_flops_per_s == peak == 989.4e12
    assert fp32.mfu(1e6, 2)["mfu_paper"] == pytest.approx(mfu["mfu_paper"])


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"run": {"global_batch_seqs": 6}}, "multiple of"),
        ({"routing": {"tau": -1}}, "routing.tau"),
        ({"ladder": {"experts": 8, "top_k": 9}}, "top_k"),
        ({"data": {"format": "int8"}}, "data.format"),
        ({"ladder": {"split_factor": 3}}, "split factor G=3"),
        ({"run": {"expert_parallel": 2}}, "exceeds the 1 process"),
    ],
)
def test_bad_jobs_get_one_line_errors(tmp_path, override, message):
    with pytest.raises(MosaicInputError, match=message) as info:
        config = train_config_from_mapping(tiny_job(**override), "job")
        train(config, tmp_path)
    assert "\n" not in str(info.value)


def test_plot_of_a_run(tmp_path):
    pytest.importorskip("plotly")
    config = train_config_from_mapping(tiny_job(run={"tokens": 2 * 8 * 32, "plot": True}),
                                       "job")
    train(config, tmp_path)
    page = (tmp_path / "metrics.html").read_text()
    assert "smoothed" in page and "router load max" in page


def test_a_plot_without_plotly_is_refused_before_training(tmp_path, monkeypatch):
    """run.plot needs the report extra: without plotly the run stops before its first step
    (no checkpoint, no metrics), not after training (a trial's ladder trained every rung,
    then reported each failed)."""
    import sys

    monkeypatch.setitem(sys.modules, "plotly", None)  # `import plotly` raises ImportError
    config = train_config_from_mapping(tiny_job(run={"tokens": 2 * 8 * 32, "plot": True}),
                                       "job")
    with pytest.raises(MosaicInputError, match="report"):
        train(config, tmp_path / "run")
    assert not (tmp_path / "run").exists() or not any((tmp_path / "run").iterdir())


def test_mfu_against_a_mosaic_bench_peak(tmp_path):
    from mosaic.train.metrics import achievable_from_bench

    bench = tmp_path / "bench"
    bench.mkdir()
    (bench / "gemm.csv").write_text(
        "case,dtype,m,n,k,pass,source,status,tflops\n"
        "a,fp32,64,64,64,peak,peak_sweep,ok,0.5\n"
        "b,fp32,128,128,128,peak,peak_sweep,ok,0.8\n"
        "c,fp32,256,256,256,peak,peak_sweep,skipped: no,9.0\n"
        "d,fp32,32,64,128,fwd,model,ok,3.0\n"
        "e,bf16,128,128,128,peak,peak_sweep,ok,2.0\n")
    assert achievable_from_bench(bench, "fp32") == pytest.approx(0.8e12)
    config = train_config_from_mapping(
        tiny_job(run={"tokens": 2 * 8 * 32, "bench_dir": str(bench)}), "job")
    train(config, tmp_path / "run")
    record = read_metrics(tmp_path / "run" / "metrics.jsonl")[-1]
    flops = json.loads(
        (tmp_path / "run" / "run.json").read_text())["flops"]["paper_flops_per_token"]
    expected = record["tokens_per_s"] * flops / 0.8e12
    assert record["mfu_paper_vs_achievable"] == pytest.approx(expected)
    assert record["mfu_paper"] is None  # no datasheet peak for a CPU
    with pytest.raises(MosaicInputError, match="bench_dir"):
        achievable_from_bench(tmp_path, "fp32")


def test_synthetic_tokens_for_throughput_runs(tmp_path):
    stream = TokenStream([], "synthetic", seq_len=16, seed=4, vocab=300)
    x, y = stream.batch(3, 0, 2, 4, torch.device("cpu"))
    again, _ = TokenStream([], "synthetic", seq_len=16, seed=4, vocab=300).batch(
        3, 0, 2, 4, torch.device("cpu"))
    assert torch.equal(x, again) and int(x.max()) < 300 and torch.equal(x[:, 1:], y[:, :-1])
    job = tiny_job(data={"format": "synthetic", "vocab": 300}, run={"tokens": 2 * 8 * 32})
    del job["data"]["path"]
    config = train_config_from_mapping(job, "job")
    assert config.geometry().vocab == 300
    result = train(config, tmp_path)
    assert result.complete
    # Uniform random ids carry no signal: the loss stays near ln(300).
    assert result.final_loss == pytest.approx(math.log(300), abs=0.1)
    with pytest.raises(MosaicInputError, match=r"data\.path is required"):
        train_config_from_mapping(tiny_job(data={"path": None}), "job")


def test_settings_that_would_be_ignored_are_named(tmp_path):
    # A vocabulary for raw bytes (always 256 values) was taken and dropped without a word.
    with pytest.raises(MosaicInputError, match=r"data\.vocab 50257 does not apply to format "
                                               "'bytes'"):
        train_config_from_mapping(tiny_job(data={"vocab": 50257}), "job")
    assert train_config_from_mapping(tiny_job(data={"vocab": 256}), "job").data.vocab == 256
    # More intra-op threads than cores: trained, with a warning that says why it is slow.
    import os

    job = tiny_job(run={"tokens": 4 * 8 * 32, "cpu_threads": (os.cpu_count() or 1) + 1})
    with pytest.warns(UserWarning, match="exceeds this machine's"):
        assert train(train_config_from_mapping(job, "job"), tmp_path).complete


def test_a_rung_with_top_k_above_experts_names_the_ladder_fields():
    with pytest.raises(MosaicInputError, match=r"ladder.top_k \(8\) must not exceed "
                                               r"ladder.experts \(4\)"):
        train_config_from_mapping(tiny_job(ladder={"experts": 4, "top_k": 8}), "job")


def test_token_ids_beyond_the_vocabulary_and_corrupt_checkpoints_are_input_errors(tmp_path):
    """Ids 0..999 read with a 500-token vocabulary (say a uint32 file read as uint16) stop
    the run with one line naming the id; so does a checkpoint that is not one."""
    path = write_token_file(np.arange(1001), tmp_path / "ids.bin", "uint16")
    stream = TokenStream(path, "uint16", seq_len=10, seed=3, vocab=500)
    with pytest.raises(MosaicInputError, match="is not below the vocabulary size 500"):
        for step in range(20):
            stream.batch(step, 0, 4, 4, torch.device("cpu"))
    out = tmp_path / "run"
    out.mkdir()
    (out / "checkpoint.pt").write_text("not a checkpoint")
    with pytest.raises(MosaicInputError, match="not a readable mosaic checkpoint"):
        train(train_config_from_mapping(tiny_job(run={"tokens": 2 * 8 * 32}), "job"), out)


def test_output_paths_and_ladder_axes_fail_before_any_work(tmp_path):
    """`train`, `ladder run` and `bench` given a file as --out, and a ladder axis of 0, are
    one line and exit 2 (they were FileExistsError, NotADirectoryError and a raw
    ValidationError)."""
    import yaml
    from typer.testing import CliRunner

    from mosaic.cli.main import app

    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(tiny_job()))
    occupied = tmp_path / "occupied"
    occupied.write_text("x")
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump({"recipe": {"data": {"path": str(job), "format": "bytes"}},
                                    "ladder": {"q": [0], "experts": [4], "top_k": [1],
                                               "tokens": [10240], "head_dim": 8}}))
    for args, words in ((["train", str(job), "--out", str(occupied)], "not a directory"),
                        (["bench", "gemm", "--preset", "tiny", "--quick", "--out",
                          str(occupied / "x")], "cannot create the directory"),
                        (["ladder", "run", str(grid), "--out", str(tmp_path / "g"), "--list"],
                         "ladder.q.0: Input should be greater than 0")):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 2, result.output
        assert words in result.output and len(result.output.strip().splitlines()) == 1


def test_a_one_step_process_does_not_say_its_metrics_are_gone(tmp_path):
    """tokens/s leaves out each process's first (warm-up) step (docs/train.md), so
    `--stop-after 1` has no throughput; its summary said "the step metrics are gone" while
    metrics.jsonl held the step."""
    import yaml
    from typer.testing import CliRunner

    from mosaic.cli.main import app

    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(tiny_job()))
    done = CliRunner().invoke(app, ["train", str(job), "--out", str(tmp_path / "run"),
                                    "--quiet", "--stop-after", "1"])
    assert done.exit_code == 0, done.output
    assert [r["step"] for r in read_metrics(tmp_path / "run" / "metrics.jsonl")] == [0]
    text = " ".join(done.output.split())
    assert "metrics are gone" not in text and "first (warm-up) step" in text


def test_a_different_job_is_named_by_its_differing_settings(tmp_path):
    """The refusal names what differs (a trial found it listed 'model, data, routing,
    optimiser or batch' whatever changed)."""
    train(train_config_from_mapping(tiny_job(run={"tokens": 2 * 8 * 32}), "job"), tmp_path)
    other = train_config_from_mapping(tiny_job(run={"tokens": 2 * 8 * 32},
                                               optim={"lr": 5e-3}), "job")
    with pytest.raises(MosaicInputError, match=r"\(optim\.lr differs\)"):
        train(other, tmp_path)


def test_resume_refuses_changed_data(tmp_path):
    """Appending to the token file moves every later window, so the resumed run would not
    repeat the uninterrupted one: refused with both sizes."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_bytes(CORPUS.read_bytes())
    config = train_config_from_mapping(tiny_job(run={"tokens": 4 * 8 * 32},
                                                data={"path": str(corpus)}), "job")
    train(config, tmp_path / "out", stop_after_steps=2)
    size = corpus.stat().st_size
    corpus.write_bytes(CORPUS.read_bytes() + b"appended text")
    with pytest.raises(MosaicInputError, match=f"{size:,} when the checkpoint"):
        train(config, tmp_path / "out")


def test_a_cut_short_metrics_line_is_dropped_on_resume(tmp_path):
    """A crash mid-write leaves a partial last line: the resume warns and drops it (before,
    an internal error) and continues to the same losses as an uninterrupted run."""
    config = train_config_from_mapping(tiny_job(run={"tokens": 4 * 8 * 32,
                                                     "checkpoint_every": 100}), "job")
    whole = train(config, tmp_path / "whole")
    train(config, tmp_path / "split", stop_after_steps=2)
    with (tmp_path / "split" / "metrics.jsonl").open("a") as handle:
        handle.write('{"step": 2, "lo')
    with pytest.warns(UserWarning, match="line\\(s\\) 3 are not metric records"):
        resumed = train(config, tmp_path / "split")
    assert resumed.smoothed_loss == whole.smoothed_loss
    assert [r["step"] for r in read_metrics(tmp_path / "split" / "metrics.jsonl")] == [0, 1, 2, 3]


def test_a_finished_checkpoint_without_its_result_gets_a_real_one(tmp_path):
    """A crash between the last checkpoint and result.json: the rerun writes the result from
    the checkpoint and the logged metrics (before: NaN loss and tokens/s, a 1e-5 s wall
    time), and wall time counts every process that trained the run."""
    config = train_config_from_mapping(tiny_job(run={"tokens": 4 * 8 * 32,
                                                     "checkpoint_every": 100}), "job")
    first = train(config, tmp_path, stop_after_steps=2)
    whole = train(config, tmp_path)
    assert whole.wall_s > first.wall_s  # both processes' time, not the last one's
    (tmp_path / "result.json").unlink()
    rebuilt = train(config, tmp_path)
    records = read_metrics(tmp_path / "metrics.jsonl")
    assert rebuilt.final_loss == records[-1]["loss"] == whole.final_loss
    assert rebuilt.smoothed_loss == whole.smoothed_loss
    assert math.isfinite(rebuilt.tokens_per_s) and rebuilt.wall_s > first.wall_s
    assert "NaN" not in (tmp_path / "result.json").read_text()  # strict JSON, finite values


def test_a_finished_run_keeps_its_run_info_and_a_refused_start_leaves_no_folder(tmp_path):
    """Rerunning a finished run with another log_every (a resumable setting) returned its
    result but rewrote run.json, which then disagreed with metrics.jsonl; and a job refused
    before its first step left an empty output folder (a trial)."""
    from typer.testing import CliRunner

    from mosaic.cli.main import app

    config = train_config_from_mapping(tiny_job(run={"tokens": 2 * 8 * 32}), "job")
    train(config, tmp_path / "done")
    before = (tmp_path / "done" / "run.json").read_text()
    again = train_config_from_mapping(tiny_job(run={"tokens": 2 * 8 * 32, "log_every": 7}),
                                      "job")
    train(again, tmp_path / "done")
    assert (tmp_path / "done" / "run.json").read_text() == before
    job = tmp_path / "job.yaml"
    job.write_text(json.dumps(tiny_job(run={"micro_batch_seqs": 3})))  # 8 is not 3·k
    refused = CliRunner().invoke(app, ["train", str(job), "--out", str(tmp_path / "new")])
    assert refused.exit_code == 2 and "multiple of" in refused.output
    assert not (tmp_path / "new").exists()


def test_a_finished_run_survives_grown_data_and_lost_metrics(tmp_path):
    """A re-check found a finished run refused on rerun because its data file had grown
    (nothing was left to read), and NaN written into result.json when both result.json
    and metrics.jsonl were gone."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_bytes(CORPUS.read_bytes())
    config = train_config_from_mapping(tiny_job(run={"tokens": 2 * 8 * 32},
                                                data={"path": str(corpus)}), "job")
    done = train(config, tmp_path / "out")
    corpus.write_bytes(CORPUS.read_bytes() + b"more text")
    assert train(config, tmp_path / "out") == done
    (tmp_path / "out" / "result.json").unlink()
    (tmp_path / "out" / "metrics.jsonl").unlink()
    with pytest.warns(UserWarning, match="holds no records"):
        rebuilt = train(config, tmp_path / "out")
    assert rebuilt.smoothed_loss == done.smoothed_loss
    saved = json.loads((tmp_path / "out" / "result.json").read_text())
    assert saved["final_loss"] is None and saved["tokens_per_s"] is None


def test_a_diverging_run_stops_with_the_step_and_lr(tmp_path):
    """At lr 1e30 a run printed 'loss nan' every step and exited 0 (a trial): the first
    non-finite loss stops training with one error naming the step and the learning rate."""
    config = train_config_from_mapping(tiny_job(optim={"lr": 1e30}), "job")
    with pytest.raises(MosaicInputError, match=r"training diverged at step \d+: .*lr 1e\+30"):
        train(config, tmp_path)


@pytest.mark.parametrize(("block", "field"), [("run", "seq_len"), ("optim", "eps"),
                                              ("ladder", "q")])
def test_a_boolean_is_not_a_number(block, field):
    """'run.seq_len: true' trained sequences of one token (pydantic reads true as 1; a
    trial)."""
    with pytest.raises(MosaicInputError, match=f"{field}: got True; expected a number"):
        train_config_from_mapping(tiny_job(**{block: {field: True}}), "job")


def test_a_stated_kv_head_count_the_heads_do_not_divide_is_named():
    """kv_heads: 3 beside 4 query heads trained with gcd = 1 KV head without a word (a
    trial); the ladder's own default rule (q = 3: 12 heads, 8 KV heads -> 4) stays quiet."""
    from mosaic.train.config import LadderModel, ladder_rung_geometry

    with pytest.warns(UserWarning, match="kv_heads 3 does not divide the 4 query heads of "
                      "q=1: the rung uses gcd = 1 KV heads"):
        geometry = ladder_rung_geometry(LadderModel(q=1, experts=4, top_k=1, head_dim=8,
                                                    kv_heads=3), vocab=256)
    assert geometry.kv_heads == 1
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        quiet = ladder_rung_geometry(LadderModel(q=3, experts=4, top_k=1, head_dim=8),
                                     vocab=256)
    assert quiet.kv_heads == 4


def test_a_job_file_for_the_other_tool_is_named_as_such(tmp_path):
    """perf on a train job said "unknown block(s) ['ladder', 'optim', 'run'] ('optim' -> did
    you mean 'optimizer'?)", and train on a perf job listed nine unknown fields (a trial)."""
    from typer.testing import CliRunner

    from mosaic.cli.main import app

    runner = CliRunner()
    perf = runner.invoke(app, ["perf", str(REPO / "examples" / "train_q4_h200.yaml")])
    assert perf.exit_code == 2 and "a `mosaic train` job file" in perf.output
    train = runner.invoke(app, ["train", str(REPO / "examples" / "appendix_e.yaml"),
                                "--out", str(tmp_path / "o")])
    assert train.exit_code == 2 and "not a `mosaic train` job" in train.output


def test_many_passes_over_the_data_are_named(tmp_path):
    """A job reading its corpus 7.8 times said nothing (a trial); past 4 epochs repeated
    tokens are worth less than new ones (Muennighoff et al. 2023). The 3,320-byte corpus
    holds (3,320 - 1) // 32 = 103 windows of 32: 8 steps of 8 sequences read 64 / 103 = 0.6
    epochs (quiet), 64 steps 512 / 103 = 5.0."""
    import warnings

    quiet = train_config_from_mapping(tiny_job(run={"tokens": 8 * 8 * 32}), "job")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        train(quiet, tmp_path / "quiet", stop_after_steps=1)
    many = train_config_from_mapping(tiny_job(run={"tokens": 64 * 8 * 32}), "job")
    # said before the first step, when `started` tells the CLI to print what it held (a
    # trial's run with minutes per step said nothing until it was killed)
    events: list[str] = []
    with pytest.warns(UserWarning, match=r"reads its data 5.0 times") as caught:
        train(many, tmp_path / "many", stop_after_steps=1,
              log=lambda record: events.append(f"step {record['step']}"),
              started=lambda: events.append(f"started after {len(caught)} warning(s)"))
    assert events == ["started after 1 warning(s)", "step 0"]


@pytest.mark.parametrize("key", ["vocab", "vocab_sz"])
def test_a_vocabulary_smaller_than_the_data_names_the_users_key(key):
    """The error said 'model.vocab_sz' whichever spelling the file used, then 'model.vocab'
    with a hint pointing at data.format for token files too (a trial, a review)."""
    job = tiny_job()
    del job["ladder"]
    job["model"] = {"n_layers": 2, "hidden_sz": 32, "inter_sz": 80, "n_q_heads": 4,
                    "n_kv_heads": 2, "head_dim": 8, key: 100}
    job["data"] = {"format": "synthetic", "vocab": 50257}
    with pytest.raises(MosaicInputError, match=rf"model.{key} 100 is smaller than the data's "
                       r"vocabulary 50257 \(data.vocab\)"):
        train_config_from_mapping(job, "job")


def test_the_result_carries_mfu_at_the_median_step(tmp_path):
    """MFU was only in metrics.jsonl (a trial): the result and the final table give it,
    here against a stated achievable peak (a CPU has no datasheet peak): tokens/s x 6 N_act
    / peak."""
    from typer.testing import CliRunner

    from mosaic.arch import count_parameters
    from mosaic.cli.main import app

    job = tiny_job(run={"tokens": 4 * 8 * 32, "achievable_flops_per_s": 1e11})
    config = train_config_from_mapping(job, "job")
    result = train(config, tmp_path / "a")
    n_active = count_parameters(config.geometry()).n_active
    assert result.mfu_paper is None  # no datasheet peak on a CPU
    assert result.mfu_paper_vs_achievable == pytest.approx(
        result.tokens_per_s * 6 * n_active / 1e11, rel=1e-9)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    shown = CliRunner().invoke(app, ["train", str(path), "--out", str(tmp_path / "a")])
    assert shown.exit_code == 0, shown.output
    assert (f"MFU against the measured GEMM peak │ "
            f"{result.mfu_paper_vs_achievable:.2%}") in " ".join(shown.stdout.split())


def test_a_finished_run_without_its_checkpoint_is_neither_retrained_nor_overwritten(tmp_path):
    """Checkpoints are deleted after a run (16 B per parameter); its result.json still guards
    the folder: another job is refused and the same job is done, its metrics kept (a trial
    found both silently retrained over the finished run)."""
    config = train_config_from_mapping(tiny_job(run={"tokens": 2 * 8 * 32}), "job")
    finished = train(config, tmp_path)
    metrics = (tmp_path / "metrics.jsonl").read_text()
    (tmp_path / "checkpoint.pt").unlink()
    other = train_config_from_mapping(tiny_job(run={"tokens": 2 * 8 * 32, "seed": 5}), "job")
    with pytest.raises(MosaicInputError, match="different job"):
        train(other, tmp_path)
    again = train(config, tmp_path)
    assert again.final_loss == finished.final_loss
    assert (tmp_path / "metrics.jsonl").read_text() == metrics
    assert not (tmp_path / "checkpoint.pt").exists()


@pytest.mark.parametrize("block, field", [("run", "tokens"), ("optim", "warmup_tokens"),
                                          ("routing", "mu_b"), ("routing", "tau")])
def test_an_infinite_number_in_a_job_is_refused_by_name(block, field):
    """tokens: .inf overflowed the step count (an internal error); mu_b: .inf trained NaN
    router biases to the end (a trial)."""
    job = tiny_job()
    job.setdefault(block, {})[field] = float("inf")
    with pytest.raises(MosaicInputError, match=field):
        train_config_from_mapping(job, "job")


def test_an_unfingerprinted_result_without_a_checkpoint_is_refused(tmp_path):
    """A result.json written before job fingerprints, with no checkpoint to vouch for the
    job, cannot be matched to the job: refused, not returned to any job (a review)."""
    config = train_config_from_mapping(tiny_job(run={"tokens": 2 * 8 * 32}), "job")
    train(config, tmp_path)
    (tmp_path / "checkpoint.pt").unlink()
    payload = json.loads((tmp_path / "result.json").read_text())
    payload.pop("job_fingerprint")
    (tmp_path / "result.json").write_text(json.dumps(payload))
    with pytest.raises(MosaicInputError, match="records no job fingerprint"):
        train(config, tmp_path)


def test_mfu_that_cannot_be_a_fraction_and_a_gpu_peak_on_cpu_are_warned_of(tmp_path):
    """A trial gave run.achievable_flops_per_s 1e9 and read '838% MFU' without a word, and
    named an H100 on a CPU run and read 0.00% MFU: both now warn (MosaicWarning)."""
    from mosaic.errors import MosaicWarning

    slow_peak = train_config_from_mapping(
        tiny_job(run={"tokens": 2 * 8 * 32, "achievable_flops_per_s": 1e3}), "job")
    with pytest.warns(MosaicWarning, match="not a fraction of anything"):
        train(slow_peak, tmp_path / "slow")
    gpu_named = train_config_from_mapping(
        tiny_job(run={"tokens": 2 * 8 * 32, "device_name": "H100-SXM-80GB"}), "job")
    with pytest.warns(MosaicWarning, match="the run is on cpu"):
        train(gpu_named, tmp_path / "gpu")


def test_an_absurd_token_budget_is_refused():
    """run.tokens 1e30 gave 9.8e26 steps and trained 'forever' (a trial): tokens are bounded
    as every command bounds them (mosaic.limits, 1e18)."""
    with pytest.raises(MosaicInputError, match=r"run\.tokens"):
        train_config_from_mapping(tiny_job(run={"tokens": 1e30}), "job")


def test_a_second_signal_while_a_checkpoint_is_written_leaves_no_partial_file(tmp_path,
                                                                              monkeypatch):
    """A second Ctrl-C or SIGTERM stops at once, also inside torch.save (a KeyboardInterrupt
    there): the last checkpoint stays as it was, and the partial file beside it (as large as
    a checkpoint, 16 B per parameter) is removed, not left on the disk."""
    import mosaic.train.trainer as trainer

    config = train_config_from_mapping(tiny_job(run={"tokens": 4 * 8 * 32,
                                                     "checkpoint_every": 2}), "job")
    train(config, tmp_path / "run", stop_after_steps=2)
    saved = (tmp_path / "run" / "checkpoint.pt").read_bytes()

    def interrupted(payload, path):
        Path(path).write_bytes(b"partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(trainer.torch, "save", interrupted)
    with pytest.raises(KeyboardInterrupt):
        train(config, tmp_path / "run")
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [
        "checkpoint.pt", "metrics.jsonl", "run.json"]
    assert (tmp_path / "run" / "checkpoint.pt").read_bytes() == saved


def test_a_checkpoint_that_cannot_be_written_or_read_is_one_line(tmp_path, monkeypatch):
    """A full disk made torch.save raise 'enforce fail at inline_container.cc' (an internal
    error) and left its partial file; a checkpoint cut to 50,000 bytes failed torch.load
    with OSError EINVAL, another internal error (a trial)."""
    import mosaic.train.trainer as trainer

    config = train_config_from_mapping(tiny_job(run={"tokens": 4 * 8 * 32,
                                                     "checkpoint_every": 2}), "job")
    train(config, tmp_path / "run", stop_after_steps=2)
    saved = (tmp_path / "run" / "checkpoint.pt").read_bytes()

    def disk_full(payload, path):
        Path(path).write_bytes(b"partial")
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 128")

    monkeypatch.setattr(trainer.torch, "save", disk_full)
    with pytest.raises(MosaicInputError, match=r"checkpoint\.pt: the checkpoint could not be "
                       r"written \(.*\); .*checkpoint\.pt from the last checkpoint is kept"):
        train(config, tmp_path / "run")
    assert not (tmp_path / "run" / "checkpoint.tmp").exists()
    assert (tmp_path / "run" / "checkpoint.pt").read_bytes() == saved
    monkeypatch.undo()

    def seek_fails(*args, **kwargs):
        raise OSError(22, "Invalid argument")

    monkeypatch.setattr(trainer.torch, "load", seek_fails)
    with pytest.raises(MosaicInputError, match=r"not a readable mosaic checkpoint \(OSError"):
        train(config, tmp_path / "run")


def test_a_restart_from_step_zero_keeps_the_earlier_metrics(tmp_path):
    # a run whose checkpoint was lost starts again; a trial's 73 logged steps were replaced
    # by the new start's 3 without a word
    from mosaic.errors import MosaicWarning

    config = train_config_from_mapping(tiny_job(run={"tokens": 4 * 8 * 32,
                                                     "checkpoint_every": 2}), "job")
    train(config, tmp_path, stop_after_steps=3)
    earlier = (tmp_path / "metrics.jsonl").read_text()
    (tmp_path / "checkpoint.pt").unlink()
    with pytest.warns(MosaicWarning, match="starts from step 0 .*kept in "
                      r"metrics\.before-restart\.jsonl"):
        train(config, tmp_path, stop_after_steps=1)
    assert (tmp_path / "metrics.before-restart.jsonl").read_text() == earlier
    assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [0]


def test_the_summary_of_a_run_whose_metrics_are_gone_says_so(tmp_path):
    """Its median-step tokens/s is unknown: the summary said 'nan' (a trial)."""
    import yaml
    from typer.testing import CliRunner

    from mosaic.cli.main import app

    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(tiny_job(run={"tokens": 2 * 8 * 32})))
    out = tmp_path / "out"
    first = CliRunner().invoke(app, ["train", str(job), "--out", str(out), "--quiet"])
    assert first.exit_code == 0, first.output
    (out / "result.json").unlink()
    (out / "metrics.jsonl").unlink()
    again = CliRunner().invoke(app, ["train", str(job), "--out", str(out), "--quiet"],
                               terminal_width=200)
    assert again.exit_code == 0, again.output
    assert "unknown (the step metrics are gone)" in again.output
    assert "nan" not in again.stdout


@pytest.mark.parametrize(
    ("extra", "field"),
    [({"glu": False}, "model.glu"),  # was an internal error from the model's constructor
     ({"activation": "geglu"}, "model.activation"),  # was trained as SwiGLU, silently
     ({"attention_output_gate": True}, "model.attention_output_gate")],
)
def test_ffn_and_gate_features_the_model_lacks_are_refused_when_the_job_is_read(extra, field):
    """model.py builds SwiGLU FFNs and the per-head gate only: a job asking for anything
    else is refused by its field when it is read, not in the middle of the run (glu: false
    was an internal error once the model was built; geglu trained as SwiGLU)."""
    job = tiny_job()
    del job["ladder"]
    job["model"] = {"layers": 2, "d_model": 32, "heads": 4, "kv_heads": 2, "head_dim": 8,
                    "ffn": 64, "vocab": 256, **extra}
    with pytest.raises(MosaicInputError, match=field) as info:
        train_config_from_mapping(job, "job.yaml")
    assert str(info.value).startswith("job.yaml: ")


@pytest.mark.parametrize(
    ("data", "words"),
    [({"path": "missing.txt"}, "data.path '"),
     ({"path": "short.txt"}, "data.path holds 10 tokens; at least run.seq_len + 1 = 33")],
)
def test_errors_met_once_a_job_runs_name_its_file(tmp_path, capsys, data, words):
    """A data file that is missing or too short is found only when the run starts, after
    the job validated; the one-line error named neither the job file nor, for a short file,
    the run.seq_len it falls short of, so a user with several jobs could not tell which one
    failed. `mosaic train` and `python -m mosaic.train` both start it with the file."""
    from typer.testing import CliRunner

    from mosaic.cli.main import app
    from mosaic.train.__main__ import main

    (tmp_path / "short.txt").write_bytes(b"0123456789")
    job = tmp_path / "second.yaml"
    job.write_text(yaml.safe_dump(tiny_job(data=data)))
    result = CliRunner().invoke(app, ["train", str(job), "--out", str(tmp_path / "a")])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {job}: {words}"), lines
    assert not (tmp_path / "a").exists()  # refused before its first step: no folder left
    assert main([str(job), "--out", str(tmp_path / "b")]) == 2
    assert capsys.readouterr().err.startswith(f"error: {job}: {words}")


def test_grouped_mm_stated_where_it_cannot_run_is_one_line(tmp_path):
    """run.expert_compute: grouped_mm on expert rows torch's grouped GEMM cannot take (here
    d_expert = 80 / 8 = 10 fp32 values, 40 bytes: strides must be multiples of 16 bytes,
    model.grouped_mm_supported) was an 'internal error ... this is a bug' line; it is the
    job's choice, refused naming the field, as docs/train.md's `auto` would fall back."""
    from typer.testing import CliRunner

    from mosaic.cli.main import app

    job = tmp_path / "gm.yaml"
    job.write_text(yaml.safe_dump(tiny_job(ladder={"split_factor": 8},
                                           run={"expert_compute": "grouped_mm"})))
    result = CliRunner().invoke(app, ["train", str(job), "--out", str(tmp_path / "a")])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"error: {job}: run.expert_compute: grouped_mm does not run")
    assert "internal error" not in lines[0]


def test_an_unknown_device_name_is_refused_when_the_job_is_read():
    """run.device_name was looked up when the run started (each ladder rung failed on it
    in turn) and the error named neither the field nor the file."""
    with pytest.raises(MosaicInputError,
                       match=r"^job.yaml: run.device_name: unknown device 'H900'"):
        train_config_from_mapping(tiny_job(run={"device_name": "H900"}), "job.yaml")
    config = train_config_from_mapping(tiny_job(run={"device_name": "H100-SXM-80GB"}), "job")
    assert config.run.device_name == "H100-SXM-80GB"


def test_another_job_is_refused_a_folder_holding_a_partial_run_without_checkpoint(tmp_path):
    """A run stopped before its first checkpoint leaves run.json and metrics.jsonl; a
    different job given that --out overwrote its run.json and filed its metrics as this
    job's 'earlier start' (a trial). It is refused, naming what differs, as a foreign
    checkpoint is; the same job (a resumable setting changed) still starts again there."""
    config = train_config_from_mapping(tiny_job(run={"tokens": 4 * 8 * 32,
                                                     "checkpoint_every": 2}), "job")
    train(config, tmp_path, stop_after_steps=1)
    (tmp_path / "checkpoint.pt").unlink()
    info = (tmp_path / "run.json").read_text()
    other = train_config_from_mapping(tiny_job(run={"tokens": 4 * 8 * 32, "seed": 5}), "job")
    with pytest.raises(MosaicInputError, match=r"belongs to a different job \(run.seed "
                                               r"differs\)"):
        train(other, tmp_path)
    assert (tmp_path / "run.json").read_text() == info
    assert not (tmp_path / "metrics.before-restart.jsonl").exists()
    same = train_config_from_mapping(tiny_job(run={"tokens": 4 * 8 * 32,
                                                   "checkpoint_every": 3}), "job")
    with pytest.warns(MosaicWarning, match="starts from step 0"):
        assert train(same, tmp_path, stop_after_steps=1).steps == 1


def test_one_sigterm_stops_a_long_step_promptly_from_outside(tmp_path):
    """`mosaic train` on CPU with a step of about a minute here (3072 sequences of 128 tokens
    on one thread): one SIGTERM from another process stopped only when the step ended (a
    trial), past Slurm's and Kubernetes' 30 s grace. Now it exits within seconds with
    status 130 (the CLI's interrupt status), before step 0 is done: no metric record, no
    checkpoint (nothing was trained), no partial file, run.json whole, one progress line
    and the one error line that says how to resume."""
    import os
    import signal
    import subprocess
    import sys
    import time

    job = tiny_job(data={"format": "synthetic", "vocab": 256},
                   run={"tokens": 2 * 3072 * 128, "seq_len": 128, "global_batch_seqs": 3072,
                        "micro_batch_seqs": 64, "checkpoint_every": 1})
    del job["data"]["path"]
    path, out = tmp_path / "job.yaml", tmp_path / "out"
    path.write_text(yaml.safe_dump(job))
    process = subprocess.Popen(
        [sys.executable, "-c", "from mosaic.cli.main import main; main()", "train", str(path),
         "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        deadline = time.monotonic() + 120
        while not (out / "run.json").exists():  # written just before the first step
            assert process.poll() is None and time.monotonic() < deadline, process.stderr.read()
            time.sleep(0.2)
        time.sleep(3.0)  # inside step 0's forward/backward passes
        sent = time.monotonic()
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=60)
        waited_s = time.monotonic() - sent
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 130, stderr
    assert waited_s < 30, waited_s
    assert "interrupted (SIGTERM); stopping now: the step under way is dropped" in stderr
    assert "error: interrupted; resume with: mosaic train" in stderr
    assert "Traceback" not in stderr and "step      0" not in stdout
    assert sorted(p.name for p in out.iterdir()) == ["metrics.jsonl", "run.json"]
    assert (out / "metrics.jsonl").read_text() == ""
    assert json.loads((out / "run.json").read_text())["total_steps"] == 2


def test_run_info_of_synthetic_data_states_no_corpus(tmp_path):
    """Synthetic ids come from no corpus: run.json said data_tokens 0 and data_epochs
    ~7e-17 (a trial); both are null there, and a corpus's are its size and passes."""
    runs = {"synthetic": {"format": "synthetic", "path": None}, "corpus": {}}
    for name, data in runs.items():
        config = train_config_from_mapping(
            tiny_job(data=data, run={"tokens": 2 * 8 * 32}), "job")
        train(config, tmp_path / name)
        runs[name] = json.loads((tmp_path / name / "run.json").read_text())
    assert runs["synthetic"]["data_tokens"] is None and runs["synthetic"]["data_epochs"] is None
    corpus_bytes = CORPUS.stat().st_size
    windows = (corpus_bytes - 1) // 32
    assert runs["corpus"]["data_tokens"] == corpus_bytes
    assert runs["corpus"]["data_epochs"] == pytest.approx(2 * 8 / windows)


def test_a_folder_another_process_trains_is_refused(tmp_path):
    """`kill -9` on torchrun alone leaves its workers training; a trial's rerun trained
    beside them and metrics.jsonl ended with 245 lines for 160 steps. A folder another
    process holds is refused with one line, and once that process ends, it trains."""
    import subprocess
    import sys

    config = train_config_from_mapping(tiny_job(run={"tokens": 2 * 8 * 32}), "job")
    tmp_path.mkdir(exist_ok=True)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, sys, time\n"
         f"fd = os.open({str(tmp_path / '.train.lock')!r}, os.O_RDWR | os.O_CREAT)\n"
         "fcntl.flock(fd, fcntl.LOCK_EX); os.write(fd, b'4242\\n')\n"
         "print('held', flush=True); time.sleep(120)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(MosaicInputError, match=r"process 4242 is training this run folder"):
            train(config, tmp_path)
        assert not (tmp_path / "metrics.jsonl").exists()
    finally:
        holder.kill()
        holder.wait()
    assert train(config, tmp_path).complete  # the lock died with its holder


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_lock_path_that_is_not_a_file_is_named(tmp_path, kind):
    """A FIFO left at DIR/.train.lock stopped `mosaic train` with 'internal error (OSError:
    [Errno 22] Invalid argument)' (a trial); it, or a folder there, is refused by name."""
    import os

    config = train_config_from_mapping(tiny_job(run={"tokens": 2 * 8 * 32}), "job")
    lock = tmp_path / ".train.lock"
    if kind == "fifo":
        os.mkfifo(lock)
    else:
        lock.mkdir()
    with pytest.raises(MosaicInputError, match=r"\.train\.lock: .*not a regular file"):
        train(config, tmp_path)
    assert not (tmp_path / "metrics.jsonl").exists()
