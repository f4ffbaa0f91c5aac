"""Run the per-geometry layout searches of `plan` and `sweep` as Ray tasks.

The co-design search is embarrassingly parallel over geometries (Eq. 6 is solved per grid
row); :func:`mosaic.plan.search.profile_geometries` cuts the grid into blocks of rows. The
local backend runs the blocks in forked processes; this one submits each block as a Ray task
(https://docs.ray.io/en/latest/ray-core/tasks.html) to a local or remote Ray cluster, with
the search state put once into Ray's object store. Blocks are reassembled in grid order, so
the result is identical to the local backend's (tests/plan/test_ray_backend.py).

Use it through :func:`execution_backend`::

    with execution_backend(RayBackend(address="auto")):
        result = search(envelope, space, law, calibration)

Ray is an optional extra (``pip install -e '.[ray]'``) and is imported only here.
"""

from __future__ import annotations

import contextlib
import contextvars
import copyreg
import functools
import logging
import os
import re
import socket
import time
import types
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from mosaic.errors import MosaicInputError, MosaicWarning, missing_extra

BACKENDS = ("local", "ray")
CONNECT_TIMEOUT_S = 5.0
WAIT_POLL_S = 1.0  # how often the search looks at the cluster while no block finishes
# How long the head node's GCS may refuse connections before the search gives up: without
# GCS fault tolerance a dead GCS is the whole cluster's end, and Ray ends the driver after
# RAY_gcs_rpc_server_reconnect_timeout_s (60 s); with it (HA Redis) a restarted GCS lets
# running tasks go on (https://docs.ray.io/en/latest/ray-core/fault_tolerance/gcs.html),
# so a short outage is waited out, well within Ray's 60 s
GCS_LOST_AFTER_S = 15.0
# The raylet of the driver's own node is not restarted: its death is the node's
# (https://docs.ray.io/en/latest/ray-core/fault_tolerance/nodes.html), and the driver's
# objects in its store are lost; Ray then ends the driver with status 1 ("The connection
# to the plasma store is failed. Terminate the process", observed with Ray 2.60) once it
# next touches the store. Two polls, then the search leaves Ray first.
RAYLET_LOST_AFTER_S = 2.0
_CURRENT: contextvars.ContextVar[RayBackend | None] = contextvars.ContextVar(
    "mosaic_execution_backend", default=None)


def _reduce_mapping_proxy(proxy: types.MappingProxyType) -> tuple[Any, tuple[dict]]:
    # Catalog objects keep read-only mappings; a proxy over a copy is the same value.
    return types.MappingProxyType, (dict(proxy),)


@dataclass
class RayBackend:
    """Where to run: "auto" joins the cluster this machine belongs to (``ray start``),
    "HOST:PORT" a given head node; ``address`` None is Ray's own choice, RAY_ADDRESS or a
    cluster this machine runs, else a new local instance, and with ``num_cpus`` always a
    new local instance of that size."""

    address: str | None = None
    num_cpus: int | None = None  # only for a local instance started here

    def connect(self) -> Any:
        """Import ray and connect (once); one-line errors when missing or unreachable."""
        try:
            import ray
        except ImportError:
            raise missing_extra("ray", "--backend ray") from None
        copyreg.pickle(types.MappingProxyType, _reduce_mapping_proxy)
        if ray.is_initialized():
            return ray
        # ray.init reads RAY_ADDRESS when the address is None or "auto"
        # (https://docs.ray.io/en/latest/ray-core/api/doc/ray.init.html), and retries a dead
        # one for minutes: check it as a stated address is checked
        environment = os.environ.get("RAY_ADDRESS", "").strip()
        if environment and self.address is None and self.num_cpus is not None:
            # --workers sizes a new local instance, which would leave RAY_ADDRESS's cluster
            # unused without a word (a trial), as --address with --workers is refused
            raise MosaicInputError(
                f"--workers sizes the local Ray instance --backend ray starts, but "
                f"RAY_ADDRESS={environment} names a cluster: unset RAY_ADDRESS, or drop "
                "--workers to run on that cluster")
        from_environment = (self.address == "auto" or (self.address is None
                                                       and self.num_cpus is None)
                            ) and bool(environment)
        if (from_environment and environment != "auto"
                and not _looks_like_host_port(environment)):
            # Ray's own "Invalid address format" came after its retries (a trial); a stated
            # --address HOST:PORT leaves RAY_ADDRESS unread, so it is not judged then
            raise MosaicInputError(f"RAY_ADDRESS={environment!r}: allowed: auto or HOST:PORT "
                                   "(e.g. 10.0.0.5:6379); check or unset RAY_ADDRESS")
        target = environment if from_environment else self.address
        where = (f"RAY_ADDRESS={target}" if from_environment
                 else target or "a new local instance")
        if target not in (None, "auto") and (not from_environment
                                             or _looks_like_host_port(target)):
            _check_reachable(target, where, "check or unset RAY_ADDRESS" if from_environment
                             else "check --address")
        # A new local instance lives and dies with this command: Ray's notices about it
        # (Ray 2.5x: "Token authentication is enabled for this Ray cluster...", a logging
        # warning from ray._private.authentication) would be the only line on stderr of a
        # `--quiet` plan. A cluster's warnings (address given) still show.
        ray_logger = logging.getLogger("ray")
        level = ray_logger.level
        if target is None:
            ray_logger.setLevel(logging.ERROR)
        try:
            # a CPU count sizes a new local instance ("local": not a cluster this machine
            # runs, which would refuse num_cpus; a review)
            local = self.address is None and self.num_cpus is not None
            ray.init(address="local" if local else self.address,
                     num_cpus=self.num_cpus if self.address is None else None,
                     include_dashboard=False, log_to_driver=False,
                     ignore_reinit_error=True, configure_logging=False)
        except (ConnectionError, RuntimeError, ValueError, TimeoutError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            # a head node that answered gRPC (checked above) and still refused: Ray's token
            # authentication, on by default for `ray start` clusters since Ray 2.59; a driver
            # sends the token to a stated address only with RAY_AUTH_MODE=token
            # (docs.ray.io ray-security/token-auth; a trial read only 'Failed to connect').
            # Not said of other failures: no cluster for 'auto', a malformed address.
            token = ("; a cluster with token authentication also needs RAY_AUTH_MODE=token "
                     "and its token here (RAY_AUTH_TOKEN or ~/.ray/auth_token, docs/ray.md)"
                     if target not in (None, "auto") and _looks_like_host_port(target)
                     else "")
            raise MosaicInputError(f"--backend ray: cannot reach the Ray cluster at {where}: "
                                   f"{first[:200]}{token}") from None
        finally:
            ray_logger.setLevel(level)
        _route_cluster_messages_to_stderr(ray)
        return ray

    def run_blocks(self, function: Callable[..., Any], state: tuple[Any, ...],
                   blocks: list[range], progress: Callable[[int, int], None] | None,
                   total: int) -> list[Any]:
        """``function(*state, block)`` for every block as a Ray task, results in block order."""
        from mosaic.hardware.catalog import active_catalog, active_catalog_paths

        ray = self.connect()
        remote = ray.remote(num_cpus=1)(_block_task)
        # a user catalog (--catalog) travels with the state: a worker process has only the
        # shipped one, and a device of the user's would be unknown there
        catalog = active_catalog() if active_catalog_paths() else None
        # in a list, so Ray passes the reference and the task unpickles the state only once
        # it knows its mosaic is this one (Ray resolves only top-level ObjectRef arguments:
        # https://docs.ray.io/en/latest/ray-core/objects.html#passing-object-arguments)
        state_refs = [ray.put((function, state, catalog))]
        driver = driver_mosaic()
        pending = {remote.remote(driver.identity, state_refs, block.start, block.stop): index
                   for index, block in enumerate(blocks)}
        results: list[Any] = [None] * len(blocks)
        done = 0
        watch = _ClusterWatch.of(ray)  # the cluster's ports, looked at while no block ends
        try:
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=WAIT_POLL_S)
                if ready:
                    watch.progressed()
                lost = watch.lost() if not ready else None
                if lost is not None:
                    _abandon(ray, pending)
                    raise MosaicInputError(
                        f"--backend ray: {lost} stopped answering during the search; {done} "
                        f"of {total} geometries were done. Rerun once Ray runs again (a "
                        "cluster: `ray start`, docs/ray.md), or use --backend local")
                for ref in ready:
                    index = pending.pop(ref)
                    values, results[index] = ray.get(ref)
                    worker = InstalledMosaic(*values)
                    if worker.error or worker.identity != driver.identity:
                        _abandon(ray, pending)
                        raise _other_mosaic_error(worker, driver)
                    done += len(blocks[index])
                    if progress is not None:
                        progress(done, total)
        except _task_error(ray) as exc:
            # an exception inside a task comes wrapped (RayTaskError, its `cause` the
            # original, https://docs.ray.io/en/latest/ray-core/fault_tolerance/tasks.html);
            # raised as the local backend's processes raise it, so a MosaicInputError is one
            # line, not Ray's coloured traceback (a trial)
            cause = getattr(exc, "cause", None)
            _abandon(ray, pending)  # the other blocks' errors would follow as 'Unhandled
            # error' lines (a trial: a node without mosaic)
            if isinstance(cause, _system_error(ray)):
                # the worker could not unpickle the task's inputs or the search state: its
                # node lacks what they need (a trial: a node without mosaic read
                # 'RayTaskError(RaySystemError): ray::_call_block() (pid=..., ip=...)', and
                # 'Rerun'; the task now finds a missing or other mosaic itself, first)
                inner = getattr(cause, "client_exc", None) or cause
                raise _cannot_load_error(_worker_ip(exc), f"{type(inner).__name__}: "
                                         f"{_first_line(inner)}") from None
            if isinstance(cause, BaseException):
                raise cause from None
            raise
        except (*_cluster_failures(ray), ConnectionError) as exc:
            # a worker or node that died past Ray's retries is the cluster's failure, not a
            # mosaic bug (a trial); so is a Ray Client server lost past its reconnection
            # grace period (ConnectionError, ray/util/client/worker.py); an error inside a
            # task (RayTaskError) is handled above
            _abandon(ray, pending)
            raise MosaicInputError(
                f"--backend ray: the Ray cluster failed during the search "
                f"({type(exc).__name__}: {_first_line(exc)}); {done} of {total} geometries "
                "were done. Rerun, or use --backend local") from None
        return results


_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # Ray colours the task name in its messages


def _first_line(exc: BaseException, limit: int = 160) -> str:
    """The first line of an exception's message, without Ray's terminal colours."""
    text = _ANSI.sub("", str(exc)).strip()
    return text.splitlines()[0][:limit] if text else ""


def _cannot_load_error(at: str, error: str) -> MosaicInputError:
    """The one line for a worker (``at``: ' at IP' or '') that cannot load mosaic."""
    return MosaicInputError(
        f"--backend ray: a Ray worker{at} cannot load mosaic's search ({error}); every node "
        "needs this mosaic installed in the Python environment Ray runs (docs/ray.md), or "
        "use --backend local")


def _worker_ip(exc: BaseException) -> str:
    """' at IP' of the worker a RayTaskError names ('ray::f() (pid=1, ip=10.0.0.5)'), or ''."""
    found = re.search(r"\bip=([^),\s]+)", _ANSI.sub("", str(exc)))
    return f" at {found.group(1)}" if found else ""


def _task_error(ray: Any) -> tuple[type[BaseException], ...]:
    """Ray's RayTaskError, where this Ray defines it."""
    error = getattr(ray.exceptions, "RayTaskError", None)
    return (error,) if isinstance(error, type) else ()


def _system_error(ray: Any) -> tuple[type[BaseException], ...]:
    """Ray's RaySystemError, where this Ray defines it."""
    error = getattr(ray.exceptions, "RaySystemError", None)
    return (error,) if isinstance(error, type) else ()


@dataclass
class _ClusterWatch:
    """The ports whose refusal ends a search: (what, HOST:PORT, seconds allowed) for the head
    node's GCS and the raylet of the driver's node. Ray's driver does not notice either die:
    ray.wait keeps returning nothing until Ray ends the process with status 1 and no mosaic
    line (trials: `ray stop --force` mid-plan, 74 s with a cluster, 11 s with a local
    instance)."""

    ports: list[tuple[str, str, float]]
    first_refusal_s: dict[str, float]  # address -> time.monotonic() of its first refusal

    @classmethod
    def of(cls, ray: Any) -> _ClusterWatch:
        """The ports of the cluster ``ray`` is connected to (none where Ray does not say,
        and none through Ray Client: see :func:`_through_ray_client`)."""
        ports: list[tuple[str, str, float]] = []
        if _through_ray_client(ray):
            return cls(ports, {})
        with contextlib.suppress(Exception):  # a Ray without these public APIs: no watch
            context = ray.get_runtime_context()
            if context.gcs_address:
                ports.append((f"the Ray cluster's head node (GCS at {context.gcs_address})",
                              context.gcs_address, GCS_LOST_AFTER_S))
            node_id = context.get_node_id()
            for node in ray.nodes():
                if node.get("NodeID") == node_id and node.get("NodeManagerPort"):
                    address = f"{node['NodeManagerAddress']}:{node['NodeManagerPort']}"
                    ports.append((f"this machine's Ray node (raylet at {address})", address,
                                  RAYLET_LOST_AFTER_S))
        return cls(ports, {})

    def progressed(self) -> None:
        """A block finished: the ports are looked at only while none does, so a refusal
        seen before it and one after it are not known to be one outage (a GCS with fault
        tolerance restarted twice, minutes apart, ended the search at the second's first
        refusal); each silence is timed from its own first refusal."""
        self.first_refusal_s.clear()

    def lost(self) -> str | None:
        """What has refused connections for longer than allowed, through polls in which no
        block finished (None: all answer)."""
        now = time.monotonic()
        for what, address, allowed_s in self.ports:
            if _port_open(address):
                self.first_refusal_s.pop(address, None)
            elif now - self.first_refusal_s.setdefault(address, now) >= allowed_s:
                return what
        return None


def _through_ray_client(ray: Any) -> bool:
    """Whether ``ray`` is connected through Ray Client (``--address ray://HOST:10001``,
    https://docs.ray.io/en/latest/cluster/running-applications/job-submission/ray-client.html).
    Its runtime context reports the GCS address the head node's client server uses
    (ray/util/client/server/server.py, RUNTIME_CONTEXT, Ray 2.x): an address inside the
    cluster, which a driver that reaches only the client port (a port-forward, a firewall)
    cannot open, so watching it ended a healthy search after GCS_LOST_AFTER_S. Ray Client
    watches its own connection: a lost server raises ConnectionError once
    RAY_CLIENT_RECONNECT_GRACE_PERIOD has passed (30 s: ray/_private/ray_constants.py
    DEFAULT_CLIENT_RECONNECT_GRACE_PERIOD, raised in ray/util/client/worker.py)."""
    with contextlib.suppress(Exception):  # a Ray without Ray Client, or a stand-in
        return ray.util.client.ray.is_connected() is True
    return False


def _port_open(address: str, timeout_s: float = 2.0) -> bool:
    """Whether a TCP connection to ``address`` (HOST:PORT) opens within ``timeout_s``."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            return True
    except (OSError, ValueError):
        return False


def _abandon(ray: Any, pending: dict[Any, int]) -> None:
    """After a failure: cancel the tasks still pending and leave Ray, so its notices of
    them do not follow mosaic's one error line and its dying core worker does not end the
    process with status 1 before the CLI's 2 (a trial: `ray stop` mid-plan exited 1, with
    'Unhandled error' lines after the error)."""
    for ref in pending:
        with contextlib.suppress(Exception):
            ray.cancel(ref, force=True)
    with contextlib.suppress(Exception):
        ray.shutdown()


@dataclass(frozen=True)
class InstalledMosaic:
    """The mosaic a process imports: ``identity`` its version and a digest of the package
    files that compute (``.py``, ``.yaml``, ``.json``: code and shipped data), the same on
    two machines exactly when they run the same mosaic; ``where`` its package folder;
    ``node`` the Ray node's IP ('' on the driver); ``error`` why a worker could not import
    mosaic ('' where it could)."""

    identity: str
    where: str
    node: str = ""
    error: str = ""


def _version_checked_task() -> tuple[Callable[[], tuple[str, str, str]],
                                     Callable[..., tuple[tuple[str, ...], Any]]]:
    """(what mosaic this process imports, the Ray task of one block). Both are nested here so
    that cloudpickle ships their code with the task by value (a nested function cannot be
    imported by name; module-level ones are pickled by reference: cloudpickle's README), so
    the check runs on a worker whose mosaic is older, differs or is missing. The task
    compares its mosaic with the driver's before it unpickles any of the search, and runs
    the block only where they are the same: a worker with another mosaic computed other
    numbers without a word. Its values are plain strings, which any mosaic unpickles."""

    def installed() -> tuple[str, str, str]:
        """(identity, package folder, '') of the mosaic this process imports, or ('', '',
        the import error)."""
        import hashlib
        import pathlib

        try:
            import mosaic
        except ImportError as exc:
            return "", "", f"{type(exc).__name__}: {exc}"
        root = pathlib.Path(mosaic.__file__).parent
        digest = hashlib.sha256()
        for path in sorted(root.rglob("*")):
            if path.suffix in (".py", ".yaml", ".json") and "__pycache__" not in path.parts:
                content = path.read_bytes()
                digest.update(f"{path.relative_to(root).as_posix()}\0{len(content)}\0".encode()
                              + content)
        version = getattr(mosaic, "__version__", "?")
        return f"{version} (source {digest.hexdigest()[:12]})", str(root), ""

    worker: dict[str, tuple[str, str, str]] = {}  # filled on the worker only, once per
    # process (Ray keeps a task's function loaded in its worker process)

    def block_task(driver_identity: str, state_refs: list[Any], start: int,
                   stop: int) -> tuple[tuple[str, ...], Any]:
        import ray

        try:
            node = ray.util.get_node_ip_address()
        except Exception:  # a Ray without it: the message names no node
            node = ""
        if "mosaic" not in worker:
            worker["mosaic"] = installed()
        identity, where, error = worker["mosaic"]
        if error or identity != driver_identity:
            return (identity, where, node, error), None
        from mosaic.plan.ray_backend import _call_block

        return (identity, where, node, ""), _call_block(ray.get(state_refs[0]), start, stop)

    return installed, block_task


_installed_mosaic, _block_task = _version_checked_task()


@functools.cache
def driver_mosaic() -> InstalledMosaic:
    """The mosaic of this process (the driver), which every worker's must equal."""
    identity, where, _ = _installed_mosaic()
    return InstalledMosaic(identity, where)


def _other_mosaic_error(worker: InstalledMosaic, driver: InstalledMosaic) -> MosaicInputError:
    """The one line for a worker that cannot import mosaic or imports another one."""
    at = f" at {worker.node}" if worker.node else ""
    if worker.error:
        return _cannot_load_error(at, worker.error)
    return MosaicInputError(
        f"--backend ray: the Ray worker{at} runs mosaic {worker.identity} from {worker.where}, "
        f"this command mosaic {driver.identity} from {driver.where}: results would differ; "
        "every node needs the same mosaic (release or checkout, docs/ray.md), or use "
        "--backend local")


def _call_block(packed: tuple[Callable[..., Any], tuple[Any, ...], Any], start: int,
                stop: int) -> Any:
    from mosaic.hardware.catalog import install_catalog
    from mosaic.threads import limit_blas_threads

    limit_blas_threads()  # one task per CPU, one BLAS thread per task (mosaic.threads)
    function, state, catalog = packed
    install_catalog(catalog)  # the driver's catalog (None: the shipped one)
    return function(*state, range(start, stop))


def current_backend() -> RayBackend | None:
    """The backend set by :func:`execution_backend` (None: local processes)."""
    return _CURRENT.get()


@contextlib.contextmanager
def execution_backend(backend: RayBackend | None) -> Iterator[None]:
    """Run the layout searches started inside this block on ``backend``."""
    token = _CURRENT.set(backend)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def backend_from_options(backend: str, address: str | None,
                         workers: int | None = None) -> RayBackend | None:
    """``--backend local|ray``, ``--address`` and ``--workers`` into a backend (None =
    local); under Ray, ``workers`` caps the CPUs of a local instance started here (a trial
    found it ignored), and a cluster's size is its own."""
    if backend not in BACKENDS:
        raise MosaicInputError(f"--backend {backend!r}: allowed values are "
                               f"{', '.join(BACKENDS)}")
    if backend == "local":
        if address is not None:
            raise MosaicInputError("--address needs --backend ray")
        return None
    if address is not None and address != "auto" and not _looks_like_host_port(address):
        raise MosaicInputError(f"--address {address!r}: allowed: auto or HOST:PORT "
                               "(e.g. 10.0.0.5:6379)")
    if workers is not None and address is not None:
        raise MosaicInputError("--workers sizes the local Ray instance --backend ray starts; "
                               "a cluster (--address) runs on the CPUs it has: drop --workers")
    cpus = os.cpu_count() or 1
    if workers is not None and workers > cpus:  # (a trial's 1000 started 23 cold workers
        # on 2 cores: 43 s against 19 s with 2)
        warnings.warn(f"--workers {workers} exceeds this machine's {cpus} CPUs: the local Ray "
                      "instance starts a worker process, which imports mosaic cold, for each "
                      f"task it runs at once; --workers {cpus} is faster", MosaicWarning,
                      stacklevel=2)
    backend_obj = RayBackend(address=address, num_cpus=workers)
    backend_obj.connect()  # fail before any work when ray is missing or unreachable
    return backend_obj


def _check_reachable(address: str, where: str | None = None, remedy: str = "check --address",
                     timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """A TCP connection to the head node's GCS port, so a wrong address fails in seconds
    (ray.init itself retries for minutes); ``where`` names the address as the user gave
    it (default: the address), ``remedy`` what to change."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)),
                                      timeout=timeout_s) as connection:
            grpc = _answers_grpc(connection)
    except (OSError, ValueError) as exc:
        raise MosaicInputError(f"--backend ray: cannot reach the Ray cluster at "
                               f"{where or address} within {timeout_s:g} s ({exc}); start it "
                               f"with `ray start --head` (docs/ray.md) or {remedy}") from None
    if grpc is False:
        # another service on the port (a trial's HTTP server: ray.init retried for minutes)
        raise MosaicInputError(f"--backend ray: {where or address} answers, but not as a Ray "
                               "head node's GCS port does (gRPC); `ray start --head` prints "
                               f"the address to use (port 6379 by default), or {remedy}")


# Ray's exceptions for a worker, node or object lost under a task (ray.exceptions, Ray 2.x):
# the cluster failed, whatever the task computes
CLUSTER_FAILURES = ("WorkerCrashedError", "NodeDiedError", "LocalRayletDiedError",
                    "ObjectLostError", "RaySystemError")


def _cluster_failures(ray: Any) -> tuple[type[BaseException], ...]:
    """The :data:`CLUSTER_FAILURES` this Ray defines."""
    return tuple(getattr(ray.exceptions, name) for name in CLUSTER_FAILURES
                 if isinstance(getattr(ray.exceptions, name, None), type))


def _route_cluster_messages_to_stderr(ray: Any) -> None:
    """Ray's driver prints the cluster's error messages ('(raylet) A worker died or was
    killed ...') as is_err False, so on stdout (ray/_private/worker.py
    listen_error_messages, Ray 2.x), where they corrupted a `plan --json` when a worker
    died (a trial): they are diagnostics, and go to stderr here. A Ray without that function
    is left as it is."""
    worker = getattr(getattr(ray, "_private", None), "worker", None)
    original = getattr(worker, "print_to_stdstream", None)
    if original is None or getattr(original, "to_stderr", False):
        return

    def to_stderr(data: dict[str, Any], ignore_prefix: bool) -> Any:
        return original({**data, "is_err": True}, ignore_prefix=ignore_prefix)

    to_stderr.to_stderr = True  # type: ignore[attr-defined]
    worker.print_to_stdstream = to_stderr


# The HTTP/2 connection preface and an empty SETTINGS frame (RFC 9113 Sec. 3.4 and 6.5): a
# gRPC server, as a Ray head node's GCS is, answers with a SETTINGS frame of its own.
_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
_HTTP2_SETTINGS = 4  # frame type


# First bytes of a TLS record (RFC 8446 Sec. 5.1: alert 21, handshake 22): a cluster run
# with RAY_USE_TLS answers a plain preface so, and is left to ray.init
_TLS_RECORD_TYPES = (0x15, 0x16)


def _answers_grpc(connection: socket.socket) -> bool | None:
    """Whether the server on ``connection`` speaks HTTP/2 as gRPC does: its first frame is
    a SETTINGS frame (True); it sent something else or closed (False); it said nothing
    within the socket's timeout, or speaks TLS (None: undecided, left to ray.init)."""
    if os.environ.get("RAY_USE_TLS", "").strip() not in ("", "0"):
        return None
    header = b""
    try:
        connection.sendall(_HTTP2_PREFACE)
        while len(header) < 4:
            chunk = connection.recv(9 - len(header))
            if not chunk:
                break
            header += chunk
    except TimeoutError:
        return None
    except OSError:
        return False
    if header[:1] and header[0] in _TLS_RECORD_TYPES:
        return None
    return len(header) >= 4 and header[3] == _HTTP2_SETTINGS


def _looks_like_host_port(text: str) -> bool:
    host, sep, port = text.removeprefix("ray://").rpartition(":")
    return bool(sep and host and port.isdigit() and 0 < int(port) < 65536)
