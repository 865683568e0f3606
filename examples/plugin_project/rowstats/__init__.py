"""rowstats: a small library written against devshim, the project the pytest plugin tests.

``sum_of_squares(X, devices)`` splits the rows of ``X`` over ``devices``, squares and sums
each shard where it lives, and adds the partial sums on the first device: the shape of
every data-parallel reduction, and a place where a forgotten copy hides.
"""

from __future__ import annotations

from contextlib import nullcontext

import devshim as ds


def _where(x):
    """A block that runs ops on ``x``'s device: TensorFlow (and CuPy) place an op by the
    enclosing device scope, not by its inputs. Their device objects are ``with`` blocks
    (so are torch's and MXNet's, harmlessly); JAX's and NumPy's are not, and need none."""
    native = ds.device_of(x)  # the framework's own device object
    return native if hasattr(native, "__enter__") else nullcontext()


def sum_of_squares(X, devices=None):
    """The sum of ``X * X``, computed shard by shard on ``devices`` (default: ``X``'s device).

    The result is a 0-d array on ``devices[0]``. Only explicit copies are made (the shards,
    and each partial sum to the first device), so it runs under ``ds.transfer_guard("disallow")``.
    """
    devices = list(devices) if devices is not None else [ds.device_of(X)]
    partials = []
    for shard in ds.split_batch(X, devices=devices):
        xp = ds.array_module(shard)
        with _where(shard):
            partials.append(xp.sum(shard * shard, axis=0))  # per column: MXNet copies no 0-d arrays
    first = ds.copy_if_needed(partials[0], devices[0])
    with _where(first):
        total = first
        for partial in partials[1:]:
            total = total + ds.to_device(partial, devices[0])
        return ds.array_module(total).sum(total)
