"""Faults of the disk and of the data directory, over gRPC against real server processes: a file
size limit (RLIMIT_FSIZE, always available), a full file system (a small tmpfs) and a file
system that turns read-only (ext4 on a loop device, remounted read-only by an injected error);
a second server on the same directory; a damaged log at the start.

The tests run as root, so file permissions do not stop a write: the limits are real ones. The
mounts need CAP_SYS_ADMIN (and loop devices); those tests skip, saying why, where that is not
permitted. Whatever the fault, a write is either acknowledged (logged and applied) or refused
with RESOURCE_EXHAUSTED / UNAVAILABLE and not applied at all; lookups keep working; writes
resume once the disk can be written.
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from conftest import make_stub
from serverproc import ServeProcess, without_loading_notice

from permindex.storage.snapshot import SNAPSHOT_NAME
from permindex.storage.wal_records import segment_name
from permindex.v1 import index_pb2 as pb


def _docs(prefix: str, n: int, key_bytes: int = 40, base: int = 0) -> dict[str, int]:
    return {f"{prefix}/{i:06d}/".ljust(key_bytes, "x"): base + i for i in range(n)}


def _add(stub: Any, entries: dict[str, int]) -> pb.AddResponse:
    request = pb.AddRequest(
        documents=[pb.Document(key=k, fingerprint=v) for k, v in entries.items()]
    )
    response: pb.AddResponse = stub.Add(request, timeout=30)
    return response


def _held(stub: Any, keys: list[str]) -> dict[str, int]:
    response = stub.Get(pb.GetRequest(keys=keys), timeout=30)
    return {r.key: r.fingerprint for r in response.results if r.found}


def _refused(call: Callable[[], Any]) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        call()
    error: grpc.RpcError = caught.value
    return error


def _fill_until_refused(
    stub: Any, prefix: str, batch: int, key_bytes: int, base: int = 0
) -> tuple[dict[str, int], dict[str, int], grpc.RpcError]:
    """Add batches until one is refused: (acknowledged, the refused batch, its error)."""
    acknowledged: dict[str, int] = {}
    for round_ in range(10_000):
        entries = _docs(f"{prefix}{round_}", batch, key_bytes, base=base + round_ * batch)
        try:
            _add(stub, entries)
        except grpc.RpcError as error:
            return acknowledged, entries, error
        acknowledged.update(entries)
    pytest.fail("the writes were never refused")


def _check_refusal_changed_nothing(
    stub: Any, acknowledged: dict[str, int], refused: dict[str, int]
) -> None:
    """Nothing of the refused batch is stored; every acknowledged key is; lookups work."""
    assert _held(stub, list(refused)) == {}
    assert stub.Stats(pb.StatsRequest(), timeout=30).count == len(acknowledged)
    sample = list(acknowledged.items())[:: max(1, len(acknowledged) // 50)]
    assert _held(stub, [k for k, _ in sample]) == dict(sample)
    reply = stub.Query(pb.QueryRequest(fingerprints=[v for _, v in sample], k=0), timeout=30)
    assert [[m.key for m in r.matches] for r in reply.results] == [[k] for k, _ in sample]


# ------------------------------------------------------------------------ a file size limit


def test_file_size_limit_refuses_writes_and_they_resume_when_raised(tmp_path: Path) -> None:
    """RLIMIT_FSIZE in the server process: a log append that crosses it is written in part,
    then fails with EFBIG (SIGXFSZ is ignored, as Python does by default); the part is cut back,
    the RPC fails with RESOURCE_EXHAUSTED and nothing is applied. Raising the limit (prlimit
    from outside) lets writes resume; after a kill -9 the log is intact."""
    limit = 24_000

    def limit_file_size() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))

    data_dir = tmp_path / "data"
    server = ServeProcess(data_dir, "--snapshot-interval", "0", preexec_fn=limit_file_size)
    try:
        address = server.address()
        assert address is not None, server.text
        channel, stub = make_stub(address)
        with channel:
            acknowledged, refused, error = _fill_until_refused(stub, "doc", 20, 40)
            assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, error.details()
            details = error.details() or ""
            assert "File too large" in details and "nothing was changed" in details
            assert segment_name(1) in details
            _check_refusal_changed_nothing(stub, acknowledged, refused)
            # Smaller records still fit below the limit: fill it to the brim with 1-key batches.
            more, _, _ = _fill_until_refused(stub, "one", 1, 40, base=10**6)
            acknowledged.update(more)
            far = pb.Document(key="c" * 200, fingerprint=2**64 - 1)
            checked = _refused(
                lambda: stub.CheckAndAdd(pb.CheckAndAddRequest(documents=[far]), timeout=30)
            )
            assert checked.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            gone = _refused(
                lambda: stub.Remove(pb.RemoveRequest(keys=list(acknowledged)[:3]), timeout=30)
            )
            assert gone.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            _check_refusal_changed_nothing(stub, acknowledged, refused)
            assert (data_dir / segment_name(1)).stat().st_size <= limit
            resource.prlimit(server.pid, resource.RLIMIT_FSIZE, (limit * 4, resource.RLIM_INFINITY))
            assert _add(stub, refused).added == len(refused)  # the same batch, now accepted
            acknowledged.update(refused)
            stub.Remove(pb.RemoveRequest(keys=list(acknowledged)[:3]), timeout=30)
            for key in list(acknowledged)[:3]:
                del acknowledged[key]
    finally:
        server.kill()
    again = ServeProcess(data_dir, "--snapshot-interval", "0")
    try:
        address = again.address()
        assert address is not None, again.text
        channel, stub = make_stub(address)
        with channel:
            keys = [*acknowledged, *_docs("doc", 3)]
            assert _held(stub, keys) == acknowledged
        assert "torn tail" not in again.text  # the refused appends left no partial record
    finally:
        again.kill()


# ---------------------------------------------------------------------------- mounts (root)


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False)


@pytest.fixture
def mounts() -> Iterator[list[Path]]:
    """Mount points to unmount at teardown (lazily: a killed server may still hold files)."""
    mounted: list[Path] = []
    yield mounted
    for point in reversed(mounted):
        _run("umount", "-l", str(point))


def _mount_tmpfs(point: Path, size: str, mounts: list[Path]) -> None:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root and mount(8)")
    point.mkdir()
    result = _run("mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(point))
    if result.returncode != 0:
        pytest.skip(f"mounting a tmpfs is not permitted here: {result.stderr.strip()}")
    mounts.append(point)


def _fill(directory: Path) -> Path:
    """Fill the file system of ``directory`` to the last byte; the filler file."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        for size in (1 << 16, 4096, 512, 1):
            try:
                while True:
                    os.write(fd, b"\xff" * size)
            except OSError:
                pass
    finally:
        os.close(fd)
    return filler


def test_disk_full_refuses_writes_and_they_resume_when_space_returns(
    tmp_path: Path, mounts: list[Path]
) -> None:
    point = tmp_path / "small"
    _mount_tmpfs(point, "4m", mounts)
    data_dir = point / "data"
    server = ServeProcess(data_dir, "--snapshot-interval", "0")
    try:
        address = server.address()
        assert address is not None, server.text
        channel, stub = make_stub(address)
        with channel:
            acknowledged = _docs("before", 200)
            _add(stub, acknowledged)
            filler = _fill(point)
            more, refused, error = _fill_until_refused(stub, "big", 100, 1000, base=10**6)
            acknowledged.update(more)
            assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, error.details()
            assert "No space left on device" in (error.details() or "")
            _check_refusal_changed_nothing(stub, acknowledged, refused)
            snapshot = _refused(lambda: stub.Snapshot(pb.SnapshotRequest(), timeout=30))
            assert "No space left" in (snapshot.details() or "")  # refused, nothing broken
            filler.unlink()
            assert _add(stub, refused).added == len(refused)
            acknowledged.update(refused)
            assert stub.Snapshot(pb.SnapshotRequest(), timeout=30).count == len(acknowledged)
        assert server.stop() == 0, server.text
        assert not list(data_dir.glob("*.tmp"))  # no temporary file left by the failed snapshot
    finally:
        server.kill()
    again = ServeProcess(data_dir, "--snapshot-interval", "0")
    try:
        address = again.address()
        assert address is not None, again.text
        channel, stub = make_stub(address)
        with channel:
            assert _held(stub, list(acknowledged)) == acknowledged
    finally:
        again.kill()


def _mount_ext4(image: Path, point: Path, mounts: list[Path]) -> str:
    """Mount a fresh 16 MiB ext4 image on a loop device with errors=remount-ro; the device
    name (e.g. loop0), whose /sys/fs/ext4/<name>/trigger_fs_error makes it read-only."""
    if os.geteuid() != 0:
        pytest.skip("mounting a loop device needs root")
    if shutil.which("mkfs.ext4") is None or not Path("/dev/loop-control").exists():
        pytest.skip("needs mkfs.ext4 and loop devices (/dev/loop-control)")
    with open(image, "wb") as out:
        out.truncate(16 << 20)
    made = _run("mkfs.ext4", "-q", "-F", str(image))
    if made.returncode != 0:
        pytest.skip(f"mkfs.ext4 failed: {made.stderr.strip()}")
    point.mkdir()
    result = _run("mount", "-o", "loop,errors=remount-ro", str(image), str(point))
    if result.returncode != 0:
        pytest.skip(f"mounting a loop device is not permitted here: {result.stderr.strip()}")
    mounts.append(point)
    source = _run("findmnt", "-n", "-o", "SOURCE", str(point)).stdout.strip()
    device = Path(os.path.realpath(source)).name
    if not Path(f"/sys/fs/ext4/{device}/trigger_fs_error").exists():
        pytest.skip(f"no /sys/fs/ext4/{device}/trigger_fs_error to make the file system read-only")
    return device


def test_read_only_file_system_refuses_writes_lookups_go_on(
    tmp_path: Path, mounts: list[Path]
) -> None:
    """The file system turns read-only under the server (ext4's reaction to an error, injected
    through sysfs): writes fail with UNAVAILABLE and change nothing, lookups go on, the graceful
    stop reports the failed final snapshot in one line, and once the file system is mounted again
    every acknowledged write is there."""
    image, point = tmp_path / "fs.img", tmp_path / "ext4"
    device = _mount_ext4(image, point, mounts)
    data_dir = point / "data"
    server = ServeProcess(data_dir, "--snapshot-interval", "0")
    try:
        address = server.address()
        assert address is not None, server.text
        channel, stub = make_stub(address)
        with channel:
            acknowledged = _docs("before", 300)
            _add(stub, acknowledged)
            stub.Snapshot(pb.SnapshotRequest(), timeout=30)
            more = _docs("after", 50, base=1000)
            _add(stub, more)
            acknowledged.update(more)
            Path(f"/sys/fs/ext4/{device}/trigger_fs_error").write_text("permindex test\n")
            refused = _docs("refused", 10, base=5000)
            error = _refused(lambda: _add(stub, refused))
            assert error.code() == grpc.StatusCode.UNAVAILABLE, error.details()
            assert "Read-only file system" in (error.details() or "")
            removal = _refused(
                lambda: stub.Remove(pb.RemoveRequest(keys=list(acknowledged)[:5]), timeout=30)
            )
            assert removal.code() == grpc.StatusCode.UNAVAILABLE
            _check_refusal_changed_nothing(stub, acknowledged, refused)
        code = server.stop()
        assert code != 0 and "Traceback" not in server.text
        assert "permindex: error: snapshot could not be written" in server.text
        assert "Read-only file system" in server.text
    finally:
        server.kill()
    assert _run("umount", str(point)).returncode == 0
    mounts.remove(point)
    assert _run("mount", "-o", "loop", str(image), str(point)).returncode == 0
    mounts.append(point)
    again = ServeProcess(data_dir, "--snapshot-interval", "0")
    try:
        address = again.address()
        assert address is not None, again.text
        channel, stub = make_stub(address)
        with channel:
            assert _held(stub, [*acknowledged, *refused]) == acknowledged
    finally:
        again.kill()


# ---------------------------------------------------------------------- one owner, bad logs


def test_second_server_on_the_same_directory_names_the_owner(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    first = ServeProcess(data_dir)
    try:
        assert first.address() is not None, first.text
        second = ServeProcess(data_dir)
        code = second.wait()
        assert code == 7, second.text
        assert second.text.count("\n") == 1, second.text
        assert f"data directory {data_dir} is in use by process {first.pid}" in second.text
        assert first.process.poll() is None  # the owner is undisturbed
    finally:
        first.kill()
    third = ServeProcess(data_dir)  # the lock died with its owner
    try:
        assert third.address() is not None, third.text
    finally:
        third.kill()


def _log_with_records(data_dir: Path, batches: int) -> Path:
    """A data directory whose log holds ``batches`` Add records (one key each), no snapshot."""
    server = ServeProcess(data_dir, "--snapshot-interval", "0")
    try:
        address = server.address()
        assert address is not None, server.text
        channel, stub = make_stub(address)
        with channel:
            for i in range(batches):
                _add(stub, {f"key/{i}": i})
    finally:
        server.kill()
    assert not (data_dir / SNAPSHOT_NAME).exists()
    return data_dir / segment_name(1)


def test_start_cuts_a_torn_tail_and_refuses_damage_before_it(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    segment = _log_with_records(data_dir, 5)
    data = segment.read_bytes()
    segment.write_bytes(data[:-7])  # the last record torn
    server = ServeProcess(data_dir, "--snapshot-interval", "0")
    try:
        address = server.address()
        assert address is not None, server.text
        assert "cut off a torn tail of" in server.text and "(1 record)" in server.text
        assert "(4 keys loaded from" in server.text
        channel, stub = make_stub(address)
        with channel:
            assert sorted(_held(stub, [f"key/{i}" for i in range(5)])) == [
                f"key/{i}" for i in range(4)
            ]
    finally:
        server.kill()
    damaged = bytearray(segment.read_bytes())
    damaged[60] ^= 0xFF  # inside the first record: valid records follow it
    segment.write_bytes(bytes(damaged))
    refused = ServeProcess(data_dir, "--snapshot-interval", "0")
    assert refused.wait() == 7, refused.text
    # one line, besides the notice that loading the kernels takes long (a busy machine)
    lines = without_loading_notice(refused.text)
    assert len(lines) == 1 and lines[0].startswith("permindex: error: "), refused.text
    assert str(segment) in refused.text and "--truncate-corrupt-log" in refused.text
    assert segment.read_bytes() == bytes(damaged)  # untouched
    accepted = ServeProcess(data_dir, "--snapshot-interval", "0", "--truncate-corrupt-log")
    try:
        assert accepted.address() is not None, accepted.text
        assert "--truncate-corrupt-log: cut" in accepted.text
        assert "(0 keys loaded from" in accepted.text
        assert segment.with_name(segment.name + ".dropped").exists()
    finally:
        accepted.kill()
