"""Marking functions that torch.compile runs in plain Python rather than tracing into.

Example:
    >>> from devshim._trace import trace_constant
"""

from __future__ import annotations

__all__ = ["trace_constant"]


def trace_constant(fn):
    """Mark `fn` as `torch.compiler.assume_constant_result` does, without importing torch.

    torch.compile then runs `fn` in plain Python while tracing (its arguments
    are constants: classes, device specs) and keeps what it returns, rather
    than tracing into it. devshim's learning paths (building the registry,
    making adapters, resolving a device spec) take locks and import modules,
    which Dynamo cannot trace. The torch adapter applies torch's own decorator
    too, when it is made (`TorchBackend.__init__`).

    Example:
        >>> trace_constant(registry_lookup) is registry_lookup
        True
    """
    fn._dynamo_marked_constant = True  # the attribute torch.compiler.assume_constant_result sets
    return fn
