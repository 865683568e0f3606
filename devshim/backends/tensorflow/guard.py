"""The transfer guard's hooks for TensorFlow (eager execution).

Host reads: every way of reading an eager tensor on the host (`t.numpy()`,
`float(t)`, `int(t)`, `bool(t)`, `np.asarray(t)`, `print(t)`,
f-strings, pickling) goes through one method of TensorFlow's eager tensor
base class, which is replaced while some guard is active. `memoryview(t)`
reads the buffer directly and is not seen.

Op inputs: TensorFlow copies an op's inputs to the op's device without a
word: the device scope's, or without a scope its own pick (GPU 0 when there
is one, else `/CPU:0`; an op with a variable input runs on the variable's
device). The two calls every eager op goes through (the generated ops' fast
path and `execute`) are wrapped while a guard is active, and each input on
another device than the op's is reported (under "log" once the op ran: one TensorFlow
refuses, or that fails, is not counted), for ops with one tensor input
(`tf.exp(x)`, `x * 2`) as for those with several. Python scalars, 0-d host tensors
and int32 tensors wherever placed (TensorFlow keeps shapes and indices in host
memory even on a GPU) are not transfers, and reading an int32 tensor is no
device-to-host read. `tf.identity` and copies devshim makes are
explicit. Ops inside a `tf.function` are placed by TensorFlow's graph
runtime and are not seen one by one.
"""

from __future__ import annotations

import re

import tensorflow as tf

from devshim.backends.registry import load_backend
from devshim.backends.tensorflow import _internals
from devshim.guard import marker
from devshim.guard.hooks import GuardHooks, mark_wrapper, mixed_devices_refused, tensors_in
from devshim.guard.report import check_move, read_checked, read_name, run_logged
from devshim.guard.state import current

# Callers of the one reading method, as the read looks in the code that makes it.
_READERS = {
    "numpy": "t.numpy()",
    "__float__": "float(t)",
    "__int__": "int(t)",
    "__index__": "using t as an index",
    "__bool__": "bool(t)",
    "__complex__": "complex(t)",
    "__array__": "np.asarray(t)",
    "__format__": "formatting t (f-string, str.format)",
    "__reduce__": "pickling t",
    # and TensorFlow's functions that print a tensor (`_internals`): "print(t) / repr(t)"
}
# Ops that are copies the user asked for, and function calls whose ops TensorFlow places itself.
_UNCHECKED_OPS = {"Identity", "IdentityN", "DeepCopy", "CopyToDevice", "PartitionedCall", "StatefulPartitionedCall"}


class _NoEagerTensor:
    """Stands in for TensorFlow's eager tensor class on a release that moved it: no value is one."""


# TensorFlow's entry points, from the probes (`_internals`): found once, here, when the guard loads.
_NUMPY = _internals.EAGER_NUMPY.get()  # Slot(_EagerTensorBase, "_numpy"): every host read goes through it
_EagerTensor = _internals.EAGER_TENSOR.get()  # (no tensor made here: that would start TensorFlow's runtime)
_OP_ENTRY_POINTS = _internals.OP_ENTRY_POINTS.get() if _EagerTensor is not None else None
_EagerTensor = _EagerTensor or _NoEagerTensor
_READERS.update(dict.fromkeys(_internals.PRINT_FRAMES.get() or (), "print(t) / repr(t)"))
_RESOURCE, _INT32, _INT64 = tf.resource, tf.int32, tf.int64
# Set by install(): where descriptions come from, and the name of TensorFlow's default device
# for ops without a scope (GPU 0 when the machine has one, else the host). The name, not its
# Device: the adapter's descriptions are made anew when its devices change (virtual GPUs
# configured after the guard was installed), and places are compared with `is`.
_place = None
_default_name = None


def _on_accelerator(t) -> bool:
    # int32 tensors live in host memory even when placed on a GPU (TensorFlow keeps shapes and
    # indices there), so reading one moves nothing: TensorFlow's own gradient code reads the
    # reduction axes of a GPU op that way.
    name = t.device
    return bool(name) and t.dtype != _INT32 and _place(name).kind != "cpu"


def _guarded_numpy(original):
    def _numpy(self):
        state = current()
        if state.checking and not marker.is_explicit() and _on_accelerator(self):
            what = read_name(_READERS, "reading t on the host")
            return read_checked(what, _place(self.device), state, original, self)
        return original(self)

    return mark_wrapper(_numpy, original)


def _variable_place(inputs: list):
    """Where the first variable among `inputs` lives (None without one): an op with a variable
    input runs on the variable's device, scope or not."""
    return next((_place(t.device) for t in inputs if t.dtype == _RESOURCE), None)


def _default_target(inputs: list):
    variable = _variable_place(inputs)
    if variable is None and all(_place(t.device).kind == "cpu" and t.dtype in (_INT32, _INT64) for t in inputs):
        return _place("/CPU:0")
    return variable or _place(_default_name)


def _check(op_name: str, device_name, inputs: list, state) -> list:
    """Refuse the op under "disallow"; under "log", the copies to record once TensorFlow ran it
    (an op it refuses, or one that fails, is not counted)."""
    if op_name in _UNCHECKED_OPS:
        return []
    names = [t.device for t in inputs]
    first = names[0]
    alike = names.count(first) == len(names)
    # _place gives one Device object per place, so `is` compares places.
    if device_name:
        target = _place(device_name)
        if alike and _place(first) is target:
            return []  # the common case: inputs already where the op runs
        target = _variable_place(inputs) or target
    else:
        if alike and _place(first) is _place(_default_name):
            return []
        target = _default_target(inputs)
    pending = []
    for t, name in zip(inputs, names):
        if not name:
            continue
        source = _place(name)
        # 0-d host tensors are numbers; int32 tensors are shapes and indices, which TensorFlow keeps
        # in host memory wherever they are placed (its gradient code passes a shape made on one
        # GPU to an op on another), so handing one over copies no device memory.
        if source is target or t.dtype == _INT32 or (source.kind == "cpu" and t.shape.rank == 0):
            continue
        scope = "" if device_name else " (no device scope: TensorFlow's default device)"
        pending.append(check_move(source, target, f"tf op {op_name}{scope}", state))
    return pending


def _run_checked(original, args: tuple, op_name: str, device_name, values, state):
    """`original(*args)`, the op's tensor inputs among `values` checked first (`_check`)."""
    inputs = tensors_in(values, _EagerTensor)
    return run_logged(_check(op_name, device_name, inputs, state) if inputs else None, original, *args)


def _guarded_fast_path(original):
    def TFE_Py_FastPathExecute(ctx, op_name, name, *args):
        state = current()
        if state.checking and args and not marker.is_explicit():
            # one input is enough: tf.exp(x) under another device's scope copies x
            return _run_checked(original, (ctx, op_name, name, *args), op_name, ctx.device_name, args, state)
        return original(ctx, op_name, name, *args)

    return mark_wrapper(TFE_Py_FastPathExecute, original)


def _guarded_execute(original):
    def TFE_Py_Execute(ctx_handle, device_name, op_name, inputs, attrs, num_outputs):
        state = current()
        if state.checking and not marker.is_explicit():
            args = (ctx_handle, device_name, op_name, inputs, attrs, num_outputs)
            return _run_checked(original, args, op_name, device_name, inputs, state)
        return original(ctx_handle, device_name, op_name, inputs, attrs, num_outputs)

    return mark_wrapper(TFE_Py_Execute, original)


# TensorFlow's refusals of inputs on other devices: an op's under the "explicit" device policy
# (tf.config.experimental.set_device_policy), and a resource read from another device.
_MIXED = re.compile(r"Tensors on conflicting devices|located in device \S+ from device")


class TensorFlowGuardHooks(GuardHooks):
    """TensorFlow's transfer-guard hooks (the contract: `devshim.guard.hooks.GuardHooks`).

    Example:
        >>> ds.backends.guard_hooks("tensorflow").install()
    """

    def install(self) -> None:
        """Wrap the reading method and the two op entry points (`uninstall`: the base's restore)."""
        global _place, _default_name
        backend = load_backend("tensorflow")  # may load the backend, which may install: check after
        if self.patched():
            return
        _place = backend._describe_name
        _default_name = "/GPU:0" if backend.accelerator_count() else "/CPU:0"
        if _NUMPY is not None:
            self.patch(*_NUMPY, _guarded_numpy(_NUMPY.own()))
        if _OP_ENTRY_POINTS is not None:
            for slot, wrap in zip(_OP_ENTRY_POINTS, (_guarded_fast_path, _guarded_execute)):
                self.patch(*slot, wrap(slot.current()))

    def enter_block(self, state) -> None:
        """Nothing to set (TensorFlow's device policy is the user's); following every block
        is what lets `translate` see the errors leaving it."""

    def translate(self, error):
        return mixed_devices_refused("TensorFlow", error, tf.errors.OpError, _MIXED)
