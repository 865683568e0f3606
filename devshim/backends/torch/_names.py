"""Names the torch backend's modules share, at the bottom of its imports.

`core.py`, `_distributed.py` and the `_virtual` package all import from here and
from nothing of each other's, so imports in this backend go one way: core -> _virtual
(only when virtual GPUs are asked for), and every module -> _names. No framework is
imported here.
"""

#: The torch device type of devshim's virtual GPUs (torch's privateuse1 slot, renamed).
VIRTUAL_TYPE = "vgpu"

__all__ = ["VIRTUAL_TYPE"]
