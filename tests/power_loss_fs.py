"""A FUSE file system that loses, at a simulated power cut, everything not made durable: the
power-loss tests' disk (``tests/test_power_loss.py``). Not a test module.

Semantics (what POSIX promises and no more, as LazyFS gives PostgreSQL's and etcd's tests):

* a file's contents (its bytes and its size) are durable as of its last ``fsync`` or
  ``fdatasync``; anything written or truncated since is lost at a cut;
* a directory's entries (names created, renamed, linked or removed in it) are durable as of the
  directory's last ``fsync``; an entry changed since is undone at a cut -- a new file or
  directory whose parent was never fsynced is gone, whatever was fsynced inside it, a removed
  name comes back with its file's durable contents;
* a file or directory reachable from the root through durable entries alone survives, with its
  durable contents; nothing else does.

Everything lives in this process's memory. The file system runs in its own process, mounted in
the foreground by `mfusepy <https://github.com/mxmlnkn/mfusepy>`_ (libfuse 3), with the kernel's
caches off (``direct_io``, zero entry and attribute timeouts) so that what a reader sees after a
cut is what the file system holds. It is driven by one-line commands on its standard input,
each answered with one line on its standard output:

``cut``                 freeze: the durable state is taken as the crash image, and every
                        operation from then on fails with EIO (so nothing can be acknowledged
                        after the cut). Answers ``ok``.
``cut-on GLOB N``       cut right after the N-th creation (create, mkdir, link or rename's new
                        name) of a name matching GLOB (``fnmatch``, the name alone). ``ok``.
``status``              ``cut T`` once cut (by either command; T: the cut's time.monotonic(),
                        a clock every process of the machine shares), else ``running``.
``restore``             the crash image becomes the file system's state and operations work
                        again (the processes that used the old state must be gone: their open
                        files point to the lost state). ``ok``.
``stats``               ``ok FILE_FSYNCS DIR_FSYNCS``.

Run as ``python tests/power_loss_fs.py MOUNTPOINT``; it prints ``ready`` once mounted and exits
when unmounted (``fusermount3 -u MOUNTPOINT``).
"""

from __future__ import annotations

import errno
import fnmatch
import os
import stat
import sys
import threading
import time
from typing import Any

import mfusepy


class Node:
    """A file or a directory: its current state and its durable one."""

    __slots__ = ("data", "durable_data", "durable_entries", "entries", "is_dir", "mode", "mtime")

    def __init__(self, is_dir: bool, mode: int) -> None:
        self.is_dir = is_dir
        self.mode = mode
        self.mtime = time.time()
        self.data = bytearray()
        self.durable_data = b""
        self.entries: dict[str, Node] = {}
        self.durable_entries: dict[str, Node] = {}


def crash_image(root: Node) -> Node:
    """A new tree of what survives a cut of ``root``: the nodes reachable through durable
    entries, each with its durable contents (hard links kept: one node, several names)."""
    copies: dict[int, Node] = {}

    def copy(node: Node) -> Node:
        found = copies.get(id(node))
        if found is not None:
            return found
        new = Node(node.is_dir, node.mode)
        copies[id(node)] = new
        new.data = bytearray(node.durable_data)
        new.durable_data = node.durable_data
        new.entries = {name: copy(child) for name, child in node.durable_entries.items()}
        new.durable_entries = dict(new.entries)
        return new

    return copy(root)


class PowerLossFileSystem(mfusepy.Operations):  # type: ignore[misc]
    """The operations (mfusepy's high-level API, by path and file handle)."""

    use_ns = True
    flag_nullpath_ok = True
    flag_nopath = True

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.root = Node(True, stat.S_IFDIR | 0o755)
        self.handles: dict[int, Node] = {}
        self.next_handle = 1
        self.image: Node | None = None  # set at a cut
        self.cut_time = 0.0
        self.trigger: tuple[str, int] | None = None
        self.file_fsyncs = 0
        self.dir_fsyncs = 0

    # ---- control

    def cut(self) -> None:
        """Freeze (the caller holds the lock)."""
        if self.image is None:
            self.image = crash_image(self.root)
            self.cut_time = time.monotonic()

    def command(self, line: str) -> str:
        words = line.split()
        with self.lock:
            if words == ["cut"]:
                self.cut()
                return "ok"
            if len(words) == 3 and words[0] == "cut-on":
                self.trigger = (words[1], int(words[2]))
                return "ok"
            if words == ["status"]:
                return f"cut {self.cut_time}" if self.image is not None else "running"
            if words == ["restore"]:
                if self.image is None:
                    return "error: not cut"
                self.root, self.image, self.trigger = self.image, None, None
                self.handles.clear()
                return "ok"
            if words == ["stats"]:
                return f"ok {self.file_fsyncs} {self.dir_fsyncs}"
        return f"error: unknown command {line.strip()!r}"

    def _created(self, name: str) -> None:
        if self.trigger is not None and fnmatch.fnmatchcase(name, self.trigger[0]):
            pattern, count = self.trigger
            if count <= 1:
                self.trigger = None
                self.cut()
            else:
                self.trigger = (pattern, count - 1)

    # ---- helpers (the lock held)

    def _live(self) -> None:
        if self.image is not None:
            raise OSError(errno.EIO, "the power is cut")

    def _node(self, path: str) -> Node:
        node = self.root
        for part in path.strip("/").split("/"):
            if not part:
                continue
            if not node.is_dir:
                raise OSError(errno.ENOTDIR, path)
            child = node.entries.get(part)
            if child is None:
                raise OSError(errno.ENOENT, path)
            node = child
        return node

    def _parent(self, path: str) -> tuple[Node, str]:
        head, _, name = path.rstrip("/").rpartition("/")
        parent = self._node(head or "/")
        if not parent.is_dir:
            raise OSError(errno.ENOTDIR, path)
        return parent, name

    def _target(self, path: str | None, fh: int | None) -> Node:
        if fh:
            node = self.handles.get(fh)
            if node is None:
                raise OSError(errno.EBADF, "stale handle")
            return node
        if path is None:
            raise OSError(errno.EBADF, "no path and no handle")
        return self._node(path)

    def _handle(self, node: Node) -> int:
        fh = self.next_handle
        self.next_handle += 1
        self.handles[fh] = node
        return fh

    def _links(self, node: Node) -> int:
        if node.is_dir:
            return 2 + sum(1 for child in node.entries.values() if child.is_dir)
        return 1

    # ---- operations

    def init_with_config(self, conn_info: Any, config: Any) -> None:
        if config is not None:
            config.direct_io = 1
            config.hard_remove = 1
            config.entry_timeout = 0
            config.attr_timeout = 0
            config.negative_timeout = 0
        print("ready", flush=True)
        threading.Thread(target=control_loop, args=(self,), daemon=True).start()

    def getattr(self, path: str | None, fh: int | None = None) -> dict[str, Any]:
        with self.lock:
            self._live()
            node = self._target(path, fh)
            ns = int(node.mtime * 1e9)
            return {
                "st_mode": node.mode,
                "st_nlink": self._links(node),
                "st_size": 4096 if node.is_dir else len(node.data),
                "st_uid": os.getuid(),
                "st_gid": os.getgid(),
                "st_atime": ns,
                "st_mtime": ns,
                "st_ctime": ns,
                "st_blksize": 4096,
                "st_blocks": (len(node.data) + 511) // 512,
            }

    def statfs(self, path: str) -> dict[str, int]:
        return {
            "f_bsize": 4096, "f_frsize": 4096, "f_blocks": 1 << 22, "f_bfree": 1 << 21,
            "f_bavail": 1 << 21, "f_files": 1 << 20, "f_ffree": 1 << 19, "f_namemax": 255,
        }  # fmt: skip

    def readdir(self, path: str | None, fh: int) -> list[str]:
        with self.lock:
            self._live()
            node = self._target(path, fh)
            return [".", "..", *node.entries]

    def opendir(self, path: str) -> int:
        with self.lock:
            self._live()
            node = self._node(path)
            if not node.is_dir:
                raise OSError(errno.ENOTDIR, path)
            return self._handle(node)

    def releasedir(self, path: str | None, fh: int) -> int:
        with self.lock:
            self.handles.pop(fh, None)
        return 0

    def fsyncdir(self, path: str | None, datasync: int, fh: int) -> int:
        with self.lock:
            self._live()
            node = self._target(path, fh)
            node.durable_entries = dict(node.entries)
            self.dir_fsyncs += 1
        return 0

    def mkdir(self, path: str, mode: int) -> int:
        with self.lock:
            self._live()
            parent, name = self._parent(path)
            if name in parent.entries:
                raise OSError(errno.EEXIST, path)
            parent.entries[name] = Node(True, stat.S_IFDIR | (mode & 0o7777))
            parent.mtime = time.time()
            self._created(name)
        return 0

    def rmdir(self, path: str) -> int:
        with self.lock:
            self._live()
            parent, name = self._parent(path)
            node = parent.entries.get(name)
            if node is None:
                raise OSError(errno.ENOENT, path)
            if not node.is_dir:
                raise OSError(errno.ENOTDIR, path)
            if node.entries:
                raise OSError(errno.ENOTEMPTY, path)
            del parent.entries[name]
        return 0

    def create(self, path: str, mode: int, flags: int = 0) -> int:
        with self.lock:
            self._live()
            parent, name = self._parent(path)
            node = parent.entries.get(name)
            if node is None:
                node = Node(False, stat.S_IFREG | (mode & 0o7777))
                parent.entries[name] = node
                parent.mtime = time.time()
                self._created(name)
            elif flags & os.O_EXCL:
                raise OSError(errno.EEXIST, path)
            elif flags & os.O_TRUNC:
                del node.data[:]
            return self._handle(node)

    def open(self, path: str, flags: int) -> int:
        with self.lock:
            self._live()
            node = self._node(path)
            if flags & os.O_TRUNC and not node.is_dir:
                del node.data[:]
            return self._handle(node)

    def release(self, path: str | None, fh: int) -> int:
        with self.lock:
            self.handles.pop(fh, None)
        return 0

    def flush(self, path: str | None, fh: int) -> int:
        return 0

    def read(self, path: str | None, size: int, offset: int, fh: int) -> bytes:
        with self.lock:
            self._live()
            node = self._target(path, fh)
            return bytes(node.data[offset : offset + size])

    def write(self, path: str | None, data: bytes, offset: int, fh: int) -> int:
        with self.lock:
            self._live()
            node = self._target(path, fh)
            if offset > len(node.data):
                node.data.extend(bytes(offset - len(node.data)))
            node.data[offset : offset + len(data)] = data
            node.mtime = time.time()
            return len(data)

    def truncate(self, path: str | None, length: int, fh: int | None = None) -> int:
        with self.lock:
            self._live()
            node = self._target(path, fh)
            if length < len(node.data):
                del node.data[length:]
            else:
                node.data.extend(bytes(length - len(node.data)))
            node.mtime = time.time()
        return 0

    def fsync(self, path: str | None, datasync: int, fh: int) -> int:
        with self.lock:
            self._live()
            node = self._target(path, fh)
            node.durable_data = bytes(node.data)
            self.file_fsyncs += 1
        return 0

    def unlink(self, path: str) -> int:
        with self.lock:
            self._live()
            parent, name = self._parent(path)
            node = parent.entries.get(name)
            if node is None:
                raise OSError(errno.ENOENT, path)
            if node.is_dir:
                raise OSError(errno.EISDIR, path)
            del parent.entries[name]
            parent.mtime = time.time()
        return 0

    def link(self, target: str, source: str) -> int:
        # mfusepy's order: ``target`` is the new name, ``source`` the existing file.
        with self.lock:
            self._live()
            node = self._node(source)
            if node.is_dir:
                raise OSError(errno.EPERM, source)
            parent, name = self._parent(target)
            if name in parent.entries:
                raise OSError(errno.EEXIST, target)
            parent.entries[name] = node
            self._created(name)
        return 0

    def rename(self, old: str, new: str, flags: int = 0) -> int:
        with self.lock:
            self._live()
            old_parent, old_name = self._parent(old)
            node = old_parent.entries.get(old_name)
            if node is None:
                raise OSError(errno.ENOENT, old)
            new_parent, new_name = self._parent(new)
            replaced = new_parent.entries.get(new_name)
            if flags & 1 and replaced is not None:  # RENAME_NOREPLACE
                raise OSError(errno.EEXIST, new)
            if flags & ~1:
                raise OSError(errno.EINVAL, "rename flag not supported")
            if replaced is not None:
                if replaced.is_dir != node.is_dir:
                    raise OSError(errno.EISDIR if replaced.is_dir else errno.ENOTDIR, new)
                if replaced.is_dir and replaced.entries:
                    raise OSError(errno.ENOTEMPTY, new)
            del old_parent.entries[old_name]
            new_parent.entries[new_name] = node
            old_parent.mtime = new_parent.mtime = time.time()
            self._created(new_name)
        return 0

    def chmod(self, path: str | None, mode: int) -> int:
        with self.lock:
            self._live()
            if path is None:
                return 0
            node = self._node(path)
            node.mode = (node.mode & ~0o7777) | (mode & 0o7777)
        return 0

    def chown(self, path: str | None, uid: int, gid: int) -> int:
        return 0

    def utimens(self, path: str | None, times: tuple[int, int] | None = None) -> int:
        return 0


class FUSE(mfusepy.FUSE):  # type: ignore[misc]
    """mfusepy's FUSE, with libfuse 3's truncate passing its file handle on (``ftruncate`` of
    an open file: with ``nopath`` there is no path to go by)."""

    def truncate_fuse_3(self, path: bytes | None, length: int, fip: Any) -> int:
        fh = fip.contents.fh if fip else None
        name = None if path is None else path.decode(self.encoding, self.errors)
        result: int = self.operations.truncate(name, length, fh)
        return result


def control_loop(fs: PowerLossFileSystem) -> None:
    """Answer the commands of standard input (module docstring) until it closes."""
    for line in sys.stdin:
        if line.strip():
            print(fs.command(line), flush=True)


def main() -> None:
    mountpoint = sys.argv[1]
    FUSE(PowerLossFileSystem(), mountpoint, foreground=True, nothreads=True)


if __name__ == "__main__":
    main()
