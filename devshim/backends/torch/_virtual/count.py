"""How many virtual GPUs exist now, and which `vgpu` devices a call may name.

The lowest module of the package: the others read the count from here.

Example:
    >>> set_count(2)
    >>> target("vgpu:1")
    device(type='vgpu', index=1)
"""

from __future__ import annotations

import torch

from devshim import settings
from devshim.backends.torch._names import VIRTUAL_TYPE
from devshim.errors import DeviceUnavailableError

__all__ = ["device_count", "set_count", "target", "is_virtual_type"]

_count = 0          # virtual GPUs presented now (0 once turned off; tensors made before still work)


def device_count() -> int:
    """How many virtual GPUs exist now (`torch.vgpu.device_count()`).

    Example:
        >>> device_count()
        2
    """
    return _count


def set_count(count: int) -> None:
    """Change how many virtual GPUs exist (0: none, though tensors made on them still work).

    Example:
        >>> set_count(3)
    """
    global _count
    _count = count  # (one store: readers see the old count or the new one)


def is_virtual_type(device) -> bool:
    """Whether torch.device `device` is a virtual GPU."""
    return device.type == VIRTUAL_TYPE


def target(device):
    """`device` (a factory's `device=`) as a torch.device; a bare "vgpu" is vgpu:0, the
    current device (a Python device guard cannot hold another current device)."""
    device = torch.device(device)
    if device.type != VIRTUAL_TYPE:
        return device
    index = 0 if device.index is None else device.index
    if index >= _count:
        raise DeviceUnavailableError(
            f"{VIRTUAL_TYPE}:{index} does not exist: devshim presents {_count} virtual GPU"
            f"{'s' if _count != 1 else ''} ({settings.VIRTUAL_DEVICES_VAR}={_count}). Use "
            f"ds.try_gpu({index}) to fall back to the CPU, or ask for more virtual GPUs."
        )
    return device if device.index is not None else torch.device(VIRTUAL_TYPE, index)
