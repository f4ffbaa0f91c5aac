"""A studio started on a free localhost port for the tests, and the browser helpers."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("plotly")


@dataclass
class Studio:
    """A running studio: its base URL and app (the app holds the plan runner)."""

    url: str
    app: Any

    def call(self, path: str, payload: Any = None) -> tuple[int, dict[str, Any]]:
        data = None if payload is None else json.dumps(payload).encode()
        request = urllib.request.Request(self.url + path, data=data,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())

    def text(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=60) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_studio(**kwargs: Any) -> tuple[Studio, Any, threading.Thread]:
    import uvicorn

    from mosaic.studio.app import create_app

    app = create_app(**kwargs)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the studio did not start")
        time.sleep(0.05)
    return Studio(f"http://127.0.0.1:{port}", app), server, thread


@contextlib.contextmanager
def running_studio(**kwargs: Any) -> Iterator[Studio]:
    """A studio of its own (``create_app`` keywords) for one test, stopped after it."""
    running, server, thread = start_studio(**kwargs)
    try:
        yield running
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.fixture(scope="module")
def studio() -> Any:
    running, server, thread = start_studio(plan_time_limit_s=120)
    yield running
    running.app.state.runner.cancel()
    running.app.state.runner.wait(30)
    server.should_exit = True
    thread.join(10)
