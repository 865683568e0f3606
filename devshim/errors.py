"""Every error and warning devshim raises, and nothing else.

Each class also derives from the built-in exception a caller would naturally
catch (`ValueError`, `TypeError`, `RuntimeError`), so code written
against plain Python exceptions, or against the framework's own errors,
keeps working. Every message names what was wrong and says what to do.

Example:
    >>> try:
    ...     ds.gpu(7)
    ... except ds.DeviceUnavailableError as err:   # also a RuntimeError
    ...     print(err)
"""

from __future__ import annotations

__all__ = [
    "DevshimError",
    "BackendError",
    "InvalidDeviceError",
    "DeviceUnavailableError",
    "DeviceMismatchError",
    "ImplicitTransferError",
    "CrossDeviceConversionError",
    "CopyRequiredError",
    "InvalidGuardLevelError",
    "NotATensorError",
    "NestCycleError",
    "NotAModelError",
    "UnbuiltModelError",
    "UnsupportedPlacementError",
    "BatchSplitError",
    "ReduceMismatchError",
    "MixedFrameworksError",
    "UnknownSubmoduleError",
    "GuardBlockInUseError",
    "UnsupportedDtypeError",
    "UnsupportedValueError",
    "DatalessTensorError",
    "NotOnHostError",
    "UnplacedTensorError", "FirstCallInTraceError",
    "MultiDeviceValueError",
    "MixedArrayModulesError",
    "TimingError",
    "ExperimentError",
    "BenchUsageError",
    "PlotUnavailableError",
    "LauncherEnvironmentError",
    "VirtualDeviceCountError",
    "VirtualDataParallelError",
    "FrameworkReleaseError",
    "VirtualDLPackError",
    "DevshimWarning",
    "ImplicitTransferWarning",
    "SharedDeviceWarning",
    "FrameworkInternalWarning",
    "VirtualBesideRealGpuWarning",
    "NotCloseError", "GradientMismatchError", "NoAutodiffError", "ImmutableInputError", "GradientCheckUsageError",
    "TorchCompileReleaseError",
    "NondifferentiableError", "InputMutatedError", "GradientFunctionError", "ToleranceError",
    "DeviceOutOfMemoryError", "VirtualMemorySizeError",
    "BackendPluginWarning",
    "PrecisionWarning",
    "KerasBackendMismatchError",
]
__all__ += ["VirtualMemoryWithoutDevicesWarning", "MemoryEstimateError", "MemoryEstimateUnsupportedError"]


class DevshimError(Exception):
    """Base class of every error devshim raises.

    Example:
        >>> try:
        ...     ds.gpu(7)
        ... except ds.DevshimError as err:
        ...     print(err)
    """

    # The same initialiser every builtin exception has, named as Exception's: TensorFlow's
    # autograph re-raises errors from inside tf.function with their own type only when
    # their __init__ is Exception.__init__ (else it wraps them in a StagingError).
    __init__ = Exception.__init__


class BackendError(DevshimError, ValueError):
    """A backend name is unknown, its framework is not installed, or it cannot
    do what was asked (for example virtual devices on NumPy).

    Example:
        >>> ds.set_backend("caffe")
        Traceback (most recent call last):
        devshim.errors.BackendError: Unknown backend 'caffe'. Valid names: ...
    """


class InvalidDeviceError(DevshimError, ValueError):
    """A device specification that devshim cannot read.

    Example:
        >>> ds.device("banana")
        Traceback (most recent call last):
        devshim.errors.InvalidDeviceError: Cannot read device specification 'banana'. ...
    """


class DeviceUnavailableError(DevshimError, RuntimeError):
    """A well-formed device that this machine (or backend) does not have.

    Example:
        >>> ds.gpu(3)          # on a machine with one GPU
        Traceback (most recent call last):
        devshim.errors.DeviceUnavailableError: gpu:3 is not available: ...
    """


class DeviceMismatchError(DevshimError, RuntimeError):
    """Tensors that must share a device do not.

    Example:
        >>> ds.ensure_same_device(x_on_gpu0, y_on_gpu1)
        Traceback (most recent call last):
        devshim.errors.DeviceMismatchError: Tensors are on different devices: ...
    """


class ImplicitTransferError(DevshimError, RuntimeError):
    """Under `ds.transfer_guard("disallow")`, a copy between the host and a device
    that the code did not ask for: reading an accelerator tensor on the host with
    `float(t)`, `t.item()`, `t.numpy()`, `print(t)`, `np.asarray(t)` and
    the like. The message names the read and the explicit call to use instead
    (`ds.to_numpy`).

    Example:
        >>> with ds.transfer_guard("disallow"):
        ...     float(loss_on_gpu)
        Traceback (most recent call last):
        devshim.errors.ImplicitTransferError: float(t) reads a tensor on gpu:0 on the host ...
    """


class CrossDeviceConversionError(DeviceMismatchError):
    """Under `ds.transfer_guard("disallow")`, a `ds.convert` without `device=` whose
    target framework has no array on the tensor's device, so the conversion would copy
    it to another device (a torch GPU tensor to NumPy, a virtual GPU to a host-only
    framework). The message names both devices and the `device=` that makes the copy
    explicit.

    Example:
        >>> with ds.transfer_guard("disallow"):
        ...     ds.convert(x_on_gpu, "numpy")
        Traceback (most recent call last):
        devshim.errors.CrossDeviceConversionError: ds.convert(x, 'numpy') would copy x from gpu:0 ...
    """


class CopyRequiredError(DevshimError, BufferError):
    """`ds.convert(x, to, copy=False)` where the target cannot share `x`'s memory:
    another device, a dtype or layout the target's DLPack import refuses, a read-only
    input going to a framework whose arrays are writable, a virtual GPU. A
    `BufferError`, as the array API's `from_dlpack(copy=False)` raises. The message
    says why; pass `copy=None` to allow the copy.

    Example:
        >>> ds.convert(read_only_array, "torch", copy=False)
        Traceback (most recent call last):
        devshim.errors.CopyRequiredError: ds.convert(x, 'torch', copy=False) cannot share ...
    """


class InvalidGuardLevelError(DevshimError, ValueError):
    """A transfer-guard level devshim does not know (valid: "allow", "log", "disallow"),
    given to `ds.transfer_guard` or in `DEVSHIM_TRANSFER_GUARD`.

    Example:
        >>> ds.transfer_guard("forbid")
        Traceback (most recent call last):
        devshim.errors.InvalidGuardLevelError: Unknown transfer-guard level 'forbid'. ...
    """


class NotATensorError(DevshimError, TypeError):
    """A value that no installed backend recognises as a tensor.

    Example:
        >>> ds.device_of([1, 2])
        Traceback (most recent call last):
        devshim.errors.NotATensorError: device_of() expects a tensor ...
    """

    @classmethod
    def for_value(cls, x, function: str) -> "NotATensorError":
        """The error `function` raises for a value `x` that is neither a tensor nor a nest.

        Example:
            >>> raise NotATensorError.for_value("abc", "device_of")
        """
        return cls.for_type(type(x), function)

    @classmethod
    def for_type(cls, kind: type, function: str) -> "NotATensorError":
        """`for_value` for a value of class `kind` (what torch.compile's trace knows of it).

        Example:
            >>> raise NotATensorError.for_type(str, "device_of")
        """
        return cls(
            f"{function}() expects a tensor of an installed framework (torch.Tensor, "
            f"numpy.ndarray, ...) or a dict/list/tuple/dataclass of them, but got "
            f"{kind.__module__}.{kind.__qualname__}. Convert it to a tensor first, "
            f"e.g. torch.as_tensor(x) or numpy.asarray(x)."
        )


class NotAModelError(DevshimError, TypeError):
    """`place_model` and friends got something that is not a model of an installed
    framework (a torch `nn.Module`, a Gluon `Block`, a Keras model).

    Example:
        >>> ds.place_model([1, 2], "cpu")
        Traceback (most recent call last):
        devshim.errors.NotAModelError: builtins.list is not a model devshim can place. ...
    """


class UnbuiltModelError(DevshimError, RuntimeError):
    """A model with no parameters yet (lazy torch layers, a Gluon block waiting for
    deferred initialisation, an unbuilt Keras model): there is nothing to place or
    ask about. The message says how to create the parameters first.

    Example:
        >>> ds.model_device(nn.LazyLinear(4))
        Traceback (most recent call last):
        devshim.errors.UnbuiltModelError: This LazyLinear has no parameters yet ...
    """


class UnsupportedPlacementError(DevshimError, TypeError):
    """A placement the framework cannot do safely: splitting a Gluon block or a
    Keras model over devices by hooks, cloning a subclassed Keras model. The
    message says why and what to do instead.

    Example:
        >>> ds.place_model(keras_model, {"dense": "gpu:1"})
        Traceback (most recent call last):
        devshim.errors.UnsupportedPlacementError: Keras places a layer's weights when it builds ...
    """


class BatchSplitError(DevshimError, ValueError):
    """`split_batch` cannot split the batch: fewer examples than devices, or
    tensors with different numbers of examples.

    Example:
        >>> ds.split_batch(X[:1], y[:1], ds.try_all_gpus())   # 1 example, 2 GPUs
        Traceback (most recent call last):
        devshim.errors.BatchSplitError: split_batch got 1 example for 2 devices ...
    """


class ReduceMismatchError(DevshimError, ValueError):
    """`allreduce` got tensors that cannot be summed element by element: their
    shapes or dtypes differ. A sum over devices never broadcasts; the message
    lists each tensor's shape and dtype.

    Example:
        >>> ds.allreduce([a, b])   # a is (3, 1), b is (3,)
        Traceback (most recent call last):
        devshim.errors.ReduceMismatchError: allreduce sums tensors of one shape and dtype ...
    """


class MixedFrameworksError(DevshimError, TypeError):
    """A function that works on tensors of one framework at a time (`allreduce`)
    got tensors of several: the message names them and `ds.convert`.

    Example:
        >>> ds.allreduce([torch.ones(2), tf.ones(2)])
        Traceback (most recent call last):
        devshim.errors.MixedFrameworksError: allreduce got tensors of 2 frameworks ...
    """


class UnknownSubmoduleError(DevshimError, LookupError):
    """A device map for `place_model` names a part the model does not have (or is
    not a name at all). Nothing was moved; the message lists the names it has.

    Example:
        >>> ds.place_model(net, {"0": "gpu:0", "no_such_block": "gpu:1"})
        Traceback (most recent call last):
        devshim.errors.UnknownSubmoduleError: Sequential has no submodule 'no_such_block' ...
    """


class GuardBlockInUseError(DevshimError, RuntimeError):
    """One `transfer_guard` object was entered again while another thread, or
    another asyncio task, still has it entered. Make one block per thread or task:
    `with ds.transfer_guard("disallow"):` inside each.

    Example:
        >>> guard = ds.transfer_guard("disallow")
        >>> # entered in two asyncio tasks at once: the second entry raises
        Traceback (most recent call last):
        devshim.errors.GuardBlockInUseError: This transfer_guard object is already entered ...
    """


class UnsupportedDtypeError(DevshimError, TypeError):
    """A tensor whose dtype the requested operation cannot represent, such as
    `to_numpy` of a torch `complex32` or quantized tensor (NumPy has no
    such type). The message says which conversion to make first.

    Example:
        >>> ds.to_numpy(torch.zeros(2, dtype=torch.complex32))
        Traceback (most recent call last):
        devshim.errors.UnsupportedDtypeError: NumPy has no complex32 type. ...
    """


class NestCycleError(DevshimError, ValueError):
    """A nest that contains itself (a list holding itself, a dict among its own values):
    walking it would never end, so devshim names the path where it loops instead of
    overflowing Python's stack.

    Example:
        >>> batch = {"x": X}
        >>> batch["self"] = batch
        >>> ds.to_device(batch, "cpu")
        Traceback (most recent call last):
        devshim.errors.NestCycleError: This nest contains itself at ['self'] ...
    """


class UnsupportedValueError(DevshimError, TypeError):
    """A framework value devshim recognises but refuses to move, rather than
    skip it silently or alias it (for example a `tf.TensorArray` in a nest).

    Example:
        >>> ds.to_device({"steps": tf.TensorArray(tf.float32, 2)}, "cpu")
        Traceback (most recent call last):
        devshim.errors.UnsupportedValueError: devshim cannot move a TensorArray ...
    """


class DatalessTensorError(DevshimError, RuntimeError):
    """A tensor on a device that holds no data (torch's `meta`) was asked for
    its values: there is nothing to copy.

    Example:
        >>> ds.to_numpy(torch.ones(2, device="meta"))
        Traceback (most recent call last):
        devshim.errors.DatalessTensorError: This tensor lives on meta:0, ...
    """


class NotOnHostError(DevshimError, TypeError):
    """A tensor on a GPU was asked to become a NumPy array without a copy
    (`t.numpy()`, `numpy.asarray(t)`). Raised for tensors on devshim's
    virtual torch GPUs, with the message (and the TypeError) CUDA tensors give:
    copy to the host first with `t.cpu()`, or use `ds.to_numpy(t)`.

    Example:
        >>> torch.ones(2, device=ds.try_gpu()).numpy()    # DEVSHIM_VIRTUAL_DEVICES=1
        Traceback (most recent call last):
        devshim.errors.NotOnHostError: can't convert vgpu:0 device type tensor to numpy. ...
    """


class UnplacedTensorError(DevshimError, RuntimeError):
    """A tensor that has no device yet, such as a symbolic tensor inside
    `tf.function`, whose placement is decided when the graph runs.

    Example:
        >>> @tf.function
        ... def f(x):
        ...     return ds.device_of(x)
        >>> f(tf.ones(1))
        Traceback (most recent call last):
        devshim.errors.UnplacedTensorError: This Tensor has no device yet: ...
    """


class FirstCallInTraceError(DevshimError, RuntimeError):
    """devshim met a tensor type (and built its tables) for the first time inside
    `torch.compile`'s trace, and this torch's Dynamo cannot be asked to start the
    trace over (torch 2.13 to 2.15 can: there such a compile works). Call any devshim
    function once before compiling (`ds.try_gpu()`).

    Example:
        >>> torch.compile(lambda x: ds.device_of(x), fullgraph=True)(torch.ones(1))  # on such a torch
        Traceback (most recent call last):
        devshim.errors.FirstCallInTraceError: devshim met torch.Tensor for the first time ...
    """


class MultiDeviceValueError(UnsupportedValueError):
    """A value spread over several devices at once (a JAX array sharded or
    replicated over a mesh, a TensorFlow composite tensor whose parts live
    apart) was asked for its one device. Moving it whole works: `to_device`
    gathers it onto the target. For a JAX array `ds.device_of` answers its
    `Sharding`; `neutral_device` raises this.

    Example:
        >>> ds.neutral_device(jax.device_put(x, NamedSharding(mesh, P("batch"))))
        Traceback (most recent call last):
        devshim.errors.MultiDeviceValueError: This JAX array is spread over 2 devices ...
    """


class MixedArrayModulesError(DevshimError, TypeError):
    """`array_module` got arrays of frameworks that no one array module handles
    together (a torch tensor and a JAX array, say). NumPy arrays mixed with CuPy
    arrays are not an error: CuPy is the answer, as in Chainer.

    Example:
        >>> ds.array_module(torch.ones(2), jnp.ones(2))
        Traceback (most recent call last):
        devshim.errors.MixedArrayModulesError: array_module() got arrays of several frameworks ...
    """


class VirtualDeviceCountError(BackendError):
    """A virtual device count that cannot be: negative, not a whole number, or more than
    the backend can index (torch device indices are 8-bit, so torch takes at most 128).

    Example:
        >>> ds.testing.virtual_devices(300)
        >>> ds.num_gpus()
        Traceback (most recent call last):
        VirtualDeviceCountError: DEVSHIM_VIRTUAL_DEVICES=300 ... the torch backend takes 0 to 128 ...
    """


class VirtualDataParallelError(DevshimError, RuntimeError):
    """torch's `nn.DataParallel` would run on one device although virtual GPUs were
    given (a torch release that finds its devices in a way devshim does not answer).

    Example:
        >>> torch.nn.DataParallel(net, device_ids=ds.try_all_gpus())
        Traceback (most recent call last):
        VirtualDataParallelError: nn.DataParallel found no devices to run on ...
    """


class VirtualDLPackError(DevshimError, BufferError):
    """A tensor on a devshim virtual torch GPU was asked for a DLPack capsule by anything but
    torch's own `torch.from_dlpack` (`numpy.from_dlpack(t)`, `t.__dlpack__()`): another
    framework would take its host memory for a GPU's, so no capsule is made;
    `ds.convert(t, "numpy")` (or any framework) copies, `t.cpu()` too. Within torch the
    capsule shares the memory, as on CUDA. Also raised when a tensor torch imported from a
    capsule devshim did not make (`torch._C._to_dlpack(t)`) is used: it holds no memory
    devshim knows. A `BufferError`, what DLPack producers raise for a tensor they cannot
    export.

    Example:
        >>> numpy.from_dlpack(torch.ones(2, device=ds.try_gpu()))   # DEVSHIM_VIRTUAL_DEVICES=1
        Traceback (most recent call last):
        devshim.errors.VirtualDLPackError: vgpu:0 is a devshim virtual GPU: its tensors' DLPack ...
    """


class TimingError(DevshimError, ValueError):
    """A timing request that cannot be answered (an empty Timer, a bad argument).

    Example:
        >>> ds.Timer().avg()
        Traceback (most recent call last):
        devshim.errors.TimingError: Timer.avg() has no recorded time to average yet. ...
    """


class ExperimentError(DevshimError, ValueError):
    """An experiment of `devshim bench` was asked for something it cannot measure.

    Example:
        >>> from devshim.bench.experiments import matmul
        >>> matmul.run(sizes=[0])
        Traceback (most recent call last):
        devshim.errors.ExperimentError: matmul sizes must be ...
    """


class BenchUsageError(DevshimError, ValueError):
    """Command-line options of `devshim bench` that cannot work (an output
    file in a folder that does not exist, a plot format matplotlib cannot write).

    Example:
        $ devshim bench matmul --json /no/such/folder/rows.json
        devshim: error: --json /no/such/folder/rows.json: the folder /no/such/folder does not exist ...
    """


class PlotUnavailableError(DevshimError, RuntimeError):
    """`--plot` was asked for but matplotlib is not installed.

    Example:
        $ devshim bench matmul --plot matmul.png
        devshim: error: --plot needs matplotlib, which is not installed. ...
    """


class LauncherEnvironmentError(DevshimError, ValueError):
    """A launcher's environment that devshim cannot use: a rank variable (`LOCAL_RANK`,
    `SLURM_LOCALID`, ...) that is not a whole number, or `ds.init_distributed()`
    without the rendezvous address its launcher does not provide (`MASTER_ADDR` and
    `MASTER_PORT` under Slurm, Open MPI or Horovod). The message names the variable and
    what to set.

    Example:
        >>> os.environ["LOCAL_RANK"] = "first"; ds.settings.reload()
        >>> ds.try_gpu()
        Traceback (most recent call last):
        devshim.errors.LauncherEnvironmentError: LOCAL_RANK='first' is not a whole number, ...
    """


class FrameworkReleaseError(DevshimError, RuntimeError):
    """A devshim feature was asked for on a framework release older than the one it needs
    (placing a Keras 2 model; docs/supported-versions.md lists each feature's range). The
    message names the release it needs and what to do meanwhile.

    Example:
        >>> ds.place_model(tf_keras_model, ds.try_gpu())     # Keras 2 (TF 2.12-2.15, tf_keras)
        Traceback (most recent call last):
        devshim.errors.FrameworkReleaseError: devshim places Keras 3 models; this is a Keras 2 ...
    """


class DevshimWarning(UserWarning):
    """Base class of the warnings devshim issues.

    Example:
        >>> warnings.simplefilter("error", ds.DevshimWarning)   # make them fail tests
    """


class ImplicitTransferWarning(DevshimWarning):
    """Under `ds.transfer_guard("log")`, a copy between devices (or between the host
    and a device) that the code did not ask for. Issued once per call site; the
    guard's report counts every occurrence.

    Example:
        >>> with ds.transfer_guard("log") as report:
        ...     float(loss_on_gpu)        # ImplicitTransferWarning, once for this line
        >>> report.total
        1
    """


class SharedDeviceWarning(DevshimWarning):
    """More processes on this machine than accelerators: under a launcher, `ds.try_gpu()`
    gives local rank `r` accelerator `r % count`, so some processes share one. Issued
    once per process. Start one process per accelerator, or hide them with
    `DEVSHIM_DEVICE=cpu` if sharing is not what you want.

    Example:
        >>> ds.try_gpu()     # LOCAL_RANK=2, LOCAL_WORLD_SIZE=4, two GPUs
        SharedDeviceWarning: 4 processes on this machine share 2 GPUs ...
        device(type='cuda', index=0)
    """


class VirtualBesideRealGpuWarning(DevshimWarning):
    """torch's virtual GPUs were registered in a process where torch also sees a real GPU:
    from then on a backward pass on the real GPU fails in that process (torch's autograd engine
    follows the one accelerator `torch.accelerator` names, now `vgpu`: an internal assert of
    torch's, reported to torch as pytorch/pytorch#161129, since torch 2.8). Forward passes, copies,
    waits and timing on the real GPU keep working. Issued once per process. Train on the real GPU
    in a process that does not ask for virtual GPUs, or hide it from the one that does
    (`CUDA_VISIBLE_DEVICES=`).

    Example:
        >>> ds.testing.virtual_devices(2); ds.num_gpus()   # on a machine with a CUDA GPU
        VirtualBesideRealGpuWarning: torch's virtual GPUs are registered beside a real cuda GPU ...
        2
    """


# ------------------------------------------------------------------ ds.testing (issue 30)


class NotCloseError(DevshimError, AssertionError):
    """`ds.testing.assert_allclose` found values that differ by more than the tolerance, or
    shapes or nests that differ. An `AssertionError`, so pytest reports it as a failed
    test; the message gives the number of mismatched elements, the greatest absolute and
    relative difference with their index, and each side's framework, dtype, shape and device.

    Example:
        >>> ds.testing.assert_allclose(torch.ones(3), np.zeros(3))
        Traceback (most recent call last):
        devshim.errors.NotCloseError: Not equal to tolerance rtol=1e-05, atol=1e-06 ...
    """


class GradientMismatchError(NotCloseError):
    """`ds.testing.check_backward` found a gradient from the framework's autodiff that
    differs from the numerical one: the message names the input and says how they differ.

    Example:
        >>> ds.testing.check_backward(exp_with_a_wrong_backward, (x,))
        Traceback (most recent call last):
        devshim.errors.GradientMismatchError: The gradient of input 0 (of 1) differs ...
    """


class NoAutodiffError(DevshimError, TypeError):
    """`ds.testing.check_backward` got arrays of a framework without automatic
    differentiation (NumPy, CuPy): there is no backward to check. The message says what to
    use instead (`numerical_grad` and `assert_allclose`, or a framework with autodiff).

    Example:
        >>> ds.testing.check_backward(np.exp, (np.ones(3),))
        Traceback (most recent call last):
        devshim.errors.NoAutodiffError: NumPy has no automatic differentiation ...
    """


class ImmutableInputError(DevshimError, TypeError):
    """`ds.testing.numerical_grad` with a function that takes no arguments (it reads the
    arrays it closes over, which are changed in place) was given arrays that cannot be
    changed in place: JAX arrays, TensorFlow tensors that are not `tf.Variable`\\ s,
    read-only NumPy arrays. The message shows the form that works: a function taking the
    inputs as arguments.

    Example:
        >>> ds.testing.numerical_grad(lambda: jnp.exp(x), (x,), (gy,))
        Traceback (most recent call last):
        devshim.errors.ImmutableInputError: numerical_grad changes the inputs in place ...
    """


class GradientCheckUsageError(DevshimError, ValueError):
    """`ds.testing.numerical_grad` or `check_backward` was called in a way that cannot
    work: an input that is not a floating-point array, `grad_outputs` that do not match
    the function's outputs, an `eps` too small to change an input of its dtype, a function
    that takes neither the inputs nor no arguments. The message names the input or output.

    Example:
        >>> ds.testing.numerical_grad(f, (torch.arange(3),), (gy,))
        Traceback (most recent call last):
        devshim.errors.GradientCheckUsageError: input 0 is a torch int64 array ...
    """


class ToleranceError(DevshimError, ValueError):
    """A tolerance given to `ds.testing.assert_allclose` (`rtol`, `atol`) is not a finite
    number, 0 or more: a negative or NaN one would fail or pass every comparison whatever the
    values. The message names the argument and what to pass.

    Example:
        >>> ds.testing.assert_allclose(x, y, atol=-1e-6)
        Traceback (most recent call last):
        devshim.errors.ToleranceError: assert_allclose(atol=-1e-06): a tolerance is a finite number ...
    """


class PrecisionWarning(DevshimWarning):
    """A gradient check could not run `f` in the full float32 precision it promises: the
    framework refused to turn TF32 off for its duration (torch's `cudnn.flags` raising where
    its old and new TF32 settings are mixed), so products and convolutions may round to TF32's
    10 bits and their central differences be noise. The message names the setting to make
    yourself before the check. Issued at each such check.

    Example:
        >>> ds.testing.check_backward(conv, (x,))    # torch.backends.cudnn.flags refused
        PrecisionWarning: torch could not turn TF32 off for cuDNN in this check ...
    """


class FrameworkInternalWarning(DevshimWarning):
    """A framework release lacks a private name devshim uses (a release devshim is not tested
    on moved it): the feature that needs it degrades, and the warning says how. Issued once per
    internal and process. docs/supported-versions.md lists every internal and its fallback.

    Example:
        >>> ds.to_device(x, ds.try_gpu())     # on a torch that moved torch._dynamo.exc.RestartAnalysis
        FrameworkInternalWarning: torch 2.16.0 has no torch._dynamo.exc.RestartAnalysis ...
    """


class TorchCompileReleaseError(FrameworkReleaseError, AssertionError):
    """A devshim call inside a `torch.compile`'d function that a torch older than 2.13
    cannot trace. Its Dynamo cannot trace devshim's dispatch, so there it traces devshim's
    own traced versions of `ds.device_of`, `neutral_device`, `to_device`,
    `copy_if_needed` and `same_device` over torch tensors in dicts, lists, tuples and
    namedtuples (`ds.try_gpu` and the other calls without a tensor run in plain Python on
    every torch). This error is the rest: another function (`ds.to_numpy`,
    `ds.ensure_same_device`), or a nest of another kind (a `UserDict`, a dataclass) or a
    tensor of another framework. Raised while Dynamo traces the call, with `fullgraph=True`
    and without; the message names the call and says what to do: pass a dict, call it outside
    the compiled function (and pass its result in), or upgrade torch to 2.13 or later.

    It is an `AssertionError` as well as a `FrameworkReleaseError` (a `RuntimeError`):
    the one kind of exception torch's Dynamo lets out of a trace as it is; any other reaches
    the caller as torch's `InternalTorchDynamoError`, its type lost.

    Example:
        >>> torch.compile(lambda x: ds.to_numpy(x))(torch.ones(2))   # torch 2.4.1 to 2.12
        Traceback (most recent call last):
        devshim.errors.TorchCompileReleaseError: ds.to_numpy inside torch.compile needs torch 2.13 ...
    """


# ------------------------------------------------------------------ ds.testing (issue 37)


class NondifferentiableError(DevshimError, ValueError):
    """`ds.testing.check_backward` (or `check_double_backward`) found the autodiff and the
    numerical gradient apart only at elements where `f` has no derivative: its slopes just
    below and just above the input differ (a kink, as relu and abs have at 0, or a jump), so the
    central difference there is no derivative to compare with. Neither side is wrong; the
    message names the input, the elements and both slopes, and says to move the inputs away from
    the kink (further than twice `eps`) or to pass a smaller `eps`.

    Example:
        >>> ds.testing.check_backward(torch.relu, (torch.zeros(3),))
        Traceback (most recent call last):
        devshim.errors.NondifferentiableError: f is not differentiable at input 0 ...
    """


class InputMutatedError(DevshimError, RuntimeError):
    """The function given to `ds.testing.numerical_grad`, `check_backward` or
    `check_double_backward` changed one of its inputs in place. A gradient check calls `f`
    many times and needs each call to see the inputs it was given; the message names the input
    and the call, and says to write `f` without in-place changes to its inputs (or to clone
    them first). The caller's own tensors are left as they were: `f` got copies (or, when it
    reads the arrays it closes over, they are restored).

    Example:
        >>> ds.testing.check_backward(lambda x: x.add_(1), (x,))
        Traceback (most recent call last):
        devshim.errors.InputMutatedError: f changed input 0 ... in place ...
    """


class GradientFunctionError(GradientCheckUsageError, TypeError):
    """The function given to a `ds.testing` gradient check cannot be called the way the
    check calls it: it is not callable, or it takes another number of arguments than the
    inputs given. A `GradientCheckUsageError` and a `TypeError`; the message shows the
    call the check makes and what to pass.

    Example:
        >>> ds.testing.check_backward(lambda x: x * 2, (x, y))
        Traceback (most recent call last):
        devshim.errors.GradientFunctionError: check_backward() calls f with the 2 inputs ...
    """


class DeviceOutOfMemoryError(DevshimError, MemoryError, RuntimeError):
    """A device ran out of memory in one of devshim's own calls (`ds.to_device`,
    `ds.copy_if_needed`, `ds.place_model`, `ds.replicate`, `ds.split_batch`,
    `ds.convert`). The framework's own error (`torch.OutOfMemoryError`, JAX's
    `RESOURCE_EXHAUSTED`, TensorFlow's `ResourceExhaustedError`, CuPy's
    `OutOfMemoryError`, ...) is its `__cause__`; the message names the device, the bytes
    asked for and the bytes free there before the call, and says what to do. `device` (a
    `ds.Device`), `requested` and `free` (bytes; None where unknown) and `call` hold the same facts.

    Recognised where an out-of-memory error is looked for: a `MemoryError`; a `RuntimeError`
    with the message as its one argument, worded as CUDA's ("gpu:0 out of memory. ..." and the
    word CUDA), which is what accelerate's `should_reduce_batch_size` and Lightning's
    `is_oom_error` read, so their batch-size finders try a smaller batch; and, where the
    framework's own error is a class devshim can extend (torch's `torch.OutOfMemoryError`),
    an instance of that class too (`for_framework`), so `except torch.OutOfMemoryError:` catches it.

    Example:
        >>> try:
        ...     ds.to_device(batch, "gpu:0")
        ... except ds.DeviceOutOfMemoryError as err:   # also a MemoryError
        ...     print(err.device, err.requested, err.free, type(err.__cause__).__name__)
        gpu:0 134217728 67108864 OutOfMemoryError
    """

    _kinds: dict = {}  # a framework's error class -> the subclass that is also one

    def __init__(self, message: str = "", *, device=None, requested=None, free=None, call: str = "") -> None:
        super().__init__(message)
        self.device, self.requested, self.free, self.call = device, requested, free, call

    @classmethod
    def for_framework(cls, framework_error) -> type:
        """`DeviceOutOfMemoryError`, or (for a framework whose own out-of-memory error class is
        `framework_error`) a subclass that is also a `framework_error`, made once per class.

        Example:
            >>> issubclass(ds.DeviceOutOfMemoryError.for_framework(torch.OutOfMemoryError), torch.OutOfMemoryError)
            True
        """
        if framework_error is None or issubclass(cls, framework_error):
            return cls
        if framework_error not in cls._kinds:
            kind = type(cls.__name__, (cls, framework_error), {"__module__": cls.__module__, "__doc__": cls.__doc__})
            cls._kinds.setdefault(framework_error, kind)
        return cls._kinds[framework_error]

    def __reduce__(self):
        # Pickled as DeviceOutOfMemoryError itself: a framework's subclass is made at run time.
        return _rebuild_out_of_memory, (str(self), dict(self.__dict__))


def _rebuild_out_of_memory(message: str, state: dict) -> DeviceOutOfMemoryError:
    error = DeviceOutOfMemoryError(message)
    error.__dict__.update(state)
    return error


class VirtualMemorySizeError(DevshimError, ValueError):
    """`DEVSHIM_VIRTUAL_MEMORY` (the size of each virtual GPU), the pytest plugin's
    `--devshim-virtual-memory` or `ds.settings.set_virtual_memory` got a value that is not
    a size: a positive number of bytes with an optional unit (`64MiB`, `16GB`, `1.5G`).

    Example:
        >>> ds.settings.set_virtual_memory("lots")
        Traceback (most recent call last):
        devshim.errors.VirtualMemorySizeError: DEVSHIM_VIRTUAL_MEMORY='lots' is not a size ...
    """


class BackendPluginWarning(DevshimWarning):
    """An installed package declares a devshim backend (the `devshim.backends` entry point) that
    cannot be used: its module fails to import, defines no `SPEC`, names another backend than its
    entry point, or takes the name of one devshim has. That backend is left out, the others work;
    the message names the package and what to fix. Issued when the backend table is first built.

    Example:
        >>> ds.available_backends()     # with a broken plug-in installed
        BackendPluginWarning: the devshim_mine distribution's devshim.backends entry point mine = ...
        ['torch', 'numpy']
    """


class KerasBackendMismatchError(BackendError):
    """`DEVSHIM_BACKEND` names another framework than the one Keras 3 runs on (`KERAS_BACKEND`,
    or Keras's own default): devshim's devices would be the wrong framework's for Keras's
    models. Raised by the first call that needs the selected backend; the message says which
    variable to set.

    Example:
        >>> import keras                               # KERAS_BACKEND=jax
        >>> ds.try_gpu()                               # DEVSHIM_BACKEND=torch
        Traceback (most recent call last):
        devshim.errors.KerasBackendMismatchError: DEVSHIM_BACKEND=torch, but Keras runs on jax ...
    """


class VirtualMemoryWithoutDevicesWarning(DevshimWarning):
    """`DEVSHIM_VIRTUAL_MEMORY` gives virtual GPUs a size, and `DEVSHIM_VIRTUAL_DEVICES` asks for
    none: no device has that size, so the setting does nothing. Issued when devshim first reads
    how many virtual devices there are; add `DEVSHIM_VIRTUAL_DEVICES=1` (or more), or unset the size.

    Example:
        >>> ds.num_gpus()          # DEVSHIM_VIRTUAL_MEMORY=16GiB without DEVSHIM_VIRTUAL_DEVICES
        VirtualMemoryWithoutDevicesWarning: DEVSHIM_VIRTUAL_MEMORY='16GiB' gives virtual GPUs a size, but ...
        0
    """


class MemoryEstimateError(DevshimError, RuntimeError):
    """`ds.estimate_memory` (or `ds.largest_batch`) could not run the step without memory: it
    read a value that does not exist there (`loss.item()`, printing a tensor, a shape that
    depends on the values), used a tensor made outside the estimate (which has memory of its
    own), or named a device the framework cannot stand in for. The message says which, and
    what to write instead; the framework's own error is its `__cause__`.

    Example:
        >>> ds.estimate_memory(lambda: print(torch.ones(2).sum().item()))
        Traceback (most recent call last):
        devshim.errors.MemoryEstimateError: the step read a tensor's value ...
    """


class MemoryEstimateUnsupportedError(DevshimError, NotImplementedError):
    """`ds.estimate_memory` (or `ds.largest_batch`) on a framework devshim cannot estimate
    without running the step on its memory (TensorFlow, MXNet, NumPy, CuPy): the message names
    the framework, the ones that can (PyTorch, JAX), and how to measure instead
    (`ds.memory_peak` on a GPU, or on a torch virtual GPU of the size).

    Example:
        >>> ds.estimate_memory(step, backend="tensorflow")
        Traceback (most recent call last):
        devshim.errors.MemoryEstimateUnsupportedError: devshim cannot estimate a TensorFlow step ...
    """
