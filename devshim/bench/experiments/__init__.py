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

import importlib
import pkgutil

__all__ = ["experiments"]

ORDER = ("matmul", "logging", "parallel", "transfer", "overhead", "guard", "startup")
_found = None


def experiments() -> dict:
    """name -> Experiment, for every module in this folder."""
    global _found
    if _found is None:
        found = {}
        for module in pkgutil.iter_modules(__path__):
            declared = getattr(importlib.import_module(f"{__name__}.{module.name}"), "EXPERIMENT", None)
            if declared is not None:
                found[declared.name] = declared
        rank = {name: i for i, name in enumerate(ORDER)}
        _found = dict(sorted(found.items(), key=lambda item: (rank.get(item[0], len(ORDER)), item[0])))
    return _found
