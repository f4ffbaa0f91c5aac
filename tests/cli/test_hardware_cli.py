"""`mosaic hardware list|show`, user catalogs (--catalog), and tables off a terminal."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mosaic.cli.contract import json_problems
from mosaic.cli.main import app
from mosaic.hardware import shipped_catalog, use_catalog

ROOT = Path(__file__).resolve().parents[2]
JOB = ROOT / "examples" / "appendix_e.yaml"
runner = CliRunner()

USER_CATALOG = """
devices:
  - name: X1000
    aliases: [x1k]
    vendor: Example
    peak_flops_per_s:
      bf16: {value: 1.0e+15, source: "made up for a test"}
    hbm_bytes: {value: 64.0e+9, source: "made up"}
    hbm_bw_bytes_per_s: {value: 4.0e+12, source: "made up"}
    scale_up_bw_bytes_per_s: {value: 400.0e+9, source: "made up"}
  - name: B200
    vendor: NVIDIA
    peak_flops_per_s:
      bf16: {value: 2.25e+15, source: "as shipped"}
    hbm_bytes: {value: 100.0e+9, source: "a smaller partition, for the test"}
    hbm_bw_bytes_per_s: {value: 7.7e+12, source: "as shipped"}
    scale_up_bw_bytes_per_s: {value: 900.0e+9, source: "as shipped"}
systems:
  - name: x1k-node
    device: x1k
    gpus_per_node: {value: 4, source: "made up"}
    scale_up_domain_gpus: {value: 4, source: "made up"}
    nics_per_node: {value: 4, source: "made up"}
    nic_bw_bytes_per_s: {value: 50.0e+9, source: "400 Gb/s"}
    scale_out_fabric: Ethernet 400G
    scale_up_latency_s: {value: 3.4e-6, source: "NCCL tuning model"}
    scale_out_latency_s: {value: 14.0e-6, source: "NCCL tuning model"}
"""


@pytest.fixture(autouse=True)
def _shipped_catalog_after():
    yield
    use_catalog()


@pytest.fixture
def user_catalog(tmp_path) -> Path:
    path = tmp_path / "my_hw.yaml"
    path.write_text(USER_CATALOG)
    return path


def run(*args: str) -> dict:
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_list_shows_the_shipped_catalog():
    doc = run("hardware", "list")
    assert [d["name"] for d in doc["devices"]] == list(shipped_catalog().devices)
    assert {d["origin"] for d in doc["devices"] + doc["systems"]} == {"shipped"}
    b200 = next(d for d in doc["devices"] if d["name"] == "B200")
    assert b200["peak_flops_per_s"]["bf16"] == 2.25e15


def test_a_devices_unstated_optional_numbers_say_why_they_are_null():
    """hardware list --json printed sfu_exp2_per_s null for every device with no reason
    beside it (the CLI contract: no bare null where a number belongs)."""
    doc = run("hardware", "list")
    assert not json_problems(doc)
    a100 = next(d for d in doc["devices"] if d["name"] == "A100-SXM-80GB")
    assert a100["sfu_exp2_per_s"] is None and "sfu_exp2_per_s" in a100["unstated_note"]


def test_user_catalog_adds_and_replaces(user_catalog):
    doc = run("hardware", "list", "--catalog", str(user_catalog))
    origins = {d["name"]: d["origin"] for d in doc["devices"] + doc["systems"]}
    assert origins["X1000"] == "user" and origins["x1k-node"] == "user"
    assert origins["B200"] == "user (replaces shipped)"
    assert origins["H100-SXM-80GB"] == "shipped"
    # shipped systems holding B200 now use the user's B200
    p6 = next(s for s in doc["systems"] if s["name"] == "p6-b200.48xlarge")
    assert p6["device"] == "B200"
    show = run("hardware", "show", "p6-b200", "--catalog", str(user_catalog))
    assert show["kind"] == "system" and show["origin"] == "shipped (with your device)"
    device = run("hardware", "show", "b200", "--catalog", str(user_catalog))
    assert device["hbm_bytes"] == 100e9
    assert device["sources"]["hbm_bytes"] == "a smaller partition, for the test"


def test_perf_on_a_user_system(user_catalog):
    base = run("perf", str(JOB))
    smaller = run("perf", str(JOB), "--catalog", str(user_catalog))
    shipped_hbm = shipped_catalog().device("B200").hbm_bytes
    assert base["memory_capacity_gib"] == pytest.approx(shipped_hbm / 2**30)
    assert smaller["memory_capacity_gib"] == pytest.approx(100e9 / 2**30)
    # the root option and the environment variable do the same for any command
    root = runner.invoke(app, ["--catalog", str(user_catalog), "perf", str(JOB),
                               "--set", "hardware.system=x1k-node", "--json"])
    assert root.exit_code == 0, root.output
    doc = json.loads(root.stdout)
    assert doc["hardware"]["system"] == "x1k-node" and doc["hardware"]["devices"] == 512
    assert doc["memory_capacity_gib"] == pytest.approx(64e9 / 2**30)
    use_catalog()
    env = runner.invoke(app, ["hardware", "show", "x1k", "--json"],
                        env={"MOSAIC_CATALOG": str(user_catalog)})
    assert env.exit_code == 0, env.output
    assert json.loads(env.stdout)["name"] == "X1000"


def test_mosaic_catalog_names_several_files_as_path_does(tmp_path):
    """MOSAIC_CATALOG was split on spaces (click's default for a repeatable option): a file
    under "my hw/" was not found and "a.yaml:b.yaml" was read as one file name. It takes
    os.pathsep-separated files, as PATH does."""
    folder = tmp_path / "my hw"
    folder.mkdir()
    first, second = folder / "a.yaml", folder / "b.yaml"
    first.write_text(USER_CATALOG)
    second.write_text(USER_CATALOG.replace("X1000", "X2000").replace("x1k", "x2k"))
    both = os.pathsep.join([str(first), str(second)])
    for argv in (["hardware", "list", "--json"], ["perf", str(JOB), "--json"]):
        result = runner.invoke(app, argv, env={"MOSAIC_CATALOG": both})
        assert result.exit_code == 0, result.output
    listed = runner.invoke(app, ["hardware", "list", "--json"], env={"MOSAIC_CATALOG": both})
    names = {device["name"] for device in json.loads(listed.stdout)["devices"]}
    assert {"X1000", "X2000"} <= names
    # the command line's repeatable option is unchanged
    typed = runner.invoke(app, ["--catalog", str(first), "hardware", "list", "--json",
                                "--catalog", str(second)], env={"MOSAIC_CATALOG": None})
    assert typed.exit_code == 0, typed.output
    assert {"X1000", "X2000"} <= {d["name"] for d in json.loads(typed.stdout)["devices"]}


def test_invalid_catalog_is_one_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(USER_CATALOG.replace("value: 64.0e+9", "value: -1"))
    result = runner.invoke(app, ["hardware", "list", "--catalog", str(path)])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1
    assert "device 'X1000' (entry 1): field 'hbm_bytes.value'" in lines[0]


def test_a_broken_root_catalog_stops_only_the_commands_that_read_hardware(tmp_path):
    """A malformed MOSAIC_CATALOG stopped `mosaic arch` and `law` commands, which read no
    hardware (a fuzz trial); the catalog is read at its first use."""
    path = tmp_path / "bad.yaml"
    path.write_text("devices: [\n")
    arch = runner.invoke(app, ["--catalog", str(path), "arch", "--q", "8", "--json"])
    assert arch.exit_code == 0, arch.output
    listed = runner.invoke(app, ["--catalog", str(path), "hardware", "list"])
    assert listed.exit_code == 2 and "malformed YAML" in listed.output
    assert runner.invoke(app, ["hardware", "list"]).exit_code == 0  # the next run: shipped


def test_a_catalog_file_the_environment_names_says_so_in_its_error(tmp_path):
    """A MOSAIC_CATALOG left set to a missing file stopped `mosaic perf JOB` with '...:
    hardware catalog file not found', a file the command line never named."""
    missing = str(tmp_path / "gone.yaml")
    for argv in (["perf", str(JOB)], ["hardware", "list"]):
        result = runner.invoke(app, argv, env={"MOSAIC_CATALOG": missing})
        assert result.exit_code == 2, result.output
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and missing in lines[0], lines
        assert "named by the MOSAIC_CATALOG environment variable" in lines[0], lines
    # named on the command line, the file is the user's own words: no origin to add
    typed = runner.invoke(app, ["--catalog", missing, "hardware", "list"],
                          env={"MOSAIC_CATALOG": None})
    assert typed.exit_code == 2 and "MOSAIC_CATALOG" not in typed.output, typed.output
    assert runner.invoke(app, ["hardware", "list"]).exit_code == 0  # the next run: shipped


def test_a_plan_json_named_by_mosaic_catalog_is_said_to_be_one(tmp_path):
    """MOSAIC_CATALOG set to a plan's JSON printed one long line of "Extra inputs are not
    permitted", once for each of its keys (a trial)."""
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"envelope": {"nodes": 4}, "search_space": {},
                                "candidates": [], "optimum": {}, "counts": {}}))
    result = runner.invoke(app, ["hardware", "list"], env={"MOSAIC_CATALOG": str(plan)})
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "Extra inputs" not in lines[0], lines
    assert "the file that `mosaic plan --json` writes, not a hardware catalog" in lines[0]
    assert "named by the MOSAIC_CATALOG environment variable" in lines[0]


def test_unknown_names_point_to_a_command_that_exists():
    result = runner.invoke(app, ["perf", str(JOB), "--set", "hardware.system=nope"])
    assert result.exit_code == 2
    assert "`mosaic hardware list`" in result.output
    assert runner.invoke(app, ["hardware", "list"]).exit_code == 0
    missing = runner.invoke(app, ["hardware", "show", "nope"])
    assert missing.exit_code == 2
    assert "unknown device or system 'nope'; `mosaic hardware list`" in missing.output


@pytest.mark.parametrize(("command", "typed", "meant"), [
    (["hardware", "show"], "H1OO", "'H100'"),  # letter O for zero
    (["hardware", "show"], "Hl00", "'H100'"),  # letter l for one
    (["hardware", "show"], "MI3OOX", "'MI300X'"),
    (["perf", str(JOB), "--set"], "hardware.system=DGX-H1OO", "'DGX-H100'"),
])
def test_letters_typed_for_digits_get_a_suggestion(command, typed, meant):
    """'H1OO' (letter O) got no "did you mean" where 'DGX-H10' got one (a trial): its
    difflib ratio to 'h100' was 0.5, under the 0.6 cutoff. Both the show command and the
    catalog lookup suggest through one function (catalog.close_names)."""
    result = runner.invoke(app, [*command, typed])
    assert result.exit_code == 2
    assert f"did you mean {meant}" in result.output


@pytest.mark.parametrize(("command", "prefix"), [
    (["hardware", "show"], ""), (["stacks", "show"], ""),
    (["perf", str(JOB), "--set"], "hardware.system="),
    (["perf", str(JOB), "--set"], "performance.stack="),
    (["perf", str(JOB), "--set"], "parallelism.dispatcher="),
])
def test_a_long_value_is_not_echoed_whole(command, prefix):
    """`mosaic hardware show` with a 5,000-character name printed all of it back (a trial):
    a message shows the start of a long value and its length (errors.shown)."""
    result = runner.invoke(app, [*command, prefix + "x" * 5000])
    assert result.exit_code == 2
    assert "(5,000 characters)" in result.output and len(result.output) < 1000


def test_tables_are_not_cut_when_redirected():
    """Off a terminal rich assumed 80 columns and cut names and numbers with '…'."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    code = "from mosaic.cli.main import main; main()"
    out = subprocess.run([sys.executable, "-c", code, "hardware", "list"],
                         capture_output=True, text=True, env=env, check=True).stdout
    assert "…" not in out
    for name in ("H100-SXM-96GB-500W", "p6-b200.48xlarge", "GB200-NVL72"):
        assert name in out
    perf = subprocess.run([sys.executable, "-c", code, "perf", str(JOB)],
                          capture_output=True, text=True, env=env, check=True).stdout
    assert "…" not in perf
    assert "tp=1, pp=16, vpp=1, cp=1, dp=32, ep=8, etp=1, micro_batch=2" in perf
    # prose values (sources) wrap at 120 columns instead of padding every line to the
    # longest (2,826 columns for B200), and nothing of them is lost
    shown = subprocess.run([sys.executable, "-c", code, "hardware", "show", "B200"],
                           capture_output=True, text=True, env=env, check=True).stdout
    assert max(len(line) for line in shown.splitlines()) <= 120
    assert "…" not in shown
    flat = " ".join(part.strip(" │") for line in shown.splitlines()
                    for part in line.split("│")[2:3])
    assert "stas00/ml-engineering compute/accelerator/README.md MAMF table" in flat


def test_plan_on_a_user_gpu_through_the_root_option(user_catalog):
    """`--gpu X1000` finds the user's node type: the catalog in use, not only the shipped one."""
    result = runner.invoke(app, ["--catalog", str(user_catalog), "plan", "--gpu", "x1k",
                                 "--nodes", "16", "--days", "20", "--q", "8", "--experts", "8",
                                 "--top-k", "1", "--split-factor", "1", "--json"])
    assert result.exit_code == 0, result.output
    envelope = json.loads(result.stdout)["envelope"]
    assert (envelope["system"], envelope["gpu"], envelope["n_devices"]) == \
        ("x1k-node", "X1000", 64)
    assert envelope["hbm_bytes_per_device"] == 64e9


def test_a_device_named_by_a_shipped_alias_replaces_it_for_the_shipped_systems(tmp_path):
    """docs/hardware.md: a user entry with a shipped name *or alias* replaces the shipped
    entry. A user `H100` (an alias of H100-SXM-80GB) with a derated bf16 peak: the shipped
    systems that name H100-SXM-80GB run on it, and its full name still finds it (found by a
    new-user trial: every command failed with "unknown device 'H100-SXM-80GB'")."""
    path = tmp_path / "derated.yaml"
    path.write_text("""
devices:
  - name: H100
    vendor: NVIDIA
    peak_flops_per_s:
      bf16: {value: 9.0e+14, source: "a derated H100, for the test"}
    hbm_bytes: {value: 85.2e+9, source: "as shipped"}
    hbm_bw_bytes_per_s: {value: 3.35e+12, source: "as shipped"}
    scale_up_bw_bytes_per_s: {value: 450.0e+9, source: "as shipped"}
""")
    listed = run("hardware", "list", "--catalog", str(path))
    systems = {s["name"]: s for s in listed["systems"]}
    assert systems["DGX-H100"]["device"] == "H100"
    devices = {d["name"]: d for d in listed["devices"]}
    assert devices["H100"]["origin"] == "user (replaces shipped)"
    assert "H100-SXM-80GB" not in devices
    device = run("hardware", "show", "H100-SXM-80GB", "--catalog", str(path))
    assert device["name"] == "H100" and device["peak_flops_per_s"]["bf16"] == 9.0e14


@pytest.mark.parametrize("field, value, shown, error", [
    ("kernel_fit", "b200", "B200", None),  # names match case-insensitively (docs/hardware.md)
    ("kernel_fit", "B200-SXM", "B200", None),  # an alias: the fits that device uses
    ("kernel_fit", "gb200", "B200", None),  # a GB200 uses the B200's fits, so this does too
    ("kernel_fit", "a100-sxm-80gb", "A100", None),
    ("kernel_fit", "X99", None, "my_hw.yaml: device 'X1000': field 'kernel_fit': unknown "
                                "device 'X99'"),
    ("architecture", "Hopper", "hopper", None),
    ("architecture", "rubin", None, "field 'architecture': Input should be 'ampere'"),
])
def test_kernel_fit_and_architecture_are_checked(tmp_path, field, value, shown, error):
    """Before, `kernel_fit: b200` (or any other spelling of a catalog device than the four
    fit-table keys) silently ran the analytical kernels, and an unknown fit or generation was
    accepted without a word (found by two new-user trials)."""
    path = tmp_path / "my_hw.yaml"
    path.write_text(USER_CATALOG.replace("    vendor: Example\n",
                                         f"    vendor: Example\n    {field}: {value}\n"))
    result = runner.invoke(app, ["hardware", "show", "X1000", "--catalog", str(path), "--json"])
    if error is None:
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)[field] == shown
    else:
        assert result.exit_code == 2 and error in result.output


def test_the_root_and_the_command_catalogs_merge(user_catalog, tmp_path):
    """`mosaic --catalog A cmd --catalog B`: B's system names A's device (before, the
    command's option replaced the root's, and B's system was refused), and the next
    in-process call without --catalog runs on the shipped catalog again."""
    systems = tmp_path / "systems.yaml"
    systems.write_text(USER_CATALOG[USER_CATALOG.index("systems:"):].replace(
        "name: x1k-node", "name: x1k-node-b"))
    devices = tmp_path / "devices.yaml"
    devices.write_text(USER_CATALOG[:USER_CATALOG.index("systems:")])
    result = runner.invoke(app, ["--catalog", str(devices), "hardware", "show", "x1k-node-b",
                                 "--catalog", str(systems), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["device"] == "X1000"
    after = runner.invoke(app, ["hardware", "show", "X1000"])
    assert after.exit_code == 2 and "unknown device or system 'X1000'" in after.output


@pytest.mark.parametrize("command", [["export", str(JOB), "--to", "yaml"],
                                     ["plan", "--help"], ["sweep", "days", "--help"]])
def test_every_command_reading_hardware_takes_catalog(command, user_catalog):
    if command[-1] == "--help":
        assert "--catalog" in runner.invoke(app, command).output
        return
    result = runner.invoke(app, [*command, "--catalog", str(user_catalog)])
    assert result.exit_code == 0, result.output


def test_validate_lists_a_record_its_catalog_cannot_predict_and_goes_on(user_catalog):
    """The user catalog's B200 has no fp8 peak: the example's MXFP8 B200 record cannot be
    predicted and is listed with the skipped records; the others are scored (before, the
    whole command stopped at that record)."""
    result = runner.invoke(app, ["validate", str(ROOT / "examples" / "runs_example.yaml"),
                                 "--catalog", str(user_catalog), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    (skipped,) = [s for s in doc["skipped"] if "cannot be predicted" in s["reason"]]
    assert skipped["id"] == "example-bridge-qwen3-30b-a3b-b200-8-mxfp8"
    assert "no fp8 peak" in skipped["reason"]
    assert len(doc["runs"]) == 3


def test_calibrate_skips_a_record_its_catalog_cannot_predict_as_validate_does(
        user_catalog, tmp_path):
    """The same record stops no fit either: `calibrate` lists it with validate's reason and
    fits the others (a trial's nvfp4 record on H100s stopped calibrate with an error naming
    no record), and --strict refuses it."""
    runs = str(ROOT / "examples" / "runs_example.yaml")
    validated = json.loads(runner.invoke(app, ["validate", runs, "--catalog",
                                               str(user_catalog), "--json"]).stdout)
    out = tmp_path / "mine.yaml"
    result = runner.invoke(app, ["calibrate", runs, "--catalog", str(user_catalog), "--out",
                                 str(out), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["skipped"] == validated["skipped"]
    assert doc["n_runs"] == len([r for r in validated["runs"] if not r["oom"]])
    assert out.exists()
    strict = runner.invoke(app, ["calibrate", runs, "--catalog", str(user_catalog), "--out",
                                 str(tmp_path / "strict.yaml"), "--strict"])
    assert strict.exit_code == 2
    assert "example-bridge-qwen3-30b-a3b-b200-8-mxfp8" in strict.output


def test_calibrate_with_only_unpredictable_records_left_counts_the_excluded(
        user_catalog, tmp_path):
    """Where --exclude leaves only records the model cannot predict, the 'no usable run
    record' error counts the runs excluded on request, as validate's does (it said 0)."""
    runs = str(ROOT / "examples" / "runs_example.yaml")
    others = ("example-torchtitan-llama3.1-8b-h100-8-fsdp,"
              "example-bridge-deepseekv3-gb200-256-bf16,"
              "example-constructed-llama3.1-8b-h100-8-ddp-oom")
    result = runner.invoke(app, ["calibrate", runs, "--catalog", str(user_catalog), "--out",
                                 str(tmp_path / "c.yaml"), "--exclude", others])
    assert result.exit_code == 2
    assert "no usable run record (1 skipped, 3 excluded)" in result.output
    assert "example-bridge-qwen3-30b-a3b-b200-8-mxfp8" in result.output


def test_a_misspelt_catalog_field_gets_a_suggestion(tmp_path):
    path = tmp_path / "typo.yaml"
    path.write_text(USER_CATALOG.replace("    scale_up_bw_bytes_per_s: {value: 400.0e+9",
                                         "    host_link_byte_per_s: {value: 1.0e+9, source: x}\n"
                                         "    scale_up_bw_bytes_per_s: {value: 400.0e+9"))
    result = runner.invoke(app, ["hardware", "list", "--catalog", str(path)])
    assert result.exit_code == 2
    assert "field 'host_link_byte_per_s'" in result.output
    assert "did you mean 'host_link_bw_bytes_per_s'?" in result.output


def test_a_bare_number_in_a_catalog_says_how_numbers_are_written(tmp_path):
    path = tmp_path / "bare.yaml"
    path.write_text(USER_CATALOG.replace(
        'bf16: {value: 1.0e+15, source: "made up for a test"}', "bf16: 1.0e+15"))
    result = runner.invoke(app, ["hardware", "list", "--catalog", str(path)])
    assert result.exit_code == 2
    assert "field 'peak_flops_per_s.bf16': every number is written {value: NUMBER" in (
        result.output)


def test_a_misspelt_top_level_key_gets_a_suggestion(tmp_path):
    path = tmp_path / "top.yaml"
    path.write_text(USER_CATALOG.replace("devices:", "device:", 1))
    result = runner.invoke(app, ["hardware", "list", "--catalog", str(path)])
    assert result.exit_code == 2 and "did you mean 'devices'?" in result.output



def test_show_reads_each_number_in_its_unit():
    """Raw SI values (1.501e+11, 5e+10) beside their reading: GiB of memory, Gb/s of a NIC,
    GB/s of NVLink, TFLOP/s of a peak (a trial read raw bytes)."""
    device = runner.invoke(app, ["hardware", "show", "H200"], terminal_width=400)
    system = runner.invoke(app, ["hardware", "show", "DGX-H200"], terminal_width=400)
    assert device.exit_code == 0 and system.exit_code == 0
    for text in ("1.501e+11 = 139.8 GiB", "bf16 9.894e+14 = 989 TFLOP/s",
                 "4.5e+11 = 450 GB/s"):
        assert text in device.stdout, text
    assert "5e+10 = 400 Gb/s" in system.stdout and "3.4e-06 = 3.4 us" in system.stdout


def test_validate_names_the_profile_and_catalog_that_scored_its_runs(user_catalog):
    """validate --json said neither which calibration nor which hardware catalog scored
    the runs (a trial); a run without --catalog names no catalog."""
    runs = str(ROOT / "examples" / "runs_example.yaml")
    document = run("validate", runs, "--catalog", str(user_catalog))
    assert (document["calibration"], document["catalog"]) == ("default", [str(user_catalog)])
    use_catalog()
    plain = run("validate", runs, "--calibration", "paper-p6b200")
    assert plain["calibration"] == "paper-p6b200" and "catalog" not in plain
