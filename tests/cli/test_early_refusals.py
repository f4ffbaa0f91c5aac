"""Refused before any work: an optional extra that is not installed (one line naming how
to install it from the checkout, quoted for every shell; a trial's plan --html searched for
14 s, then asked for `pip install mosaic[report]`, which zsh rejects and which PyPI resolves
to another project), and a window no geometry can train in even at full peak."""

import sys

from typer.testing import CliRunner

import mosaic.cli.plan_cmd as plan_cmd
from mosaic.cli.main import app
from mosaic.errors import install_hint

runner = CliRunner()


def test_the_hint_is_the_quoted_editable_install():
    assert install_hint("report") == "pip install -e '.[report]' in the mosaic checkout"


def test_plan_html_without_plotly_stops_before_the_search(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "plotly", None)  # import plotly raises ImportError

    def no_search(*args, **kwargs):
        raise AssertionError("searched before saying the report extra is missing")

    monkeypatch.setattr(plan_cmd, "search", no_search)
    result = runner.invoke(app, ["plan", "--nodes", "2", "--html", str(tmp_path / "p.html")])
    assert result.exit_code == 2
    assert result.output.strip() == (
        "error: this needs the report extra: pip install -e '.[report]' in the mosaic "
        "checkout")


def test_a_window_too_short_at_full_peak_is_refused_before_the_search(monkeypatch):
    """--days 0.01 on Table 3's 32 p6-b200 nodes: at the bf16 datasheet peak the window
    gives the smallest geometry 2.25e15 x 256 x 864 s / (6 N_act) tokens, a third of the
    40 N_act it needs; said at once, not after a 24 s search (a trial)."""
    from mosaic.arch import count_parameters, ladder_geometry
    from mosaic.hardware import get_system

    def no_search(*args, **kwargs):
        raise AssertionError("searched a window no geometry can train in")

    monkeypatch.setattr(plan_cmd, "search", no_search)
    result = runner.invoke(app, ["plan", "--days", "0.01"])
    assert result.exit_code == 2
    n_active = count_parameters(ladder_geometry(8, 16, 1, 8)).n_active
    peak = get_system("p6-b200.48xlarge").device.peak_flops_per_s["bf16"]
    tokens = peak * 256 * 0.01 * 86400 / (6 * n_active)
    assert (f"closest geometry (q=8 E=16 K=1 G=8) {tokens:.3g} tokens, "
            f"{tokens / (40 * n_active):.2g}x the {40 * n_active:.3g}") in result.output
    assert result.output.strip().endswith(
        "add nodes, add days, lower --tpp or search smaller models (--q, --max-total-params)")
