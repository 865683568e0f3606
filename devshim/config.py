"""Environment variables, read each time they are needed (never at import).

``DEVSHIM_BACKEND``          which framework functions without a tensor use.
``DEVSHIM_DEVICE``           ``cpu`` hides every accelerator; unset, ``auto`` or ``gpu`` does not.
``DEVSHIM_VIRTUAL_DEVICES``  N virtual accelerators backed by host memory (backends that can).
"""

from __future__ import annotations

import os
from typing import Optional

from devshim.errors import BackendError, InvalidDeviceError

BACKEND_VAR = "DEVSHIM_BACKEND"
DEVICE_VAR = "DEVSHIM_DEVICE"
VIRTUAL_DEVICES_VAR = "DEVSHIM_VIRTUAL_DEVICES"

# Set by devshim.testing.virtual_devices(); takes precedence over the environment.
_virtual_devices_override: Optional[int] = None


def requested_backend() -> Optional[str]:
    value = os.environ.get(BACKEND_VAR, "").strip()
    return value or None


def accelerators_hidden() -> bool:
    """True when ``DEVSHIM_DEVICE=cpu`` asks devshim to act as if no accelerator existed."""
    value = os.environ.get(DEVICE_VAR, "").strip().lower()
    if value in ("", "auto", "gpu"):
        return False
    if value == "cpu":
        return True
    raise InvalidDeviceError(
        f"{DEVICE_VAR}={os.environ[DEVICE_VAR]!r} is not understood. "
        f"Use {DEVICE_VAR}=cpu to hide accelerators, or unset it."
    )


def virtual_device_count() -> int:
    """How many virtual accelerators were asked for (0 when none)."""
    if _virtual_devices_override is not None:
        return _virtual_devices_override
    raw = os.environ.get(VIRTUAL_DEVICES_VAR, "").strip()
    if not raw:
        return 0
    try:
        count = int(raw)
    except ValueError:
        count = -1
    if count < 0:
        raise BackendError(
            f"{VIRTUAL_DEVICES_VAR}={raw!r} must be a non-negative whole number, e.g. "
            f"{VIRTUAL_DEVICES_VAR}=2."
        )
    return count
