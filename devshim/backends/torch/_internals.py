"""The private torch names the torch backend uses, each behind a probe (`devshim.backends.probes`).

The backend's modules ask these probes and name no torch internal themselves. Each probe
says which feature needs the name and what that feature does without it; on a torch that
moved one, its first use issues one `FrameworkInternalWarning`. The canary tests
(`tests/test_internals.py`) fail in CI the day a release moves one.

The virtual GPUs (the `_virtual` package) rest on more of them than any other feature:
torch's Python device registration (`torch._C._acc`), its wrapper-tensor and dispatch
machinery, its storage and pickling helpers. Those probes are listed in `VIRTUAL_GPU_INTERNALS`;
virtual GPUs are refused by name (`BackendError`) on a torch that lacks one of them, before
anything is registered. The ATen operator names the package treats specially are in
`ATEN_OPERATORS` (names in torch's operator registry, several spelt with a leading
underscore); their canary checks each is still an operator.
"""

from __future__ import annotations

import contextlib
from operator import attrgetter
from typing import Any, NamedTuple

from devshim.backends.probes import Internals, Slot, dotted, names_in_code

#: The torch releases devshim's CI tests (tox envs torch-floor, torch and torch-latest).
TESTED = "2.4 to 2.15"

INTERNALS = Internals("torch", title="torch", tested=TESTED)


def _add(name: str, find=None, **described):
    """An internal probed at its dotted `name`, unless `find` says where else to look."""
    return INTERNALS.add(name, find=find or dotted(name), **described)


def _read_by(code, name: str, moved: str) -> str:
    """`name`, once `code` is seen to use it (else AttributeError: `moved` and the name)."""
    if name not in names_in_code(code):
        raise AttributeError(f"{moved} {name}")
    return name


def _current_tx():
    from torch._dynamo.symbolic_convert import InstructionTranslator

    InstructionTranslator.current_tx  # noqa: B018 - the method restart_trace calls
    return InstructionTranslator


def _module_slots():
    import torch

    module = torch.nn.Module()
    if not isinstance(module._parameters, dict) or not isinstance(module._buffers, dict):
        raise TypeError("torch.nn.Module._parameters/_buffers are no longer dicts")
    return ("_parameters", "_buffers")


#: The attribute Dynamo traces in a function's place (torch.jit's and torch.compile's wrappers set
#: it). On a torch before 2.13 devshim's public functions that take tensors carry their traced
#: version there (the `_traced` module; `devshim.backends.dispatch.follow_torch_release`), and
#: on every torch those that take none a stand-in Dynamo runs in plain Python; set before torch is
#: imported too, hence a name here and not only the probe's answer. Releases before 2.13 are
#: fixed: the probe, run by the torch-floor env, checks the one that is the floor.
DYNAMO_INLINE_ATTRIBUTE = "_torchdynamo_inline"


def _dynamo_inline():
    import inspect

    from torch._dynamo.variables import builder

    return _read_by(inspect.unwrap(builder.VariableBuilder._wrap).__code__, DYNAMO_INLINE_ATTRIBUTE,
                    "torch._dynamo's VariableBuilder no longer reads")


DYNAMO_INLINE = INTERNALS.add(
    "torch._dynamo VariableBuilder reading _torchdynamo_inline",
    feature="devshim's calls inside torch.compile on torch before 2.13: Dynamo traces devshim's traced "
            "versions of them (or refuses one without, TorchCompileReleaseError)",
    fallback="Dynamo traces devshim's dispatch and fails inside it with its own error: call devshim "
             "outside the compiled function.",
    find=_dynamo_inline,
    before=(2, 13),
)
SKIP_CODE = _add(
    "torch._dynamo.eval_frame.skip_code",
    feature="devshim's own functions running uncompiled, on torch before 2.13, where torch.compile meets "
            "them outside a trace (a compiled function that traced no op, a graph break, "
            "torch.compile(ds.to_device) itself)",
    fallback="Dynamo compiles such a devshim function on its own and fails inside devshim's dispatch with "
             "its own error: call devshim outside the compiled function there.",
    before=(2, 13),
)
FUNCTION_MODE_STACK = _add(
    "torch.overrides._get_current_function_mode_stack",
    feature="the transfer guard taking its op-input check (a TorchFunctionMode) off a thread's mode "
            "stack when the thread's last guard block ends",
    fallback="the guard's mode stays on that thread's torch function mode stack after the block; it lets "
             "every op through there, at the cost of one Python call per op.",
)
PRIVATEUSE1_NAME = _add(
    "torch._C._get_privateuse1_backend_name",
    feature="telling a real out-of-tree accelerator from devshim's virtual GPUs (ds.try_gpu)",
    fallback="torch.accelerator's answer is taken as the accelerator unless it is devshim's vgpu.",
)
# The two internals restart_trace reads: one feature, one fallback.
_FIRST_CALL_IN_TRACE = dict(
    feature="torch.compile when the compiled function holds the process's first devshim call",
    fallback="such a compile raises FirstCallInTraceError; call any devshim function once before compiling.",
)
RESTART_ANALYSIS = _add("torch._dynamo.exc.RestartAnalysis", **_FIRST_CALL_IN_TRACE)
CURRENT_TX = _add("torch._dynamo.symbolic_convert.InstructionTranslator.current_tx", _current_tx,
                  **_FIRST_CALL_IN_TRACE)
TENSOR_USE_COUNT = _add(
    "torch.Tensor._use_count",
    feature="ds.allreduce across processes returning only once gloo's worker thread has let go of the "
            "tensors it summed (on torch before 2.8, a process group torn down while that thread still "
            "holds a tensor Python has dropped deadlocks destroy_process_group)",
    fallback="ds.allreduce keeps the tensors of its latest cross-process sum alive until its next call, "
             "so they outlive that thread's hold in all but a very late teardown.",
)
MODULE_SLOTS = INTERNALS.add(
    "torch.nn.Module._parameters / _buffers",
    feature="ds.place_model's rollback when moving a module fails part way",
    fallback="a failed ds.place_model still raises, but the tensors it had moved stay moved.",
    find=_module_slots,
)


# ---------------------------------------------------------------- virtual GPUs (_virtual package)
# Each is needed by the virtual GPUs as a whole: without one they are refused by name
# (`missing_for_virtual_gpus`). `since` is their own range's floor, torch 2.10 (older releases
# are refused by release first, quietly here).

_VIRTUAL = "virtual GPUs (DEVSHIM_VIRTUAL_DEVICES on the torch backend)"
_VIRTUAL_REFUSED = ("virtual GPUs are refused with a BackendError naming this internal; real devices "
                    "and the CPU work as before.")
_VIRTUAL_FLOOR = (2, 10)


def _tensor_data():
    import torch

    descriptor = vars(torch._C.TensorBase)["data"]
    descriptor.__get__, descriptor.__set__  # noqa: B018 - read and written below autograd
    return descriptor


def _op_parts():
    """What the virtual GPUs read of torch's `OpOverload`: the class, and readers of its C++
    entry point and its schema (`kernel_of(op)`, `schema_of(op)`)."""
    import torch

    op = torch.ops.aten.add.Tensor
    op._op, op._schema.arguments  # noqa: B018 - the entry point and schema the plans read
    return torch._ops.OpOverload, attrgetter("_op"), attrgetter("_schema")


def _cpu_keys():
    import torch

    return torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)


def _lazy_allowed():
    from torch.nn.parameter import UninitializedTensorMixin

    allowed = UninitializedTensorMixin._allowed_methods
    if not isinstance(allowed, (list, tuple, set, frozenset)):
        raise TypeError("UninitializedTensorMixin._allowed_methods is no longer a collection of methods")
    return allowed


def _device_type_lookups():
    import importlib

    data_parallel = importlib.import_module("torch.nn.parallel.data_parallel")  # (the package exports
    names = ("_get_available_device_type", "_get_all_device_indices")        # a function of that name)
    for name in names:
        getattr(data_parallel, name)
    return names


def _parameter_mark():
    import torch

    return _read_by(type(torch.nn.Parameter).__instancecheck__.__code__, "_is_param",
                    "torch.nn.Parameter's isinstance check no longer reads")


def _bad_fork_name():
    import torch

    name = "_is_in_bad_fork"
    getattr(torch.cuda, name)  # what torch asks every device module (CUDA's answers it)
    return name


def _device_test_modules():
    import importlib.util

    names = ("torch.testing._internal.common_utils", "torch.testing._internal.common_device_type")
    for name in names:
        if importlib.util.find_spec(name) is None:
            raise ImportError(f"no module {name}")
    return names


_virtual_gpu_internals: list = []  # every probe _virtual declares, in order


def _virtual(name: str, use: str, find=None):
    """A probe the virtual GPUs need (listed in `VIRTUAL_GPU_INTERNALS`)."""
    internal = _add(name, find, feature=f"{_VIRTUAL}: {use}", fallback=_VIRTUAL_REFUSED, since=_VIRTUAL_FLOOR)
    _virtual_gpu_internals.append(internal)
    return internal


# torch's Python device registration: the hooks and device-guard base classes, their registration
# functions, and the autograd device type they report.
ACCELERATION_HOOKS = _virtual("torch._C._acc (PrivateUse1Hooks, DeviceGuard, their registration)",
                              "the vgpu device's Python hooks and device guard",
                              dotted("torch._C._acc.PrivateUse1Hooks", "torch._C._acc.DeviceGuard",
                                     "torch._C._acc.register_python_privateuseone_hook",
                                     "torch._C._acc.register_python_privateuseone_device_guard",
                                     "torch._C._autograd.DeviceType.PrivateUse1"))
REGISTER_DEVICE_MODULE = _virtual("torch._register_device_module", "torch.vgpu, the device module")
BAD_FORK = _virtual("device module _is_in_bad_fork", "torch.vgpu, the device module", _bad_fork_name)
OPERATOR_LISTING = _virtual("torch._C._dispatch_get_all_op_names / _dispatch_has_kernel_for_dispatch_key",
                            "kernels for the operators torch runs on every device",
                            dotted("torch._C._dispatch_get_all_op_names",
                                   "torch._C._dispatch_has_kernel_for_dispatch_key"))
TENSOR_METADATA = _virtual("torch._C._get_tensor_metadata / _set_tensor_metadata",
                           "the conjugate and negative bits a tensor carries",
                           dotted("torch._C._get_tensor_metadata", "torch._C._set_tensor_metadata"))
STORAGE_FROM_POINTER = _virtual("torch._C._construct_storage_from_data_pointer",
                                "storages on a virtual GPU (views, torch.save, DLPack)")
WRAPPER_SUBCLASS = _virtual("torch.Tensor._make_wrapper_subclass", "the tensor class on a virtual GPU")
DISABLE_TORCH_FUNCTION = _virtual("torch._C.DisableTorchFunction", "Tensor.data set below torch's function layer")
DISABLE_TORCH_FUNCTION_SUBCLASS = _virtual("torch._C.DisableTorchFunctionSubclass", "reading a tensor's device")
DISABLED_TORCH_FUNCTION_IMPL = _virtual("torch._C._disabled_torch_function_impl",
                                        "no Python at torch's function layer")
TENSOR_DATA = _virtual("torch._C.TensorBase.data", "Tensor.data", _tensor_data)
AUTOGRAD_THREADS = _virtual("torch._C._is_multithreading_enabled / _set_multithreading_enabled",
                            "backward passes on the calling thread",
                            dotted("torch._C._is_multithreading_enabled", "torch._C._set_multithreading_enabled"))
OP_PARTS = _virtual("torch._ops.OpOverload (._op, ._schema)", "each operator's device rules and host kernel",
                    _op_parts)
CPU_KEYS = _virtual("torch._C.DispatchKeySet(DispatchKey.CPU)", "DLPack export's host storage", _cpu_keys)
C_GENERATOR = _virtual("torch._C.Generator", "a random generator per virtual GPU")
PARSE_TO = _virtual("torch._C._nn._parse_to", "moving torch.nn.Lazy* modules' tensors")
LAZY_ALLOWED = _virtual("torch.nn.parameter.UninitializedTensorMixin._allowed_methods",
                        "torch.nn.Lazy* modules' uninitialised tensors", _lazy_allowed)
EXCEPTION_WRAPPER = _virtual("torch._utils.ExceptionWrapper", "nn.DataParallel passing a replica's error on")
DEVICE_TYPE_LOOKUPS = _virtual("torch.nn.parallel.data_parallel._get_available_device_type / "
                               "_get_all_device_indices", "nn.DataParallel finding the virtual GPUs",
                               _device_type_lookups)
TENSOR_TEXT = _virtual("torch._tensor_str._str", "printing a tensor as CUDA's print")
PARAMETER_MARK = _virtual("torch.nn.Parameter's _is_param mark",
                          "parameters on a virtual GPU passing isinstance(p, nn.Parameter)", _parameter_mark)
UNTYPED_DTYPES = _virtual("torch.storage._new_dtypes", "torch.save of a virtual tensor")  # (a function)
# torch's own functions that rebuild a pickled tensor (so `weights_only` loads take them).
REBUILD_FUNCTIONS = _virtual("torch._utils._rebuild_tensor_v2 / _v3 / _rebuild_parameter",
                             "torch.save of a virtual tensor (weights_only loads)",
                             dotted("torch._utils._rebuild_tensor_v2", "torch._utils._rebuild_tensor_v3",
                                    "torch._utils._rebuild_parameter"))
DEVICE_TEST_MODULES = INTERNALS.add(
    "torch.testing._internal.common_device_type / common_utils",
    feature="ds.testing.torch_device_tests: torch's device-generic tests on virtual GPUs",
    fallback="ds.testing.torch_device_tests raises a BackendError naming the module this torch lacks.",
    find=_device_test_modules,
    since=_VIRTUAL_FLOOR,
)

#: What the virtual GPUs need, all of it (`missing_for_virtual_gpus`): the probes declared above.
VIRTUAL_GPU_INTERNALS = tuple(_virtual_gpu_internals)


QUEUE_CALLBACK = _add(
    "torch.autograd.Variable._execution_engine.queue_callback",
    feature="a virtual GPU's size (DEVSHIM_VIRTUAL_MEMORY) refusing an allocation inside a backward pass: "
            "torch.OutOfMemoryError is raised when the pass ends (an error raised inside one of torch's own "
            "backward nodes on an out-of-tree device ends the process)",
    fallback="an allocation past the size is refused where it happens, which inside a backward pass ends "
             "the process (torch's device guard cannot unwind past a Python error).",
    find=dotted("torch.autograd.Variable._execution_engine"),
    since=_VIRTUAL_FLOOR,
)


def _keras(name: str, find=None, **described):
    """An internal of Keras 3 (its torch backend), probed as the torch ones are."""
    return _add(name, find, framework="keras", since=(3, 0), **described)


def _keras_torch_core():
    """Keras's torch backend module (importing it imports Keras's torch layer, not another backend)."""
    from keras.src.backend.torch import core

    return core


def _keras_device_input():
    import inspect

    core = _keras_torch_core()
    if not callable(getattr(core, "_parse_device_input", None)) or \
            "_parse_device_input" not in names_in_code(inspect.unwrap(core.device_scope).__code__):
        raise AttributeError("keras's torch device_scope no longer reads _parse_device_input")
    return Slot(core, "_parse_device_input")


def _keras_copy_frames():
    return frozenset({_keras_torch_core().convert_to_tensor.__code__})


KERAS_DEVICE_INPUT = _keras(
    "keras.src.backend.torch.core._parse_device_input",
    feature="keras.device(...) taking devshim's torch devices (torch.device objects, virtual GPUs' 'vgpu:1') "
            "when Keras runs on torch",
    fallback="keras.device refuses a torch.device: give it the string torch spells it with "
             "(str(device); 'privateuseone:1' for virtual GPU 1).",
    find=_keras_device_input,
)
KERAS_CURRENT_DEVICE = _keras(
    "keras.src.backend.torch.core.get_device",
    feature="ds.model_device of a Keras model devshim did not place saying where Keras computes (its current "
            "device: KERAS_TORCH_DEVICE, a keras.device block) when that is not where the weights are",
    fallback="ds.model_device answers where the weights are.",
)
KERAS_COPY_FRAMES = _keras(
    "keras.src.backend.torch.core.convert_to_tensor",
    feature="the transfer guard seeing the copies Keras makes of a layer's inputs to its current device "
            "(convert_to_tensor's x.to(device)) as implicit transfers",
    fallback="those copies are taken for explicit ones (Tensor.to) and let through.",
    find=_keras_copy_frames,
)
KERAS_MAYBE_BUILD = _keras(
    "keras.layers.Layer._maybe_build",
    feature="ds.place_model of an unbuilt Keras model, built on its first call under the device, when Keras runs "
            "on torch",
    fallback="only the model's build() and call() run under the device (a subclassed model's weights, made "
             "after Keras traces its call(), land on Keras's default device): pass input_shape= to "
             "ds.place_model to build it there at once.",
)
KERAS_FUNCTIONAL = _keras(
    "keras.src.models.functional.Functional",
    feature="ds.replicate cloning functional Keras models (keras.Model(inputs, outputs)) when Keras runs on torch",
    fallback="functional models are refused like subclassed ones (UnsupportedPlacementError); "
             "keras.Sequential models are still cloned.",
)


def missing_for_virtual_gpus() -> list:
    """The names of the internals in `VIRTUAL_GPU_INTERNALS` this torch lacks (probing each).

    Example:
        >>> missing_for_virtual_gpus()          # torch 2.10 to 2.15
        []
    """
    return [internal.name for internal in VIRTUAL_GPU_INTERNALS if not internal.available()]


#: The ATen operators the virtual GPUs treat specially, by their names in torch's operator
#: registry (`torch.ops.aten.<name>`; a leading underscore is part of the operator's name, not
#: Python's privacy). `_foreach_` is the prefix of torch's list operators.
ATEN_OPERATORS = frozenset({
    "_copy_from", "_copy_from_and_resize", "_to_copy", "_local_scalar_dense", "_resize_output_",
    "_index_put_impl_", "_unsafe_index", "_unsafe_index_put", "_ctc_loss", "_ctc_loss_backward",
    "_pack_padded_sequence", "_pack_padded_sequence_backward", "_pad_packed_sequence",
})
FOREACH_PREFIX = "_foreach_"

__all__ = ["INTERNALS", "TESTED", "DYNAMO_INLINE_ATTRIBUTE", "DYNAMO_INLINE", "SKIP_CODE", "FUNCTION_MODE_STACK",
           "PRIVATEUSE1_NAME", "RESTART_ANALYSIS", "CURRENT_TX", "MODULE_SLOTS", "VIRTUAL_GPU_INTERNALS",
           "missing_for_virtual_gpus", "ATEN_OPERATORS", "FOREACH_PREFIX", "ACCELERATION_HOOKS",
           "REGISTER_DEVICE_MODULE", "BAD_FORK", "OPERATOR_LISTING", "TENSOR_METADATA", "STORAGE_FROM_POINTER",
           "WRAPPER_SUBCLASS", "DISABLE_TORCH_FUNCTION", "DISABLE_TORCH_FUNCTION_SUBCLASS",
           "DISABLED_TORCH_FUNCTION_IMPL", "TENSOR_DATA", "AUTOGRAD_THREADS", "OP_PARTS", "CPU_KEYS", "C_GENERATOR",
           "PARSE_TO", "LAZY_ALLOWED", "EXCEPTION_WRAPPER", "DEVICE_TYPE_LOOKUPS", "TENSOR_TEXT", "PARAMETER_MARK",
           "UNTYPED_DTYPES", "REBUILD_FUNCTIONS", "DEVICE_TEST_MODULES", "QUEUE_CALLBACK", "KERAS_DEVICE_INPUT",
           "KERAS_CURRENT_DEVICE", "KERAS_COPY_FRAMES", "KERAS_FUNCTIONAL", "KERAS_MAYBE_BUILD"]


class FakeTensors(NamedTuple):
    """What `ds.estimate_memory` runs a torch step with (`FAKE_TENSORS`)."""

    mode: Any              # torch._subclasses.fake_tensor.FakeTensorMode: tensors with no storage memory
    tensor: Any            # their type, FakeTensor
    copy_mode: Any         # its FakeCopyMode: copy.deepcopy of a model makes one of fake tensors
    dispatch_mode: Any     # torch.utils._python_dispatch.TorchDispatchMode: devshim's count of their bytes
    value_read: tuple      # the errors a step that reads a value (item, a data-dependent shape) gets


def _fake_tensors() -> FakeTensors:
    from torch._subclasses import fake_tensor
    from torch.utils._python_dispatch import TorchDispatchMode

    return FakeTensors(fake_tensor.FakeTensorMode, fake_tensor.FakeTensor, fake_tensor.FakeCopyMode, TorchDispatchMode,
                       (fake_tensor.DataDependentOutputException, fake_tensor.DynamicOutputShapeException))


FAKE_TENSORS = INTERNALS.add(
    "torch._subclasses.fake_tensor.FakeTensorMode, FakeCopyMode and torch.utils._python_dispatch.TorchDispatchMode",
    feature="ds.estimate_memory and ds.largest_batch on torch: a step run on tensors without memory, their "
            "storages counted as they are made and freed",
    fallback="ds.estimate_memory refuses torch steps with ds.MemoryEstimateUnsupportedError.",
    find=_fake_tensors,
)


def _fake_memo():
    from torch._subclasses.fake_tensor import FakeTensorConverter

    FakeTensorConverter.set_tensor_memo  # noqa: B018 - what from_meta_and_device calls for each result
    return _read_by(FakeTensorConverter.from_meta_and_device.__code__, "set_tensor_memo",
                    "FakeTensorConverter.from_meta_and_device no longer calls")


#: torch's FakeTensorMode keeps a weak reference to every tensor an operation makes (its
#: converter's memo, `set_tensor_memo`), and `nn.Module.to` swaps a FakeTensor parameter in place
#: (`torch.utils.swap_tensors`), which refuses a tensor with a weak reference: `model.to(device)`
#: inside FakeTensorMode fails (described in pytorch/pytorch#196558). The estimate's own mode does not memoise
#: results (a fresh result is never looked up again), so `model.to(device)` works in a step.
FAKE_MEMO = INTERNALS.add(
    "torch._subclasses.fake_tensor.FakeTensorConverter.set_tensor_memo",
    feature="ds.estimate_memory on torch: model.to(device) inside the estimated step",
    fallback="the estimate of a step that calls module.to(device) may fail with torch's \"Couldn't swap\" "
             "error (build the model on its device instead: torch.nn.Linear(..., device=device)).",
    find=_fake_memo,
)


def _dynamo_config():
    from torch._dynamo import config

    config.disable  # noqa: B018 - the switch patched
    return config


#: torch.compile'd code runs eagerly in an estimate: Inductor's kernels make their tensors below
#: torch's dispatcher, in real memory the estimate neither counts nor should take. From torch 2.6,
#: `torch.compiler.set_stance("force_eager")` says so publicly; before, Dynamo is switched off.
DYNAMO_CONFIG = _add(
    "torch._dynamo.config.disable",
    _dynamo_config,
    feature="ds.estimate_memory of a step that uses torch.compile, on torch before 2.6: its compiled functions "
            "and modules run eagerly (torch.compiler.set_stance(\"force_eager\") from 2.6)",
    fallback="the compiled code runs Inductor's kernels, which make real tensors, and the estimate is refused "
             "with ds.MemoryEstimateError: estimate the step without torch.compile.",
    before=(2, 6),
)


def compiled_code_runs_eagerly():
    """A context in which functions and modules compiled with `torch.compile` run eagerly, on
    torch's own kernels (`torch.compiler.set_stance("force_eager")`, torch 2.6 on; Dynamo switched
    off before, `DYNAMO_CONFIG`).

    Example:
        >>> with compiled_code_runs_eagerly():
        ...     torch.compile(model)(x)      # model(x), not compiled
    """
    import torch

    set_stance = getattr(torch.compiler, "set_stance", None)
    if set_stance is not None:
        return set_stance("force_eager")
    config = DYNAMO_CONFIG.get()
    return config.patch(disable=True) if config is not None else contextlib.nullcontext()


#: torch takes its faster `foreach` kernels (an optimiser's step over all its tensors at once,
#: CUDA's default; `clip_grad_norm_`'s, on the CPU too) only for tensors whose type is in these
#: lists, and neither a FakeTensor's nor a virtual tensor's is: an estimate adds FakeTensor for
#: the step's time, and virtual GPUs add their tensor type once installed, as torch itself adds
#: DTensor's, so a step takes the path it takes on its device's real tensors.
FOREACH_TYPES = _add(
    "torch.optim.optimizer._foreach_supported_types",
    feature="an optimiser's default path on a virtual GPU and in ds.estimate_memory on torch (the foreach "
            "kernels, CUDA's default, whose temporaries are as large as all the parameters at once)",
    fallback="optimisers take the per-tensor path on virtual GPUs and in estimated steps (pass foreach=True "
             "to the optimiser for CUDA's default path).",
)
CLIP_FOREACH_TYPES = _add(
    "torch.utils._foreach_utils._foreach_supported_types",
    feature="clip_grad_norm_'s default path (foreach) on a virtual GPU and in ds.estimate_memory on torch",
    fallback="clip_grad_norm_ takes the per-tensor path on virtual GPUs and in estimated steps (pass "
             "foreach=True for the default).",
)


def take_foreach_path(tensor_type) -> list:
    """Makes optimisers and `clip_grad_norm_` take their `foreach` kernels by default for tensors
    of `tensor_type`, as they do for CUDA tensors: adds the type to those of the two lists
    (`FOREACH_TYPES`, `CLIP_FOREACH_TYPES`) that this torch has and that lack it, and gives back
    the lists it was added to (a caller that adds it for a while takes it off them again).

    Example:
        >>> take_foreach_path(VirtualTensor)   # once, when virtual GPUs are installed
        [[Tensor, Parameter, VirtualTensor], [Tensor, VirtualTensor]]
        >>> take_foreach_path(VirtualTensor)   # the lists hold it already
        []
    """
    lists = [found for found in (FOREACH_TYPES.get(), CLIP_FOREACH_TYPES.get())
             if found is not None and tensor_type not in found]
    for found in lists:
        found.append(tensor_type)
    return lists


__all__ += ["FakeTensors", "FAKE_TENSORS", "FAKE_MEMO", "DYNAMO_CONFIG", "compiled_code_runs_eagerly", "FOREACH_TYPES",
            "CLIP_FOREACH_TYPES", "take_foreach_path"]
