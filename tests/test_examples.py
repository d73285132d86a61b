"""The ``>>>`` examples of the public API run, and every public callable has one.

The objects are every name of ``permindex.__all__`` and, for classes, each public method and
property they have (inherited ones included, each function once: under the public class that
defines it, else under Index or Client rather than the classes extending them). An example
that needs a server names ``address``: the test starts a real server on 127.0.0.1 (port 0, a
temporary data directory) for it and puts its ``HOST:PORT`` in the example's globals, as the
docstring says in one line.
"""

from __future__ import annotations

import doctest
import inspect
from collections.abc import Iterator

import pytest
from conftest import StartServer

import permindex

#: The options of every example: ``...`` matches anything, runs of whitespace are one space.
OPTIONS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE

#: The classes whose every public method must show an example (besides every callable name of
#: ``permindex.__all__``).
CLASSES_WITH_EXAMPLES = ("Index", "ExpiringIndex", "Client", "AsyncClient")

#: Public callables that may lack an example, each with the reason it cannot have a useful one.
WITHOUT_EXAMPLE: dict[str, str] = {}


def _function(value: object) -> object | None:
    """The function behind a class attribute (a method, classmethod, staticmethod or property),
    or None for data (fields, constants)."""
    if isinstance(value, (classmethod, staticmethod)):
        return value.__func__
    if isinstance(value, property):
        return value.fget
    if inspect.isfunction(value):
        return value
    return None


def public_objects() -> Iterator[tuple[str, object, object]]:
    """(dotted name, object whose docstring is read, function or class) of the public API; the
    object of a property is the property (its docstring is its getter's). A function reached
    through several public classes is named once: under the one that defines it, else the
    first by name."""
    classes: list[tuple[str, type]] = []
    for name in sorted(permindex.__all__):
        if name == "__version__":
            continue
        value = getattr(permindex, name)
        yield f"permindex.{name}", value, value
        if inspect.isclass(value):
            classes.append((name, value))
    members: dict[int, tuple[str, object, object]] = {}
    for name, cls in sorted(classes, key=_class_order):
        for attr in sorted(dir(cls)):
            if attr.startswith("_"):
                continue
            static = inspect.getattr_static(cls, attr)
            function = _function(static)
            if function is None or not getattr(function, "__module__", "").startswith("permindex"):
                continue  # data, or a built-in's method (Exception.add_note, tuple.count)
            if id(function) not in members or attr in vars(cls):
                members[id(function)] = (f"permindex.{name}.{attr}", static, function)
    yield from sorted(members.values(), key=lambda member: member[0])


def _class_order(item: tuple[str, type]) -> tuple[bool, str]:
    """Index and Client before the classes that extend them, so that a method they share is
    named after the plain form."""
    return (item[0] not in ("Index", "Client"), item[0])


OBJECTS = list(public_objects())


def _docstring(documented: object) -> str:
    return getattr(documented, "__doc__", None) or ""


def _examples(name: str, documented: object) -> doctest.DocTest:
    return doctest.DocTestParser().get_doctest(_docstring(documented), {}, name, None, 0)


@pytest.mark.parametrize(
    ("name", "documented"),
    [(name, documented) for name, documented, _ in OBJECTS if ">>>" in _docstring(documented)],
    ids=[name for name, documented, _ in OBJECTS if ">>>" in _docstring(documented)],
)
def test_examples_run(name: str, documented: object, start_server: StartServer) -> None:
    test = _examples(name, documented)
    test.globs = {}
    if any("address" in example.source for example in test.examples):
        test.globs["address"] = start_server().address
    output: list[str] = []
    runner = doctest.DocTestRunner(optionflags=OPTIONS)
    result = runner.run(test, out=output.append, clear_globs=True)
    assert result.failed == 0, "".join(output)


def _required() -> Iterator[tuple[str, object]]:
    """The callables that must show an example: every callable name of ``__all__`` and each
    public method of :data:`CLASSES_WITH_EXAMPLES`; exception classes aside, as a group: they
    are raised, not called (their docstrings say when)."""
    for name, documented, function in OBJECTS:
        parts = name.split(".")
        if len(parts) == 2:
            if inspect.isclass(function) and issubclass(function, BaseException):
                continue
            if callable(function):
                yield name, documented
        elif parts[1] in CLASSES_WITH_EXAMPLES and not isinstance(documented, property):
            yield name, documented


REQUIRED = list(_required())


@pytest.mark.parametrize(("name", "documented"), REQUIRED, ids=[name for name, _ in REQUIRED])
def test_public_callable_has_an_example(name: str, documented: object) -> None:
    if name in WITHOUT_EXAMPLE:
        pytest.skip(WITHOUT_EXAMPLE[name])
    # an override without a docstring of its own shows its parent's (inspect.getdoc)
    doc = _docstring(documented) or inspect.getdoc(documented) or ""
    if ">>>" not in doc:
        pytest.fail(f"{name} has no >>> example in its docstring")


def test_the_allow_list_names_public_callables() -> None:
    """An allow-list entry names a required callable (a stale entry would hide nothing)."""
    assert set(WITHOUT_EXAMPLE) <= {name for name, _ in REQUIRED}
