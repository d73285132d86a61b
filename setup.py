"""The optional C extension of permindex (the metadata is in pyproject.toml).

permindex.index._match_lists makes a batch lookup's result lists in C, and a single query's
(calling the lookup kernel through its C entry point). It is optional: where no C compiler is at
hand the build prints a warning and the install goes on, and permindex makes the same lists in
Python (permindex/index/match.py, permindex/index/lookup.py).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "permindex.index._match_lists",
            sources=["permindex/index/_match_lists.c"],
            optional=True,
        )
    ]
)
