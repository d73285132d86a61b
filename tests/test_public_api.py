"""The public API: every name of ``permindex.__all__`` resolves, the moved names are the
package's objects, and ``import permindex`` pulls in no grpc, numpy or numba. (The docs' Python
examples, imports included, run in tests/test_docs.py.)"""

from __future__ import annotations

import subprocess
import sys

import pytest

import permindex


@pytest.mark.parametrize("name", sorted(permindex.__all__))
def test_all_names_resolve(name: str) -> None:
    assert getattr(permindex, name) is not None


def test_moved_names_are_the_package_objects() -> None:
    from permindex.index.join.clusters import NearDuplicates, clusters
    from permindex.text.fingerprint import simhash, simhash_features

    assert permindex.clusters is clusters
    assert permindex.NearDuplicates is NearDuplicates
    assert permindex.simhash is simhash
    assert permindex.simhash_features is simhash_features


def test_import_permindex_pulls_no_grpc() -> None:
    code = "import sys, permindex; print(any(m.split('.')[0] == 'grpc' for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_import_permindex_is_light_and_names_load_on_first_use() -> None:
    """``import permindex`` loads neither numpy nor numba (the command's start and a Ctrl-C
    window stay short); the public names load on first use, ``import *`` and ``dir`` see
    them all, and an unknown name is an AttributeError."""
    code = (
        "import sys, permindex\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'numpy', 'numba', 'grpc'}))\n"
        "print(permindex.simhash('one two three four') == permindex.simhash_many("
        "['one two three four'])[0][0])\n"
        "names = {}\n"
        "exec('from permindex import *', names)\n"
        "public = set(permindex.__all__)\n"
        "print(public <= set(names) and public <= set(dir(permindex)))\n"
        "try:\n"
        "    permindex.no_such_name\n"
        "except AttributeError as error:\n"
        "    print(error)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == [
        "[]",
        "True",
        "True",
        "module 'permindex' has no attribute 'no_such_name'",
    ]


_FIRST_USE_FROM_EIGHT_THREADS = """
import threading, permindex

names = ["Client", "Flag", "ExactGroup", "NearDuplicates", "simhash_many", "Index", "hamming",
         "AsyncClient"]
barrier = threading.Barrier(len(names))
errors = []


def first_use(name):
    barrier.wait()
    try:
        getattr(permindex, name)
    except BaseException as error:
        errors.append(f"{name}: {type(error).__name__}: {error}")


threads = [threading.Thread(target=first_use, args=(name,)) for name in names]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(errors)
"""


def test_first_use_of_public_names_from_several_threads_at_once() -> None:
    """Eight threads asking for eight different public names at the same moment each get
    theirs (before: the modules' circular imports, run from several threads at once, raised
    ``_DeadlockError`` or ``ImportError: cannot import name`` in about 40 % of such starts).
    Five fresh interpreters."""
    for _ in range(5):
        done = subprocess.run(
            [sys.executable, "-c", _FIRST_USE_FROM_EIGHT_THREADS],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert (done.returncode, done.stdout) == (0, "[]\n"), done.stderr


_FIRST_IMPORTS = (
    "permindex.storage.key_section",
    "permindex.storage.snapshot",
    "permindex.storage.wal_records",
    "permindex.index.keys.rule",
    "permindex.index.keys.store",
    "permindex.index.tables.permutation",
    "permindex.index.search.matches",
    "permindex.index.join.clusters",
)


@pytest.mark.parametrize("module", _FIRST_IMPORTS)
def test_a_module_imports_first_in_a_fresh_interpreter(module: str) -> None:
    """A module of the index's or the storage's layers imported before anything else of
    permindex (as a script or a reader of the docs may): no import circle between the key
    section (storage) and the key rule (index) bites."""
    done = subprocess.run(
        [sys.executable, "-c", f"import {module}"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
