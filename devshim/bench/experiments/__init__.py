"""The experiments of `devshim bench`, one module each, found by looking in this folder.

Each module declares `EXPERIMENT` (a `devshim.bench.experiment.Experiment`);
`experiments()` returns them by name, in the order of `ORDER` first (the
order the D2L chapter meets them), then any others by name.

Example:
    >>> from devshim.bench.experiments import experiments
    >>> list(experiments())
    ['matmul', 'logging', 'parallel', 'transfer', 'overhead', 'guard', 'startup']
"""

from __future__ import annotations

import functools
import importlib
import pkgutil

__all__ = ["experiments"]

ORDER = ("matmul", "logging", "parallel", "transfer", "overhead", "guard", "startup")


@functools.lru_cache(maxsize=None)
def experiments() -> dict:
    """name -> Experiment, for every module in this folder (looked up once, then kept).

    Example:
        >>> experiments()["matmul"].summary
        'D2L exercise 1: square float32 matmuls by size, on the CPU and each GPU'
    """
    found = {}
    for module in pkgutil.iter_modules(__path__):
        declared = getattr(importlib.import_module(f"{__name__}.{module.name}"), "EXPERIMENT", None)
        if declared is not None:
            found[declared.name] = declared
    rank = {name: i for i, name in enumerate(ORDER)}
    return dict(sorted(found.items(), key=lambda item: (rank.get(item[0], len(ORDER)), item[0])))
