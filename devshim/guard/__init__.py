"""The transfer guard: copies nobody asked for fail, or are logged, on every backend.

A transfer is *explicit* when devshim makes it for you (`to_device`,
`copy_if_needed`, `to_numpy`, and everything built on them); those go
through `devshim.transfer`, which marks them. Every other copy is
*implicit*: a framework reading a GPU tensor on the host for `float(t)`, or
copying an op's input from one device to another. The guard decides, per
direction, what happens to implicit ones:

`"allow"`     nothing is checked (the default);
`"log"`       an `ImplicitTransferWarning` once per call site, and the report counts each one;
`"disallow"`  `ImplicitTransferError` (host reads) or `DeviceMismatchError`
                (op inputs on another device) is raised before the copy happens.

The guard is in two parts, on either side of the backends. This package is its core, below
the backends (which report to it), lowest module first:

`levels`     the levels, directions and kinds of event (`devshim.settings` reads them);
`state`      the levels in force per thread or asyncio task (a ContextVar) and the process default;
`marker`     the explicit-transfer marker the transfer door sets;
`hooks`      `GuardHooks`, the contract each backend's `guard.py` implements, with the
               save/patch/restore of the framework functions those hooks replace;
`lifecycle`  when those hooks go in and out (the registry declares backends to it);
`report`     `implicit()`, what hooks call, and the `TransferReport` a block yields;

The other part is the block users write, `ds.transfer_guard`: `devshim/guard_block.py`,
above the backends (it asks the registry to declare them before the hooks go in).

Importing this package imports none of its modules: each name below is loaded on first use.

Example:
    >>> from devshim.guard import levels
    >>> levels.DISALLOW
    'disallow'
"""

from typing import TYPE_CHECKING

from devshim._lazy import lazy_names

if TYPE_CHECKING:  # what type checkers see; at run time each name loads on first use
    from devshim.guard.hooks import GuardHooks, is_wrapper, mark_wrapper, original_of
    from devshim.guard.levels import ALLOW, DIRECTIONS, DISALLOW, KINDS, LEVELS, LOG, OP_INPUT, READ, TO_DEVICE
    from devshim.guard.report import TransferEvent, TransferReport, crossing, direction_of, implicit, read_name
    from devshim.guard.state import GuardState, current

_EXPORTS = {
    **dict.fromkeys(("TransferReport", "TransferEvent", "implicit", "crossing", "read_name", "direction_of"),
                    "devshim.guard.report"),
    **dict.fromkeys(("GuardState", "current"), "devshim.guard.state"),
    **dict.fromkeys(("GuardHooks", "mark_wrapper", "original_of", "is_wrapper"), "devshim.guard.hooks"),
    **dict.fromkeys(("ALLOW", "LOG", "DISALLOW", "LEVELS", "DIRECTIONS", "KINDS", "READ", "OP_INPUT",
                     "TO_DEVICE"), "devshim.guard.levels"),
}
_SUBMODULES = ("levels", "state", "marker", "hooks", "lifecycle", "report")

__all__ = [
    "TransferReport", "TransferEvent", "implicit", "crossing", "read_name", "direction_of",
    "GuardState", "current", "GuardHooks", "mark_wrapper", "original_of", "is_wrapper", "ALLOW", "LOG",
    "DISALLOW", "LEVELS", "DIRECTIONS", "KINDS", "READ", "OP_INPUT", "TO_DEVICE"
]
__getattr__, __dir__ = lazy_names(globals(), _EXPORTS, _SUBMODULES)
