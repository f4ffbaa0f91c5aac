"""`mosaic studio` on a port another process listens on: one line, exit 2, before any
start-up banner."""

import socket

import pytest
from typer.testing import CliRunner

from mosaic.cli.main import app
from mosaic.errors import MosaicInputError
from mosaic.studio.server import require_free_port


def test_a_busy_port_is_a_one_line_error():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        with pytest.raises(MosaicInputError, match=f"cannot listen on 127.0.0.1:{port}"):
            require_free_port("127.0.0.1", port)
        pytest.importorskip("uvicorn")
        result = CliRunner().invoke(app, ["studio", "--no-browser", "--port", str(port)])
    assert result.exit_code == 2
    assert "mosaic studio on" not in result.output and "--port" in result.output


def test_a_free_port_passes():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    require_free_port("127.0.0.1", port)


def test_an_unknown_host_is_named_not_the_port():
    """--host 999.1.1.1 said 'pick another with --port' (a fuzz trial)."""
    import pytest

    from mosaic.errors import MosaicInputError

    with pytest.raises(MosaicInputError, match=r"^--host 999\.1\.1\.1: not an address"):
        require_free_port("999.1.1.1", 8799)
