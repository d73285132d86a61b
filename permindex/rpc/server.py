"""The permindex gRPC server: :func:`create_server` (in-process, for tests and embedding) and
:func:`run_server` (the ``permindex serve`` command: signals, exit codes); the start-up and
shutdown order is in :class:`RunningServer`'s docstring.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import signal
import socket
import sys
import threading
import time
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

import grpc
from grpc_health.v1 import health_pb2_grpc
from grpc_reflection.v1alpha import _async as reflection_aio
from grpc_reflection.v1alpha import reflection_pb2_grpc

from permindex.addresses import parse_address
from permindex.errors import (
    EXIT_CODES,
    InvalidArgumentError,
    PermindexError,
    StorageError,
    exit_code_for,
)
from permindex.index import ExpiringIndex
from permindex.rpc.auth import (
    Authorization,
    TokenFile,
    exposure_problem,
    server_credentials,
)
from permindex.rpc.behaviors import Layer, ServiceHandlers
from permindex.rpc.catalog import Catalog
from permindex.rpc.config import EVENT_LOOPS, ServerConfig
from permindex.rpc.handlers import add_servicer
from permindex.rpc.health import NOT_SERVING, SERVING, HealthService, bounded
from permindex.rpc.jaccard import JaccardState
from permindex.rpc.limits import CallLimits
from permindex.rpc.memory import format_bytes
from permindex.rpc.metrics import MetricsServer
from permindex.rpc.service import SERVICE_NAME, PermIndexService
from permindex.rpc.state import ServerState
from permindex.rpc.work import Work
from permindex.storage.datadir import refuse_if_locked
from permindex.storage.snapshot import SnapshotInfo
from permindex.storage.store import Store
from permindex.text.fingerprint import simhash_many

__all__ = ["RunningServer", "create_server", "refuse_in_use", "run_server"]

log = logging.getLogger(__name__)

_T = TypeVar("_T")
#: The health service's name (grpc.health.v1).
_HEALTH_SERVICE = "grpc.health.v1.Health"
_REFLECTION_SERVICE = "grpc.reflection.v1alpha.ServerReflection"


def new_event_loop(choice: str = "auto") -> asyncio.AbstractEventLoop:
    """The server's event loop (``serve --event-loop``): ``uvloop`` (libuv), ``asyncio`` (the
    standard library's), or ``auto``: uvloop where it is installed (a dependency everywhere but
    Windows), else asyncio's. grpc.aio runs on either; what uvloop saves a unary call is in
    docs/performance.md (``benchmarks/run.py --only grpc``).

    Raises:
        ValueError: ``choice`` is not one of :data:`~permindex.rpc.config.EVENT_LOOPS`, or is
            ``uvloop`` and uvloop is not installed.
    """
    if choice not in EVENT_LOOPS:
        raise ValueError(f"event loop {choice!r}: expected auto, uvloop or asyncio")
    if choice != "asyncio":
        try:
            import uvloop
        except ImportError:
            if choice == "uvloop":
                raise ValueError(
                    "--event-loop uvloop: uvloop is not installed (pip install uvloop, or use "
                    "--event-loop asyncio)"
                ) from None
        else:
            loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
            return loop
    return asyncio.new_event_loop()


class _EventLoop:
    """An event loop (:func:`new_event_loop`) running in its own thread (``permindex-loop``),
    where the gRPC server and every call live; :meth:`call` runs a coroutine there from any
    other thread."""

    def __init__(self, choice: str = "auto") -> None:
        self.loop = new_event_loop(choice)
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="permindex-loop", daemon=True
        )
        self._thread.start()

    def call(self, coroutine: Coroutine[Any, Any, _T]) -> _T:
        """Run ``coroutine`` on the loop; block until it is done; its result or exception."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def close(self) -> None:
        """Stop the loop (after the tasks it was given are done) and end its thread."""
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


#: At shutdown, once no call is at work any more, how long what is still open (a last status,
#: a stream whose client does not read) may take before it is cancelled, seconds.
_LAST_STATUS_SECONDS = 1.0
#: Seconds without an add after which the server merges an index's runs into one per table
#: (checked this often).
MERGE_IDLE_SECONDS = 1.0
_INTERRUPTED = 128 + signal.SIGINT  # exit code after Ctrl-C during the start (the shell's 130)


class RunningServer:
    """A started server (see :func:`create_server`).

    Attributes:
        host: the host it listens on, as configured.
        port: the port it listens on (the one picked when port 0 was asked for).
        address: ``HOST:PORT`` with the actual port.
        data_dir: its data directory.
        config: the options it was started with.
        state: the index and snapshot bookkeeping shared with the servicer.
        loaded_count: keys loaded from the snapshot at start.

    Start-up order: lock the data directory, load its snapshot into a new index and replay the
    write-ahead log after it (:meth:`permindex.storage.store.Store.open`), and only then bind, start
    and report SERVING on the standard health service; a corrupt snapshot or log therefore stops the
    start before anything listens. A snapshot written with another k or design loads anyway: the
    tables are rebuilt from its (key, fingerprint) pairs with the server's options, and a warning
    says so.

    Shutdown (:meth:`RunningServer.stop`, SIGTERM, SIGINT): health goes NOT_SERVING, new calls are
    refused, in-flight calls get ``grace_seconds`` to finish, then the final snapshot is written
    (when the log holds anything it does not), the log is fsynced and closed, and the data directory
    is released.
    """

    def __init__(
        self,
        *,
        config: ServerConfig,
        server: grpc.aio.Server,
        loop: _EventLoop,
        limits: CallLimits,
        executor: ThreadPoolExecutor,
        health_servicer: HealthService,
        state: ServerState,
        host: str,
        port: int,
        loaded_count: int,
        catalog: Catalog | None = None,
    ) -> None:
        self.config = config
        self.state = state
        self.host = host
        self.port = port
        self.address = f"{host}:{port}"
        self.data_dir = Path(config.data_dir)
        self.loaded_count = loaded_count
        #: Every collection (the default one is :attr:`state`).
        self.catalog = catalog
        self._server = server
        self._loop = loop
        #: The stream and call limits (open streams: ``limits.streams``).
        self.limits = limits
        self._executor = executor
        self._health = health_servicer
        #: The Prometheus endpoint (``config.metrics_address``), or None.
        self.metrics: MetricsServer | None = None
        #: The token file in force (``config.token_file``), watched for changes; or None.
        self.tokens: TokenFile | None = None
        self._stop_lock = threading.Lock()
        self._stopping = False
        self._stopped = threading.Event()
        #: (collection, snapshot) of every snapshot the graceful stop wrote, default first.
        self.final_snapshots: list[tuple[str, SnapshotInfo]] = []
        self._periodic_wakeup = threading.Event()
        self._periodic = threading.Thread(target=self._upkeep, name="permindex-upkeep", daemon=True)
        self._periodic.start()

    def _upkeep(self) -> None:
        """Every :data:`MERGE_IDLE_SECONDS` (or the snapshot interval, if shorter): merge the
        runs of each collection's index once nothing was added to it for that long
        (:meth:`Index.merge_all_runs`: queries then probe one run per table); every
        ``config.snapshot_interval`` seconds (if > 0): snapshot the collections that changed."""
        interval = self.config.snapshot_interval
        tick = MERGE_IDLE_SECONDS if interval <= 0 else min(interval, MERGE_IDLE_SECONDS)
        next_snapshot = time.monotonic() + interval
        while not self._periodic_wakeup.wait(tick):
            try:
                self._merge_idle()
            except Exception:  # logged; the runs stay as they are and queries still answer
                log.exception("merging the index's runs failed")
            if interval > 0 and time.monotonic() >= next_snapshot:
                next_snapshot = time.monotonic() + interval
                try:
                    self._snapshot_all()  # what it wrote is in the log lines
                except Exception:  # logged and retried at the next interval; serving goes on
                    log.exception("periodic snapshot failed; retrying in %s s", interval)

    def _merge_idle(self) -> None:
        """:meth:`Index.merge_all_runs` of every collection idle for MERGE_IDLE_SECONDS, after
        expiring what is due (:meth:`ExpiringIndex.expire`) in collections with expiry."""
        states = [self.state] if self.catalog is None else [s for _, s in self.catalog.items()]
        for state in states:
            if isinstance(state.index, ExpiringIndex):
                state.index.expire()  # reclaimed even while no call comes
            if isinstance(state, JaccardState):  # a Jaccard collection: its own index
                state.jaccard.expire()
                state.jaccard.compact(0.5)  # expired and replaced rows, once half the rows
            began = time.monotonic()
            if state.index.merge_all_runs(idle=MERGE_IDLE_SECONDS):
                log.debug(
                    "merged the runs of %d keys in %.2f s",
                    len(state.index),
                    time.monotonic() - began,
                )

    def _snapshot_all(self) -> tuple[SnapshotInfo | None, list[tuple[str, SnapshotInfo]]]:
        """Snapshot every collection whose log holds changes its last snapshot does not.
        Returns the default collection's info (None: unchanged) and (collection, info) of every
        snapshot written, default first. A failure of another collection is logged; the default
        one's is raised (after the others were written)."""
        if self.catalog is None:
            info = self.state.snapshot(only_if_changed=True)
            return info, [] if info is None else [("default", info)]
        written: list[SnapshotInfo | None] = [None]
        snapshots: list[tuple[str, SnapshotInfo]] = []

        def one(name: str, state: ServerState) -> None:
            info = state.snapshot(only_if_changed=True)
            if info is not None:
                snapshots.append((name, info))
            if state is self.state:
                written[0] = info

        self.catalog.each(one)
        snapshots.sort(key=lambda item: item[1] is not written[0])  # default first
        return written[0], snapshots

    def snapshot(self) -> SnapshotInfo:
        """Write a snapshot now (whether or not anything changed).

        Raises:
            SnapshotWriteError: it could not be written; the previous one stays.
        """
        info = self.state.snapshot()
        if info is None:  # pragma: no cover - only_if_changed=False always writes
            raise RuntimeError("snapshot skipped")
        return info

    @property
    def stopped(self) -> bool:
        """Whether :meth:`stop` has finished."""
        return self._stopped.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until :meth:`stop` has finished (or ``timeout`` seconds); whether it has."""
        return self._stopped.wait(timeout)

    def stop(self, grace: float | None = None) -> SnapshotInfo | None:
        """Stop gracefully, then write the final snapshot; idempotent (a second call returns
        None at once).

        Health goes NOT_SERVING; every stream waiting for its client (an idle Ingest or
        QueryColumns, a response stream the client does not read) and every health watch is
        closed with UNAVAILABLE at once; new calls are refused (UNAVAILABLE); in-flight unary
        calls and the batches already received on streams get ``grace`` seconds (default:
        ``config.grace_seconds``) to finish and are cancelled after that (and once none is at
        work, what is left a second later is cancelled: a stream whose client does not read
        cannot send its status, and does not hold the stop); then a snapshot is
        written if the log holds changes the last one does not, the log is fsynced (whatever the
        fsync policy) and closed, and the data directory is released.

        Returns:
            The final snapshot's info, or None when nothing had changed (or already stopped).

        Raises:
            SnapshotWriteError: the final snapshot could not be written (the server is stopped
                and the data directory released all the same).
        """
        with self._stop_lock:
            if self._stopping:
                return None
            self._stopping = True
        grace = self.config.grace_seconds if grace is None else grace
        log.info("stopping: in-flight calls have %s s to finish", grace)
        try:
            self._loop.call(self._stop_serving(grace))
            self._periodic_wakeup.set()
            self._periodic.join()
            self._executor.shutdown(wait=True)  # index work still running after the grace end
            self._loop.close()
            info, self.final_snapshots = self._snapshot_all()
            written = len(self.final_snapshots)
            log.info(
                "stopped (%s)",
                f"{written} final snapshot{'' if written == 1 else 's'} written"
                if written
                else "nothing to snapshot",
            )
            return info
        finally:
            if self.catalog is not None:
                self.catalog.close(skip_default=True)
            try:
                self.state.store.close()
            except StorageError as error:  # nothing lost if the final snapshot was written
                log.error("closing the write-ahead log failed: %s", error)
            if self.metrics is not None:
                self.metrics.close()
            if self.tokens is not None:
                self.tokens.close()
            self._stopped.set()

    async def _stop_serving(self, grace: float) -> None:
        """Health NOT_SERVING, idle streams closed and new calls refused
        (:meth:`CallLimits.close`); then, once no call is at work or ``grace`` seconds have
        passed, gRPC's stop, which gives what is still open (a last status on its way, a
        stream whose client does not read and so cannot take its status either) at most
        :data:`_LAST_STATUS_SECONDS` more before it cancels it. One call of gRPC's stop: a
        second one racing the first has crashed the process."""
        self._health.set_all(NOT_SERVING)
        self.limits.close()
        loop = asyncio.get_running_loop()
        began = loop.time()
        try:
            await asyncio.wait_for(self.limits.wait_idle(), grace)
        except TimeoutError:
            log.info(
                "grace period over: cancelling the %d call(s) still at work", self.limits.working
            )
        left = max(0.0, grace - (loop.time() - began))
        await self._server.stop(min(left, _LAST_STATUS_SECONDS))

    def __enter__(self) -> RunningServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _bind_errors(host: str, port: int) -> list[OSError]:
    """What binding ``host``:``port`` now would meet (``host`` bracketed for IPv6 or not): a
    probe socket (SO_REUSEADDR, as gRPC and the metrics endpoint set it) bound to every
    address the host resolves to; the error of each that failed, in resolution order, or the
    single ``socket.gaierror`` when the host does not resolve; empty when every bind worked."""
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        candidates = socket.getaddrinfo(
            bare, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as error:
        return [error]
    errors: list[OSError] = []
    for family, kind, proto, _, sockaddr in candidates:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(sockaddr)
            except OSError as error:
                errors.append(error)
    return errors


def _refuse_port_in_use(host: str, port: int, address: str) -> None:
    """Raise a clear OSError when ``port`` is already in use on ``host`` (checked with a probe
    socket before gRPC tries, which would only log a C-level error line). Other bind errors are
    left for gRPC to judge (e.g. an IPv6 address of "localhost" on a host without IPv6)."""
    if port == 0:
        return
    for error in _bind_errors(host, port):
        if error.errno == errno.EADDRINUSE and not isinstance(error, socket.gaierror):
            raise OSError(
                error.errno, f"cannot listen on {address}: the address is in use"
            ) from error


def refuse_in_use(config: ServerConfig) -> int | None:
    """None when the gRPC address (``config.address``) is not in use, the metrics address
    (``config.metrics_address``) can be listened on, and no other process holds the data
    directory (``config.data_dir``), as probes find now; else the error printed as
    :func:`run_server` prints it, and its exit code: 2 (a usage error) for a gRPC address in
    use and a metrics address in use, not local, unresolvable, or on the gRPC address's own
    port; 7 for a data directory held by another server. ``permindex serve`` asks before it
    loads the kernels (seconds on a first start, more on a busy machine), so that the error
    comes at once; :func:`run_server` checks again when it binds and locks them."""
    try:
        host, port = parse_address(config.address)
        _refuse_port_in_use(host, port, config.address)
        if config.metrics_address is not None:
            problem = _metrics_address_problem(config.metrics_address, host, port)
            if problem is not None:
                print(
                    f"permindex: error: --metrics-address {config.metrics_address}: cannot "
                    f"listen there: {problem}",
                    file=sys.stderr,
                    flush=True,
                )
                return EXIT_CODES["usage"]
        refuse_if_locked(Path(config.data_dir))
    except Exception as error:
        return _report_start_error(error)
    return None


def _metrics_address_problem(address: str, grpc_host: str, grpc_port: int) -> str | None:
    """Why the metrics endpoint cannot listen on ``address`` (``HOST:PORT``, already checked
    for its form), found by binding a probe socket to every address it resolves to; None when
    it can. Its port equal to the gRPC address's (``grpc_host``, ``grpc_port``, port 0 aside)
    on the same host is a problem too (the server would take it first)."""
    host, port = parse_address(address)
    if port != 0 and port == grpc_port and host == grpc_host:
        return f"it is the port of --address {grpc_host}:{grpc_port}"
    errors = _bind_errors(host, port)
    if not errors:
        return None
    error = errors[0]
    if isinstance(error, socket.gaierror):
        return f"the host cannot be resolved ({error.strerror})"
    if error.errno == errno.EADDRINUSE:
        return "the address is in use"
    return f"{error.strerror or error} (not an address of this machine?)"


def _report_start_error(error: Exception) -> int:
    """Print why the server could not start (one line on stderr) and return the exit code:
    :func:`~permindex.errors.exit_code_for`, except 2 for a ``--address`` in use (a bad
    command line, as a bad port is)."""
    log.debug("start failed", exc_info=error)
    if (
        not isinstance(error, OSError)
        or error.errno != errno.EADDRINUSE
        or isinstance(error, PermindexError)
    ):
        print(f"permindex: error: {_one_line(error)}", file=sys.stderr, flush=True)
        return exit_code_for(error)
    print(
        f"permindex: error: {error.strerror} (another server? stop it, or choose another "
        "port; port 0 picks a free one)",
        file=sys.stderr,
        flush=True,
    )
    return EXIT_CODES["usage"]


def _raise_file_limit(connections: int) -> None:
    """Raise this process's soft limit of open files to its hard limit (each connection is a
    file descriptor; systemd's default soft limit is 1,024), and warn when the hard limit is
    below ``connections`` plus room for the data files."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not on POSIX
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as error:  # pragma: no cover - refused by the system
            log.debug("could not raise the open-file limit: %s", error)
    if soft != resource.RLIM_INFINITY and soft < connections + 64:
        log.warning(
            "the open-file limit is %d, below --max-connections %d plus room for data files: "
            "raise it (ulimit -n, systemd LimitNOFILE) or lower --max-connections",
            soft,
            connections,
        )


def create_server(config: ServerConfig) -> RunningServer:
    """Load ``config.data_dir``, then start serving ``permindex.v1.PermIndex`` (plus standard
    health checking and server reflection) on ``config.address``.

    Nothing listens until the data is loaded and the compiled kernels (lookups, fingerprints)
    are loaded; health reports SERVING from then on. Messages up to
    ``config.max_message_bytes`` are accepted and sent; request bytes that are not a valid message
    for their RPC get INVALID_ARGUMENT (the handlers of :mod:`permindex.rpc.handlers`). With
    ``config.snapshot_interval`` > 0, a thread snapshots every that many seconds when anything
    changed.

    Returns:
        The :class:`RunningServer` (``.port`` is the actual port when port 0 was asked for).

    Raises:
        CorruptFileError: the snapshot or the log is corrupt, foreign, truncated or of an unknown
            version, or the log is damaged before its tail (see :mod:`permindex.storage.wal`);
            nothing is served.
        DataDirLockedError: another server owns the data directory (the message names its pid).
        InvalidArgumentError: a malformed address or option (e.g. k too large for the design).
        OSError: the address cannot be bound (in use, not local), or the data directory cannot
            be created or read.
    """
    host, port = parse_address(config.address)
    credentials = server_credentials(config)  # files read (and options checked) before loading
    tokens = TokenFile(config.token_file) if config.token_file is not None else None
    exposed = exposure_problem(config)
    if exposed is not None and not config.insecure:
        raise InvalidArgumentError(f"refusing to start: {exposed}; pass --insecure to accept")
    if exposed is not None:
        log.warning("insecure: %s", exposed)
    _refuse_port_in_use(host, port, config.address)
    _raise_file_limit(config.max_connections)
    store = Store.open(
        config.data_dir,
        k=config.k,
        expire_after=config.expire_after,
        fsync=config.fsync,
        fsync_interval=config.fsync_interval,
        truncate_corrupt_log=config.truncate_corrupt_log,
    )
    index = store.index
    # The text path's compiled kernel loaded (or compiled, once per install) before anything
    # listens, as the index's are by the Index: no request pays for it.
    simhash_many(["load the fingerprint kernel now"])
    metrics = MetricsServer() if config.metrics_address is not None else None
    catalog: Catalog | None = None
    executor: ThreadPoolExecutor | None = None
    loop: _EventLoop | None = None
    started: grpc.aio.Server | None = None
    try:
        state = ServerState(store, config)
        executor = ThreadPoolExecutor(
            max_workers=config.workers, thread_name_prefix="permindex-work"
        )
        catalog = Catalog(config, state)
        catalog.load()  # every other collection, recovered before anything listens
        _warn_above_limit(catalog)
        loop = _EventLoop(config.event_loop)
        server, limits, health_service, port = loop.call(
            _start(config, state, catalog, executor, metrics, tokens, credentials)
        )
        started = server
        if metrics is not None and config.metrics_address is not None:
            metrics.watch(catalog, names=not config.metrics_hide_collections)
            try:
                metrics.serve(config.metrics_address)
            except OSError as error:
                raise OSError(
                    error.errno,
                    f"--metrics-address {config.metrics_address}: cannot listen there: "
                    f"{error.strerror or error}",
                ) from None
    except BaseException:
        if catalog is not None:
            catalog.close(skip_default=True)
        if metrics is not None:
            metrics.close()
        if loop is not None:
            if started is not None:
                loop.call(started.stop(None))
            loop.close()
        if executor is not None:
            executor.shutdown(wait=False)
        store.close()
        raise
    loop.loop.call_soon_threadsafe(health_service.set_all, SERVING)
    running = RunningServer(
        config=config,
        server=server,
        loop=loop,
        limits=limits,
        executor=executor,
        health_servicer=health_service,
        state=state,
        host=host,
        port=port,
        loaded_count=len(index),
        catalog=catalog,
    )
    running.metrics = metrics
    if tokens is not None:
        running.tokens = tokens
        tokens.start()
    log.info("serving on %s (%d keys)", running.address, len(index))
    return running


def _warn_above_limit(catalog: Catalog) -> None:
    """Warn when the data loaded is above ``--max-memory`` already: the server starts (reads
    and removes are served) and refuses writes until it is under it."""
    memory = catalog.memory
    if memory.limit is not None and memory.used() > memory.limit:
        log.warning(
            "the data loaded holds %s, above --max-memory %s: writes are refused until data is "
            "removed or the limit raised",
            format_bytes(memory.used()),
            format_bytes(memory.limit),
        )


def _server_options(config: ServerConfig) -> list[tuple[str, Any]]:
    """The gRPC channel arguments of the server: message sizes, keepalive, no shared port."""
    return [
        ("grpc.max_receive_message_length", config.max_message_bytes),
        ("grpc.max_send_message_length", config.max_message_bytes),
        ("grpc.so_reuseport", 0),  # a port in use is an error, not silently shared
        # ping a connection idle for keepalive_seconds; drop it (and its calls) when the peer
        # does not answer within keepalive_timeout_seconds: a client gone without a goodbye
        # frees its streams
        ("grpc.keepalive_time_ms", int(config.keepalive_seconds * 1000)),
        ("grpc.keepalive_timeout_ms", int(config.keepalive_timeout_seconds * 1000)),
        # without it the server sends the pings but never gives up on an unanswered one
        # (grpcio 1.85: a SIGSTOPped client held its streams for good)
        ("grpc.http2.ping_timeout_ms", int(config.keepalive_timeout_seconds * 1000)),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
        # clients may ping every 10 s (gRPC's default refuses pings more often than 5 min)
        ("grpc.http2.min_recv_ping_interval_without_data_ms", 10_000),
        ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
        # connections beyond this are closed at once; one that has not finished its HTTP/2 (or
        # TLS) handshake within 10 s is closed: silent sockets cannot hold file descriptors
        ("grpc.max_allowed_incoming_connections", config.max_connections),
        ("grpc.server_handshake_timeout_ms", 10_000),
    ]


async def _start(
    config: ServerConfig,
    state: ServerState,
    catalog: Catalog,
    executor: ThreadPoolExecutor,
    metrics: MetricsServer | None,
    tokens: TokenFile | None,
    credentials: grpc.ServerCredentials | None,
) -> tuple[grpc.aio.Server, CallLimits, HealthService, int]:
    """Build, bind and start the asyncio server (on the event loop); health NOT_SERVING."""
    calls = None if metrics is None else metrics.calls
    limits = CallLimits(
        max_streams=config.max_streams,
        max_streams_per_address=config.max_streams_per_address,
        max_unary=config.max_concurrent_rpcs,
        idle_seconds=config.stream_idle_seconds,
        on_refused=None if calls is None else calls.streams_refused_by,
        on_idle_closed=None if calls is None else calls.idle_closed.inc,
    )
    # metrics outermost, so that calls refused by a limit are counted too; the token check
    # comes before all of them, from the call's metadata (Authorization: a caller without a
    # token holds no stream, and its request is never read), its refusals counted by the metrics
    layers: list[Layer] = [*([calls.wrap] if calls is not None else []), limits.wrap]
    authorization = None if tokens is None else Authorization(tokens)
    server = grpc.aio.server(options=_server_options(config))
    services = ServiceHandlers()  # every service's handlers, wrapped by the layers once
    health_service = HealthService(limits, ("", SERVICE_NAME))
    health_pb2_grpc.add_HealthServicer_to_server(health_service, services)
    services.services[_HEALTH_SERVICE] = bounded(services.services[_HEALTH_SERVICE])
    # our handlers, not the generated add_PermIndexServicer_to_server: a malformed request
    # gets INVALID_ARGUMENT instead of INTERNAL (see permindex.rpc.handlers)
    servicer = PermIndexService(
        state,
        catalog,
        work=Work(executor),
        on_budget_refused=None if calls is None else calls.budget_refusals.inc,
    )
    add_servicer(servicer, services, max_batch=config.max_batch, authorization=authorization)
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(
        reflection_aio.ReflectionServicer((SERVICE_NAME, _HEALTH_SERVICE, _REFLECTION_SERVICE)),
        services,
    )
    services.register(
        server,
        layers,
        authorization=authorization,
        refusal_layer=None if calls is None else calls.wrap,
    )
    try:
        if credentials is None:
            port = server.add_insecure_port(config.address)
        else:
            port = server.add_secure_port(config.address, credentials)
    except RuntimeError as error:
        port = 0
        log.debug("binding %s failed: %s", config.address, error)
    if port == 0:
        await server.stop(None)
        raise OSError(
            errno.EADDRINUSE,
            f"cannot listen on {config.address}: the address is in use or not local",
        )
    await server.start()
    return server, limits, health_service, port


def _loaded(running: RunningServer) -> str:
    """``N keys`` (the default collection), with the other collections' when there are any."""
    text = f"{running.loaded_count} key{'' if running.loaded_count == 1 else 's'}"
    others = [] if running.catalog is None else list(running.catalog.items())
    others = [(name, state) for name, state in others if state is not running.state]
    if others:
        count = sum(len(state.index) for _, state in others)
        text += (
            f", and {count} key{'' if count == 1 else 's'} in {len(others)} other "
            f"collection{'' if len(others) == 1 else 's'}"
        )
    return text


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return text


def run_server(config: ServerConfig, *, stop_event: threading.Event | None = None) -> int:
    """Run a server until SIGTERM or SIGINT (or ``stop_event``), then stop gracefully.

    Prints exactly one line to stderr once serving::

        permindex: serving on HOST:PORT (N keys loaded from DIR)

    (with ", and M keys in C other collections" after N keys when there are others).

    Signal handlers (SIGTERM, SIGINT, SIGHUP) are installed when called from the main thread
    (they are restored on return); a second signal while stopping is ignored (the final
    snapshot is never cut short).

    Returns:
        0 after a clean stop; otherwise the exit code of :func:`permindex.errors.exit_code_for`
        for the error, which is reported on stderr in one line (never a traceback): a corrupt
        snapshot, a locked data directory, a failed final snapshot; 2 for an address that is in
        use (``--address`` cannot be used, as with a bad port); 130
        when SIGINT (Ctrl-C) arrives while the data is still loading.

    Logging is left to the caller: configure the ``permindex`` loggers (e.g.
    ``logging.basicConfig(level=logging.INFO)``) to see snapshots and shutdown on stderr;
    without that, only warnings and errors appear.
    """
    try:
        running = create_server(config)
    except KeyboardInterrupt:
        print("permindex: interrupted while starting; nothing served", file=sys.stderr, flush=True)
        return _INTERRUPTED
    except Exception as error:
        return _report_start_error(error)
    stop = stop_event if stop_event is not None else threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if stop.is_set():
            log.warning("%s: already stopping", signal.Signals(signum).name)
        else:
            log.info("%s: stopping", signal.Signals(signum).name)
        stop.set()

    previous: dict[signal.Signals, object] = {}
    if threading.current_thread() is threading.main_thread():
        # SIGHUP too: closing the terminal a server runs in stops it gracefully (final snapshot).
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            previous[signum] = signal.signal(signum, on_signal)
    try:
        metrics = running.metrics
        print(
            f"permindex: serving on {running.address} ({_loaded(running)} loaded "
            f"from {Path(config.data_dir).resolve()}"
            + ("" if metrics is None else f"; metrics on http://{metrics.address}/metrics")
            + ")",
            file=sys.stderr,
            flush=True,
        )
        while not stop.wait(0.5):
            pass
        try:
            running.stop(config.grace_seconds)
        except Exception as error:
            print(f"permindex: error: {_one_line(error)}", file=sys.stderr, flush=True)
            return exit_code_for(error)
        done = (
            "; ".join(
                f"snapshot of {written.count} key{'' if written.count == 1 else 's'} "
                f"written to {written.path}"
                for _, written in running.final_snapshots
            )
            or "no snapshot needed: nothing changed since the last one or the start"
        )
        print(f"permindex: stopped; {done}", file=sys.stderr, flush=True)
        return 0
    finally:
        if not running.stopped:  # an exception before stop (e.g. KeyboardInterrupt)
            running.stop(config.grace_seconds)
        for signum, handler in previous.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]
