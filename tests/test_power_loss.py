"""Power cuts under a real server: nothing acknowledged is lost.

``kill -9`` keeps the operating system's page cache, so it cannot tell whether the server made
durable what it acknowledged. These tests run ``permindex serve`` on a FUSE file system that,
at a simulated power cut, drops every file byte and every directory entry not yet made durable
by fsync (``tests/power_loss_fs.py``, mounted by :class:`power_loss.PowerLossDisk`). After each
cut the server is restarted on what survived, and every acknowledged change -- keys added,
replaced and removed, collections created and dropped -- is checked through Export and
ListCollections.

First the file system itself is tested (written without fsync: gone; fsynced: kept; a name
created, renamed or removed without an fsync of its directory: undone). Then the server: the
issue's three endings of an acknowledged collection (kill -9, SIGTERM, Snapshot), a dropped
collection, and rounds of mixed writes (unary adds, streaming ingest, removes, collection create
and drop, snapshots and log rotation at any moment, graceful stops) cut at random moments and
right when a temporary file, a new log segment, a snapshot or a collection folder appears.
``--fsync always`` must lose nothing acknowledged; ``interval`` at most the last interval; names
(collections) are durable under every policy. :data:`ROUNDS` rounds run in the default suite;
``pytest -m power_loss_soak`` runs :data:`SOAK_ROUNDS` more.

Skipped, with the reason, where FUSE is not available (no ``/dev/fuse``, no libfuse 3, no
mfusepy).
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from power_loss import PowerLossDisk, unavailable
from serverproc import ServeProcess

from permindex import Client
from permindex.errors import PermindexError

UNAVAILABLE = unavailable()
pytestmark = [
    pytest.mark.skipif(UNAVAILABLE is not None, reason=f"power-loss tests: {UNAVAILABLE}"),
    pytest.mark.timeout(600),
]

ROUNDS = 8  # mixed rounds with cuts in the default suite (about 15 s)
SOAK_ROUNDS = 200  # and behind the power_loss_soak marker
POOL = 400  # keys per collection
NAMES = ("alpha", "beta", "gamma")  # collections the rounds create and drop
#: Names whose creation the mixed rounds cut right after: a log segment or a snapshot being
#: written (temporary files), a snapshot or segment renamed into place, a collection being
#: created or dropped.
TRIGGERS = (
    ".wal-*.tmp",
    "wal-*.log",
    ".snapshot.pmx.*.tmp",
    "snapshot.pmx",
    ".creating-*",
    ".dropped-*",
    "collection.json",
)


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[PowerLossDisk]:
    with PowerLossDisk(tmp_path / "disk") as mounted:
        yield mounted


def fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# ---- the file system itself


def test_unsynced_bytes_are_lost_and_synced_bytes_kept(disk: PowerLossDisk) -> None:
    root = disk.mountpoint
    fd = os.open(root / "file", os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, b"durable")
    os.fsync(fd)
    os.write(fd, b" and not")
    os.close(fd)
    (root / "never-synced").write_bytes(b"lost")
    fsync_path(root)
    assert (root / "file").read_bytes() == b"durable and not"
    disk.cut()
    with pytest.raises(OSError):
        os.listdir(root)  # nothing works while the power is cut
    disk.restore()
    assert (root / "file").read_bytes() == b"durable"
    assert (root / "never-synced").read_bytes() == b""  # its name was fsynced, its bytes not


def test_fdatasync_and_truncate(disk: PowerLossDisk) -> None:
    root = disk.mountpoint
    fd = os.open(root / "log", os.O_RDWR | os.O_CREAT, 0o644)
    os.write(fd, b"0123456789")
    os.fdatasync(fd)
    os.ftruncate(fd, 4)
    os.close(fd)
    fsync_path(root)
    disk.cut()
    disk.restore()
    assert (root / "log").read_bytes() == b"0123456789"  # the cut undid the truncation


def test_names_need_their_directory_fsynced(disk: PowerLossDisk) -> None:
    root = disk.mountpoint
    (root / "kept").write_bytes(b"k")
    (root / "removed").write_bytes(b"r")
    (root / "renamed").write_bytes(b"n")
    for name in ("kept", "removed", "renamed"):
        fsync_path(root / name)
    fsync_path(root)
    (root / "created").write_bytes(b"c")
    fsync_path(root / "created")  # the file's bytes, not its name
    os.unlink(root / "removed")
    os.rename(root / "renamed", root / "new-name")
    os.link(root / "kept", root / "hard-link")
    (root / "folder").mkdir()
    (root / "folder" / "inside").write_bytes(b"i")
    fsync_path(root / "folder" / "inside")
    fsync_path(root / "folder")  # its entries, not its own name in the root
    disk.cut()
    disk.restore()
    assert sorted(os.listdir(root)) == ["kept", "removed", "renamed"]
    assert (root / "removed").read_bytes() == b"r"


def test_cut_on_a_name(disk: PowerLossDisk) -> None:
    root = disk.mountpoint
    disk.cut_on(".*.tmp", 2)
    (root / "a").write_bytes(b"a")
    (root / ".x.tmp").write_bytes(b"x")
    assert not disk.is_cut
    fsync_path(root)
    with pytest.raises(OSError):  # the name appears, then the power is cut: the write fails
        (root / ".y.tmp").write_bytes(b"y")
    assert disk.is_cut
    disk.restore()
    assert sorted(os.listdir(root)) == [".x.tmp", "a"]
    assert disk.fsyncs()[1] >= 1


# ---- a server on it


class Server:
    """``permindex serve`` on the disk, and a client of it."""

    def __init__(self, data_dir: Path, *extra: str) -> None:
        self.process = ServeProcess(data_dir, *extra)
        address = self.process.address(timeout=120)
        if address is None:
            self.process.kill()
            raise AssertionError(f"the server did not start:\n{self.process.text}")
        self.client = Client(address, timeout=60)

    def contents(self) -> dict[str, dict[str, int]]:
        """Every collection's keys and fingerprints, by ListCollections and Export."""
        return {
            info.name: dict(self.client.iter_export(collection=info.name, timeout=60))
            for info in self.client.list_collections()
        }

    def kill(self) -> None:
        self.client.close()
        self.process.kill()

    def stop(self) -> int:
        self.client.close()
        return self.process.stop()


def serve(disk: PowerLossDisk, policy: str = "always", *extra: str) -> Server:
    return Server(disk.mountpoint / "data", "--fsync", policy, *extra)


def documents(prefix: str, count: int, seed: int) -> dict[str, int]:
    rng = random.Random(seed)
    return {f"{prefix}{i:04d}": rng.getrandbits(64) for i in range(count)}


@pytest.mark.parametrize("ending", ["kill -9", "SIGTERM", "Snapshot then kill -9"])
def test_an_acknowledged_collection_survives_a_cut(disk: PowerLossDisk, ending: str) -> None:
    server = serve(disk)
    server.client.create_collection("alpha")
    keys = documents("alpha/", 100, seed=1)
    server.client.use("alpha").add(keys.items())
    if ending == "SIGTERM":
        assert server.stop() == 0
    else:
        if ending.startswith("Snapshot"):
            server.client.use("alpha").snapshot()
        server.kill()
    disk.cut()
    disk.restore()
    server = serve(disk)
    try:
        assert server.contents() == {"default": {}, "alpha": keys}
    finally:
        server.kill()


def test_an_acknowledged_drop_survives_a_cut(disk: PowerLossDisk) -> None:
    server = serve(disk)
    for name in ("alpha", "beta"):
        server.client.create_collection(name)
        server.client.use(name).add(documents(name, 100, seed=2).items())
    server.client.use("beta").snapshot()
    assert server.client.drop_collection("beta") == 100
    server.kill()
    disk.cut()
    disk.restore()
    server = serve(disk)
    try:
        assert sorted(server.contents()) == ["alpha", "default"]
        server.client.create_collection("beta")  # the name is free again, and empty
        assert server.contents()["beta"] == {}
    finally:
        server.kill()


# ---- mixed rounds


@dataclass
class Model:
    """What the server acknowledged, and what it may or may not have kept.

    ``collections``: name -> key -> fingerprint, as acknowledged. ``pending``: per collection,
    key -> the number of the latest change sent for it and not acknowledged (changes are
    numbered in the order sent, which is the order the server logs them): either state of
    such a key is right. ``unsure_collections``: names whose create or drop was not
    acknowledged (present or not; when present, their keys must still agree).
    """

    collections: dict[str, dict[str, int]] = field(default_factory=lambda: {"default": {}})
    pending: dict[str, dict[str, int]] = field(default_factory=dict)
    unsure_collections: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)
    sent: int = 0

    def known(self) -> list[str]:
        """Collections that exist for sure."""
        with self.lock:
            return sorted(set(self.collections) - self.unsure_collections)

    def send(self, name: str, keys: list[str]) -> int:
        """Note a change of ``keys`` about to be sent; its number."""
        with self.lock:
            self.sent += 1
            self.pending.setdefault(name, {}).update(dict.fromkeys(keys, self.sent))
            return self.sent

    def acknowledged(self, name: str, number: int, changes: dict[str, int | None]) -> None:
        """The change ``number`` was acknowledged: its keys are known, but for those a later
        change, still unacknowledged, may have changed again."""
        with self.lock:
            stored = self.collections[name]
            pending = self.pending.get(name, {})
            for key, fingerprint in changes.items():
                if fingerprint is None:
                    stored.pop(key, None)
                else:
                    stored[key] = fingerprint
                if pending.get(key, 0) <= number:
                    pending.pop(key, None)

    def check(self, found: dict[str, dict[str, int]], context: str) -> None:
        """Raise AssertionError where ``found`` (after a restart) lost or invented an
        acknowledged change; then take ``found`` as the model (every state is known again)."""
        problems: list[str] = []
        for name in sorted(set(self.collections) | set(found)):
            if name in self.unsure_collections:
                if name not in found:
                    continue
            elif name not in found:
                problems.append(f"collection {name} acknowledged, missing")
                continue
            elif name not in self.collections:
                problems.append(f"collection {name} found, never acknowledged (or dropped)")
                continue
            expected = self.collections.get(name, {})
            unsure = set(self.pending.get(name, {}))
            got = found[name]
            for key in sorted((set(expected) | set(got)) - unsure):
                if expected.get(key) != got.get(key):
                    problems.append(
                        f"{name}/{key}: acknowledged {expected.get(key)}, found {got.get(key)}"
                    )
        assert not problems, f"{context}: {len(problems)} problems: {problems[:10]}"
        self.collections = {name: dict(keys) for name, keys in found.items()}
        self.pending = {}
        self.unsure_collections = set()


class Writer(threading.Thread):
    """Random writes to the server until ``stop`` is set or a call fails (after the cut):
    each acknowledged one recorded in the model, the one that failed marked unsure."""

    def __init__(self, server: Server, model: Model, rng: random.Random, ops: int) -> None:
        super().__init__(daemon=True)
        self.client, self.model, self.rng, self.ops = server.client, model, rng, ops
        self.stop = threading.Event()
        self.failure: tuple[float, BaseException] | None = None
        self.done = 0

    def run(self) -> None:
        for _ in range(self.ops):
            if self.stop.is_set():
                return
            try:
                self.step()
            except PermindexError as error:
                self.failure = (time.monotonic(), error)
                return
            self.done += 1

    def fingerprints(self, prefix: str, count: int) -> dict[str, int]:
        return {
            f"{prefix}{self.rng.randrange(POOL):04d}": self.rng.getrandbits(64)
            for _ in range(count)
        }

    def step(self) -> None:
        rng, model = self.rng, self.model
        name = rng.choice(model.known())
        client = self.client.use(name)
        action = rng.choices(
            ["add", "ingest", "remove", "snapshot", "create", "drop"], [30, 20, 15, 8, 6, 4]
        )[0]
        if action == "add":
            batch = self.fingerprints("unary/", rng.randrange(1, 50))
            number = model.send(name, list(batch))
            client.add(batch.items())
            model.acknowledged(name, number, dict(batch))
        elif action == "ingest":
            batches = [self.fingerprints("stream/", rng.randrange(1, 80)) for _ in range(4)]
            numbered = iter([(model.send(name, list(batch)), batch) for batch in batches])

            def progress(_: object) -> None:
                number, batch = next(numbered)
                model.acknowledged(name, number, dict(batch))

            client.ingest_batches([list(b.items()) for b in batches], progress=progress)
        elif action == "remove":
            with model.lock:
                stored = sorted(model.collections[name])
            if not stored:
                return
            keys = rng.sample(stored, min(len(stored), rng.randrange(1, 20)))
            number = model.send(name, keys)
            client.remove(keys)
            model.acknowledged(name, number, dict.fromkeys(keys))
        elif action == "snapshot":
            client.snapshot()
        elif action == "create":
            new = rng.choice(NAMES)
            if new in model.collections:
                return
            with model.lock:
                model.unsure_collections.add(new)
                model.collections[new] = {}
            self.client.create_collection(new)
            with model.lock:
                model.unsure_collections.discard(new)
        elif action == "drop":
            if name == "default":
                return
            with model.lock:
                model.unsure_collections.add(name)
            self.client.drop_collection(name)
            with model.lock:
                model.unsure_collections.discard(name)
                del model.collections[name]
                model.pending.pop(name, None)


def one_round(disk: PowerLossDisk, model: Model, seed: int, policy: str = "always") -> str:
    """Start a server on what the last cut left, check it against the model, write at random
    and end the round -- at a random moment during the writes -- with a power cut, a cut right
    after a name appears, kill -9 then a cut, or a graceful stop then a cut; returns how the
    round ended."""
    rng = random.Random(seed)
    extra = ["--snapshot-interval", str(rng.choice([0.2, 0.5]))] if rng.random() < 0.5 else []
    server = serve(disk, policy, *extra)
    try:
        model.check(server.contents(), f"round {seed}: after the restart")
    except BaseException:
        server.kill()
        raise
    ending = rng.choice(["cut", "cut on a name", "cut on a name", "SIGTERM", "kill -9"])
    if ending == "cut on a name":
        trigger = rng.choice(TRIGGERS)
        disk.cut_on(trigger, rng.randrange(1, 3))
        ending = f"cut on {trigger}"
    writer = Writer(server, model, rng, ops=rng.randrange(10, 60))
    started = time.monotonic()
    writer.start()
    if ending.startswith("cut on"):
        while writer.is_alive() and not disk.is_cut:
            time.sleep(0.01)
    else:
        writer.join(timeout=rng.uniform(0.0, 1.5))
    # The power cut, the kill or the stop: calls may fail from here.
    ended = disk.cut_time or time.monotonic()
    if ending == "cut":
        disk.cut()
    elif ending == "SIGTERM":
        code = server.stop()
        assert code == 0, f"round {seed}: the graceful stop exited {code}:\n{server.process.text}"
    elif ending == "kill -9":
        server.kill()
    writer.stop.set()
    writer.join(timeout=120)
    assert not writer.is_alive(), f"round {seed}: the writes did not end"
    server.kill()
    if not disk.is_cut:
        disk.cut()
    disk.restore()
    if writer.failure is not None and writer.failure[0] < ended:
        raise AssertionError(f"round {seed}: a write failed before any cut: {writer.failure[1]}")
    return f"{ending}, {writer.done} writes in {ended - started:.1f} s"


def run_rounds(disk: PowerLossDisk, rounds: int) -> list[str]:
    """``rounds`` rounds from a random seed (in every failure's message), then a last restart
    checked against the model."""
    model = Model()
    base = random.randrange(1 << 30)
    endings = [
        f"round {seed}: {one_round(disk, model, seed)}" for seed in range(base, base + rounds)
    ]
    server = serve(disk)
    try:
        model.check(server.contents(), "after the last round")
    finally:
        server.kill()
    return endings


def test_mixed_writes_cut_at_random_moments_lose_nothing_acknowledged(
    disk: PowerLossDisk,
) -> None:
    print("\n".join(run_rounds(disk, ROUNDS)))


@pytest.mark.power_loss_soak
def test_many_more_rounds(disk: PowerLossDisk) -> None:
    print("\n".join(run_rounds(disk, SOAK_ROUNDS)))


def test_interval_loses_at_most_the_last_interval(disk: PowerLossDisk) -> None:
    """``--fsync interval`` (0.1 s): writes acknowledged, then 1 s with nothing written, then
    the cut: all of them kept, and the collections created and dropped too (names are durable
    under every policy)."""
    server = serve(disk, "interval", "--fsync-interval", "0.1")
    server.client.create_collection("alpha")
    server.client.create_collection("beta")
    keys = documents("a", 300, seed=3)
    for start in range(0, 300, 30):
        server.client.use("alpha").add(list(keys.items())[start : start + 30])
    server.client.drop_collection("beta")
    time.sleep(1.0)
    disk.cut()
    server.kill()
    disk.restore()
    server = serve(disk, "interval")
    try:
        assert server.contents() == {"default": {}, "alpha": keys}
    finally:
        server.kill()


def test_never_keeps_names_and_snapshots(disk: PowerLossDisk) -> None:
    """``--fsync never``: what a Snapshot acknowledged is kept, and the collections' names; the
    writes after it may be lost, and the restart succeeds."""
    server = serve(disk, "never")
    server.client.create_collection("alpha")
    server.client.create_collection("beta")
    snapshotted = documents("s", 200, seed=4)
    server.client.use("alpha").add(snapshotted.items())
    server.client.use("alpha").snapshot()
    later = documents("later", 50, seed=5)
    server.client.use("alpha").add(later.items())
    server.client.drop_collection("beta")
    disk.cut()
    server.kill()
    disk.restore()
    server = serve(disk, "never")
    try:
        found = server.contents()
        assert sorted(found) == ["alpha", "default"]
        assert snapshotted.items() <= found["alpha"].items()
        assert set(found["alpha"]) <= set(snapshotted) | set(later)
    finally:
        server.kill()
