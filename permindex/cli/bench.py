"""``permindex bench``: a load generator against a running permindex server, as redis-benchmark is
for Redis.

Several client processes (``--clients``, each with its own :class:`permindex.Client`, so the
client side is not bound by one interpreter lock) send requests for ``--duration`` seconds or until
each has sent ``--requests`` requests, whichever comes first. Each request carries ``--batch``
fingerprints or documents; the operation of each request is drawn from ``--mix`` (weights of
``query``, ``add`` and ``check`` for CheckAndAdd). Data is synthetic (``--preload`` random
fingerprints stored first under ``bench-SEED-I`` keys, queries and additions of which a fraction
``--near`` are planted near-duplicates, 0 to 3 bits from a preloaded fingerprint) or a JSONL corpus
(``--corpus``: lines of ``{"id", "fingerprint"}`` or ``{"id", "text"}``, the text fingerprinted by
the client). Every request's latency is measured on the client (time.perf_counter_ns around the
Client call: ``query_many``, ``add`` or ``check_and_add_many``, one request each); the report
gives, per operation and in total, requests and items per second and the p50, p90, p99 and max
latency, and can be written as JSON (``--json``).

It talks only to ``--address``, and stops by itself: the clients end at the deadline or the request
count, and a client that has not reported ``--timeout`` seconds after the deadline is terminated.
Keys it adds start with ``bench-`` and stay on the server.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import queue
import random
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from permindex.cli.args import CommandFactory, non_negative, positive
from permindex.cli.connection import ClientOptions
from permindex.cli.output import CommandError, counted
from permindex.errors import ServerError
from permindex.index.hamming import parse_fingerprint

if TYPE_CHECKING:
    from permindex.client import Client

__all__ = ["BenchConfig", "add_command", "format_report", "parse_mix", "preload", "run_bench"]

OPERATIONS = ("query", "add", "check")
_PRELOAD_BATCH = 10_000
_TOP = (1 << 64) - 1


@dataclass(frozen=True)
class BenchConfig:
    """What to run; see the module docstring and ``permindex bench --help``."""

    address: str
    clients: int = 4
    duration: float = 10.0
    requests: int = 0  # per client; 0: no limit but the duration
    batch: int = 1
    mix: dict[str, float] = field(default_factory=lambda: {"query": 1.0})
    k: int | None = None
    preload: int = 100_000
    near: float = 0.5
    seed: int = 1
    corpus: str | None = None
    timeout: float = 30.0
    #: TLS material, token and collection of the client options; None: plain.
    security: ClientOptions | None = None


def parse_mix(text: str) -> dict[str, float]:
    """``query=8,add=1,check=1`` (or ``query``) as {operation: weight}; raises ValueError."""
    mix: dict[str, float] = {}
    for part in text.split(","):
        name, _, weight = part.strip().partition("=")
        if name not in OPERATIONS:
            raise ValueError(f"unknown operation {name!r} in --mix (use {', '.join(OPERATIONS)})")
        value = float(weight) if weight else 1.0
        if not value >= 0:
            raise ValueError(f"weight of {name} must be >= 0, got {weight}")
        mix[name] = value
    if not sum(mix.values()) > 0:
        raise ValueError("--mix needs a positive weight")
    return mix


def _load_corpus(path: str) -> tuple[list[str], list[int]]:
    """(ids, fingerprints) of a JSONL corpus; texts are fingerprinted, too-short ones skipped."""
    from permindex.text.fingerprint import simhash_many

    opener: Callable[..., Any] = open
    if path.endswith(".gz"):
        import gzip

        opener = gzip.open
    keys: list[str] = []
    given: list[int | None] = []  # None: fingerprinted from texts[...] below
    texts: list[str] = []
    with opener(path, "rt", encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                key = str(record["id"])
                if "fingerprint" in record:
                    value = record["fingerprint"]
                    fp: int | None = parse_fingerprint(value)
                else:
                    texts.append(str(record["text"]))
                    fp = None
            except (ValueError, KeyError, TypeError) as error:
                raise ValueError(f"{path}:{number}: not a corpus line ({error})") from None
            keys.append(key)
            given.append(fp)
    found, valid = simhash_many(texts)  # too-short texts are skipped
    computed = iter(zip(found.tolist(), valid.tolist(), strict=True))
    ids: list[str] = []
    fps: list[int] = []
    for key, fp in zip(keys, given, strict=True):
        if fp is None:
            value, ok = next(computed)
            if not ok:
                continue
            fp = value
        ids.append(key)
        fps.append(fp)
    if not fps:
        raise ValueError(f"{path}: no document with a fingerprint")
    return ids, fps


def _pool(config: BenchConfig) -> tuple[list[str], list[int]]:
    """The keys and fingerprints every client draws near-duplicates from."""
    if config.corpus is not None:
        return _load_corpus(config.corpus)
    rng = np.random.default_rng(config.seed)
    fps = rng.integers(0, _TOP, config.preload, dtype=np.uint64, endpoint=True).tolist()
    return [f"bench-{config.seed}-{i}" for i in range(config.preload)], fps


def preload(client: Client, keys: list[str], fps: list[int]) -> None:
    """Store ``keys[i]`` with ``fps[i]`` through ``client``, 10,000 a request."""
    for start in range(0, len(keys), _PRELOAD_BATCH):
        client.add(
            zip(
                keys[start : start + _PRELOAD_BATCH],
                fps[start : start + _PRELOAD_BATCH],
                strict=True,
            )
        )


def _connect(config: BenchConfig, timeout: float) -> Client:
    """A Client of the server with the command line's TLS, token and collection options, a
    deadline of ``timeout`` seconds per call and one request per ``--batch`` items."""
    options = config.security or ClientOptions()
    return options.client(config.address, timeout=timeout, batch_size=max(config.batch, 1))


def _client(
    number: int,
    config: BenchConfig,
    pool: list[int],
    start_at: float,
    results: multiprocessing.Queue[dict[str, Any]],
) -> None:
    """One client process: requests until the deadline or the count; puts its latencies (ns,
    per operation) and counts on ``results``."""
    rng = random.Random(config.seed * 1_000_003 + number)
    names = [name for name in OPERATIONS if config.mix.get(name, 0) > 0]
    weights = [config.mix[name] for name in names]
    latencies: dict[str, list[int]] = {name: [] for name in names}
    items = dict.fromkeys(names, 0)
    errors = dict.fromkeys(names, 0)
    first_error = ""
    counter = 0

    def fingerprint() -> int:
        if pool and rng.random() < config.near:
            value = rng.choice(pool)
            for bit in rng.sample(range(64), rng.randint(0, 3)):
                value ^= 1 << bit
            return value
        return rng.getrandbits(64)

    client = _connect(config, config.timeout)
    calls: dict[str, Callable[[list[Any]], object]] = {
        "query": lambda fps: client.query_many(fps, k=config.k),
        "add": client.add,
        "check": lambda documents: client.check_and_add_many(documents, k=config.k),
    }
    elapsed = 0.0
    try:
        client.wait_ready(config.timeout)
        time.sleep(max(0.0, start_at - time.time()))
        began_load = time.perf_counter()
        deadline = began_load + config.duration
        sent = 0
        while time.perf_counter() < deadline and not (config.requests and sent >= config.requests):
            op = rng.choices(names, weights)[0] if len(names) > 1 else names[0]
            request: list[Any]
            if op == "query":
                request = [fingerprint() for _ in range(config.batch)]
            else:
                request = []
                for _ in range(config.batch):
                    counter += 1
                    request.append((f"bench-{config.seed}-c{number}-{counter}", fingerprint()))
            call = calls[op]
            began = time.perf_counter_ns()
            try:
                call(request)
            except ServerError as error:
                errors[op] += 1
                first_error = first_error or f"{op}: {error}"
            else:
                latencies[op].append(time.perf_counter_ns() - began)
                items[op] += config.batch
            sent += 1
        elapsed = time.perf_counter() - began_load
    except ConnectionError:  # not connected within the timeout
        first_error = f"cannot reach {config.address} within {config.timeout:g} s"
    finally:
        client.close()
    results.put(
        {
            "client": number,
            "latencies": latencies,
            "items": items,
            "errors": errors,
            "first_error": first_error,
            "seconds": elapsed,
        }
    )


def _summary(latencies_ns: list[int], items: int, errors: int, seconds: float) -> dict[str, Any]:
    values = np.array(latencies_ns, dtype=np.float64) / 1e6
    out: dict[str, Any] = {
        "requests": len(latencies_ns),
        "items": items,
        "errors": errors,
        "requests_per_second": len(latencies_ns) / seconds if seconds > 0 else 0.0,
        "items_per_second": items / seconds if seconds > 0 else 0.0,
    }
    for name, q in (("p50", 50), ("p90", 90), ("p99", 99)):
        out[f"{name}_ms"] = float(np.percentile(values, q)) if values.size else None
    out["max_ms"] = float(values.max()) if values.size else None
    return out


def run_bench(
    config: BenchConfig, *, progress: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """Run the benchmark described by ``config`` against its address; returns the report (the
    structure ``--json`` writes). Raises ConnectionError when the server cannot be reached and
    ValueError for a bad corpus."""
    say = progress or (lambda _message: None)
    keys, pool = _pool(config)
    client = _connect(config, 120.0)  # the preload's deadline per request
    try:
        try:
            client.wait_ready(min(config.timeout, 10.0))
        except ConnectionError:
            raise ConnectionError(f"cannot reach a permindex server at {config.address}") from None
        if config.corpus is None and config.preload:
            say(f"preloading {config.preload:,} fingerprints")
            began = time.perf_counter()
            preload(client, keys, pool)
            say(f"preloaded in {time.perf_counter() - began:.1f} s")
        client.timeout = config.timeout
        stats = client.stats()
    finally:
        client.close()
    context = multiprocessing.get_context("spawn")
    results: multiprocessing.Queue[dict[str, Any]] = context.Queue()
    start_at = time.time() + 1.0 + 0.3 * config.clients  # after every client has started
    processes = [
        context.Process(target=_client, args=(i, config, pool, start_at, results), daemon=True)
        for i in range(config.clients)
    ]
    for process in processes:
        process.start()
    say(f"{counted(config.clients, 'client')} for {config.duration:g} s")
    reports: list[dict[str, Any]] = []
    deadline = start_at + config.duration + config.timeout
    while len(reports) < len(processes) and time.time() < deadline:
        try:
            reports.append(results.get(timeout=max(0.1, min(1.0, deadline - time.time()))))
        except queue.Empty:
            continue
    for process in processes:
        process.join(timeout=max(0.1, deadline - time.time()))
        if process.is_alive():
            process.terminate()  # our own child, past its deadline
            process.join(timeout=5)
    # rates over the time the load really took: --requests may end it before --duration
    seconds = max((r["seconds"] for r in reports), default=config.duration) or config.duration
    ops: dict[str, Any] = {}
    all_latencies: list[int] = []
    all_items = all_errors = 0
    for name in OPERATIONS:
        if config.mix.get(name, 0) <= 0:
            continue
        latencies = [v for r in reports for v in r["latencies"].get(name, [])]
        items = sum(r["items"].get(name, 0) for r in reports)
        errors = sum(r["errors"].get(name, 0) for r in reports)
        ops[name] = _summary(latencies, items, errors, seconds)
        all_latencies += latencies
        all_items += items
        all_errors += errors
    return {
        "config": {key: value for key, value in asdict(config).items() if key != "security"},
        "server": {"count": int(stats.count), "memory_bytes": int(stats.memory_bytes)},
        "clients_reported": len(reports),
        "first_errors": [r["first_error"] for r in reports if r["first_error"]],
        "operations": ops,
        "total": _summary(all_latencies, all_items, all_errors, seconds),
        "seconds": seconds,
    }


def format_report(report: dict[str, Any]) -> str:
    """The report as a text table (one line per operation and a total)."""
    config = report["config"]
    mix = ",".join(f"{name}={weight:g}" for name, weight in config["mix"].items())
    lines = [
        f"permindex bench: {config['address']}, {counted(config['clients'], 'client')}, "
        f"{config['duration']:g} s, batch {config['batch']}, mix {mix}; "
        f"server holds {report['server']['count']:,} keys",
        f"{'op':<7}{'requests':>10}{'req/s':>11}{'items/s':>12}"
        f"{'p50 ms':>9}{'p90 ms':>9}{'p99 ms':>9}{'max ms':>9}{'errors':>8}",
    ]

    def row(name: str, s: dict[str, Any]) -> str:
        def ms(value: float | None) -> str:
            return "-" if value is None else f"{value:.3f}"

        return (
            f"{name:<7}{s['requests']:>10,}{s['requests_per_second']:>11,.0f}"
            f"{s['items_per_second']:>12,.0f}{ms(s['p50_ms']):>9}{ms(s['p90_ms']):>9}"
            f"{ms(s['p99_ms']):>9}{ms(s['max_ms']):>9}{s['errors']:>8,}"
        )

    for name, summary in report["operations"].items():
        lines.append(row(name, summary))
    if len(report["operations"]) > 1:
        lines.append(row("total", report["total"]))
    for error in report["first_errors"][:3]:
        lines.append(f"error: {error}")
    return "\n".join(lines)


# -- command line ------------------------------------------------------------------------------


def add_command(command: CommandFactory) -> None:
    """Register ``permindex bench`` with the CLI's subcommand factory."""
    bench = command(
        "bench",
        "load-test a running server (throughput, latency percentiles)",
        "Send requests to a running server from several client processes for a fixed time and\n"
        "print throughput and latency percentiles (p50, p90, p99, max) per operation.\n\n"
        "Synthetic data: --preload random fingerprints are stored first (keys bench-SEED-I);\n"
        "queries and additions are then random fingerprints, of which a fraction --near are\n"
        "planted near-duplicates (0 to 3 bits from a preloaded one). --corpus FILE.jsonl[.gz]\n"
        'uses {"id", "fingerprint"} or {"id", "text"} lines instead (nothing is preloaded).\n'
        "Bounded: every client stops at --duration or after --requests requests; it talks\n"
        "only to --address. Keys it adds start with bench- and stay on the server.\n\n"
        "examples:\n"
        "  permindex bench --clients 4 --duration 10                  single lookups\n"
        "  permindex bench --batch 1000 --mix query=8,add=1,check=1   batches, mixed\n"
        "  permindex bench --corpus docs.jsonl.gz --json bench.json",
    )
    bench.add_argument("--clients", type=positive, default=4, help="client processes (4)")
    bench.add_argument(
        "--duration", type=float, default=10.0, help="seconds of load per client (10)"
    )
    bench.add_argument(
        "--requests", type=non_negative, default=0, help="at most this many requests per client"
    )
    bench.add_argument("--batch", type=positive, default=1, help="items per request (1)")
    bench.add_argument(
        "--mix", default="query", help="operation weights, e.g. query=8,add=1,check=1 (query)"
    )
    bench.add_argument("--k", type=non_negative, default=None, help="k of queries (server's)")
    bench.add_argument(
        "--preload", type=non_negative, default=100_000, help="fingerprints stored first (100000)"
    )
    bench.add_argument(
        "--near", type=float, default=0.5, help="fraction of planted near-duplicates (0.5)"
    )
    bench.add_argument("--seed", type=non_negative, default=1, help="random seed (1)")
    bench.add_argument("--corpus", metavar="JSONL", default=None, help="documents to send")
    bench.add_argument("--json", metavar="PATH", default=None, help="also write the report here")
    bench.add_argument(
        "--timeout", type=float, default=30.0, help="seconds to wait for the server (30)"
    )
    bench.set_defaults(func=_cmd_bench)


def _cmd_bench(args: argparse.Namespace) -> int:
    if not 0 < args.duration <= 24 * 3600:
        raise CommandError("--duration must be in (0, 86400] seconds", "usage")
    if not 0 <= args.near <= 1:
        raise CommandError("--near must be between 0 and 1", "usage")
    try:
        mix = parse_mix(args.mix)
    except ValueError as error:
        raise CommandError(str(error), "usage") from None
    if args.corpus is not None and not Path(args.corpus).is_file():
        raise CommandError(f"--corpus {args.corpus}: no such file", "invalid")
    config = BenchConfig(
        address=args.address,
        clients=args.clients,
        duration=args.duration,
        requests=args.requests,
        batch=args.batch,
        mix=mix,
        k=args.k,
        preload=args.preload,
        near=args.near,
        seed=args.seed,
        corpus=args.corpus,
        timeout=args.timeout,
        security=args.connection,
    )
    try:
        report = run_bench(
            config, progress=lambda m: print(f"permindex bench: {m}", file=sys.stderr)
        )
    except ConnectionError as error:
        raise CommandError(str(error), "unavailable") from None
    except ValueError as error:
        raise CommandError(str(error), "invalid") from None
    print(format_report(report))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 1 if report["clients_reported"] < config.clients else 0
