"""Virtual GPUs for PyTorch: `DEVSHIM_VIRTUAL_DEVICES=N` on the torch backend.

Imported only when virtual devices are asked for; nothing here runs otherwise.

What torch sees
    torch's open registration slot for an out-of-tree device ("privateuse1") is
    renamed `vgpu` and given a device module (`torch.vgpu`), a Python device
    guard and hooks (`torch._C._acc`), so `torch.device("vgpu", 1)` is a
    device torch accepts everywhere a device goes: factories
    (`torch.ones(2, device=...)`), `Tensor.to`, `Module.to`. devshim's
    virtual `gpu:i` is `vgpu:i`; no host device indices are involved (the
    CPU is torch's one CPU, as always). torch's availability probes
    (`torch.accelerator.is_available()`) answer False, as on the CPU machine
    this is, so torch code that switches on them takes its CPU path.

What a tensor on one is
    a `VirtualTensor`: a `torch.Tensor` subclass whose device is `vgpu:i`
    and whose values live in an ordinary CPU tensor (`_host`). Every ATen
    operation on it arrives in `VirtualTensor.__torch_dispatch__`, below
    autograd, which checks devices the way CUDA does, runs the operation on the
    host tensors, and wraps the results on the same virtual GPU. So autograd,
    optimizers and `nn.Module` code run unchanged and compute the same numbers
    as on the CPU. Factory calls that name a virtual GPU reach torch's
    privateuse1 dispatch key, where a fallback kernel runs them on the CPU and
    wraps the result. The wrapper carries its host tensor's sizes, strides and
    storage offset itself, so torch reads them in C++ with no call into Python;
    the operations that change them in place (`t_()`, `resize_()`, `set_()`,
    an `out=` that resizes, ...) make it follow its host (`dispatch.follow_host`).

What CUDA rules are simulated
    - tensors of two devices in one operation raise the RuntimeError CUDA raises
      ("Expected all tensors to be on the same device, but found at least two
      devices, vgpu:0 and vgpu:1!"); 0-dim CPU tensors mix, as on CUDA, and
      indexing accepts CPU index tensors, as on CUDA;
    - `Tensor.numpy()` and `numpy.asarray(t)` refuse, as on CUDA: copy first
      (`t.cpu()`, `ds.to_numpy(t)`); `item()`, `float(t)`, `tolist()`
      and printing read the values, as on CUDA (a sync there).

Host reads and mixed-device operations pass through torch's function layer
under their usual names (`torch.Tensor.tolist`, `torch.Tensor.numpy`,
`torch.Tensor.__float__`, `torch.add`, ...), so a `TorchFunctionMode`
such as devshim's transfer guard sees them on virtual tensors exactly as on
CUDA ones. The class itself has no `__torch_function__` (no Python runs at
torch's function layer, which costs nothing then): its special cases are
methods of its own, which hand themselves to an active mode under torch's
names (`tensor._present`).

Autograd: torch's engine keeps one worker queue per device *index* and its
Python-registered device guard reports a single device, so backward passes run
on the calling thread, as they do for CPU tensors: every operation on a virtual
tensor switches autograd's multithreading off for the thread it runs in
(`torch.autograd.set_multithreading_enabled(False)`), and so does the device
guard, which the engine asks in the thread that starts a backward pass before
it picks a queue. Values are unchanged.

What a tensor carries besides its values, as on CUDA: the lazy conjugate and negative bits
(views copy them from their host), one random generator per virtual GPU
(`generators.py`), and its storage when saved (`saving.py`: views and tied weights stay
shared through `torch.save`/`torch.load`). What it cannot carry is refused by name:
DLPack (`ds.VirtualDLPackError`) and quantized tensors (`ds.UnsupportedValueError`).

The package, by concern (each module imports only those listed before it):

    `support.py`       whether this torch can carry them (its release, the internals they need)
    `count.py`         how many virtual GPUs exist; which `vgpu:i` a call may name
    `rnn.py`           GPU-only fused RNN kernels, as the same math on host tensors
    `saving.py`        torch.save/torch.load: storages tagged and restored per virtual GPU
    `reads.py`         host reads: `tolist`, `numpy`, printing, storage, pickling, DLPack
    `generators.py`    random generators per virtual GPU; `torch.Generator(device="vgpu:i")`
    `dispatch.py`      ATen operations: CUDA's device rules, then the host kernel
    `tensor.py`        `VirtualTensor`, the wrapper tensor class
    `registration.py`  renaming privateuse1 to `vgpu`: device module, guard, hooks, kernels
    `device_tests.py`  torch's device-generic tests (`instantiate_device_type_tests`) on them

The device type's name, `VIRTUAL_TYPE`, lives in `devshim.backends.torch._names`,
below this package and `core.py` alike.

Example:
    >>> install(2)
    >>> x = torch.ones(2, 3, device="vgpu:1")
    >>> (x * 2).sum().item()
    12.0
"""

from __future__ import annotations

from devshim.backends.torch._names import VIRTUAL_TYPE
from devshim.backends.torch._virtual import support

support.check()  # before the modules below read torch's internals: refuses by name, registers nothing

from devshim.backends.torch._virtual.count import device_count, set_count  # noqa: E402
from devshim.backends.torch._virtual.registration import install, installed  # noqa: E402
from devshim.backends.torch._virtual.tensor import VirtualTensor  # noqa: E402

__all__ = ["install", "installed", "device_count", "set_count", "VirtualTensor", "VIRTUAL_TYPE"]
