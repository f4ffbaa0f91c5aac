"""An optional extra that is not installed is one line naming how to install it from the
checkout (quoted for every shell), said before any work (a trial: plan --html searched for
14 s, then asked for `pip install mosaic[report]`, which zsh rejects and which PyPI resolves
to another project)."""

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
