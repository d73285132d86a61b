"""Server options and their defaults, shared by ``permindex serve`` and the server factory.

Importing this module does not import grpc.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from permindex.addresses import DEFAULT_ADDRESS
from permindex.storage.wal import FsyncPolicy

__all__ = ["ServerConfig"]


@dataclass(frozen=True)
class ServerConfig:
    """Options of one server process.

    Attributes:
        address: ``HOST:PORT`` to listen on; port 0 picks a free port. Loopback by default.
        data_dir: directory of the snapshots and the write-ahead log; created if missing.
        k: the largest Hamming distance (bits) the index answers; at most 3 for the default
            (4 blocks, 1 leading) design.
        snapshot_interval: seconds between periodic snapshots (only written when something
            changed); 0 disables them. Snapshots are also written on the Snapshot RPC and on a
            graceful stop (SIGTERM/SIGINT).
        max_message_bytes: largest gRPC message accepted or sent, bytes (default 64 MiB).
        max_batch: most documents / fingerprints / keys in one request message.
        shingle_size: words per shingle when the server fingerprints a text.
        min_words: a text with fewer words is too short: not indexed, reported as TOO_SHORT
            (0: only texts shorter than a shingle). The article SimHash deduplication here grew
            from refuses fewer than 20 words: below that one changed word moves the fingerprint
            past the threshold.
        grace_seconds: on SIGTERM/SIGINT, how long in-flight calls may take to finish, seconds.
        workers: threads serving RPCs.
        fsync: when the write-ahead log is fsynced: ``always`` (each write request, before it is
            acknowledged), ``interval`` (every ``fsync_interval`` seconds) or ``never`` (left to
            the kernel); see :mod:`permindex.storage.wal` for what each can lose.
        fsync_interval: seconds between fsyncs of the log under ``fsync="interval"``.
        truncate_corrupt_log: at the start, cut the log at a corrupt record found before its
            tail (losing the changes from there on) instead of refusing to start.
        tls_cert, tls_key: PEM certificate chain and private key: serve TLS (None: plaintext).
        tls_client_ca: PEM CA certificates: require a client certificate signed by one of them.
        token_file: bearer tokens with their roles, one ``TOKEN ROLE`` a line
            (:mod:`permindex.rpc.auth`); None: no authentication.
        insecure: allow a non-loopback address without both TLS and tokens (with a warning).
        max_key_bytes: longest key, UTF-8 bytes (at most 1,024, the index's limit).
        max_text_bytes: longest document text, UTF-8 bytes.
        max_concurrent_rpcs: calls served or queued at once; one more is refused at once with
            RESOURCE_EXHAUSTED instead of waiting in an unbounded queue.
        metrics_address: ``HOST:PORT`` of the Prometheus endpoint (``/metrics``); None: off.
    """

    address: str = DEFAULT_ADDRESS
    data_dir: Path = Path("permindex-data")
    k: int = 3
    snapshot_interval: float = 60.0
    max_message_bytes: int = 64 * 1024 * 1024
    max_batch: int = 100_000
    shingle_size: int = 3
    min_words: int = 0
    grace_seconds: float = 30.0
    workers: int = 8
    fsync: FsyncPolicy = "always"
    fsync_interval: float = 0.1
    truncate_corrupt_log: bool = False
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_client_ca: Path | None = None
    token_file: Path | None = None
    insecure: bool = False
    max_key_bytes: int = 1024
    max_text_bytes: int = 32 * 1024 * 1024
    max_concurrent_rpcs: int = 64
    metrics_address: str | None = None
