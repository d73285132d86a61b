"""Prometheus metrics of a server over HTTP (``serve --metrics-address HOST:PORT``, off by
default): the per-server registry, the gauges read at scrape time (:class:`StateCollector`), the
RPC counters and latency histogram (:class:`CallMetrics`), and the HTTP endpoint
(:class:`MetricsServer`, whose docstring lists what is exported).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import grpc
from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from permindex.rpc.behaviors import Behavior, Send, rewrap
from permindex.rpc.state import ServerState, resident_memory_bytes

__all__ = ["CallMetrics", "MetricsServer", "StateCollector"]

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from permindex.rpc.catalog import Catalog

    _Handler = grpc.RpcMethodHandler[Any, Any]
else:
    _Handler = Any

#: Latency buckets, seconds: 100 µs to 60 s.
_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
            1.0, 2.5, 5.0, 10.0, 30.0, 60.0)  # fmt: skip


def _wal_files(state: ServerState) -> list[Any]:
    return sorted(state.data_dir.path.glob("wal-*.log"))


class StateCollector(Collector):
    """The gauges of every collection of a :class:`~permindex.rpc.catalog.Catalog`, read at
    each scrape; with ``names=False`` summed over the collections under ``collection="all"``
    (the ages: the largest), so that the endpoint does not reveal the collections' names."""

    def __init__(self, catalog: Catalog, *, names: bool = True) -> None:
        self._catalog = catalog
        self._names = names

    def collect(self) -> Iterable[GaugeMetricFamily]:
        help_of = {
            "permindex_fingerprints": "Keys stored.",
            "permindex_index_memory_bytes": "The index's estimate of its memory.",
            "permindex_snapshot_bytes": "Last snapshot's size, bytes.",
            "permindex_snapshot_keys": "Keys in the last snapshot.",
            "permindex_snapshot_age_seconds": "Seconds since the last snapshot was written.",
            "permindex_wal_bytes": "Bytes in the write-ahead log.",
            "permindex_wal_segments": "Segment files of the log.",
            "permindex_wal_sequence": "Last change logged.",
            "permindex_wal_last_write_age_seconds": "Seconds since the log was last written.",
        }
        ages = {"permindex_snapshot_age_seconds", "permindex_wal_last_write_age_seconds"}
        series: dict[str, dict[str, float]] = {name: {} for name in help_of}
        uptime = 0.0
        for name, state in self._catalog.items():
            label = name if self._names else "all"

            def put(metric: str, value: float, label: str = label) -> None:
                values = series[metric]
                if metric in ages:
                    values[label] = max(values.get(label, 0.0), value)
                else:
                    values[label] = values.get(label, 0.0) + value

            put("permindex_fingerprints", len(state.index))
            put("permindex_index_memory_bytes", state.index.memory_bytes())
            snapshot = state.last_snapshot
            if snapshot is not None:
                put("permindex_snapshot_bytes", snapshot.bytes)
                put("permindex_snapshot_keys", snapshot.count)
                put(
                    "permindex_snapshot_age_seconds",
                    max(0.0, time.time() - snapshot.created_unix_seconds),
                )
            sizes = []
            newest = 0.0
            for path in _wal_files(state):
                try:
                    status = path.stat()
                except OSError:  # deleted by a snapshot meanwhile
                    continue
                sizes.append(status.st_size)
                newest = max(newest, status.st_mtime)
            put("permindex_wal_bytes", sum(sizes))
            put("permindex_wal_segments", len(sizes))
            put("permindex_wal_sequence", state.store.sequence)
            if newest:
                put("permindex_wal_last_write_age_seconds", max(0.0, time.time() - newest))
            uptime = max(uptime, state.uptime_seconds)
        for metric, values in series.items():
            family = GaugeMetricFamily(metric, help_of[metric], labels=["collection"])
            for label, value in values.items():
                family.add_metric([label], value)
            yield family
        resident = GaugeMetricFamily(
            "permindex_resident_memory_bytes", "Resident memory of the server process, bytes."
        )
        resident.add_metric([], resident_memory_bytes())
        yield resident
        memory = self._catalog.memory
        limit = GaugeMetricFamily(
            "permindex_memory_limit_bytes", "The memory limit (serve --max-memory); 0: none."
        )
        limit.add_metric([], memory.limit or 0)
        yield limit
        used = GaugeMetricFamily(
            "permindex_memory_used_bytes",
            "What --max-memory is checked against: the index memory of every collection, plus\n"
            "the writes admitted and being applied, bytes.",
        )
        used.add_metric([], memory.used())
        yield used
        started = GaugeMetricFamily("permindex_uptime_seconds", "Seconds since the start.")
        started.add_metric([], uptime)
        yield started


def _code_name(context: Any, default: str) -> str:
    code = context.code()
    if isinstance(code, grpc.StatusCode):
        return code.name
    return default


class CallMetrics:
    """Counts every call by method and status code and times it (a call layer, :meth:`wrap`),
    and counts the refusals of the limits."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "permindex_rpc_requests",
            "Calls finished, by method and status code.",
            ["method", "code"],
            registry=registry,
        )
        self.errors = Counter(
            "permindex_rpc_errors",
            "Calls finished with a status other than OK, by method and code.",
            ["method", "code"],
            registry=registry,
        )
        self.streams_refused = Counter(
            "permindex_streams_refused",
            "Calls refused at once for a limit: streams in all (--max-streams), from one address\n"
            "(--max-streams-per-address), unary calls at once (--max-concurrent-rpcs).",
            ["limit"],
            registry=registry,
        )
        self.idle_closed = Counter(
            "permindex_streams_idle_closed",
            "Streams closed because their client sent or read nothing for --stream-idle-seconds.",
            registry=registry,
        )
        self.budget_refusals = Counter(
            "permindex_budget_refusals",
            "Pairs, Clusters, Flags and ExactDuplicates calls refused by --max-join-work.",
            registry=registry,
        )
        self.duration = Histogram(
            "permindex_rpc_duration_seconds",
            "Call latency, seconds, by method.",
            ["method"],
            buckets=_BUCKETS,
            registry=registry,
        )

    def streams_refused_by(self, limit: str) -> None:
        """Count one call refused by ``limit`` (see :class:`permindex.rpc.limits.CallLimits`)."""
        self.streams_refused.labels(limit).inc()

    def _observe(self, method: str, code: str, began: float) -> None:
        self.requests.labels(method, code).inc()
        if code != "OK":
            self.errors.labels(method, code).inc()
        self.duration.labels(method).observe(time.perf_counter() - began)

    def wrap(self, method_path: str, handler: _Handler) -> _Handler:
        """``handler`` of ``method_path`` counted and timed (a call layer; put it outermost, so
        that calls refused by the token check or a limit are counted too)."""
        method = method_path.rsplit("/", 1)[-1]
        observe = self._observe

        def layer(inner: Behavior) -> Behavior:
            async def observed(request: Any, context: Any, send: Send) -> Any:
                began = time.perf_counter()
                code = "OK"
                try:
                    return await inner(request, context, send)
                except asyncio.CancelledError:
                    code = "CANCELLED"
                    raise
                except BaseException:
                    code = _code_name(context, "UNKNOWN")
                    raise
                finally:
                    if code == "OK":
                        code = _code_name(context, "OK")
                    observe(method, code, began)

            return observed

        return rewrap(handler, layer)


class MetricsServer:
    """The registry of one server, its interceptor and (once :meth:`serve` is called) the HTTP
    endpoint.

    Each server has its own registry (two servers in one process do not mix their numbers).
    The endpoint needs no token: it listens where ``--metrics-address`` says (loopback in the
    examples; anyone who can reach it reads it), and reveals the collections' names in its
    ``collection`` labels, their sizes and write activity, and the methods called; with
    ``--metrics-hide-collections`` the gauges are summed under ``collection="all"`` instead.
    Exported (``collection`` labels name the collection; the default one is ``default``):

    - ``permindex_rpc_requests_total``: calls finished, by ``method`` and status ``code``
      (``OK``, ``INVALID_ARGUMENT``, ``UNAUTHENTICATED``...), refused calls included;
    - ``permindex_rpc_errors_total``: the same, only for codes other than ``OK``;
    - ``permindex_streams_refused_total``: calls refused at once by a limit, by ``limit``
      (``streams``, ``streams_per_address``, ``unary``);
    - ``permindex_streams_idle_closed_total``: streams closed as idle (``--stream-idle-seconds``);
    - ``permindex_budget_refusals_total``: join calls refused by ``--max-join-work``;
    - ``permindex_rpc_duration_seconds``: latency histogram by ``method`` (a streaming call:
      from its start to its last message);
    - ``permindex_fingerprints``: keys stored, by ``collection``;
    - ``permindex_index_memory_bytes``: the index's own estimate of its memory, by
      ``collection``;
    - ``permindex_resident_memory_bytes``: the server process's resident memory (VmRSS);
    - ``permindex_memory_limit_bytes``: ``serve --max-memory`` (0: no limit);
    - ``permindex_memory_used_bytes``: what that limit is checked against, server-wide
      (:mod:`permindex.rpc.memory`): ``permindex_index_memory_bytes`` summed, plus the writes
      admitted and being applied;
    - ``permindex_snapshot_bytes``: size of the last snapshot loaded or written (this and all
      below but the uptime: by ``collection``);
    - ``permindex_snapshot_keys``: keys in it;
    - ``permindex_snapshot_age_seconds``: seconds since it was written (absent before the
      first);
    - ``permindex_wal_bytes``: bytes in the write-ahead log's segment files;
    - ``permindex_wal_segments``: segment files of the log;
    - ``permindex_wal_sequence``: sequence number of the last change logged;
    - ``permindex_wal_last_write_age_seconds``: seconds since the log was last written;
    - ``permindex_uptime_seconds``: seconds since the server started.

    The gauges are read when Prometheus scrapes (a custom collector), so they cost nothing
    between scrapes; RPC counters and histograms are updated by a call layer at the end
    of each call.
    """

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.calls = CallMetrics(self.registry)
        self._httpd: Any = None
        self.address: str | None = None

    def watch(self, catalog: Catalog, *, names: bool = True) -> None:
        """Export the gauges of every collection of ``catalog`` (``names=False``: summed,
        without the collections' names; :class:`StateCollector`)."""
        self.registry.register(StateCollector(catalog, names=names))

    def serve(self, address: str) -> str:
        """Serve ``/metrics`` on ``HOST:PORT`` (port 0 picks one); the actual address.

        Raises:
            OSError: the address cannot be bound.
        """
        host, _, port = address.rpartition(":")
        bare = host[1:-1] if host.startswith("[") else host
        self._httpd, _ = start_http_server(int(port), addr=bare, registry=self.registry)
        self.address = f"{host}:{self._httpd.server_port}"
        log.info("metrics on http://%s/metrics", self.address)
        return self.address

    def close(self) -> None:
        """Stop the HTTP endpoint (if any)."""
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
