"""PyTorch's device contract.

"gpu" is torch's accelerator, whichever it is: `torch.accelerator` (torch
2.7 and later) names it (cuda, also for ROCm builds; xpu; mps; mtia; an
out-of-tree device renamed from privateuse1). Older torch falls back to
checking cuda, xpu, mps and mtia in turn. Devices are counted by each device
module (`torch.cuda.device_count()`), which starts no CUDA. Native devices are
`torch.device` objects, so `torch.ones(2, device=ds.try_gpu())` works.
torch's `meta` device (shapes without data) is devshim's kind `"meta"`.
PyTorch has a single CPU device.

Virtual GPUs (`DEVSHIM_VIRTUAL_DEVICES=N`) are torch devices of type
`vgpu` (torch's out-of-tree device slot, privateuse1, renamed): virtual
`gpu:i` is `torch.device("vgpu", i)`, whose tensors keep their values in
host memory and follow CUDA's device rules. The `_virtual` package implements
them and is imported only when they are asked for.
"""

from __future__ import annotations

import contextlib
import sys
import warnings

from devshim import settings
from devshim.backends.base import Backend, DeviceTable, _caller_level
from devshim.backends.torch import SPEC, _internals
from devshim.backends.torch._names import VIRTUAL_TYPE
from devshim._device import Device
from devshim.errors import (
    BackendError, DatalessTensorError, DeviceUnavailableError, DevshimError, InvalidDeviceError,
    UnsupportedDtypeError, UnsupportedValueError, VirtualBesideRealGpuWarning,
)

# torch dtypes NumPy lacks (the ml_dtypes type of the same name stands in for each), and the
# integer type of the same bits torch views each as.
_ML_DTYPES = {"bfloat16": "int16", "float8_e4m3fn": "uint8", "float8_e5m2": "uint8", "float8_e4m3fnuz": "uint8",
              "float8_e5m2fnuz": "uint8"}
# Accelerator device types torch may report, tried in this order on torch without
# torch.accelerator.
_FALLBACK_PLATFORMS = ("cuda", "xpu", "mps", "mtia")


_warned_beside: list = []  # VirtualBesideRealGpuWarning was issued (once per process)


def _warn_autograd_beside(platform: str) -> None:
    """Measured with torch 2.11 on an H200: once the virtual GPUs are registered, a backward pass
    on the real GPU fails in every thread of the process (torch's engine asks torch.accelerator
    for the streams to wait on, and it names vgpu)."""
    if _warned_beside:
        return
    _warned_beside.append(platform)
    warnings.warn(VirtualBesideRealGpuWarning(
        f"torch's virtual GPUs are registered beside a real {platform} GPU: from now on a backward "
        f"pass on the real GPU fails in this process (measured with torch 2.11 on CUDA: torch's own "
        f"'opt_ready_stream && opt_parent_stream INTERNAL ASSERT FAILED'), as torch's autograd follows "
        f"torch.accelerator, which names vgpu now; torch cannot unregister it (torch's issue "
        f"pytorch/pytorch#161129, since torch 2.8). Forward passes, copies, waits and timing on the real GPU "
        f"keep working. Train on the real GPU in a process that does not ask for virtual GPUs "
        f"(ds.testing.virtual_devices, DEVSHIM_VIRTUAL_DEVICES), or hide it from this one "
        f"(CUDA_VISIBLE_DEVICES= before torch starts) to train on the virtual GPUs alone."), stacklevel=_caller_level())


class TorchBackend(Backend):
    """PyTorch tensors on the CPU, the accelerator, or `meta`.

    Example:
        >>> ds.get_backend("torch").try_gpu()
        device(type='cpu')
    """

    spec = SPEC
    # torch keeps a device index in 8 signed bits: vgpu:128 would wrap to -128, vgpu:256 to vgpu:0.
    max_virtual_devices = 128
    virtual_limit_reason = " (torch device indices are 8-bit: vgpu:0 to vgpu:127)"

    def __init__(self) -> None:
        super().__init__()
        self._described = DeviceTable("device", exact=True, attribute_is_native=True)  # torch.device -> Device
        self._count = None
        self._by_accelerator = False  # whether torch.accelerator named the platform (and speaks for it)
        self._virtual = 0  # virtual GPUs this adapter last presented
        if self.spec.is_loaded():
            self._learn_tensor_types()

    def _learn_tensor_types(self) -> None:
        """Fill devshim's dispatch tables for torch's tensor classes now, so that the first
        ds.device_of / to_device / copy_if_needed inside torch.compile traces lookups only."""
        from devshim.backends import dispatch

        torch = self.fw
        dispatch.follow_torch_release()  # before torch 2.13: Dynamo traces devshim's traced versions of its calls
        torch.compiler.assume_constant_result(dispatch.learn_class)  # (marked already; torch's own way)
        dispatch.learn_types(self, (torch.Tensor, torch.nn.Parameter))
        # The devices too, and each device object as a target: Dynamo guards on the tables it reads,
        # so a table that changed while it traced fails the guard ("Guard failed on the same frame").
        try:
            natives = self.devices()
        except DevshimError:  # settings the first real call will complain about
            natives = [torch.device("cpu")]
        for native in natives:
            self._described.targets[native] = self.describe(native)
            self._described.natives[native] = self._targets[native] = native

    def restart_trace(self) -> None:
        """Inside torch.compile, start Dynamo's analysis of the frame over (its RestartAnalysis):
        devshim filled its tables during the trace, which read them empty. Dynamo's speculation
        log is cleared first because the second pass takes another path through devshim (lookups
        that now succeed) and Dynamo would otherwise report that as a divergence. Both are
        Dynamo internals (torch 2.13 to 2.15): where they are missing, nothing happens and the
        caller raises `FirstCallInTraceError`, which says to call devshim once before compiling."""
        torch = self.fw
        if not torch.compiler.is_compiling():
            return
        restart, translator = _internals.RESTART_ANALYSIS.get(), _internals.CURRENT_TX.get()
        if restart is None or translator is None:
            return
        try:
            translator.current_tx().speculation_log.clear()
        except (AttributeError, AssertionError, IndexError):
            return
        raise restart("devshim filled its dispatch tables during this trace")

    def reset(self) -> None:
        super().reset()
        self._count = None
        if self._virtual:  # settings changed: torch sees the virtual GPUs they ask for now
            from devshim.backends.torch import _virtual

            try:  # what the settings ask for now (0 when hidden)
                requested = 0 if settings.accelerators_hidden() else settings.virtual_device_count()
            except DevshimError:  # a bad variable: the functions that need it raise then
                requested = 0
            # A count torch cannot index presents none here; the next use raises, saying the range.
            self._virtual = requested if requested <= self.max_virtual_devices else 0
            _virtual.set_count(self._virtual)

    # ------------------------------------------------------------ the accelerator

    def find_platform(self):
        """The accelerator's device type ("cuda", "xpu", "mps", ...), or None without one."""
        # Fork safety: nothing here initialises CUDA, so a process that asks devshim for its
        # devices can still fork workers that use CUDA (torch's "poison fork" note), and a CUDA
        # build on a machine without a driver finds no GPU rather than failing.
        # torch.accelerator.current_accelerator() without check_available reads the build's
        # accelerator and touches no driver; the count is the device module's (_device_count).
        # torch.cuda.is_available() (and current_accelerator(check_available=True), which calls
        # it) would call cudaGetDeviceCount, initialising the driver, unless
        # PYTORCH_NVML_BASED_CUDA_CHECK=1 is set; so does torch 2.6's current_accelerator(),
        # which always checks (and raises without an accelerator): there the old checks run.
        torch = self.fw
        accelerator = getattr(torch, "accelerator", None)
        self._by_accelerator = False
        asked_the_api = _names_the_build_accelerator(accelerator)  # (False: a torch without virtual GPUs)
        if asked_the_api:
            found = accelerator.current_accelerator()
            if found is not None and found.type != VIRTUAL_TYPE:
                self._by_accelerator = True
                return found.type if self._device_count(found.type) else None
            name_of = _internals.PRIVATEUSE1_NAME.get()  # torch's name for its out-of-tree device slot
            if name_of is None or name_of() != VIRTUAL_TYPE:
                return None
            # devshim's virtual GPUs fill torch.accelerator's out-of-tree slot, which torch
            # asks before any other: look for a real accelerator the old way.
        for platform in _FALLBACK_PLATFORMS:
            if self._device_count(platform) > 0:
                if asked_the_api:  # (reached only where torch.accelerator named the virtual GPUs)
                    _warn_autograd_beside(platform)
                return platform
        return None

    def _device_count(self, platform: str) -> int:
        """How many `platform` devices torch sees, asked without initialising a CUDA context:
        the device module's count (`torch.cuda.device_count()`, NVML's where NVML works), which
        is what `torch.accelerator.device_count()` answers from torch 2.8. On torch 2.6 and 2.7
        that function initialises the accelerator first (`torch.cuda._lazy_init`: no CUDA in
        forked workers after it, and `Found no NVIDIA driver` from a CUDA build without a
        driver), so devshim never calls it. A device torch cannot count is no device."""
        torch = self.fw
        module = getattr(torch, platform, None)
        try:
            if module is None or not hasattr(module, "device_count"):
                if platform == "mps":  # a torch whose torch.mps has no device_count
                    mps = getattr(torch.backends, "mps", None)
                    return int(mps is not None and mps.is_available())
                module = torch.get_device_module(platform)  # an out-of-tree device's module
            # max: torch before 2.6 answers -1 for MTIA on a machine without one (its hooks are unset).
            return max(0, module.device_count())
        except (AttributeError, RuntimeError, ValueError, AssertionError):  # a build whose driver is missing
            return 0

    def accelerator_count(self) -> int:
        if self._count is None:
            platform = self.accelerator_platform()
            self._count = 0 if platform is None else self._device_count(platform)
        return self._count

    def make_current(self, native) -> None:
        """Make `native` the current device of its accelerator (`torch.cuda.set_device`), so
        NCCL, DDP and code that writes a bare "cuda" use it. Host and virtual devices: nothing."""
        if native.type in ("cpu", "meta", VIRTUAL_TYPE):
            return
        set_device = self._accelerator_api("set_device_index") or self.fw.get_device_module(native.type).set_device
        set_device(native)

    def sum_across_processes(self, total):
        """`total` summed over the ranks of torch.distributed's default process group, when
        one is initialised (`ds.allreduce`'s second level); `total` itself otherwise."""
        dist = sys.modules.get("torch.distributed")
        if dist is None or not dist.is_available() or not dist.is_initialized():
            return total
        from devshim.backends.torch import _distributed

        return _distributed.all_reduce_sum(total)

    # ------------------------------------------------------------ primitives

    def is_tensor(self, x) -> bool:
        return isinstance(x, self.fw.Tensor)

    def is_tensor_type(self, kind: type):
        return issubclass(kind, self.fw.Tensor)

    def is_native_device(self, obj) -> bool:
        return isinstance(obj, self.fw.device)

    def make_native_device(self, kind: str, index: int):
        torch = self.fw
        if kind in ("cpu", "meta"):
            return torch.device(kind)
        virtual = settings.virtual_device_count()
        if virtual and not settings.accelerators_hidden():
            self.enable_virtual_devices(virtual)
            return torch.device(VIRTUAL_TYPE, index)
        return torch.device(self.accelerator_platform() or "cuda", index)

    def enable_virtual_devices(self, count: int) -> None:
        """Present `count` virtual GPUs as torch devices `vgpu:0` ... (see the `_virtual` package)."""
        if count != self._virtual:
            self.check_virtual_count(count)
            from devshim.backends.torch import _virtual

            _virtual.install(count)
            self._virtual = count

    def check_platform(self, platform: str) -> None:
        if platform == VIRTUAL_TYPE:
            if settings.virtual_device_count():
                return
            raise DeviceUnavailableError(
                f"{VIRTUAL_TYPE!r} names devshim's virtual GPUs, which are off in this process "
                f"({settings.VIRTUAL_DEVICES_VAR} is unset or 0). Set {settings.VIRTUAL_DEVICES_VAR}=2 "
                f"(or call ds.testing.virtual_devices(2)), or write 'gpu' to mean whichever GPU is there."
            )
        super().check_platform(platform)

    def device(self, spec):
        native = super().device(spec)
        if native.index is None and native.type not in ("cpu", "meta"):
            # torch.device("cuda") means the current GPU: name it, so comparisons are exact.
            native = self.fw.device(native.type, self.describe(native).index)
        return native

    def _describe(self, native) -> Device:
        kind = native.type
        if kind == "cpu":
            return Device("cpu", 0, native=native, backend=self.name)
        if kind == "meta":
            return Device("meta", 0, native=native, backend=self.name, platform="meta")
        if kind == VIRTUAL_TYPE:
            return Device("gpu", native.index or 0, native=native, backend=self.name, virtual=True)
        platform = self.accelerator_platform()
        if kind == platform or kind in _FALLBACK_PLATFORMS:
            index = native.index
            if index is None:
                index = self._current_index(kind) if kind == platform else 0
            return Device("gpu", index, native=native, backend=self.name, platform=kind)
        raise InvalidDeviceError(
            f"devshim does not handle torch device type {kind!r}; it handles cpu, meta and this "
            f"machine's accelerator ({platform or 'none here'}; cuda, xpu, mps or mtia elsewhere). "
            f"Move the tensor to one of those first, e.g. x.to('cpu')."
        )

    def _current_index(self, platform: str) -> int:
        current = self._accelerator_api("current_device_index")
        if current is not None:
            return current()
        if platform == "mps":
            return 0
        return self.fw.get_device_module(platform).current_device()

    def _accelerator_api(self, function: str):
        """`torch.accelerator`'s `function` when it speaks for this machine's accelerator and has
        one; else None, and the caller asks the device module (`torch.cuda`, ...) itself.

        With devshim's virtual GPUs registered beside a real one (`vgpu` fills torch's
        out-of-tree slot, which `torch.accelerator` asks first), `torch.accelerator` speaks
        for `vgpu` and refuses a `cuda` device ("cuda doesn't match the current accelerator
        vgpu"); `torch.cuda` still speaks for CUDA."""
        self.accelerator_platform()  # finds the platform, and whether torch.accelerator named it
        accelerator = getattr(self.fw, "accelerator", None)
        if self._by_accelerator and accelerator is not None and hasattr(accelerator, function):
            return getattr(accelerator, function)
        return None

    def tensor_device(self, x) -> Device:
        native = x.device
        try:
            return self._described[native]
        except KeyError:
            pass
        return self.describe(native)

    def same_place(self, x, native) -> bool:
        return x.device == native

    def copy_to(self, x, native, non_blocking: bool):
        # copy=True guarantees new storage even when x is already on `native`;
        # Tensor.to is differentiable, so autograd sees the copy.
        try:
            return x.to(native, non_blocking=non_blocking, copy=True)
        except NotImplementedError:
            if x.is_meta and native.type != "meta":
                raise self._dataless(x, f"copy it to {native}") from None
            if x.is_mkldnn and native.type == "cpu":  # `to` refuses MKL-DNN tensors, `clone` copies them
                return x.clone()
            kind = self._special_kind(x)
            if kind is not None:
                raise UnsupportedValueError(
                    f"torch cannot copy {kind} to {native} (its kernels for that device do not take "
                    f"one; devshim's virtual GPUs hold dense tensors only). {self._special_advice(x)}"
                ) from None
            raise

    def _special_kind(self, x):
        """What kind of non-dense tensor `x` is ("a sparse tensor", ...), or None when dense."""
        if x.is_nested:
            return "a nested tensor"
        if x.is_quantized:
            return f"a quantized tensor ({str(x.dtype).replace('torch.', '')})"
        if x.is_mkldnn:
            return f"an MKL-DNN tensor ({x.layout})"
        if x.layout != self.fw.strided:
            return f"a sparse tensor ({x.layout})"
        return None

    def _special_advice(self, x) -> str:
        if x.is_nested:
            return ("Copy its parts: [ds.to_device(t, device) for t in x.unbind()], or pad it first with "
                    "x.to_padded_tensor(0.0).")
        if x.is_quantized:
            return "Dequantize it first (x.dequantize()), or copy the stored integers (x.int_repr())."
        return "Make it dense first: x.to_dense()."

    def tensor_to_numpy(self, x):
        if x.is_meta:
            raise self._dataless(x, "read its values")
        if x.is_nested or x.layout != self.fw.strided:
            advice = ("use ds.to_numpy(x.unbind()) for one array per part (a tuple), or "
                      "ds.to_numpy(x.to_padded_tensor(0.0)) for one padded array" if x.is_nested
                      else "make it dense first: ds.to_numpy(x.to_dense())")
            raise UnsupportedValueError(
                f"NumPy arrays are dense, so {self._special_kind(x)} cannot become one as it is: {advice}."
            )
        t = x.detach()
        t = t.cpu() if t.device.type != "cpu" else t.clone()
        t = t.resolve_conj().resolve_neg()
        name = str(t.dtype).replace("torch.", "")
        if name in _ML_DTYPES:
            return self._through_ml_dtypes(t, name)
        try:
            return t.numpy()
        except TypeError:
            raise self._no_numpy_dtype(t, name) from None

    def _through_ml_dtypes(self, t, name: str):
        bits = _ML_DTYPES[name]
        try:
            import ml_dtypes
        except ImportError:
            raise UnsupportedDtypeError(
                f"NumPy has no {name} type. Install ml_dtypes (pip install ml_dtypes, or pip install "
                f"\"devshim[torch]\" where devshim is installed) "
                f"to get an exact copy, or convert first, e.g. ds.to_numpy(x.float())."
            ) from None
        return t.view(getattr(self.fw, bits)).numpy().view(getattr(ml_dtypes, name))

    def _no_numpy_dtype(self, t, name: str) -> UnsupportedDtypeError:
        if t.is_quantized:
            advice = ("dequantize it first, ds.to_numpy(x.dequantize()), or take the stored "
                      "integers with ds.to_numpy(x.int_repr())")
        elif name == "complex32":
            advice = "convert it first, e.g. ds.to_numpy(x.to(torch.complex64))"
        else:
            advice = "convert it to a dtype NumPy has first, e.g. ds.to_numpy(x.float())"
        return UnsupportedDtypeError(f"NumPy has no {name} type, so this tensor cannot become a "
                                     f"NumPy array as it is: {advice}.")

    def _dataless(self, x, what: str) -> DatalessTensorError:
        return DatalessTensorError(
            f"This tensor lives on meta:0, torch's device for shapes without data, so there is "
            f"nothing to {what}. Create it on a real device (ds.cpu(), ds.try_gpu()), or "
            f"materialise a meta module with module.to_empty(device=...) and load its weights."
        )

    def array_namespace(self, x):
        # torch's own namespace differs from the array API (torch.maximum takes no Python
        # numbers, for one); array-api-compat's wrapper is the array-API namespace of torch.
        try:
            from array_api_compat import torch as namespace
        except ImportError:
            raise BackendError(
                "ds.array_module for torch tensors needs array-api-compat, whose array_api_compat.torch "
                "is the array-API namespace of torch. Install it: pip install array-api-compat, "
                "or pip install \"devshim[torch]\" where devshim is installed."
            ) from None
        return namespace

    # ------------------------------------------------------------ waiting

    def synchronize(self, native) -> None:
        # Cheap checks first: timing code calls this around every measurement.
        kind = getattr(native, "type", None)
        if kind == "cpu" or kind == "meta" or kind == VIRTUAL_TYPE:
            return  # virtual GPUs compute synchronously on the host
        platform = self.accelerator_platform()
        if platform is None:
            return
        torch = self.fw
        if platform == "cuda" and not torch.cuda.is_initialized():
            return  # no CUDA context yet: nothing was ever queued on a CUDA device
        sync = self._accelerator_api("synchronize")
        if sync is None and platform == "mps":  # torch.mps.synchronize takes no device: MPS has one
            sync = lambda device: torch.mps.synchronize()  # noqa: E731
        elif sync is None:
            sync = torch.get_device_module(platform).synchronize
        if native is None:
            for i in range(self.accelerator_count()):
                sync(torch.device(platform, i))
        else:
            sync(native)

    def wait(self, x) -> None:
        self.synchronize(x.device)

    def device_details(self) -> list:
        details: list = [{"device": "cpu:0", "name": "host CPU"}]
        torch = self.fw
        platform = self.accelerator_platform()
        for native in self.devices()[1:]:
            entry: dict = {"device": str(self.describe(native)), "name": str(native), "platform": platform}
            if native.type == VIRTUAL_TYPE:
                entry.update(name=f"{native} (host memory)", platform="host", virtual=True)
            elif platform == "mps":
                entry.update(name="Apple MPS")
            else:
                # (where the runtime raises, the count is known but the runtime would not say more)
                with contextlib.suppress(AttributeError, RuntimeError, AssertionError):
                    props = torch.get_device_module(platform).get_device_properties(native.index)
                    entry["name"] = getattr(props, "name", str(native))
                    if getattr(props, "total_memory", None):
                        entry["memory_bytes"] = props.total_memory
            details.append(entry)
        return details


def _names_the_build_accelerator(accelerator) -> bool:
    """Whether `accelerator.current_accelerator()` (`torch.accelerator`, torch 2.6 and later)
    reads the build's accelerator without a runtime check: from torch 2.7, which added its
    `check_available` argument. torch 2.6's checks availability (cudaGetDeviceCount) and raises
    "Cannot access accelerator device when none is available" on a machine without one."""
    found = getattr(accelerator, "current_accelerator", None)
    if found is None:
        return False
    import inspect

    try:
        return "check_available" in inspect.signature(found).parameters
    except (TypeError, ValueError):  # a builtin without a signature: not torch's Python function
        return False

