"""One-line messages a new user meets: the version, range errors that name the right
quantity, and the way out of a calibration without cross-validation groups."""

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from mosaic import __version__
from mosaic.cli.main import app
from mosaic.errors import MosaicInputError
from mosaic.hardware.device import normalize_dtype
from mosaic.limits import check_range
from mosaic.perf.collectives import bus_factor
from mosaic.perf.plan import Checkpointing, Sharding
from mosaic.stacks.registry import check_release

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
runner = CliRunner()


def test_version_prints_the_package_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"mosaic {__version__}"


def test_a_sparsity_out_of_range_names_sparsity():
    result = runner.invoke(app, ["law", "predict", "--n-total", "1e10", "--sparsity", "1.5",
                                 "--tokens", "1e12", "--split-factor", "4"])
    assert result.exit_code == 2
    assert "sparsity S" in result.output and "split factor" not in result.output


def test_missing_files_are_one_line_naming_the_path(tmp_path):
    missing = tmp_path / "nope.json"
    result = runner.invoke(app, ["arch", "--model", str(missing)])
    assert result.exit_code == 2
    assert result.output.strip() == f"error: {missing}: config.json not found"
    out = tmp_path / "absent" / "x.args"
    result = runner.invoke(app, ["export", str(EXAMPLES / "appendix_e.yaml"), "--to",
                                 "megatron", "--out", str(out)])
    assert result.exit_code == 2
    assert f"directory {out.parent} does not exist" in result.output
    assert "Errno" not in result.output


def test_a_misnamed_block_or_field_is_the_problem_named(tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text("model: {layers: 4, d_model: 512, heads: 8, kv_heads: 8, ffn: 2048, "
                   "vocab: 32000}\nparallel: {tp: 1}\nbatch: {global_seqs: 8, seq_len: 1024}\n"
                   "hardware: {system: DGX-H100, nodes: 1}\n")
    result = runner.invoke(app, ["perf", str(job)])
    assert result.exit_code == 2 and "did you mean 'parallelism'?" in result.output
    job.write_text("model: {layers: 4, d_model: 512, heads: 8, kv_heads: 8, ffn: 2048, "
                   "vocab: 32000}\nbatch: {global_batch: 8, seq_len: 1024}\n"
                   "hardware: {system: DGX-H100, nodes: 1}\n")
    result = runner.invoke(app, ["perf", str(job)])
    assert result.exit_code == 2 and "global_batch: unknown field" in result.output


def test_a_run_record_as_a_job_shows_its_measured_step_beside_the_prediction():
    import json


    runs_file = EXAMPLES / "runs_example.yaml"
    record = yaml.safe_load(runs_file.read_text())["runs"][0]
    reference = f"{runs_file}#{record['id']}"
    perf = json.loads(runner.invoke(app, ["perf", reference, "--json"]).output)
    assert perf["measured_step_time_s"] == record["measured"]["step_time_s"]
    explain = json.loads(runner.invoke(app, ["explain", reference, "--json"]).output)
    assert explain["gap"]["measured_step_time_s"] == record["measured"]["step_time_s"]


def test_a_colon_pair_in_an_error_is_printed_as_typed():
    """rich replaced ':100:' in '--global-batch 1000:100' with an emoji (a trial)."""
    result = runner.invoke(app, ["plan", "--global-batch", "1000:100"])
    assert result.exit_code == 2
    assert "--global-batch 1000:100: MIN must not exceed MAX" in result.output


def test_an_output_that_is_the_input_is_refused_before_anything_is_written(tmp_path):
    """`report plan.json --out plan.json` replaced the plan with HTML (a trial); so did
    `export job --out job` and `perf job --html job` (a re-check). All are refused, the
    input kept."""
    plan = tmp_path / "plan.json"
    plan.write_text("{}")
    job = tmp_path / "job.yaml"
    job.write_text((EXAMPLES / "appendix_e.yaml").read_text())
    data = tmp_path / "runs.csv"
    data.write_text("n_total,tokens,loss\n1e8,1e9,3.0\n")
    runs = tmp_path / "runs.yaml"
    runs.write_text((EXAMPLES / "runs_example.yaml").read_text())
    for command, kept in ((["report", str(plan), "--out", str(plan)], plan),
                          (["export", str(job), "--to", "megatron", "--out", str(job)], job),
                          (["law", "fit", str(data), "--out", str(data)], data),
                          (["perf", str(job), "--html", str(job)], job),
                          (["layouts", str(job), "--html", str(job)], job),
                          (["validate", str(runs), "--html", str(runs)], runs)):
        before = kept.read_text()
        result = runner.invoke(app, command)
        assert result.exit_code == 2, command
        assert "is the input file" in result.output
        assert kept.read_text() == before


def test_another_commands_json_given_as_a_job_is_named(tmp_path):
    """A sweep document exported as a job got 'unknown block(s) [axis, ...] (did you mean
    search?)' (a trial); the loader says whose output it is."""
    import json

    sweep = tmp_path / "sweep.json"
    sweep.write_text(json.dumps({"axis": "nodes", "points": [], "envelope": {},
                                 "search_space": {}}))
    for command in (["export", str(sweep), "--to", "megatron"], ["perf", str(sweep)]):
        result = runner.invoke(app, command)
        assert result.exit_code == 2
        assert "the file that `mosaic sweep --json` writes, not a job" in result.output


@pytest.mark.parametrize(("command", "written_by"), [
    (["law", "optimum", "--compute", "1e22", "--json"], "law optimum --json"),
    (["law", "predict", "--q", "4", "--tokens", "1e10", "--json"], "law predict --json"),
    (["arch", "--q", "4", "--json"], "arch --json"),
])
def test_law_and_arch_outputs_given_as_a_job_are_named(tmp_path, command, written_by):
    """A law optimum given to perf got 'unknown block(s) [at_boundary, ...]' (a trial)."""
    output = tmp_path / "output.json"
    output.write_text(runner.invoke(app, command).stdout)
    result = runner.invoke(app, ["perf", str(output)])
    assert result.exit_code == 2
    assert f"the file that `mosaic {written_by}` writes, not a job" in result.output


def test_law_and_calibration_files_given_as_a_job_are_named(tmp_path):
    from importlib import resources

    from mosaic.law.law import default_law

    law, calibration = tmp_path / "law.json", tmp_path / "calibration.yaml"
    default_law().save(law)
    calibration.write_text(resources.files("mosaic.perf").joinpath(
        "data", "calibration_default.yaml").read_text())
    for path, written_by in ((law, "law fit --out"), (calibration, "calibrate --out")):
        result = runner.invoke(app, ["layouts", str(path)])
        assert result.exit_code == 2
        assert f"the file that `mosaic {written_by}` writes, not a job" in result.output


def test_a_small_models_parameters_print_as_whole_counts():
    """A CPU ladder rung printed 'N_total (non-embedding) 0.000 B' (a trial): below 0.1 B the
    count prints whole, here 2 blocks of attention 4·64·64 - 2·64·32 and a GLU FFN 3·64·128
    plus two norms of 2·64 each."""
    result = runner.invoke(app, ["arch", "--layers", "2", "--d-model", "64", "--heads", "4",
                                 "--kv-heads", "2", "--ffn", "128", "--vocab", "256"])
    assert result.exit_code == 0, result.output
    per_layer = (2 * 64 * 64 + 2 * 64 * 32) + 3 * 64 * 128 + 2 * 2 * 64
    assert f"{2 * per_layer + 2 * 64:,}" in result.stdout


def test_a_value_listed_twice_is_refused():
    """`sweep days --values 10,10` swept one window twice (a trial)."""
    result = runner.invoke(app, ["sweep", "days", "--values", "10,20,10"])
    assert result.exit_code == 2
    assert "--values '10,20,10': 10 given more than once" in result.output


def test_mosaics_own_warnings_name_no_source_line(tmp_path):
    """A deprecated spelling's warning ended '(validate_cmd.py:162)', mosaic's own source
    line (a trial); mosaic's warnings are its words alone, another library's keep theirs."""
    import subprocess
    import sys


    document = yaml.safe_load((EXAMPLES / "appendix_e.yaml").read_text())
    document["data"] = {"global_batch": 8192, "seq_len": 8192, "micro_batch": 2}  # older
    job = tmp_path / "old.yaml"
    job.write_text(yaml.safe_dump(document))
    result = subprocess.run([sys.executable, "-c", "from mosaic.cli.main import main; main()",
                             "perf", str(job)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    line = next(row for row in result.stderr.splitlines() if "deprecated spelling" in row)
    assert line.startswith(f"warning: {job}: deprecated spellings") and ".py:" not in line


@pytest.mark.parametrize(("argv", "expected"), [
    (["perf", ""], "error: argument 2 (after perf) is empty; give a file, a name or a value"),
    (["arch", "--config", " "], "error: argument 3 (after --config) is empty"),
    (["perf", "examples/appendix_e.yaml", "--out="], "error: option --out was given an empty "
     "value"),
])
def test_an_empty_argument_is_named_not_read_as_the_current_directory(argv, expected):
    """`perf ""` answered '.: is a directory' (the parser reads an empty path as '.')."""
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-c", "from mosaic.cli.main import main; main()",
                             *argv], capture_output=True, text=True, check=False)
    assert result.returncode == 2 and result.stderr.startswith(expected), result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize("command", [
    ["arch", "--model", "{deep}"], ["report", "{deep}"], ["export", "{deep}", "--to", "megatron"],
    ["compare", "{deep}", "{deep}"], ["law", "predict", "--law", "{deep}", "--q", "4",
                                      "--tokens", "1e10"],
])
def test_json_nested_beyond_the_parser_is_one_line(tmp_path, command):
    """100,000 nested brackets ended in 'internal error (RecursionError ...)' in every JSON
    reader (a trial): one reader, schema_validation.parse_json, says so in one line."""
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    result = runner.invoke(app, [part.replace("{deep}", str(deep)) for part in command])
    assert result.exit_code == 2, result.output
    assert "JSON nested too deeply to read" in result.output


def test_a_truncated_json_file_names_its_position_once(tmp_path):
    """A law file cut inside a string read "not valid JSON (Unterminated string starting at
    at line 2)": json's message ends in "at", and the position was appended with "at"."""
    law = tmp_path / "law.json"
    law.write_text('{"format": "mosaic-law/1",\n "form": "jo')
    result = runner.invoke(app, ["law", "predict", "--law", str(law), "--q", "4",
                                 "--tokens", "1e10"])
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert "not valid JSON (Unterminated string starting at: line 2, column 10)" in text, text


def test_an_endless_device_is_refused_before_it_is_read(monkeypatch):
    """perf /dev/zero grew to 24 GB before the kernel killed it (a trial); then reads stopped
    at the input size limit, after 256 MiB (validate /dev/zero: 22 s, 450 MB). A device is
    refused on its file type, as a size is, before a byte is read."""
    if not Path("/dev/zero").exists():
        pytest.skip("no /dev/zero here")

    opened = Path.open

    def no_open(self, *args, **kwargs):
        assert str(self) != "/dev/zero", "the device was opened"
        return opened(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", no_open)
    for command in ("perf", "validate"):
        result = runner.invoke(app, [command, "/dev/zero"])
        assert result.exit_code == 2, result.output
        assert "error: /dev/zero: is a device, not a YAML file" in result.output


def test_a_pipe_is_still_read_within_the_size_limit(tmp_path):
    """A FIFO (`mosaic perf <(cat job.yaml)`) is not a device: it is read, bounded."""
    import os
    import threading

    from mosaic.schema_validation import read_text

    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    fifo = tmp_path / "job.fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_text("model: {layers: 2}\n"))
    writer.start()
    assert read_text(fifo, "YAML file") == "model: {layers: 2}\n"
    writer.join(10)
    big = tmp_path / "big.fifo"
    os.mkfifo(big)
    writer = threading.Thread(target=lambda: big.write_bytes(b"#" * 101))
    writer.start()
    with pytest.raises(MosaicInputError, match="longer than the limit of 100 bytes"):
        read_text(big, "YAML file", max_bytes=100)
    writer.join(10)


@pytest.mark.parametrize(("command", "line"), [
    (["plan", "--mtbf-gpu-hours", "-5", "--checkpoint-s", "10"],
     "error: --mtbf-gpu-hours: got -5.0; allowed: a number in 1e-06..1000000000"),
    # the Young-Daly model's own check said 'checkpoint time' / 'restart time', no option
    (["plan", "--mtbf-gpu-hours", "1000", "--checkpoint-s", "-60"],
     "error: --checkpoint-s: got -60.0; allowed: a number in (0, 1000000000]"),
    # a checkpoint takes time: 0 is refused, and the range says so (it read '0..1000000000'
    # above 1e9, and 'a finite number > 0' at 0: a trial)
    (["plan", "--mtbf-gpu-hours", "1000", "--checkpoint-s", "0"],
     "error: --checkpoint-s: got 0.0; allowed: a number in (0, 1000000000]"),
    (["plan", "--mtbf-gpu-hours", "1000", "--checkpoint-s", "2e9"],
     "error: --checkpoint-s: got 2000000000.0; allowed: a number in (0, 1000000000] "
     "(a duration of at most ~30 years)"),
    (["plan", "--mtbf-gpu-hours", "1000", "--checkpoint-s", "60", "--restart-s", "-1"],
     "error: --restart-s: got -1.0; allowed: a number in 0..1000000000"),
    (["plan", "--global-batch", "auto", "--batch-rule", "tokens:abc"],
     "error: --batch-rule 'tokens:abc': tokens:N needs a number of tokens per step "
     "(e.g. 4194304 or 4M), got 'abc'"),
    # the rule bounds only a searched batch: at a fixed batch it was dropped without a word
    (["plan", "--batch-rule", "kaplan"],
     "error: --batch-rule kaplan bounds a searched batch; with a fixed --global-batch 1024 it "
     "is not read: give --global-batch auto or MIN:MAX, or drop --batch-rule"),
    (["plan", "--target-loss", "2", "--cheapest-nodes", "0,4"],
     "error: --cheapest-nodes: got 0; allowed: an integer in 1..1048576"),
    (["plan", "--cheapest-days", "3"],
     "error: --cheapest-nodes and --cheapest-days are the budgets of --target-loss; give "
     "--target-loss with them"),
    (["explain", str(EXAMPLES / "appendix_e.yaml"), "--measured-step-time-s", "1e9"],
     "error: --measured-step-time-s: got 1000000000.0; allowed: a number in 1e-06..1000000"),
])
def test_option_errors_name_the_option_and_the_value_as_typed(command, line):
    """A trial's list: the MTBF error showed the value converted to seconds, tokens:abc said
    'got nan', --cheapest-nodes 0 named 'nodes', --cheapest-days alone was ignored, and a
    narrowed range quoted the wider range's reason (~30 years for 1e6 s)."""
    result = runner.invoke(app, command)
    assert result.exit_code == 2
    assert result.output.strip() == line


def test_files_that_are_not_what_they_seem_are_named_for_what_they_are(tmp_path):
    null = tmp_path / "null.yaml"
    null.write_text("~\n")
    result = runner.invoke(app, ["perf", str(null)])
    assert "holds only null ('~')" in result.output  # was 'file is empty'
    config = tmp_path / "config.json"
    config.write_text('{"hidden_size": 4}')
    result = runner.invoke(app, ["arch", "--model", str(config)])
    assert "no model_type field" in result.output  # was 'model_type None is not supported'
    result = runner.invoke(app, ["compare", str(EXAMPLES / "appendix_e.yaml"), str(config)])
    assert "a .json file holding a job's model block is read as a job, any other .json " \
        "file as a plan" in " ".join(result.output.split())


@pytest.mark.parametrize("command, resumes", [("plan", False), ("train", True)])
def test_ctrl_c_says_it_was_interrupted(monkeypatch, capsys, command, resumes):
    """typer turns Ctrl-C into Exit(130), which a non-standalone call returns: mosaic exited
    130 without a word (a trial); it says so, and how to resume for the commands that
    checkpoint."""
    import sys

    import typer

    from mosaic.cli import main as cli_main

    interrupted = typer.Typer()

    @interrupted.command(command)
    def _stop() -> None:
        raise KeyboardInterrupt

    @interrupted.command("other")
    def _other() -> None:  # a second command keeps the command name on the line
        pass

    monkeypatch.setattr(cli_main, "app", interrupted)
    monkeypatch.setattr(sys, "argv", ["mosaic", command])
    with pytest.raises(SystemExit) as exit_info:
        cli_main.main()
    assert exit_info.value.code == 130
    err = capsys.readouterr().err
    assert err.startswith("error: interrupted")
    assert ("resume with:" in err) == resumes
    if resumes:  # the command itself, as the docs promise (a trial read "rerun the same")
        assert f"with: mosaic {command}" in err


@pytest.mark.parametrize("argv, resumes", [
    (["mosaic", "--quiet", "train", "job.yaml"], True),  # global flags hoisted to the front
    (["mosaic", "ladder", "run", "grid.yaml"], True),
    (["mosaic", "ladder", "fit", "folder"], False),  # no checkpoint to resume (a review)
])
def test_the_resume_hint_follows_the_command_words(monkeypatch, capsys, argv, resumes):
    import sys

    from mosaic.cli import main as cli_main

    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit):
        cli_main._interrupted()
    err = capsys.readouterr().err
    assert ("resume with:" in err) == resumes
    # a train interrupted before its first checkpoint starts again (a trial read "resume
    # from the last checkpoint" where none had been written)
    assert ("starts again where none was written" in err) == (argv[-2] == "train")


def test_an_interrupted_bench_says_a_rerun_measures_the_rest(monkeypatch, capsys):
    """`mosaic bench` keeps the cases it measured: Ctrl-C says a rerun measures the rest
    (a trial got a bare 'error: interrupted')."""
    import sys

    from mosaic.cli import main as cli_main

    monkeypatch.setattr(sys, "argv", ["mosaic", "bench", "gemm", "--out", "b"])
    with pytest.raises(SystemExit):
        cli_main._interrupted()
    err = capsys.readouterr().err
    assert "rerun mosaic bench gemm --out b to measure the rest" in err
    # `bench compare` and a dry run measure nothing: no such hint (a review)
    for argv in (["mosaic", "bench", "compare", "a", "b"],
                 ["mosaic", "bench", "gemm", "--dry-run"]):
        monkeypatch.setattr(sys, "argv", argv)
        with pytest.raises(SystemExit):
            cli_main._interrupted()
        assert "measure the rest" not in capsys.readouterr().err


def test_a_note_prints_as_a_note_line_and_a_warning_as_a_warning_line(capsys) -> None:
    """The library says what a plan leaves out with MosaicNote (plan.inputs); the CLI's
    warning handler prints it as `note:` and other mosaic warnings as `warning:`."""
    from mosaic.cli import warning_lines
    from mosaic.errors import MosaicNote, MosaicWarning

    warning_lines.reset()
    warning_lines.warning_line(MosaicNote("recipes also set routing"), MosaicNote, "x.py", 1)
    warning_lines.warning_line(MosaicWarning("slow"), MosaicWarning, "x.py", 2)
    warning_lines.flush(0)
    assert capsys.readouterr().err.splitlines() == ["note: recipes also set routing",
                                                    "warning: slow"]


def test_ladder_fit_on_a_folder_of_training_runs_says_to_collect_them(tmp_path):
    """`ladder fit runs` on a folder of `mosaic train` outputs said only 'runs/runs.csv:
    does not exist' (a trial)."""
    for name in ("q2-e4", "q3-e4"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "result.json").write_text("{}")
    result = runner.invoke(app, ["ladder", "fit", str(tmp_path), "--out",
                                 str(tmp_path / "law.json")])
    assert result.exit_code == 2
    text = " ".join(result.output.split())
    assert "holds 2 `mosaic train` run(s) (q2-e4, q3-e4)" in text
    assert f"mosaic ladder collect {tmp_path} --out {tmp_path / 'runs.csv'}" in text


@pytest.mark.parametrize("argv, line", [
    (["plan", "--days", "21d"], "error: Invalid value for '--days': '21d': input should be a "
                                "valid number, unable to parse string as a number"),
    (["plan", "--nodes=4x"], "error: Invalid value for '--nodes': '4x': input should be a "
                             "valid integer, unable to parse string as an integer"),
    (["law", "predict", "--tokens", "abc"], "error: Invalid value for '--tokens': 'abc': "
                                            "input should be a valid number"),
])
def test_an_unparsable_number_is_echoed_as_typed(monkeypatch, capsys, argv, line):
    """`mosaic plan --days 21d` said "Invalid value for '--days': Input should be a valid
    number, ..." without the 21d it refused (a trial); typer's pydantic coercion of every
    numeric option goes through the entry point's one usage-error line."""
    import sys

    from mosaic.cli import main as cli_main

    monkeypatch.setattr(sys, "argv", ["mosaic", *argv])
    with pytest.raises(SystemExit) as exit_info:
        cli_main.main()
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(line) and len(err.splitlines()) == 1



LONG = "x" * 5000


@pytest.mark.parametrize("call", [
    lambda: Sharding.parse(LONG),
    lambda: Checkpointing.parse(LONG),
    lambda: normalize_dtype(LONG),
    lambda: check_range("nodes", LONG, "nodes"),
    lambda: check_release(LONG, "--release"),
    lambda: bus_factor(LONG, 8),
], ids=["sharding", "checkpointing", "dtype", "range", "release", "collective"])
def test_a_long_value_in_a_library_message_is_shown_by_its_start_and_length(call):
    """These messages echoed a value the user typed whole (`{value!r}`); mosaic.errors.shown
    names a long one by its start and length."""
    with pytest.raises(MosaicInputError) as refused:
        call()
    message = str(refused.value)
    assert "(5,000 characters)" in message and len(message) < 400, message[:200]


def test_a_long_value_on_the_command_line_is_shown_by_its_start_and_length(tmp_path):
    """`--set` and an HF config's hidden_act were echoed whole (a 5,000-character line)."""
    config = json.loads((EXAMPLES / "hf" / "llama-3-8b.json").read_text())
    config["hidden_act"] = LONG
    (tmp_path / "config.json").write_text(json.dumps(config))
    for args in (["perf", str(EXAMPLES / "q12_moe.yaml"), "--set", LONG],
                 ["arch", "--model", str(tmp_path / "config.json")],
                 ["plan", "--days", "3", "--batch-rule", LONG]):
        result = runner.invoke(app, args)
        assert result.exit_code == 2 and "(5,000 characters)" in result.output, args
        assert len(result.output) < 600, result.output[:200]


def test_an_unparsable_long_number_is_shown_by_its_start_and_length(monkeypatch, capsys):
    """The usage-error line echoes the value as typed: a 5,000-character one whole."""
    import sys

    from mosaic.cli import main as cli_main

    monkeypatch.setattr(sys, "argv", ["mosaic", "plan", "--days", LONG])
    with pytest.raises(SystemExit):
        cli_main.main()
    err = capsys.readouterr().err.strip()
    assert "(5,000 characters)" in err and len(err) < 400, err[:200]


@pytest.mark.parametrize("command", [["perf"], ["layouts"]])
def test_a_ladder_grid_given_as_a_perf_job_is_named(command):
    """`bench gemm --job examples/ladder_tiny.yaml` (and perf, layouts) said only "unknown
    block(s) ['ladder', 'recipe']" (a trial); the grid is named, and how to predict a rung."""
    grid = EXAMPLES / "ladder_tiny.yaml"
    result = runner.invoke(app, [*command, str(grid)])
    assert result.exit_code == 2
    text = " ".join(result.output.split())
    assert "a ladder grid (blocks recipe and ladder: `mosaic ladder run`), not a job" in text
    assert "--perf-job perf.yaml" in text and "unknown block" not in text


def test_under_torchrun_rank_zero_alone_says_to_rerun_torchrun(monkeypatch, capsys):
    """`torchrun ... $(which mosaic) ladder run` interrupted: every rank said "resume with:
    mosaic ladder run ...", a command without torchrun (a trial); rank 0 alone says it, with
    torchrun and the script torchrun ran."""
    import sys

    from mosaic.cli import main as cli_main

    argv = ["/venv/bin/mosaic", "ladder", "run", "grid.yaml", "--out", "d"]
    monkeypatch.setattr(sys, "argv", argv)
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")
    for rank, said in (("1", ""), ("0", "error: interrupted; resume with: torchrun ... "
                                        "/venv/bin/mosaic ladder run grid.yaml --out d (")):
        monkeypatch.setenv("RANK", rank)
        with pytest.raises(SystemExit) as exit_info:
            cli_main._interrupted()
        assert exit_info.value.code == 130
        err = capsys.readouterr().err
        assert err.startswith(said) and (err == "") == (rank == "1")
