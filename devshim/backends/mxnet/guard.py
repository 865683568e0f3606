"""The transfer guard's hooks for MXNet 1.9.

Op inputs: MXNet checks only the device *type* of an op's inputs, so
`cpu(0) + cpu(1)` (and, on a GPU machine, `gpu(0) + gpu(1)`) runs
silently, on the first input's context. Every imperative op of both
front-ends (`mx.nd`, `mx.np`, `mx.npx`) is generated to call one
function, looked up in `mxnet.ndarray.register` when it runs; it is wrapped
while a guard is active, and inputs on another context than the first are
reported, comparing whole contexts (type and id); under "log" once the op ran (one MXNet
refuses, or that fails, is not counted). A 0-d host array is a number.

The `mx.np` operators MXNet 1.9 calls through its packed-function interface
(`np.tensordot`, `np.zeros` and others in `mxnet.ndarray.numpy._api_internal`)
skip that function; each of them is wrapped too. Advanced indexing (`A[I]`,
both front-ends) copies an index array on another context to `A`'s with a
copy of its own before the op: the conversion of each index array is wrapped,
and an index array on another context is reported.

Host reads: `asnumpy` is the door for every read (`item()`, `float(a)`,
`int(a)`, `bool(a)`, `tolist()`, `print(a)`, `asscalar()`); it is
replaced while a guard is active.
"""

from __future__ import annotations

import re
import sys

import mxnet as mx

from devshim.backends.mxnet import _internals
from devshim.backends.registry import load_backend
from devshim.guard import marker
from devshim.guard.hooks import GuardHooks, mark_wrapper, mixed_devices_refused, tensors_in
from devshim.guard.report import check_move, read_checked, read_name, run_logged
from devshim.guard.state import current

_READERS = {
    "item": "a.item()",
    "__float__": "float(a)",
    "__int__": "int(a)",
    "__bool__": "bool(a)",
    "tolist": "a.tolist()",
    "asscalar": "a.asscalar()",
    "__repr__": "print(a) / repr(a)",
    "__str__": "print(a) / str(a)",
    "__array__": "np.asarray(a)",
}
_NDArray = mx.nd.NDArray
# MXNet's entry points, from the probes (`_internals`): found once, here, when the guard loads.
_INVOKE = _internals.IMPERATIVE_INVOKE.get()  # Slot(mxnet.ndarray.register, "_imperative_invoke")
_NUMPY_PACKED = _internals.NUMPY_PACKED_FUNCTIONS.get()  # the module of mx.np's packed functions
_INDEX = _internals.INDEX_TO_ARRAY.get()  # Slot(NDArray, "_advanced_index_to_array")


def _guarded_asnumpy(original):
    def asnumpy(self):
        state = current()
        if state.checking and not marker.is_explicit():
            place = load_backend("mxnet").describe(self.ctx)
            if place.kind != "cpu":
                return read_checked(read_name(_READERS, "a.asnumpy()"), place, state, original, self)
        return original(self)

    return mark_wrapper(asnumpy, original)


def _guarded_invoke(original):
    def _imperative_invoke(handle, ndargs, keys, vals, out, is_np_op, output_is_list):
        state = current()
        if state.checking and len(ndargs) > 1 and not marker.is_explicit():
            pending = _check(sys._getframe(1).f_code.co_name, ndargs, state)  # the generated op's name
            return run_logged(pending, original, handle, ndargs, keys, vals, out, is_np_op, output_is_list)
        return original(handle, ndargs, keys, vals, out, is_np_op, output_is_list)

    return mark_wrapper(_imperative_invoke, original)


def _guarded_packed(name: str, original):
    def packed(*args):
        state = current()
        if state.checking and not marker.is_explicit():
            arrays = tensors_in(args, _NDArray)
            if len(arrays) > 1:
                return run_logged(_check(name, arrays, state), original, *args)
        return original(*args)

    mark_wrapper(packed, original)
    packed.__name__ = getattr(original, "__name__", name)
    return packed


def _guarded_index(original):
    def _advanced_index_to_array(idx, ax_len, ctx):
        if isinstance(idx, _NDArray) and idx.ctx != ctx:
            state = current()
            if state.checking and not marker.is_explicit():
                backend = load_backend("mxnet")
                source, target = backend.describe(idx.ctx), backend.describe(ctx)
                pending = check_move(source, target, "mxnet indexing A[I] (I an index array)", state)
                return run_logged(pending, original, idx, ax_len, ctx)
        return original(idx, ax_len, ctx)

    return staticmethod(mark_wrapper(_advanced_index_to_array, original))


def _check(op_name: str, ndargs, state) -> list:
    """Refuse the op under "disallow"; under "log", the copies to record once MXNet ran it."""
    contexts = [array.ctx for array in ndargs]  # one C call each: read once
    first = contexts[0]
    if all(context == first for context in contexts):
        return []  # the common case: every input where the op runs
    backend = load_backend("mxnet")
    described = [(array, backend.describe(context)) for array, context in zip(ndargs, contexts)]
    places = [place for array, place in described if place.kind != "cpu" or array.shape != ()]  # 0-d host: a number
    if len(places) < 2:
        return []
    target = places[0]  # MXNet runs the op on its first input's context
    return [check_move(source, target, f"mxnet op {op_name}", state) for source in places[1:] if source != target]


# MXNet's refusal of inputs in different contexts (a hybridized block's CachedOp: "CachedOp
# requires all inputs to live on the same context").
_MIXED = re.compile(r"same context")


class MXNetGuardHooks(GuardHooks):
    """MXNet's transfer-guard hooks (the contract: `devshim.guard.hooks.GuardHooks`).

    Example:
        >>> ds.backends.guard_hooks("mxnet").install()
    """

    def install(self) -> None:
        """Wrap `asnumpy`, the function every imperative op calls, the index conversion and the
        packed-function operators (`uninstall`: the base's restore)."""
        if self.patched():
            return
        self.patch(_NDArray, "asnumpy", _guarded_asnumpy(_NDArray.__dict__["asnumpy"]))
        if _INVOKE is not None:
            self.patch(*_INVOKE, _guarded_invoke(_INVOKE.current()))
        if _INDEX is not None:
            self.patch(*_INDEX, _guarded_index(_INDEX.own().__func__))
        if _NUMPY_PACKED is not None:
            for name, fn in list(vars(_NUMPY_PACKED).items()):
                if not name.startswith("__") and callable(fn) and not isinstance(fn, type):
                    self.patch(_NUMPY_PACKED, name, _guarded_packed(name, fn))

    def enter_block(self, state) -> None:
        """Nothing to set; following every block is what lets `translate` see the errors
        leaving it."""

    def translate(self, error):
        return mixed_devices_refused("MXNet", error, mx.base.MXNetError, _MIXED)
