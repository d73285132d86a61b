"""Blocks of whole JSONL lines, decompressed by a child process (the input path of
``permindex dedup``'s worker pool, :meth:`DocumentReader.text_blocks
<permindex.text.documents.DocumentReader.text_blocks>` with ``inflate_elsewhere=True``).

The child (multiprocessing, forkserver where there is one) reads the gzip file, cuts each read
after its last newline (:func:`whole_lines`) and counts the lines, so that the receiving process
only hands the blocks on. A thread of the receiving process keeps up to :data:`BLOCKS_AHEAD`
blocks queued, so that the child decompresses while that process does other work. Two ways to
hand a block over:

- **through the pipe** (``slots=0``): the block's bytes are pickled through a multiprocessing
  pipe;
- **through a ring file** (``slots=N``): the child writes each block into the next of ``N`` slots
  of a file (in ``/dev/shm`` where there is one: memory, not disk) and sends only a
  :class:`SharedBlock` (the file, offset and length), which a worker process reads with one
  ``os.pread``: the text is copied twice on its way to the worker instead of about ten times
  through two pipes. The consumer calls :meth:`InflatedBlocks.release` once a block has been
  read (in order, as the blocks came); the child waits for a free slot (a semaphore of ``N``
  permits) before it writes one. A block longer than a slot, or one the file has no room for
  (``ENOSPC`` on a small ``/dev/shm``), comes through the pipe instead, as bytes. The file is
  removed when the blocks are closed (a process killed with SIGKILL leaves it behind:
  ``permindex-blocks-<pid>-*`` in ``/dev/shm`` or the temporary folder, ``<pid>`` the
  process that made it). Unix only (``os.pread``):
  elsewhere every block comes through the pipe.

Errors: a truncated or corrupt gzip stream, or an unreadable file, is an
:class:`~permindex.errors.InvalidArgumentError` (``NAME: cannot read: ...``) raised by the
iterator where the child met it, after the blocks read before it; so is a child that died
without a word.
"""

from __future__ import annotations

import contextlib
import errno
import os
import queue
import tempfile
import threading
from collections.abc import Generator, Iterable, Iterator
from dataclasses import dataclass
from typing import IO, Any, Final

from permindex.errors import InvalidArgumentError
from permindex.processes import end_with_parent, ignore_interrupts, process_context, signals_held
from permindex.text import gzip_stream

__all__ = ["InflatedBlocks", "SharedBlock", "reads", "whole_lines"]

#: Blocks queued in the receiving process ahead of the one being handed on.
BLOCKS_AHEAD: Final = 8
_RING_FOLDER: Final = "/dev/shm"


def reads(stream: IO[bytes], size: int, name: str) -> Iterator[bytes]:
    """Reads of ``size`` bytes of ``stream`` until its end; a truncated or corrupt stream is an
    :class:`InvalidArgumentError` naming ``name`` (``cannot read``)."""
    while True:
        try:
            data = stream.read(size)
        except gzip_stream.errors() as error:
            raise InvalidArgumentError(f"{name}: cannot read: {error}") from None
        if not data:
            return
        yield data


def _line_parts(chunks: Iterable[bytes]) -> Iterator[tuple[int, list[bytes | memoryview]]]:
    """:func:`whole_lines`, each block as its parts, not joined: what was left of the reads
    before (no newline in it) and this read up to its last newline (a view of it)."""
    first = 1
    rest = b""
    for data in chunks:
        cut = data.rfind(b"\n") + 1
        if cut == 0:  # no newline yet: a line longer than a read
            rest += data
            continue
        head = memoryview(data)[:cut]
        yield first, [rest, head] if rest else [head]
        first += data.count(b"\n", 0, cut)  # what was left before holds no newline
        rest = data[cut:]
    if rest:  # the last line, without a newline
        yield first, [rest]


def whole_lines(chunks: Iterable[bytes]) -> Iterator[tuple[int, bytes]]:
    """``chunks`` (reads of a stream) cut after their last newline: ``(number of the block's
    first line, 1-based; its bytes)``; a line longer than a read is one block with the reads it
    spans; what follows the last newline of the stream is the last block."""
    for first, parts in _line_parts(chunks):
        yield first, b"".join(parts)


@dataclass(frozen=True)
class SharedBlock:
    """A block of whole lines in the ring file of :class:`InflatedBlocks`: ``length`` bytes at
    byte ``offset`` of the file ``path``. Picklable; :meth:`read` it in any process of this
    machine before the consumer releases it."""

    path: str
    offset: int
    length: int

    def read(self) -> bytes:
        """The block's bytes (one ``os.pread``; the file stays open in this process until a
        block of another ring file is read, or :func:`close_ring` of this one).

        Raises:
            OSError: the file is gone or shorter than the block.
        """
        fd = _ring_fd(self.path)
        parts: list[bytes] = []
        done = 0
        while done < self.length:
            data = os.pread(fd, self.length - done, self.offset + done)
            if not data:
                raise OSError(f"{self.path}: block at {self.offset} ends early")
            parts.append(data)
            done += len(data)
        return parts[0] if len(parts) == 1 else b"".join(parts)


_open_ring: list[tuple[str, int]] = []  # this process's open ring file: at most one


def _ring_fd(path: str) -> int:
    if _open_ring and _open_ring[0][0] == path:
        return _open_ring[0][1]
    close_ring(None)
    fd = os.open(path, os.O_RDONLY)
    _open_ring.append((path, fd))
    return fd


def close_ring(path: str | None) -> None:
    """Close this process's descriptor of the ring file ``path`` (any, with None)."""
    if _open_ring and (path is None or _open_ring[0][0] == path):
        os.close(_open_ring.pop()[1])


def _ring_file(size: int) -> str | None:
    """A new ring file of ``size`` bytes (sparse), in /dev/shm where it can be, else in the
    temporary folder; None where none can be made (or without ``os.pread``)."""
    if not hasattr(os, "pread"):
        return None
    shm = os.path.isdir(_RING_FOLDER) and os.access(_RING_FOLDER, os.W_OK)
    folder = _RING_FOLDER if shm else None
    try:
        fd, path = tempfile.mkstemp(prefix=f"permindex-blocks-{os.getpid()}-", dir=folder)
    except OSError:
        return None
    try:
        os.ftruncate(fd, size)
    except OSError:
        os.close(fd)
        os.unlink(path)
        return None
    os.close(fd)
    return path


def _inflate(
    path: str,
    name: str,
    size: int,
    sender: Any,
    ring: str | None,
    slots: int,
    slot_bytes: int,
    permits: Any,
    parent: int,
) -> None:
    """In the child process (it ends with the process ``parent``): send each block of whole
    lines of the gzip file ``path`` as ``(number of its first line, its bytes or a
    SharedBlock, the compressed bytes consumed so far)``, then None; or the message of the
    error that stopped it. With a ring file, each block waits for one of the ``permits`` and
    goes to the next slot when it fits. SIGINT and SIGTERM are the parent's to handle (it
    stops this process with SIGKILL)."""
    ignore_interrupts()
    end_with_parent(parent)
    ring_fd = -1
    try:
        with open(path, "rb") as raw, gzip_stream.open_stream(raw) as stream:
            if ring is None:
                for first, block in whole_lines(reads(stream, size, name)):
                    sender.send((first, block, raw.tell()))
            else:
                ring_fd = os.open(ring, os.O_WRONLY)
                _to_ring(
                    reads(stream, size, name),
                    raw,
                    sender,
                    ring,
                    ring_fd,
                    slots,
                    slot_bytes,
                    permits,
                )
        sender.send(None)
    except InvalidArgumentError as error:
        sender.send(str(error))
    except OSError as error:  # the file itself
        sender.send(f"{name}: cannot read: {error}")
    finally:
        if ring_fd >= 0:
            os.close(ring_fd)
        sender.close()


def _to_ring(
    chunks: Iterable[bytes],
    raw: IO[bytes],
    sender: Any,
    ring: str,
    ring_fd: int,
    slots: int,
    slot_bytes: int,
    permits: Any,
) -> None:
    """:func:`whole_lines` of ``chunks``, each block written to the next slot of the ring file
    (after one of the ``permits``) where it fits, else sent as bytes; its parts are written
    one after the other, not joined into new bytes first."""
    slot = 0
    for first, parts in _line_parts(chunks):
        permits.acquire()
        length = sum(map(len, parts))
        item: bytes | SharedBlock | None = None
        if length <= slot_bytes:
            offset = slot * slot_bytes
            try:
                for part in parts:
                    if os.pwrite(ring_fd, part, offset) != len(part):
                        raise OSError(errno.ENOSPC, "short write")  # a full /dev/shm
                    offset += len(part)
                item = SharedBlock(ring, slot * slot_bytes, length)
            except OSError:  # no room (a small /dev/shm): through the pipe
                item = None
        if item is None:
            item = b"".join(parts)
        slot = (slot + 1) % slots
        sender.send((first, item, raw.tell()))


class InflatedBlocks:
    """The blocks of whole lines of the gzip file ``path`` (named ``name`` in messages), of
    about ``max_bytes`` each, decompressed by a child process: iterate once for ``(number of
    the block's first line, its bytes or a SharedBlock)``, in order; :attr:`position` is the
    compressed bytes the child has consumed. ``slots`` > 0 hands the blocks over through a
    ring file of that many slots of ``2 * max_bytes`` (see the module): then call
    :meth:`release` once per block, after it has been read, in order; asking for a block
    while ``slots`` are unreleased raises RuntimeError (the child could not go on). The end
    of the input stops the child, and the release of the last block removes the ring file;
    closing the iterator early (or an error) stops the child and removes the file at once, as
    :meth:`close` does.

    Raises (from the iterator):
        InvalidArgumentError: the input cannot be read (truncated or corrupt gzip, I/O error),
            or the child died.
    """

    def __init__(self, path: str, name: str, max_bytes: int, *, slots: int = 0) -> None:
        self._path = path
        self._name = name
        self._max_bytes = max(1, max_bytes)
        self._slots = max(0, slots)
        self._permits: Any = None
        self._outstanding = 0
        self._ring: str | None = None  # the ring file, until the last block is released
        self.position: int | None = None

    def release(self) -> None:
        """One block (the oldest) has been read: its slot may be written again (after the
        input's end, the last release removes the ring file)."""
        if self._outstanding > 0:
            self._outstanding -= 1
            if self._permits is not None:
                self._permits.release()
            elif self._outstanding == 0:
                self.close()

    def close(self) -> None:
        """Remove the ring file now, read or not (after an error, say); the child has already
        stopped when the iterator ended or was closed."""
        ring, self._ring = self._ring, None
        if ring is not None:
            close_ring(ring)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(ring)

    def __iter__(self) -> Generator[tuple[int, bytes | SharedBlock], None, None]:
        context = process_context()
        slot_bytes = 2 * self._max_bytes
        ring = _ring_file(self._slots * slot_bytes) if self._slots else None
        self._ring = ring
        if ring is not None:
            self._permits = context.Semaphore(self._slots)
        receiver, sender = context.Pipe(duplex=False)
        child = context.Process(
            target=_inflate,
            args=(
                self._path,
                self._name,
                self._max_bytes,
                sender,
                ring,
                self._slots,
                slot_bytes,
                self._permits,
                os.getpid(),
            ),
        )
        child.daemon = True
        received: queue.Queue[Any] = queue.Queue(maxsize=BLOCKS_AHEAD)
        stop = threading.Event()

        def receive() -> None:
            while not stop.is_set():
                try:
                    message = receiver.recv()
                except (EOFError, OSError):  # the child died without a word
                    message = EOFError
                while not stop.is_set():
                    try:
                        received.put(message, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if message is None or message is EOFError or isinstance(message, str):
                    return

        thread = threading.Thread(target=receive, name="permindex-inflated-blocks", daemon=True)
        ended = False
        try:
            with signals_held():  # started and known (terminated below), or not started
                child.start()
            sender.close()
            thread.start()
            while True:
                if self._permits is not None and self._outstanding >= self._slots:
                    raise RuntimeError(
                        f"{self._slots} blocks read but not released: call release() after "
                        "reading each block"
                    )
                message = received.get()
                if message is None:
                    ended = True
                    return
                if message is EOFError:
                    raise InvalidArgumentError(
                        f"{self._name}: cannot read: the process decompressing it died"
                    )
                if isinstance(message, str):
                    raise InvalidArgumentError(message)
                first, block, self.position = message
                if self._permits is not None:
                    self._outstanding += 1
                yield first, block
        finally:
            stop.set()
            if child.is_alive():
                child.kill()  # it ignores SIGTERM (ignore_interrupts)
            if thread.ident is not None:
                thread.join()
            receiver.close()
            if child.pid is not None:
                child.join()
            self._permits = None
            if not ended or self._outstanding == 0:
                self.close()  # else the last release() does, when the blocks have been read
