"""Start-up stays light: the root command imports no numerical library, and the lazy
command table matches the commands the modules really register."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mosaic.cli import main as cli_main

HEAVY = ("numpy", "scipy", "pandas", "matplotlib", "torch", "plotly", "ray", "pydantic")


def _imported_after(code: str) -> set[str]:
    probe = f"{code}\nimport sys\nprint(' '.join(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True)
    return set(done.stdout.split())


def test_help_imports_no_numerical_library():
    code = ("import sys\nfrom mosaic.cli.main import main\nsys.argv=['mosaic','--help']\n"
            "try:\n    main()\nexcept SystemExit:\n    pass")
    loaded = _imported_after(code)
    assert not [name for name in HEAVY if name in loaded]


def test_arch_imports_no_scipy_pandas_matplotlib():
    code = ("import sys\nfrom mosaic.cli.main import main\n"
            "sys.argv=['mosaic','arch','--q','4','--json']\n"
            "try:\n    main()\nexcept SystemExit:\n    pass")
    loaded = _imported_after(code)
    assert not [name for name in ("scipy", "pandas", "matplotlib", "torch") if name in loaded]


@pytest.mark.parametrize("name", sorted(cli_main.COMMANDS))
def test_lazy_table_matches_registered_command(name):
    module_name, help_line = cli_main.COMMANDS[name]
    commands = cli_main._load_commands(module_name)
    assert name in commands
    command = commands[name]
    real_help = (command.help or "").strip().splitlines()[0]
    assert real_help == help_line


def test_every_registered_command_is_listed():
    for module_name in {module for module, _ in cli_main.COMMANDS.values()}:
        for name in cli_main._load_commands(module_name):
            assert cli_main.COMMANDS.get(name, ("",))[0] == module_name, name


def test_unknown_command_is_one_line_exit_2(capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["mosaic", "arc"])
    with pytest.raises(SystemExit) as stop:
        cli_main.main()
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: No such command 'arc'. Did you mean 'arch'?"]


def test_internal_error_is_one_line_exit_1(capsys, monkeypatch):
    def boom(*args, **kwargs):
        raise RuntimeError("kaput")

    monkeypatch.setattr(cli_main, "app", boom)
    monkeypatch.delenv("MOSAIC_DEBUG", raising=False)
    with pytest.raises(SystemExit) as stop:
        cli_main.main()
    assert stop.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "RuntimeError: kaput" in err[0]


def test_perf_of_a_job_without_tables_imports_no_pandas_or_scipy_stats():
    """`mosaic perf job.yaml` took 3.1 s, two thirds of it importing scipy.stats (read
    only by the accuracy report's Spearman) and pandas (read only by measured tables)."""
    code = ("import sys\nfrom mosaic.cli.main import main\n"
            "sys.argv=['mosaic','perf','examples/appendix_e.yaml','--json']\n"
            "try:\n    main()\nexcept SystemExit as stop:\n    assert not stop.code, stop.code")
    loaded = _imported_after(code)
    assert not [name for name in ("scipy.stats", "pandas", "matplotlib", "torch")
                if name in loaded]


@pytest.mark.parametrize("command", ["validate", "calibrate"])
def test_help_of_a_fitting_command_imports_no_scipy(command):
    """`mosaic validate --help` took 1.7 s: evaluate.calibrate imported scipy.optimize
    (1.2 s) at the top for the one function that fits."""
    code = ("import sys\nfrom mosaic.cli.main import main\n"
            f"sys.argv=['mosaic','{command}','--help']\n"
            "try:\n    main()\nexcept SystemExit as stop:\n    assert not stop.code, stop.code")
    assert "scipy.optimize" not in _imported_after(code)
