"""Blocks of whole lines decompressed by a child process (permindex.text.inflated_blocks): the
same blocks through the pipe and through the ring file, long lines, errors, the child's death,
a consumer that does not release, and the ring file removed afterwards."""

from __future__ import annotations

import gzip
import json
import multiprocessing
import os
import signal
from pathlib import Path

import numpy as np
import pytest

from permindex.errors import InvalidArgumentError
from permindex.text.documents import read_documents
from permindex.text.inflated_blocks import InflatedBlocks, SharedBlock, whole_lines

pytestmark = pytest.mark.skipif(not hasattr(os, "pread"), reason="the ring file needs os.pread")


def gzip_lines(path: Path, lines: list[bytes], *, ending: bytes = b"\n") -> bytes:
    data = b"\n".join(lines) + ending
    path.write_bytes(gzip.compress(data, compresslevel=1))
    return data


def text_lines(n: int, seed: int = 0, longest: int = 300) -> list[bytes]:
    rng = np.random.default_rng(seed)
    return [
        json.dumps({"id": f"d{i}", "text": "w" * int(rng.integers(0, longest))}).encode()
        for i in range(n)
    ]


def collect(blocks: InflatedBlocks, *, release: bool = True) -> list[tuple[int, bytes, bool]]:
    """(first line, bytes, whether it came through the ring) of every block, each read and
    released as a consumer must."""
    got = []
    for first, block in blocks:
        shared = isinstance(block, SharedBlock)
        data = block.read() if isinstance(block, SharedBlock) else block
        got.append((first, data, shared))
        if release:
            blocks.release()
    return got


@pytest.mark.parametrize("slots", [0, 1, 3, 40])
@pytest.mark.parametrize("max_bytes", [1, 64, 1000, 1 << 20])
@pytest.mark.parametrize("ending", [b"\n", b""])
def test_the_blocks_of_cutting_here(
    tmp_path: Path, slots: int, max_bytes: int, ending: bytes
) -> None:
    """Through the pipe or the ring (one slot to many), any block size, with or without a
    final newline: the blocks and first-line numbers of cutting the decompressed bytes here."""
    path = tmp_path / "a.jsonl.gz"
    data = gzip_lines(path, text_lines(300), ending=ending)
    reads = [data[i : i + max_bytes] for i in range(0, len(data), max_bytes)]
    expected = list(whole_lines(reads))
    blocks = InflatedBlocks(str(path), "a.jsonl.gz", max_bytes, slots=slots)
    got = collect(blocks)
    assert [(first, data) for first, data, _ in got] == expected
    assert b"".join(data for _, data, _ in got) == data
    assert blocks.position == path.stat().st_size
    if slots and max_bytes >= 1000:  # lines fit the slots of 2 * max_bytes: the ring
        assert all(shared for _, _, shared in got)
    if slots == 0:
        assert not any(shared for _, _, shared in got)


def test_a_line_longer_than_a_slot_comes_through_the_pipe(tmp_path: Path) -> None:
    """Slots hold 2 * max_bytes: a 5,000-byte line among short ones comes as bytes, the others
    through the ring, all in order."""
    path = tmp_path / "long.jsonl.gz"
    lines = text_lines(200, longest=40)
    lines[100] = json.dumps({"id": "long", "text": "x" * 5000}).encode()
    data = gzip_lines(path, lines)
    got = collect(InflatedBlocks(str(path), "long", 500, slots=2))
    assert b"".join(d for _, d, _ in got) == data
    long_block = [shared for _, d, shared in got if b'"long"' in d]
    assert long_block == [False]
    assert sum(shared for _, _, shared in got) >= len(got) - 1


def test_the_reader_hands_out_shared_blocks_that_parse_to_its_documents(tmp_path: Path) -> None:
    path = tmp_path / "docs.jsonl.gz"
    rows = [{"id": f"k{i}", "text": f"some words here number {i} and more"} for i in range(500)]
    path.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in rows).encode()))
    reader = read_documents(path)
    parser = reader.parser()
    got = []
    kinds = set()
    for first, block in reader.text_blocks(2000, inflate_elsewhere=True, shared_slots=4):
        kinds.add(type(block))
        got.extend(parser.block_columns(block, first).documents())
        reader.release_block()
    assert got == list(read_documents(path))
    assert kinds == {SharedBlock}
    assert reader.position_bytes() == path.stat().st_size


def test_a_consumer_that_does_not_release_is_told_not_stalled(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl.gz"
    gzip_lines(path, text_lines(400))
    blocks = InflatedBlocks(str(path), "a", 100, slots=3)
    taken = []
    with pytest.raises(RuntimeError, match="3 blocks read but not released"):
        for _, block in blocks:
            taken.append(block)
    assert len(taken) == 3


def test_the_ring_file_is_removed_at_the_end_and_on_an_early_stop(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl.gz"
    gzip_lines(path, text_lines(2000, longest=100))
    blocks = InflatedBlocks(str(path), "a", 200, slots=4)
    others = set(multiprocessing.active_children())  # of other tests, if any
    iterator = iter(blocks)
    _, first = next(iterator)
    assert isinstance(first, SharedBlock) and Path(first.path).exists()
    assert len(set(multiprocessing.active_children()) - others) == 1  # the child
    iterator.close()  # the consumer stops early: the child stops, the file goes
    assert not Path(first.path).exists()
    assert not set(multiprocessing.active_children()) - others
    again = InflatedBlocks(str(path), "a", 1000, slots=4)
    ring = None
    for _, block in again:
        assert isinstance(block, SharedBlock)
        ring = block.path
        again.release()
    assert ring is not None and not Path(ring).exists()


@pytest.mark.parametrize("slots", [0, 4])
def test_a_truncated_or_corrupt_stream_is_the_error_of_reading_it(
    tmp_path: Path, slots: int
) -> None:
    data = gzip.compress(b"".join(line + b"\n" for line in text_lines(3000)))
    for name, content in (("cut.gz", data[: len(data) // 2]), ("bad.gz", data[:50] + b"x" * 99)):
        path = tmp_path / name
        path.write_bytes(content)
        with pytest.raises(InvalidArgumentError) as expected:
            list(read_documents(path))
        with pytest.raises(InvalidArgumentError) as caught:
            collect(InflatedBlocks(str(path), str(path), 1000, slots=slots))
        assert str(caught.value) == str(expected.value)


@pytest.mark.parametrize("slots", [0, 4])
def test_a_child_killed_midway_is_an_error_not_a_hang(tmp_path: Path, slots: int) -> None:
    path = tmp_path / "a.jsonl.gz"
    gzip_lines(path, text_lines(20000))
    blocks = InflatedBlocks(str(path), "a.jsonl.gz", 100, slots=slots)
    others = set(multiprocessing.active_children())  # of other tests, if any
    iterator = iter(blocks)
    next(iterator)
    blocks.release()
    (child,) = set(multiprocessing.active_children()) - others
    assert child.pid is not None
    os.kill(child.pid, signal.SIGKILL)
    with pytest.raises(InvalidArgumentError, match=r"a\.jsonl\.gz: cannot read: the process"):
        for _ in iterator:
            blocks.release()


def test_a_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="cannot read"):
        collect(InflatedBlocks(str(tmp_path / "gone.gz"), "gone.gz", 100, slots=2))


def test_blocks_stay_readable_after_the_end_until_the_last_release(tmp_path: Path) -> None:
    """The input may end while workers still have blocks to read (dedup's last tasks): the ring
    file goes with the last release, or with close()."""
    path = tmp_path / "a.jsonl.gz"
    data = gzip_lines(path, text_lines(100, longest=50))
    for closing in (False, True):
        blocks = InflatedBlocks(str(path), "a", 1000, slots=40)
        taken = [block for _, block in blocks]  # to the end, nothing released yet
        assert all(isinstance(b, SharedBlock) for b in taken) and len(taken) > 3
        shared = [b for b in taken if isinstance(b, SharedBlock)]
        assert b"".join(b.read() for b in shared) == data
        ring = Path(shared[0].path)
        if closing:
            blocks.close()
            assert not ring.exists()
            continue
        for _ in taken[:-1]:
            blocks.release()
        assert ring.exists()
        blocks.release()
        assert not ring.exists()


def test_dedup_stopped_by_a_malformed_line_leaves_no_ring_file(tmp_path: Path) -> None:
    import tempfile

    from permindex.errors import InvalidArgumentError as Invalid
    from permindex.near.dedup import run_dedup
    from permindex.near.result import DedupOptions

    lines = text_lines(30000, longest=200)
    lines[25000] = b'{"id": "broken", "text": '
    path = tmp_path / "bad.jsonl.gz"
    gzip_lines(path, lines)
    folders = [Path("/dev/shm"), Path(tempfile.gettempdir())]

    def rings() -> set[Path]:  # this process's (another dedup on the machine may run)
        pattern = f"permindex-blocks-{os.getpid()}-*"
        return {p for f in folders if f.is_dir() for p in f.glob(pattern)}

    before = rings()
    with pytest.raises(Invalid, match="line 25001"):
        run_dedup(DedupOptions(source=str(path), out_dir=tmp_path / "r", jobs=2))
    assert rings() == before


@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="needs /dev/shm to see the ring file")
def test_dedup_stopped_by_sigterm_cleans_up_and_exits_143(tmp_path: Path) -> None:
    """SIGTERM mid-run stops dedup as Ctrl-C does: no traceback, exit 143, and neither its
    ring file nor its worker processes left behind."""
    import subprocess
    import sys
    import time

    rng = np.random.default_rng(3)
    words = [f"w{i}" for i in range(3000)]
    picks = rng.integers(0, len(words), size=(200_000, 80))
    path = tmp_path / "big.jsonl.gz"
    with gzip.open(path, "wt", compresslevel=1) as out:  # a dedup of about two seconds
        for i, row in enumerate(picks.tolist()):  # Python ints: 2 s less than numpy indexing
            out.write(f'{{"id": "k{i}", "text": "{" ".join([words[j] for j in row])}"}}\n')
    process = subprocess.Popen(
        [sys.executable, "-m", "permindex", "dedup", str(path), "--out", str(tmp_path / "r")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    rings: set[Path] = set()
    while not rings and process.poll() is None and time.monotonic() < deadline:
        rings = set(Path("/dev/shm").glob(f"permindex-blocks-{process.pid}-*"))
        time.sleep(0.02)
    time.sleep(0.5)  # past the start of its child processes, in the middle of the pass
    if process.poll() is not None:
        pytest.skip("dedup ended before it could be stopped (a machine too fast for 200,000)")
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 143, stderr
    assert "permindex dedup: terminated (SIGTERM)" in stderr and "Traceback" not in stderr
    assert rings  # its ring file, named after its process id, was there
    assert not any(ring.exists() for ring in rings)
