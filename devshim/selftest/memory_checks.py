"""The memory checks of `devshim selftest`: `ds.memory` and `ds.memory_peak` on each device.

Declared like the checks of `devshim.selftest.checks` (whose `CHECKS` list they join when
this module is imported: the runner imports it), in a group of their own, `memory`.
"""

from __future__ import annotations

import devshim as ds
from devshim.backends.memory_base import format_bytes
from devshim.selftest.checks import Context, check, expect

__all__ = ["memory_figures", "memory_peak"]

#: One float32 tensor of 1 MiB.
SHAPE = (512, 512)
NBYTES = 4 * 512 * 512
FIELDS = ("in_use", "reserved", "peak", "total", "free")


def _summary(info) -> str:
    shown = [f"{name.replace('_', ' ')} {format_bytes(getattr(info, name))}" for name in FIELDS
             if getattr(info, name) is not None]
    return ", ".join(shown) or "no figures"


@check("memory figures", "memory",
       "ds.memory gives each device one record, figures in bytes or None (free <= total, reserved >= "
       "in use); on a GPU a new 1 MiB tensor adds 1 MiB to what is in use, where the framework says",
       per="device", needs=("ops",))
def memory_figures(ctx: Context, native):
    info = ds.memory(native)
    expect(info.device == ctx.describe(native), f"ds.memory names {info.device}, not {ctx.where(native)}")
    for name in FIELDS:
        value = getattr(info, name)
        expect(value is None or (type(value) is int and value >= 0), f"{name} is {value!r}, not bytes")
    if info.total is not None and info.free is not None:
        expect(info.free <= info.total, f"{format_bytes(info.free)} free of {format_bytes(info.total)}")
    if info.in_use is not None and info.reserved is not None:
        expect(info.reserved >= info.in_use, "the allocator holds less than is in use")
    if info.device.kind != "cpu" and info.in_use is not None:
        added = _bytes_one_tensor_adds(ctx, native)
        expect(abs(added - NBYTES) <= 0.01 * NBYTES,
               f"a 1 MiB tensor added {format_bytes(added)} to what is in use on {ctx.where(native)}")
    return f"{_summary(info)} ({info.source})"


def _bytes_one_tensor_adds(ctx: Context, native) -> int:
    """What one more 1 MiB tensor adds to the bytes in use on `native`.

    A first tensor is made and kept first: the first computation of its kind on a GPU may
    allocate what every later one reuses (JAX's random numbers on an H200 added 2 MiB the
    first time), and that is not the tensor's.
    """
    first = ctx.ops.rand(SHAPE, native)
    ds.synchronize(native)
    before = ds.memory(native).in_use
    second = ctx.ops.rand(SHAPE, native)
    ds.synchronize(native)
    added = ds.memory(native).in_use - before
    del first, second
    return added


@check("memory peak", "memory",
       "ds.memory_peak sees a 1 MiB tensor made inside the block (on a GPU, where the framework says "
       "what is in use), and reports how it took the peak",
       per="device", needs=("ops",))
def memory_peak(ctx: Context, native):
    with ds.memory_peak(native) as peak:
        x = ctx.ops.rand(SHAPE, native)
        ds.synchronize(native)
    expect(peak.method in ("reset", "counter", "sampled"), f"an unknown method {peak.method!r}")
    most, start, end, added = peak.peak, peak.start, peak.end, peak.added
    if most is None and peak.reason:  # a sampled peak that could have missed a tensor says why
        return f"{peak.method}: no figure ({peak.reason})"
    if most is None or start is None or end is None or added is None:
        return f"{peak.method}: {ctx.name} says nothing of what is in use here"
    expect(most >= max(start, end), "the peak is below what was in use at the start or the end")
    if ctx.describe(native).kind != "cpu":
        expect(added >= 0.99 * NBYTES, f"the peak rose by {format_bytes(added)}, less than the "
                                       f"1 MiB tensor made inside the block")
    del x
    return f"{peak.method}: {format_bytes(added)} more at most"
