"""Help a new user reads: the root help names a starting point, on/off flags show no value
placeholder, each --exclude says what it leaves runs out of, and calibrate's constants table
has one row per key of a dict-valued constant."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from mosaic.cli.main import app, reflowed_help
from mosaic.cli.validate_cmd import constant_rows

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
runner = CliRunner()


def _help(*args: str) -> str:
    result = runner.invoke(app, [*args, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return result.output


def test_root_help_gives_the_usual_flow():
    text = " ".join(_help().split())
    assert "Usual flow: `mosaic plan" in text
    for word in ("`perf`", "`layouts`", "`explain`", "`export`", "docs/schema.md"):
        assert word in text


def test_flags_take_no_value_placeholder():
    for command in ((), ("perf",), ("layouts",), ("explain",), ("plan",), ("validate",)):
        text = _help(*command)
        assert "<bool>" not in text, command
        assert "--help" in text
    perf = _help("perf")
    json_line = next(line for line in perf.splitlines() if "--json" in line)
    assert "machine-readable output" in json_line and "<" not in json_line
    assert "<path>" in perf  # options that take a value keep their placeholder


def test_exclude_help_says_what_is_left_out():
    validate = next(line for line in _help("validate").splitlines() if "--exclude" in line)
    calibrate = next(line for line in _help("calibrate").splitlines() if "--exclude" in line)
    assert validate.rstrip(" │").endswith("to leave out (report)")
    assert "(fit and report)" in calibrate


def test_dict_constants_are_one_row_per_key():
    # an optimiser's residue at the bound of zero reads as zero, not as a value that moved
    assert constant_rows("chi_pp", 8.75114e-13) == [("chi_pp", "~0")]
    assert constant_rows("chi_a2a", 0.0123456789) == [("chi_a2a", "0.0123457")]
    assert constant_rows("stack_overhead", {"torchtitan": 1.3457351989, "default": 1.0}) == [
        ("stack_overhead[torchtitan]", "1.34574"), ("stack_overhead[default]", "1")]


def test_calibrate_table_keeps_the_key_in_brackets(tmp_path):
    result = runner.invoke(app, ["calibrate", str(EXAMPLES / "runs_example.yaml"), "--cv",
                                 "none", "--out", str(tmp_path / "c.yaml")], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "stack_overhead[default]" in result.stdout
    widest = max(len(line) for line in result.stdout.splitlines())
    assert widest < 100, widest


def test_help_paragraphs_wrap_at_the_terminal_not_at_the_source():
    """The export help's third paragraph breaks after "MoE" in the source; wide, it does not."""
    lines = [line.strip(" │") for line in _help("export").splitlines()]
    paragraph = next(line for line in lines if line.startswith("The architecture, parallel"))
    assert "recompute and MoE dispatcher are spelled" in paragraph


def test_reflowed_help_keeps_list_items_and_verbatim_blocks():
    text = "First line.\n\nJoined\n  words.\n\n- item one\n  continued\n- item two\n\n\bkept\nas is"
    assert reflowed_help(text) == (
        "First line.\n\nJoined words.\n\n- item one continued\n- item two\n\n\bkept\nas is")
