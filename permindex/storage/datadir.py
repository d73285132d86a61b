"""The data directory: its layout, its lock, and the file-system steps every writer in it uses
(fsync of the directory, temporary names, keeping and retiring a previous generation).

Layout::

    DIR/snapshot.pmx        the current snapshot (:mod:`permindex.storage.snapshot`)
    DIR/snapshot.pmx.prev   the generation before it (a hard link kept until the new one is
                            durable; a manual fallback, never loaded automatically)
    DIR/LOCK                holds an exclusive flock(2) while a server owns DIR; contains its pid
    DIR/wal-*.log           the write-ahead log's segments (:mod:`permindex.storage.wal_records`):
                            the changes after the snapshot's log sequence, kept back to the
                            previous generation's
    DIR/.snapshot.pmx.*.tmp a write in progress, or the generation before .prev being deleted
                            (gradually, :func:`delete_gradually`); left over only by a crash,
                            removed at open
    DIR/.wal-*.tmp          a log segment being created; left over only by a crash, removed at
                            recovery
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import itertools
import logging
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import psutil

from permindex.errors import DataDirLockedError, StorageError

__all__ = [
    "LOCK_NAME",
    "PREVIOUS_SUFFIX",
    "SNAPSHOT_NAME",
    "DirectoryLock",
    "NotADataDirectoryError",
    "delete_gradually",
    "fsync_directory",
    "idle_io_priority",
    "link_previous",
    "make_directories",
    "remove_stale",
    "temporary_name",
]

# Its warnings are about snapshot files, under the logger name they have always had.
log = logging.getLogger("permindex.storage.snapshot")

SNAPSHOT_NAME: Final = "snapshot.pmx"
PREVIOUS_SUFFIX: Final = ".prev"
LOCK_NAME: Final = "LOCK"

_tmp_counter = itertools.count()


def fsync_directory(directory: Path) -> None:
    """fsync ``directory`` itself, so that the names created, renamed or removed in it are
    durable (the snapshot's rename, the write-ahead log's new segments). Raises OSError."""
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_directories(path: Path) -> None:
    """Create the directory ``path`` and its missing parents durably: each new directory's
    parent is fsynced after it is created, and ``path``'s parent is fsynced even when ``path``
    existed (a process that crashed between a mkdir and that fsync leaves it so). POSIX makes a
    new name durable only with an fsync of the directory that holds it, whatever was fsynced
    inside the new directory. O(depth) fsyncs.

    Raises:
        OSError: a directory cannot be created or fsynced (FileExistsError: a file has the name).
    """
    missing = []
    folder = path
    while not folder.is_dir():
        missing.append(folder)
        if folder.parent == folder:
            break
        folder = folder.parent
    for new in reversed(missing):
        try:
            new.mkdir()
        except FileExistsError:  # made meanwhile by another process, or a file of that name
            if not new.is_dir():
                raise
        fsync_directory(new.parent)
    if not missing:
        with contextlib.suppress(PermissionError):  # a parent this user cannot open
            fsync_directory(path.parent)


def temporary_name(path: Path, purpose: str) -> Path:
    """A name for a temporary file beside ``path``, unique in this process:
    ``.<name>.<pid>.<counter>.<purpose>.tmp`` (hidden; matched by the stale-file globs)."""
    return path.with_name(f".{path.name}.{os.getpid()}.{next(_tmp_counter)}.{purpose}.tmp")


class NotADataDirectoryError(StorageError, NotADirectoryError):
    """The data directory's path names something other than a directory (a file): a
    :class:`~permindex.errors.StorageError` (``permindex serve`` exits 7) that is also the
    ``NotADirectoryError`` the operating system would raise."""


class DirectoryLock:
    """An exclusive ``flock`` on ``DIR/LOCK``, which holds the owner's pid; the directory is
    created if missing, durably (:func:`make_directories`). Released by :meth:`close` (and by
    process exit).

    Raises (from the constructor):
        NotADataDirectoryError: (a StorageError and a NotADirectoryError) ``path`` exists and
            is not a directory.
        DataDirLockedError: another process (or another lock in this one) holds it; the
            message names the holder's pid when the lock file gives it.
        StorageError: the directory cannot be created, or the lock file cannot be opened
            (permissions, a read-only file system, a file where a folder is needed); the
            message names the path and the system's reason.
    """

    def __init__(self, path: Path) -> None:
        if path.exists() and not path.is_dir():
            raise NotADataDirectoryError(
                f"data directory {path} exists and is not a directory (give a folder, new or "
                "made by permindex serve)",
                errno.ENOTDIR,
            )
        lock_path = path / LOCK_NAME
        try:
            make_directories(path)
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as error:
            raise StorageError(
                f"data directory {path} cannot be used: {error.filename or lock_path}: "
                f"{error.strerror or error}",
                error.errno,
            ) from error
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            os.close(fd)
            if error.errno not in (errno.EWOULDBLOCK, errno.EACCES):
                raise
            raise _locked(path, lock_path) from error
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd: int | None = fd

    @property
    def held(self) -> bool:
        """Whether the lock is still held (not closed)."""
        return self._fd is not None

    def close(self) -> None:
        """Release the lock; idempotent."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def refuse_if_locked(path: Path) -> None:
    """Raise what :class:`DirectoryLock` would if another process holds the lock of the data
    directory ``path`` now: a probe that creates and writes nothing (the lock, when free, is
    taken and let go at once), so that ``permindex serve`` can refuse before it loads its
    kernels. A missing or unreadable lock file passes (:class:`DirectoryLock` reports it).

    Raises:
        DataDirLockedError: another process holds the lock; the message names its pid.
    """
    lock_path = path / LOCK_NAME
    try:
        fd = os.open(lock_path, os.O_RDONLY)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        if error.errno in (errno.EWOULDBLOCK, errno.EACCES):
            raise _locked(path, lock_path) from error
        return
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _locked(path: Path, lock_path: Path) -> DataDirLockedError:
    holder = _read_pid(lock_path)
    who = f"process {holder}" if holder else "another process"
    return DataDirLockedError(
        f"data directory {path} is in use by {who} (lock {lock_path})", path=str(path), pid=holder
    )


def _read_pid(lock_path: Path) -> int | None:
    try:
        return int(lock_path.read_text().strip() or 0) or None
    except (OSError, ValueError):
        return None


def remove_stale(directory: Path, pattern: str, what: str, logger: logging.Logger) -> None:
    """Remove the files of ``directory`` matching the glob ``pattern``, left over by a crash in
    the middle of ``what``, each with a warning to ``logger``; a file that cannot be removed
    stays."""
    for stale in directory.glob(pattern):
        logger.warning("removing %s, left over by an interrupted %s", stale, what)
        with contextlib.suppress(OSError):
            stale.unlink()


@contextlib.contextmanager
def idle_io_priority() -> Iterator[None]:
    """Run the body with the calling thread at the idle I/O priority class (Linux
    ``ioprio_set(IOPRIO_CLASS_IDLE)`` through psutil, honoured by the mq-deadline and BFQ
    schedulers), then restore the thread's class: for bulk writes nobody waits for, so that the
    write-ahead log's fdatasync goes first. Does nothing where the platform or the process does
    not allow it."""
    if sys.platform != "linux":
        yield
        return
    try:
        thread = psutil.Process(threading.get_native_id())
        before = thread.ionice()
        thread.ionice(psutil.IOPRIO_CLASS_IDLE)
    except (OSError, psutil.Error, ValueError):
        yield
        return
    try:
        yield
    finally:
        with contextlib.suppress(OSError, psutil.Error, ValueError):
            thread.ionice(before.ioclass, before.value or None)


def link_previous(path: Path) -> Path | None:
    """Make ``path`` + ``.prev`` a hard link to ``path`` (before ``path`` is replaced). An older
    ``.prev`` is first renamed to a temporary name and returned, to be deleted with
    :func:`delete_gradually` once the new file is in place (a crash before that leaves it as a
    stale temporary, removed at the next open); None when there was none. When hard links fail
    (a file system without them) no previous generation is kept, with a warning."""
    previous = path.with_name(path.name + PREVIOUS_SUFFIX)
    link = temporary_name(path, "link")
    retired = None
    try:
        if previous.exists():
            retired = temporary_name(path, "retired")
            os.replace(previous, retired)
        os.link(path, link)
        os.replace(link, previous)
    except OSError as error:  # e.g. a file system without hard links: no fallback copy kept
        with contextlib.suppress(OSError):
            os.unlink(link)
        log.warning("could not keep the previous snapshot as %s: %s", previous, error)
    return retired


def delete_gradually(path: Path, step: int) -> None:
    """Delete the file ``path`` by truncating it ``step`` bytes at a time (each cut fsynced, at
    the idle I/O class) before unlinking it, so that freeing a large file's blocks does not stall
    other fsyncs on the file system. Errors are logged, never raised: the file is only a retired
    generation."""
    try:
        with idle_io_priority():
            fd = os.open(path, os.O_WRONLY)
            try:
                size = os.fstat(fd).st_size
                while size > 0:
                    size = max(0, size - step)
                    os.ftruncate(fd, size)
                    os.fsync(fd)
            finally:
                os.close(fd)
        os.unlink(path)
        fsync_directory(path.parent)  # or a cut brings the retired name back (removed at open)
    except OSError as error:
        log.warning("could not delete the retired snapshot %s: %s", path, error)
