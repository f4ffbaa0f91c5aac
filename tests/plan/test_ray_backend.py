"""The Ray backend: identical results to the local backend, one-line errors otherwise."""

from __future__ import annotations

import re
import sys
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from mosaic.errors import MosaicInputError
from mosaic.hardware.catalog import get_system, use_catalog
from mosaic.hardware.default_systems import resolve_system
from mosaic.law import default_law
from mosaic.perf.calibration import default_calibration
from mosaic.plan.envelope import Envelope, SearchSpace
from mosaic.plan.ray_backend import RayBackend, backend_from_options, execution_backend
from mosaic.plan.search import search


def test_missing_ray_is_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(MosaicInputError, match=re.escape("--backend ray needs the ray extra: "
                                                        "pip install -e '.[ray]'")):
        RayBackend().connect()


@pytest.mark.parametrize(("backend", "address", "words"), [
    ("dask", None, "allowed values are local, ray"),
    ("local", "auto", "--address needs --backend ray"),
    ("ray", "no-port", "allowed: auto or HOST:PORT"),
])
def test_bad_backend_options(backend, address, words):
    with pytest.raises(MosaicInputError, match=words):
        backend_from_options(backend, address)


def test_workers_size_a_local_ray_instance_and_not_a_cluster(monkeypatch):
    # a trial found --workers ignored under --backend ray
    from mosaic.plan.ray_backend import backend_from_options

    monkeypatch.setattr(RayBackend, "connect", lambda self: None)
    assert backend_from_options("ray", None, 3).num_cpus == 3
    with pytest.raises(MosaicInputError, match=r"a cluster .* drop --workers"):
        backend_from_options("ray", "auto", 3)



def test_a_new_local_instance_starts_without_rays_notices(monkeypatch, caplog):
    """Ray 2.5x logs "Token authentication is enabled for this Ray cluster..." when it
    starts a local instance: the only stderr line of a `--quiet` plan (a trial). The
    notice is dropped for the local instance mosaic starts, and the level restored."""
    import logging
    import types

    notice = "Token authentication is enabled for this Ray cluster."
    fake = types.SimpleNamespace(
        is_initialized=lambda: False,
        init=lambda **_: logging.getLogger("ray._private.authentication").warning(notice))
    monkeypatch.setitem(sys.modules, "ray", fake)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    before = logging.getLogger("ray").level
    with caplog.at_level(logging.WARNING):
        assert RayBackend().connect() is fake
        assert notice not in caplog.text
        assert logging.getLogger("ray").level == before
        fake.init(address=None)  # the same notice outside connect() is logged
        assert notice in caplog.text


def test_unreachable_cluster_fails_in_seconds():
    pytest.importorskip("ray")
    with pytest.raises(MosaicInputError, match=r"cannot reach the Ray cluster at 127\.0\.0\.1:1"):
        RayBackend(address="127.0.0.1:1").connect()


def test_a_dead_ray_address_in_the_environment_fails_in_seconds(monkeypatch):
    """ray.init(address=None or "auto") reads RAY_ADDRESS and retried a dead one for
    minutes, then named "a new local instance"."""
    ray = pytest.importorskip("ray")
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")
    monkeypatch.setattr(ray, "is_initialized", lambda: False)

    def no_init(**_: object) -> None:
        raise AssertionError("ray.init must not be reached")

    monkeypatch.setattr(ray, "init", no_init)
    for address in (None, "auto"):
        with pytest.raises(MosaicInputError, match=r"at RAY_ADDRESS=127\.0\.0\.1:1 within "
                                                   r".*or check or unset RAY_ADDRESS"):
            RayBackend(address=address).connect()


_USER_CATALOG = """
devices:
  - name: Trial-GPU
    vendor: NVIDIA
    kernel_fit: H100
    peak_flops_per_s: {bf16: {value: 1.48e+14, source: "test"}}
    hbm_bytes: {value: 1.0e+11, source: "test"}
    hbm_bw_bytes_per_s: {value: 4.0e+12, source: "test"}
    scale_up_bw_bytes_per_s: {value: 450.0e+9, source: "test"}
systems:
  - name: trial-node
    device: Trial-GPU
    gpus_per_node: {value: 8, source: "test"}
    scale_up_domain_gpus: {value: 8, source: "test"}
    nics_per_node: {value: 4, source: "test"}
    nic_bw_bytes_per_s: {value: 50.0e+9, source: "test"}
    scale_out_fabric: RoCE
"""


def _assert_same(remote, local) -> None:
    assert remote.optimum_index == local.optimum_index
    for name in ("tokens_per_s", "mfu", "step_time_s", "memory_bytes"):
        assert np.array_equal(getattr(remote.throughput, name),
                              getattr(local.throughput, name), equal_nan=True)
    assert remote.throughput.plans == local.throughput.plans


@pytest.mark.slow
def test_ray_results_equal_local_results(tmp_path, monkeypatch):
    """Also on a device of the user's catalog (--catalog), which the Ray workers did not
    know: every task failed with "unknown device"."""
    from mosaic.plan import ray_backend
    from mosaic.plan.ray_backend import InstalledMosaic

    ray = pytest.importorskip("ray")
    envelope = Envelope(resolve_system("B200"), n_nodes=2)
    space = SearchSpace(q=(8,), experts=(8, 16, 32), top_k=(1, 2), split_factor=(1, 4))
    law, calibration = default_law(), default_calibration()
    local = search(envelope, space, law, calibration, workers=1)
    catalog_file = tmp_path / "hw.yaml"
    catalog_file.write_text(_USER_CATALOG, encoding="utf-8")
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        seen: list[tuple[int, int]] = []
        with execution_backend(RayBackend()):
            remote = search(envelope, space, law, calibration,
                            progress=lambda done, total: seen.append((done, total)))
        use_catalog(catalog_file)
        mine = Envelope(get_system("trial-node"), n_nodes=2)
        local_mine = search(mine, space, law, calibration, workers=1)
        with execution_backend(RayBackend()):
            remote_mine = search(mine, space, law, calibration)
        # a driver whose mosaic differs from the workers' (as another checkout's would):
        # refused through Ray itself, the check's code shipped with the task
        other = InstalledMosaic("0.0.9 (source 0123456789ab)", "/elsewhere/mosaic")
        monkeypatch.setattr(ray_backend, "driver_mosaic", lambda: other)
        with execution_backend(RayBackend()), pytest.raises(
                MosaicInputError, match=r"runs mosaic .* this command mosaic 0\.0\.9 \(source "
                r"0123456789ab\) from /elsewhere/mosaic: results would differ"):
            search(envelope, space, law, calibration)
    finally:
        use_catalog()
        ray.shutdown()
    _assert_same(remote, local)
    _assert_same(remote_mine, local_mine)
    assert seen[-1] == (len(space.enumerate()), len(space.enumerate()))


def test_a_bad_workers_count_is_refused_before_ray_starts(monkeypatch):
    """`plan --backend ray --workers 0` started a Ray instance, then refused --workers."""
    from typer.testing import CliRunner

    import mosaic.cli.plan_cmd as plan_cmd
    from mosaic.cli.main import app

    def no_backend(*_: object) -> None:
        raise AssertionError("the backend must not start")

    monkeypatch.setattr(plan_cmd, "backend_from_options", no_backend)
    result = CliRunner().invoke(app, ["plan", "--backend", "ray", "--workers", "0", "--q", "8"])
    assert result.exit_code == 2 and "--workers: got 0" in result.output


def _one_reply_server(reply: bytes):
    """A TCP server on a free local port that answers its first connection with ``reply``."""
    import socket
    import threading

    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        connection, _ = server.accept()
        with connection:
            connection.recv(64)
            connection.sendall(reply)

    threading.Thread(target=serve, daemon=True).start()
    return server, server.getsockname()[1]


def test_an_address_whose_service_is_not_grpc_fails_at_once():
    """A trial's --address on an HTTP server's port passed the TCP check, and ray.init then
    retried for minutes; a gRPC server (a GCS) answers the HTTP/2 preface with SETTINGS."""
    from mosaic.plan.ray_backend import _check_reachable

    server, port = _one_reply_server(b"HTTP/1.0 400 Bad request\r\n\r\n")
    with server, pytest.raises(MosaicInputError, match=rf"127\.0\.0\.1:{port} answers, but not "
                               r"as a Ray head node's GCS port does \(gRPC\)"):
        _check_reachable(f"127.0.0.1:{port}")
    settings = bytes([0, 0, 6, 4, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 100])  # RFC 9113 SETTINGS
    server, port = _one_reply_server(settings)
    with server:
        _check_reachable(f"127.0.0.1:{port}")  # passes: left to ray.init
    # a TLS cluster (RAY_USE_TLS) answers a plain preface with a TLS alert: left to ray.init
    server, port = _one_reply_server(bytes([0x15, 3, 3, 0, 2, 2, 70]))
    with server:
        _check_reachable(f"127.0.0.1:{port}")


def test_cluster_messages_go_to_stderr_and_a_dead_worker_is_one_line(monkeypatch):
    """Ray printed '(raylet) A worker died ...' on stdout, corrupting a `plan --json`; a
    worker that kept dying ended as 'internal error (WorkerCrashedError ...)' (a trial)."""
    from mosaic.plan import ray_backend

    printed = []
    worker = SimpleNamespace(print_to_stdstream=lambda data, ignore_prefix: printed.append(data))
    fake = SimpleNamespace(_private=SimpleNamespace(worker=worker))
    ray_backend._route_cluster_messages_to_stderr(fake)
    ray_backend._route_cluster_messages_to_stderr(fake)  # once only
    worker.print_to_stdstream({"lines": ["x"], "pid": "raylet", "is_err": False},
                              ignore_prefix=False)
    assert printed == [{"lines": ["x"], "pid": "raylet", "is_err": True}]

    class WorkerCrashedError(Exception):
        pass

    calls = []
    cluster = _fake_cluster(calls, WorkerCrashedError=WorkerCrashedError)
    monkeypatch.setattr(RayBackend, "connect", lambda self: cluster)
    cluster.wait = _raising(WorkerCrashedError("The worker died unexpectedly while executing"))
    with pytest.raises(MosaicInputError, match=r"--backend ray: the Ray cluster failed during "
                       r"the search \(WorkerCrashedError: The worker died .*0 of 4 geometries "
                       r"were done\. Rerun, or use --backend local"):
        RayBackend().run_blocks(len, (), [range(0, 2), range(2, 4)], None, 4)
    # the two pending tasks cancelled and Ray left before the error: nothing of Ray's after
    # it, and exit status 2 (a trial: 1, with 'Unhandled error' lines after the error)
    assert calls == ["cancel", "cancel", "shutdown"]


class _RayTaskError(Exception):
    """Ray's RayTaskError as ray.get raises it (ray/exceptions.py, Ray 2.x): the task's
    exception is its ``cause``, the instance is of a class made from both RayTaskError and
    the cause's class (as_instanceof_cause), and its message starts with the coloured task
    name, its pid and its node's ip."""

    def __init__(self, cause: BaseException):
        self.cause = cause

    @classmethod
    def of(cls, cause: BaseException) -> _RayTaskError:
        dual = type(f"RayTaskError({type(cause).__name__})", (cls, type(cause)), {
            "__str__": lambda self: ("\x1b[36mray::block_task()\x1b[39m (pid=4242, "
                                     "ip=192.0.2.7)\n  At least one of the input arguments "
                                     f"...\n{type(cause).__name__}: {cause}")})
        return dual(cause)


class _RaySystemError(Exception):
    """Ray's RaySystemError: ``client_exc`` is the exception underneath (ray/exceptions.py)."""

    def __init__(self, client_exc: BaseException, traceback_str: str | None = None):
        super().__init__(client_exc, traceback_str)
        self.client_exc = client_exc

    def __str__(self) -> str:
        return f"System error: {self.client_exc}"


def _fake_cluster(calls: list[str], **exceptions: type[BaseException]) -> Any:
    from types import SimpleNamespace

    return SimpleNamespace(
        exceptions=SimpleNamespace(RayTaskError=_RayTaskError, RaySystemError=_RaySystemError,
                                   **exceptions),
        remote=lambda **_: lambda f: SimpleNamespace(remote=lambda *args: object()),
        put=lambda value: value,
        cancel=lambda ref, force: calls.append("cancel"),
        shutdown=lambda: calls.append("shutdown"))


def _from_worker(value: Any, identity: str | None = None, error: str = "") -> Any:
    """A block task's result as ray.get returns it: the worker's mosaic (identity, package
    folder, node IP, import error) and the block's value; by default the driver's mosaic."""
    from mosaic.plan.ray_backend import driver_mosaic

    identity = driver_mosaic().identity if identity is None else identity
    return (identity, "/opt/worker/mosaic", "192.0.2.7", error), value


def _raising(error: BaseException) -> Any:
    """A fake ray.wait (its signature: refs, *, num_returns, timeout) that raises ``error``."""
    def wait(refs, *, num_returns=1, timeout=None):
        raise error
    return wait


def test_an_error_inside_a_task_is_raised_as_the_local_backend_raises_it(monkeypatch):
    """ray.get raises a task's exception wrapped in RayTaskError, whose message is Ray's
    coloured task line and traceback: a MosaicInputError inside a task printed that over
    several lines (a trial). The local backend's processes re-raise the exception itself."""
    calls: list[str] = []
    cluster = _fake_cluster(calls)
    monkeypatch.setattr(RayBackend, "connect", lambda self: cluster)
    cluster.wait = _raising(_RayTaskError.of(MosaicInputError("unknown device 'X'")))
    with pytest.raises(MosaicInputError) as raised:
        RayBackend().run_blocks(len, (), [range(0, 2), range(2, 4)], None, 4)
    assert str(raised.value) == "unknown device 'X'"
    assert not isinstance(raised.value, _RayTaskError)
    # the other block cancelled and Ray left: its 'Unhandled error' lines for the other
    # blocks' errors followed mosaic's line (a trial)
    assert calls == ["cancel", "cancel", "shutdown"]
    cluster.wait = _raising(_RayTaskError.of(ZeroDivisionError("division by zero")))
    with pytest.raises(ZeroDivisionError) as raised:  # a bug stays a bug (exit status 1)
        RayBackend().run_blocks(len, (), [range(0, 2)], None, 2)
    assert not isinstance(raised.value, _RayTaskError)


def test_a_worker_without_mosaic_is_one_line_naming_the_fix(monkeypatch):
    """A node without mosaic cannot unpickle the search state: Ray raises RayTaskError
    (RaySystemError) whose client_exc is the ModuleNotFoundError (observed with Ray 2.60);
    the error line read 'RayTaskError(RaySystemError): ray::_call_block() (pid=...)' in
    terminal colours, and said 'Rerun' (a trial)."""
    calls: list[str] = []
    cluster = _fake_cluster(calls)
    monkeypatch.setattr(RayBackend, "connect", lambda self: cluster)
    missing = ModuleNotFoundError("No module named 'mosaic'", name="mosaic")
    cluster.wait = _raising(_RayTaskError.of(_RaySystemError(missing)))
    with pytest.raises(MosaicInputError) as raised:
        RayBackend().run_blocks(len, (), [range(0, 2), range(2, 4)], None, 4)
    message = str(raised.value)
    assert message == ("--backend ray: a Ray worker at 192.0.2.7 cannot load mosaic's search "
                       "(ModuleNotFoundError: No module named 'mosaic'); every node needs "
                       "this mosaic installed in the Python environment Ray runs "
                       "(docs/ray.md), or use --backend local")
    assert "\x1b" not in message and "Rerun" not in message


@pytest.mark.parametrize("error", ["", "ModuleNotFoundError: No module named 'mosaic'"])
def test_a_worker_with_another_mosaic_is_one_line_naming_both(monkeypatch, error):
    """A worker whose mosaic was older than the driver's (or another checkout) ran the
    driver's search with its own code and returned other numbers without a word. Each task
    now returns its worker's mosaic, and the driver refuses one that differs."""
    from mosaic.plan.ray_backend import driver_mosaic

    calls: list[str] = []
    cluster = _fake_cluster(calls)
    ready = iter([(["a"], None)])
    cluster.wait = lambda refs, *, num_returns=1, timeout=None: next(ready)
    refs = iter(["a", "b"])
    cluster.remote = lambda **_: lambda f: SimpleNamespace(remote=lambda *a: next(refs))
    cluster.get = lambda ref: _from_worker(
        "numbers", identity="" if error else "0.0.9 (source 0123456789ab)", error=error)
    monkeypatch.setattr(RayBackend, "connect", lambda self: cluster)
    with pytest.raises(MosaicInputError) as raised:
        RayBackend().run_blocks(len, (), [range(0, 2), range(2, 4)], None, 4)
    driver = driver_mosaic()
    if error:
        assert str(raised.value) == (
            "--backend ray: a Ray worker at 192.0.2.7 cannot load mosaic's search "
            "(ModuleNotFoundError: No module named 'mosaic'); every node needs this mosaic "
            "installed in the Python environment Ray runs (docs/ray.md), or use --backend "
            "local")
    else:
        assert str(raised.value) == (
            "--backend ray: the Ray worker at 192.0.2.7 runs mosaic 0.0.9 (source "
            f"0123456789ab) from /opt/worker/mosaic, this command mosaic {driver.identity} "
            f"from {driver.where}: results would differ; every node needs the same mosaic "
            "(release or checkout, docs/ray.md), or use --backend local")
    assert calls == ["cancel", "shutdown"]  # the other block cancelled, Ray left


def test_the_block_task_checks_its_mosaic_before_it_reads_the_search():
    """The task compares the worker's mosaic with the driver's first: with another mosaic
    it returns its own, and neither reads the search state nor runs the block."""
    from mosaic.plan.ray_backend import _block_task, driver_mosaic

    pytest.importorskip("ray")

    class Unreadable:
        def __getitem__(self, index: int) -> Any:
            raise AssertionError("the search state must not be read")

    values, result = _block_task("0.0.9 (source 0123456789ab)", Unreadable(), 0, 2)
    assert values[0] == driver_mosaic().identity and values[3] == "" and result is None


def _fake_package(root: Any, files: dict[str, str]) -> Any:
    """A package folder 'mosaic' under ``root`` holding ``files`` (relative path: text)."""
    for name, text in files.items():
        path = root / "mosaic" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return SimpleNamespace(__file__=str(root / "mosaic" / "__init__.py"), __version__="0.0.1")


def test_the_mosaic_identity_follows_what_computes(monkeypatch, tmp_path):
    """The identity is the version and the package's code and data: the same for two copies
    in different folders (nodes install it in their own places), another for an edited
    module, data file or a renamed module; not for caches or the studio's page assets."""
    from mosaic.plan.ray_backend import _installed_mosaic

    files = {"__init__.py": "__version__ = '0.0.1'\n", "perf/model.py": "EFF = 0.5\n",
             "hardware/catalog.yaml": "devices: []\n", "studio/page.css": "a {}\n"}

    def identity(root: Any, **changed: str) -> str:
        monkeypatch.setitem(sys.modules, "mosaic", _fake_package(root, {**files, **changed}))
        found, where, error = _installed_mosaic()
        assert where == str(root / "mosaic") and error == ""
        return found

    base = identity(tmp_path / "a")
    assert base.startswith("0.0.1 (source ")
    assert identity(tmp_path / "b") == base
    assert identity(tmp_path / "c", **{"perf/model.py": "EFF = 0.6\n"}) != base
    assert identity(tmp_path / "d", **{"hardware/catalog.yaml": "devices: [x]\n"}) != base
    assert identity(tmp_path / "e", **{"studio/page.css": "b {}\n",
                                       "perf/__pycache__/model.cpython-311.pyc": "x"}) == base
    renamed = {name: text for name, text in files.items() if name != "perf/model.py"}
    monkeypatch.setitem(sys.modules, "mosaic", _fake_package(
        tmp_path / "f", {**renamed, "perf/models.py": "EFF = 0.5\n"}))
    assert _installed_mosaic()[0] != base
    monkeypatch.setitem(sys.modules, "mosaic", None)  # a worker without mosaic
    assert _installed_mosaic()[2].startswith("ModuleNotFoundError")


def _port(listening: bool) -> tuple[Any, str]:
    """A local HOST:PORT that accepts connections (with its server) or refuses them."""
    import socket

    server = socket.create_server(("127.0.0.1", 0))
    address = f"127.0.0.1:{server.getsockname()[1]}"
    if not listening:
        server.close()  # nothing listens there now: connections are refused
        return None, address
    return server, address


@pytest.mark.parametrize("dead", ["gcs", "raylet"])
def test_a_ray_node_that_dies_mid_search_is_one_line(monkeypatch, dead):
    """Ray's driver does not notice its GCS or its own raylet die: ray.wait keeps returning
    nothing (observed with Ray 2.60 after `ray stop --force`) until Ray ends the process
    with status 1 and no mosaic line, 60 s later for the GCS
    (RAY_gcs_rpc_server_reconnect_timeout_s), seconds later for the raylet ('The connection
    to the plasma store is failed. Terminate the process'); a trial. The search watches
    both ports (Ray's runtime context and ray.nodes()) while no block finishes."""
    from mosaic.plan import ray_backend

    gcs_server, gcs = _port(listening=dead != "gcs")
    raylet_server, raylet = _port(listening=dead != "raylet")
    calls: list[str] = []
    cluster = _fake_cluster(calls)
    waits: list[float | None] = []

    def wait_nothing_ready(refs, *, num_returns=1, timeout=None):
        waits.append(timeout)
        if len(waits) > 50:
            raise AssertionError("the search kept waiting on a dead cluster")
        return [], list(refs)

    host, port = raylet.rsplit(":", 1)
    cluster.wait = wait_nothing_ready
    cluster.get_runtime_context = lambda: SimpleNamespace(gcs_address=gcs,
                                                          get_node_id=lambda: "n1")
    cluster.nodes = lambda: [{"NodeID": "n0", "NodeManagerAddress": "10.0.0.9",
                              "NodeManagerPort": 1},
                             {"NodeID": "n1", "NodeManagerAddress": host,
                              "NodeManagerPort": int(port)}]
    monkeypatch.setattr(RayBackend, "connect", lambda self: cluster)
    monkeypatch.setattr(ray_backend, "GCS_LOST_AFTER_S", 0.0)
    monkeypatch.setattr(ray_backend, "RAYLET_LOST_AFTER_S", 0.0)
    what = (f"the Ray cluster's head node (GCS at {gcs})" if dead == "gcs"
            else f"this machine's Ray node (raylet at {raylet})")
    try:
        with pytest.raises(MosaicInputError, match=re.escape(
                f"--backend ray: {what} stopped answering during the search; 0 of 4 "
                "geometries were done. Rerun once Ray runs again (a cluster: `ray start`, "
                "docs/ray.md), or use --backend local")):
            RayBackend().run_blocks(len, (), [range(0, 2), range(2, 4)], None, 4)
    finally:
        for server in (gcs_server, raylet_server):
            if server is not None:
                server.close()
    assert waits and all(t == ray_backend.WAIT_POLL_S for t in waits)  # never a blind wait
    assert calls == ["cancel", "cancel", "shutdown"]


def test_a_slow_block_on_a_live_cluster_is_waited_for(monkeypatch):
    """Nothing finished within a poll, but the GCS and the raylet answer: the search goes on."""
    from mosaic.plan import ray_backend

    gcs_server, gcs = _port(listening=True)
    calls: list[str] = []
    cluster = _fake_cluster(calls)
    results = iter([([], None), ([], None), (["a"], None), (["b"], None)])
    cluster.wait = lambda refs, *, num_returns=1, timeout=None: next(results)
    cluster.get_runtime_context = lambda: SimpleNamespace(gcs_address=gcs,
                                                          get_node_id=lambda: "n1")
    cluster.nodes = lambda: []
    refs = iter(["a", "b"])
    cluster.remote = lambda **_: lambda f: SimpleNamespace(remote=lambda *a: next(refs))
    cluster.get = lambda ref: _from_worker(ref.upper())
    monkeypatch.setattr(RayBackend, "connect", lambda self: cluster)
    monkeypatch.setattr(ray_backend, "GCS_LOST_AFTER_S", 0.0)
    with gcs_server:
        assert RayBackend().run_blocks(len, (), [range(0, 2), range(2, 4)], None, 4) == [
            "A", "B"]
    assert calls == []


def test_ray_address_in_the_environment_is_checked_before_ray_starts(monkeypatch):
    """RAY_ADDRESS beside --workers was silently left for a new local instance, and a
    malformed one failed only after Ray's retries (a trial): both are one line at once."""
    pytest.importorskip("ray")
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6390")
    with pytest.raises(MosaicInputError,
                       match=re.escape("RAY_ADDRESS=127.0.0.1:6390 names a cluster")):
        RayBackend(num_cpus=2).connect()
    monkeypatch.setenv("RAY_ADDRESS", "garbage")
    with pytest.raises(MosaicInputError, match="RAY_ADDRESS='garbage': allowed: auto or "
                                               "HOST:PORT"):
        RayBackend().connect()
    # a stated address leaves RAY_ADDRESS unread (Ray reads it for None or "auto" only):
    # not judged then; the stated one is (a closed port: one line at once)
    with pytest.raises(MosaicInputError, match=r"cannot reach the Ray cluster at 127\.0\.0\.1:1"):
        RayBackend(address="127.0.0.1:1").connect()


def test_more_workers_than_cpus_under_ray_is_warned_of(monkeypatch):
    """A trial's --workers 1000 on 2 cores started 23 cold Ray workers (43 s against 19 s)."""
    import os

    from mosaic.errors import MosaicWarning

    monkeypatch.setattr(RayBackend, "connect", lambda self: None)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    with pytest.warns(MosaicWarning, match="--workers 1000 exceeds this machine's 2 CPUs"):
        backend_from_options("ray", None, 1000)


def test_a_search_through_ray_client_does_not_watch_the_clusters_inner_gcs_address(
        monkeypatch):
    """Through Ray Client (--address ray://HOST:10001) the runtime context's gcs_address is
    the one the head node's client server uses (ray/util/client/server/server.py,
    RUNTIME_CONTEXT), inside the cluster: a driver behind a port-forward reaches only the
    client port. Watching that address ended a healthy search whose blocks each outlast a
    poll, naming a head node that was running."""
    from mosaic.plan import ray_backend

    _, unreachable = _port(listening=False)  # as the cluster's inner address looks from here
    calls: list[str] = []
    cluster = _fake_cluster(calls)
    results = iter([([], None), ([], None), (["a"], None), ([], None), (["b"], None)])
    cluster.wait = lambda refs, *, num_returns=1, timeout=None: next(results)
    cluster.get_runtime_context = lambda: SimpleNamespace(gcs_address=unreachable,
                                                          get_node_id=lambda: "n1")
    cluster.nodes = lambda: []
    cluster.util = SimpleNamespace(client=SimpleNamespace(ray=SimpleNamespace(
        is_connected=lambda: True)))
    refs = iter(["a", "b"])
    cluster.remote = lambda **_: lambda f: SimpleNamespace(remote=lambda *a: next(refs))
    cluster.get = lambda ref: _from_worker(ref.upper())
    monkeypatch.setattr(RayBackend, "connect", lambda self: cluster)
    monkeypatch.setattr(ray_backend, "GCS_LOST_AFTER_S", 0.0)  # Ray's 15 s, already past
    assert RayBackend().run_blocks(len, (), [range(0, 2), range(2, 4)], None, 4) == ["A", "B"]
    assert calls == []
    # connected directly (not through Ray Client), the same refusing GCS is a lost cluster
    cluster.util.client.ray.is_connected = lambda: False
    results = iter([([], None)])
    refs = iter(["a", "b"])
    with pytest.raises(MosaicInputError, match=r"head node .* stopped answering"):
        RayBackend().run_blocks(len, (), [range(0, 2), range(2, 4)], None, 4)


def test_a_refusal_before_a_finished_block_does_not_count_towards_one_after_it(monkeypatch):
    """GCS_LOST_AFTER_S lets a GCS with fault tolerance refuse connections for 15 s while it
    restarts (docs/ray.md). The ports are probed only while no block finishes, so a GCS
    that refused once, came back while blocks finished for 20 s, and restarted again was
    judged lost at the second restart's first refusal: its silence was timed from the
    first. Each outage now has its own 15 s."""
    from mosaic.plan import ray_backend

    clock = [0.0]
    monkeypatch.setattr(ray_backend.time, "monotonic", lambda: clock[0])
    answering = iter([False, False])  # the GCS refuses at both empty polls
    monkeypatch.setattr(ray_backend, "_port_open", lambda address: next(answering))
    calls: list[str] = []
    cluster = _fake_cluster(calls)
    # poll 1 at 0 s: nothing finished, refused; polls at 1-3 s: blocks finish; poll at
    # 21 s: nothing finished, refused (the second restart's first refusal); then 'd'
    polls = iter([([], 0.0)] + [([ref], 1.0 + i) for i, ref in enumerate("abc")]
                 + [([], 21.0), (["d"], 22.0)])

    def wait(refs, *, num_returns=1, timeout=None):
        ready, clock[0] = next(polls)
        return ready, None

    cluster.wait = wait
    cluster.get_runtime_context = lambda: SimpleNamespace(gcs_address="192.0.2.1:6379",
                                                          get_node_id=lambda: "n1")
    cluster.nodes = lambda: []
    refs = iter("abcd")
    cluster.remote = lambda **_: lambda f: SimpleNamespace(remote=lambda *a: next(refs))
    cluster.get = lambda ref: _from_worker(ref.upper())
    monkeypatch.setattr(RayBackend, "connect", lambda self: cluster)
    blocks = [range(i, i + 1) for i in range(4)]
    assert RayBackend().run_blocks(len, (), blocks, None, 4) == ["A", "B", "C", "D"]
    assert calls == []


def test_a_ray_client_server_lost_mid_search_is_one_line(monkeypatch):
    """Through Ray Client the search watches no port (the client watches its connection):
    a server lost past RAY_CLIENT_RECONNECT_GRACE_PERIOD makes ray.wait raise
    ConnectionError with Ray's words (ray/util/client/worker.py, Ray 2.x), which ended the
    command as an internal error; it is the cluster's failure, said in one line."""
    calls: list[str] = []
    cluster = _fake_cluster(calls)
    monkeypatch.setattr(RayBackend, "connect", lambda self: cluster)
    cluster.wait = _raising(ConnectionError(
        "Failed to reconnect within the reconnection grace period (30s)"))
    with pytest.raises(MosaicInputError, match=re.escape(
            "--backend ray: the Ray cluster failed during the search (ConnectionError: "
            "Failed to reconnect within the reconnection grace period (30s)); 0 of 4 "
            "geometries were done. Rerun, or use --backend local")):
        RayBackend().run_blocks(len, (), [range(0, 2), range(2, 4)], None, 4)
    assert calls == ["cancel", "cancel", "shutdown"]
