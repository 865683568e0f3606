"""The one rule for virtual devices, shared by every backend that has them.

A backend that can split the host into several devices of its own (TensorFlow's
logical CPUs, MXNet's `cpu(i)` contexts, JAX's forced host device count)
presents `N` virtual accelerators like this: host device `0` stays the
CPU, and virtual `gpu:i` is host device `i + 1`. So N virtual GPUs need
`N + 1` host devices. (PyTorch has a single CPU device and no host devices
to split: its virtual `gpu:i` is a device type of its own, `vgpu:i`; see
the `devshim/backends/torch/_virtual` package.)

Example:
    >>> host_index(gpu_index=1)
    2
    >>> virtual_gpu_index(host_index=2, count=2)
    1
    >>> virtual_gpu_index(host_index=0, count=2) is None   # the CPU
    True
"""

from __future__ import annotations

__all__ = ["host_index", "virtual_gpu_index", "host_devices_needed", "HOST_CPU"]

#: The host device that stays the CPU.
HOST_CPU = 0


def host_index(gpu_index: int) -> int:
    """The host device behind virtual `gpu:gpu_index`.

    Example:
        >>> host_index(0)
        1
    """
    return gpu_index + 1


def virtual_gpu_index(host_index: int, count: int):
    """The virtual GPU that host device `host_index` backs, or None when it backs none.

    Example:
        >>> virtual_gpu_index(1, count=2), virtual_gpu_index(3, count=2)
        (0, None)
    """
    if 1 <= host_index <= count:
        return host_index - 1
    return None


def host_devices_needed(count: int) -> int:
    """How many host devices `count` virtual GPUs need (the CPU included).

    Example:
        >>> host_devices_needed(2)
        3
    """
    return count + 1
