"""PyTorch's virtual GPUs: DEVSHIM_VIRTUAL_DEVICES=N (or ds.testing.virtual_devices(N)) on torch.

The ``vgpu`` fixture turns two virtual GPUs on for one test. torch cannot unregister a device,
so once a test here has run, this pytest process keeps the ``vgpu`` device type (with no
virtual GPUs presented once the test ends); what a process that never asked for them looks
like is checked in a fresh interpreter (``test_nothing_virtual_is_imported_or_registered...``).
"""

from __future__ import annotations

import copy
import io
import json
import threading
import warnings

import numpy as np
import pytest

import devshim as ds
from helpers import run_python
from machine import real_gpus

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

SAME_DEVICE = "Expected all tensors to be on the same device, but found at least two devices"


@pytest.fixture
def vgpu(setenv):
    """Two virtual GPUs on the torch backend for this test (conftest restores settings after)."""
    setenv("DEVSHIM_DEVICE", None)
    ds.testing.virtual_devices(2)
    with ds.use_backend("torch") as adapter:
        assert ds.num_gpus() == 2
        yield adapter


def same_numbers(cpu_tensors, virtual_tensors):
    for a, b in zip(cpu_tensors, virtual_tensors, strict=True):
        assert b.device.type == "vgpu"
        assert torch.equal(a, b.cpu()), (a, b)


# ------------------------------------------------------------ devices torch accepts


def test_num_gpus_and_the_devices_torch_accepts(vgpu):
    assert ds.try_all_gpus() == [torch.device("vgpu", 0), torch.device("vgpu", 1)]
    assert ds.try_gpu(1) == ds.gpu(1) == torch.device("vgpu", 1)
    assert ds.try_gpu(2) == torch.device("cpu")
    with pytest.raises(ds.DeviceUnavailableError, match="sees 2 GPUs"):
        ds.gpu(2)
    assert ds.devices() == [torch.device("cpu"), torch.device("vgpu", 0), torch.device("vgpu", 1)]

    X = torch.ones(2, 3, device=ds.try_gpu(1))
    assert X.device == torch.device("vgpu", 1) and X.dtype == torch.float32
    assert torch.randn(2, 3, device=ds.try_gpu()).device == torch.device("vgpu", 0)
    assert torch.arange(4).to(ds.try_gpu(1)).device == torch.device("vgpu", 1)
    assert torch.tensor([1, 2], device=ds.try_gpu(1)).tolist() == [1, 2]
    net = nn.Linear(3, 2)
    weight = net.weight
    assert net.to(ds.try_gpu(1)) is net
    assert net.weight is weight and isinstance(weight, nn.Parameter)  # same Parameter, as on CUDA
    assert weight.device == torch.device("vgpu", 1) and weight.requires_grad


def test_device_of_says_virtual_gpu(vgpu):
    d = ds.neutral_device(torch.zeros(1, device=ds.try_gpu(1)))
    assert (str(d), d.kind, d.index, d.virtual, d.platform) == ("gpu:1", "gpu", 1, True, "host")
    assert repr(d) == "Device('gpu:1', backend='torch', virtual=True)"
    assert d == ds.try_gpu(1) and d == "gpu:1" and d != ds.cpu() and d != ds.Device("gpu", 1)  # a real gpu:1
    assert ds.device("gpu:1") == ds.device("vgpu:1") == ds.device(d) == torch.device("vgpu", 1)


def test_a_virtual_gpu_that_is_not_there_is_refused(vgpu):
    with pytest.raises(ds.DeviceUnavailableError, match="vgpu:2 does not exist: devshim presents 2"):
        torch.ones(1, device="vgpu:2")
    with pytest.raises(ds.DeviceUnavailableError, match="vgpu:5 does not exist"):
        torch.ones(1).to("vgpu:5")


def test_a_bare_vgpu_is_the_first_and_new_tensor_stays_on_its_device(vgpu):
    assert torch.ones(1, device="vgpu").device == torch.device("vgpu", 0)
    x = torch.ones(1, device="vgpu:1")
    assert x.new_tensor([2.0]).device == x.new_zeros(2).device == torch.device("vgpu", 1)


# ------------------------------------------------------------ real values, CUDA's rules


def test_operations_compute_real_values_on_the_host(vgpu):
    a = torch.arange(12.0).reshape(3, 4)
    b = torch.linspace(-1, 1, 12).reshape(4, 3)
    va, vb = a.to("vgpu:0"), b.to("vgpu:0")
    same_numbers(
        [a @ b, (a * 2 + 1).sum(0), a.max(1).values, a[1:, ::2], a.t().contiguous(), torch.cat([a, a]),
         a.softmax(1), a[a > 5]],
        [va @ vb, (va * 2 + 1).sum(0), va.max(1).values, va[1:, ::2], va.t().contiguous(),
         torch.cat([va, va]), va.softmax(1), va[va > 5]],
    )


def test_views_and_in_place_updates_share_memory_as_on_cuda(vgpu):
    x = torch.zeros(2, 3, device="vgpu:1")
    row = x[1]
    returned = row.add_(5)
    assert returned is row  # in-place operations return their argument
    assert x.tolist() == [[0.0, 0.0, 0.0], [5.0, 5.0, 5.0]]
    x.t_()
    assert x.shape == (3, 2) and x.stride() == (1, 3)
    out = torch.empty(0, device="vgpu:1")
    torch.add(torch.ones(3, device="vgpu:1"), 1, out=out)  # out= resizes, as everywhere
    assert out.shape == (3,) and out.tolist() == [2.0, 2.0, 2.0]


# Operations that change a tensor's sizes, strides or storage offset in place. A virtual tensor
# keeps its own metadata (torch reads it in C++), so each must leave it as the CPU's.
RESHAPING_IN_PLACE = {
    "t_": lambda t, other: t.t_(),
    "transpose_": lambda t, other: t.transpose_(0, 1),
    "swapdims_": lambda t, other: t.swapdims_(0, 1),
    "squeeze_": lambda t, other: t[:1].clone().squeeze_(0),
    "unsqueeze_": lambda t, other: t.unsqueeze_(1),
    "as_strided_": lambda t, other: t.as_strided_((2, 2), (1, 2), 1),
    "detach_": lambda t, other: t.detach_(),
    "resize_ (grow)": lambda t, other: t.resize_(4, 5).fill_(1.5),  # new memory, set
    "resize_ (shrink)": lambda t, other: t.resize_(2),
    "resize_as_": lambda t, other: t.resize_as_(other),
    "set_ (a tensor)": lambda t, other: t.set_(other),
    "set_ (a tensor's storage, offset, size, stride)": lambda t, other: t.set_(
        other.untyped_storage(), 1, (2, 2), (1, 2)),
    "out= resizes": lambda t, other: torch.add(other, 1, out=t),
    "out= of cat resizes": lambda t, other: torch.cat([other, other], out=t),
    "out= of max (two outputs)": lambda t, other: torch.max(
        other, 0, out=(t.resize_(0), torch.empty(0, dtype=torch.long, device=t.device)))[0],
}


@pytest.mark.parametrize("name", list(RESHAPING_IN_PLACE))
def test_operations_that_reshape_in_place_leave_the_shape_the_cpu_leaves(vgpu, name):
    change = RESHAPING_IN_PLACE[name]
    results = {}
    for device in ("cpu", "vgpu:1"):
        t = torch.arange(12.0, device=device).reshape(3, 4).clone()
        other = torch.arange(20.0, 26.0, device=device).reshape(3, 2)
        t = change(t, other)  # the tensor changed in place
        # Metadata torch reads in C++, and operations that rely on it, after the change.
        results[device] = (tuple(t.shape), t.stride(), t.storage_offset(), t.is_contiguous(),
                           t.numel(), t.dim(), (t * 2).cpu().tolist() if t.numel() else None,
                           t.contiguous().view(-1).cpu().tolist())
    assert results["vgpu:1"] == results["cpu"]


def test_an_in_place_view_change_is_seen_by_autograd_as_on_the_cpu(vgpu):
    grads = {}
    for device in ("cpu", "vgpu:1"):
        x = torch.arange(6.0, device=device).reshape(2, 3).requires_grad_()
        y = x * 2
        y.t_()  # autograd records y's new shape (3, 2)
        (y * torch.arange(6.0, device=device).reshape(3, 2)).sum().backward()
        grads[device] = x.grad.cpu().tolist()
    assert grads["vgpu:1"] == grads["cpu"]


def test_assigning_data_of_another_shape_then_changing_that_tensor_in_place(vgpu):
    t = torch.zeros(2, 3, device="vgpu:1")
    value = torch.arange(4.0, device="vgpu:1").reshape(2, 2)
    t.data = value
    assert t.shape == (2, 2) and t.tolist() == [[0.0, 1.0], [2.0, 3.0]]
    value.t_()  # as on CUDA: the values are shared, the shape is each tensor's own
    assert t.shape == (2, 2) and t.tolist() == [[0.0, 1.0], [2.0, 3.0]]
    assert value.tolist() == [[0.0, 2.0], [1.0, 3.0]]
    value.add_(1)
    assert t.tolist() == [[1.0, 2.0], [3.0, 4.0]]


def test_a_lazy_module_materialises_with_its_shape_on_a_virtual_gpu(vgpu):
    net = nn.LazyLinear(4).to("vgpu:1")
    out = net(torch.ones(5, 3, device="vgpu:1"))
    assert net.weight.shape == (4, 3) and net.weight.stride() == (3, 1) and net.bias.shape == (4,)
    assert out.shape == (5, 4) and net.weight.device == torch.device("vgpu", 1)
    out.sum().backward()
    assert net.weight.grad.shape == (4, 3) and net.weight.grad.tolist() == [[5.0] * 3] * 4


def test_mixing_two_virtual_gpus_raises_what_cuda_raises(vgpu):
    x, y = torch.ones(2, 3, device="vgpu:0"), torch.ones(2, 3, device="vgpu:1")
    for mix in (lambda: x + y, lambda: x @ y.t(), lambda: torch.cat([x, y]),
                lambda: nn.Linear(3, 1).to("vgpu:1")(x)):
        with pytest.raises(RuntimeError) as info:
            mix()
        assert isinstance(info.value, ds.DeviceMismatchError)
        message = str(info.value)
        assert message.startswith((f"{SAME_DEVICE}, vgpu:0 and vgpu:1!", f"{SAME_DEVICE}, vgpu:1 and vgpu:0!"))
        assert "ds.to_device" in message


def test_a_virtual_gpu_and_a_cpu_tensor_do_not_mix_but_cpu_scalars_do(vgpu):
    x = torch.ones(2, 3, device="vgpu:1")
    with pytest.raises(ds.DeviceMismatchError, match=f"^{SAME_DEVICE}, vgpu:1 and cpu!"):
        x + torch.ones(2, 3)
    with pytest.raises(ds.DeviceMismatchError, match=f"^{SAME_DEVICE}, vgpu:1 and cpu!"):
        torch.ones(2, 3) * x
    scaled = x * torch.tensor(3.0)  # a 0-dim CPU tensor mixes, as on CUDA
    assert scaled.device == torch.device("vgpu", 1) and scaled.tolist() == [[3.0] * 3] * 2
    assert torch.where(x > 0, torch.tensor(2.0), x).device == torch.device("vgpu", 1)


def test_numbers_cpu_scalars_and_missing_optionals_compute_the_cpus_numbers(vgpu):
    """What most operations look like on their way in (torch hands over a wrapped Python number
    as the number itself, and an absent optional tensor as None)."""
    cpu = torch.arange(24.0).reshape(1, 2, 3, 4)
    weight = torch.ones(3, 2, 1, 1)

    def compute(x, w):
        doubled = x.mul_(2.0)
        assert doubled is x  # an in-place operation returns its tensor itself
        return [doubled, 3.0 * x / 4, torch.tensor(0.5) * x, x - torch.tensor(1.0), torch.tensor(2.0) ** x[0, 0, 0],
                F.conv2d(x, w), F.conv2d(x, w, None, 1, 0), torch.clamp(x, min=1.0, max=5.0)]

    on_cpu = compute(cpu.clone(), weight)
    on_gpu = compute(cpu.clone().to("vgpu:1"), weight.to("vgpu:1"))
    same_numbers(on_cpu, on_gpu)
    assert {t.device for t in on_gpu} == {torch.device("vgpu", 1)}


def test_indexing_takes_cpu_indices_as_on_cuda(vgpu):
    x = torch.arange(6.0, device="vgpu:0")
    assert x[torch.tensor([4, 1])].tolist() == [4.0, 1.0]
    assert x[torch.tensor([True, False] * 3)].tolist() == [0.0, 2.0, 4.0]
    x[torch.tensor([0])] = 7.0
    assert x[0].item() == 7.0
    with pytest.raises(ds.DeviceMismatchError, match="vgpu:0 and vgpu:1"):
        x[torch.tensor([1], device="vgpu:1")]


def test_foreach_operations_check_each_position_like_cuda(vgpu):
    a = [torch.ones(2, device="vgpu:0"), torch.ones(3, device="vgpu:1")]
    b = [torch.full((2,), 2.0, device="vgpu:0"), torch.full((3,), 3.0, device="vgpu:1")]
    summed = torch._foreach_add(a, b)
    assert [(t.device.index, t.tolist()) for t in summed] == [(0, [3.0, 3.0]), (1, [4.0, 4.0, 4.0])]
    with pytest.raises(ds.DeviceMismatchError, match=SAME_DEVICE):
        torch._foreach_add(a, b[::-1])


# ------------------------------------------------------------ host reads


def test_numpy_refuses_as_on_cuda_and_copies_work(vgpu):
    t = torch.arange(6.0, device="vgpu:0").reshape(2, 3)
    with pytest.raises(TypeError) as info:
        t.numpy()
    assert isinstance(info.value, ds.NotOnHostError)
    assert str(info.value).startswith(
        "can't convert vgpu:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor to "
        "host memory first.")
    with pytest.raises(ds.NotOnHostError):
        np.asarray(t)
    forced = t.numpy(force=True)
    forced[0, 0] = 99.0  # a copy, not the tensor's memory
    assert t[0, 0].item() == 0.0
    expected = np.arange(6.0).reshape(2, 3)
    for host in (t.cpu(), t.to("cpu"), t.detach().cpu()):
        assert host.device == torch.device("cpu") and type(host) is torch.Tensor
        np.testing.assert_array_equal(host.numpy(), expected)
    np.testing.assert_array_equal(ds.to_numpy(t), expected)
    assert float(t.sum()) == t.sum().item() == 15.0 and int(t[1, 2]) == 5 and bool(t[0, 1])
    assert t.tolist() == expected.tolist() and f"{t.sum():.1f}" == "15.0"


def test_printing_looks_like_a_cuda_tensor(vgpu):
    t = torch.ones(2, device="vgpu:1", requires_grad=True) * 2
    assert repr(t) == "tensor([2., 2.], device='vgpu:1', grad_fn=<MulBackward0>)"
    assert repr(torch.ones(2, dtype=torch.int32, device="vgpu:0")) == \
        "tensor([1, 1], device='vgpu:0', dtype=torch.int32)"
    layer = nn.Linear(1, 1).to("vgpu:0")
    assert repr(layer.bias).startswith("Parameter containing:\ntensor([")
    assert repr(layer.bias).endswith("], device='vgpu:0', requires_grad=True)")


def test_a_torch_function_mode_sees_host_reads_and_mixed_operations(vgpu):
    """What devshim's transfer guard builds on: virtual tensors pass through torch's function
    layer under the names CUDA tensors do."""
    from torch.overrides import TorchFunctionMode

    seen = []

    class Record(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if any(isinstance(a, torch.Tensor) and a.device.type == "vgpu" for a in args):
                seen.append(func)
            return func(*args, **(kwargs or {}))

    x, y = torch.ones(2, device="vgpu:0"), torch.ones(2, device="vgpu:1")
    with Record():
        float(x.sum()), x[0].item(), x.tolist(), bool(x[0])
        with pytest.raises(ds.NotOnHostError):
            x.numpy()
        with pytest.raises(ds.DeviceMismatchError):
            torch.add(x, y)
    for func in (torch.Tensor.__float__, torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.__bool__,
                 torch.Tensor.numpy, torch.add):
        assert func in seen, func


def test_under_a_torch_function_mode_the_virtual_answers_stay_devshims(vgpu):
    """The class has no __torch_function__ of its own (torch then runs no Python per call);
    its special methods hand themselves to an active mode under torch's names, and what the
    mode's call of torch's method answers is still the virtual GPU's."""
    from devshim.backends.torch._virtual.tensor import VirtualTensor

    disabled = torch._C._disabled_torch_function_impl
    assert VirtualTensor.__torch_function__ is disabled
    seen = []

    class Record(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            seen.append(func)
            return func(*args, **(kwargs or {}))

    x = torch.arange(6.0, device="vgpu:1").reshape(2, 3)
    replacement = torch.full((3,), 7.0, device="vgpu:1")
    for mode in (Record(), torch.device("vgpu:0")):  # a user's mode, and torch's device context
        seen.clear()
        with mode:
            assert repr(x[0]) == "tensor([0., 1., 2.], device='vgpu:1')"
            assert f"{x.sum():.1f}" == "15.0" and x.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
            with pytest.raises(ds.NotOnHostError):
                np.asarray(x)
            assert x.new_tensor([1.0]).device == torch.device("vgpu", 1)
            assert x.untyped_storage().nbytes() == 24 and x.data_ptr() == x._host.data_ptr() != 0
            target = torch.zeros(3, device="vgpu:1")
            target.data = replacement
            replacement.t_()  # its own host view: replacement's in-place change stays its own
            assert target.tolist() == [7.0] * 3
        if isinstance(mode, Record):
            for func in (torch.Tensor.__repr__, torch.Tensor.__format__, torch.Tensor.tolist,
                         torch.Tensor.__array__, torch.Tensor.new_tensor, torch.Tensor.untyped_storage,
                         torch.Tensor.data_ptr):
                assert func in seen, func
            assert torch.Tensor.data.__set__ in seen
        assert VirtualTensor.__torch_function__ is disabled  # the short path is back


def test_special_methods_under_modes_in_many_threads_at_once(vgpu):
    from devshim.backends.torch._virtual.tensor import VirtualTensor

    x = torch.arange(4.0, device="vgpu:0")
    errors, start = [], threading.Barrier(4)

    class Passing(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    def work():
        try:
            start.wait()
            for _ in range(200):
                with Passing():
                    assert x.tolist() == [0.0, 1.0, 2.0, 3.0]
                    assert repr(x) == "tensor([0., 1., 2., 3.], device='vgpu:0')"
                    with pytest.raises(ds.NotOnHostError):
                        x.numpy()
                assert (x * 2).tolist() == [0.0, 2.0, 4.0, 6.0]
        except BaseException as err:  # reported below
            errors.append(err)

    workers = [threading.Thread(target=work) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert not errors, errors[:1]
    assert VirtualTensor.__torch_function__ is torch._C._disabled_torch_function_impl


# ------------------------------------------------------------ training gives the CPU's numbers


def train(net, device, X, y, optimizer, steps=3):
    net = net.to(device)
    opt = optimizer(net.parameters())
    losses = []
    for _ in range(steps):
        loss = F.cross_entropy(net(X.to(device)), y.to(device))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return net, losses


@pytest.mark.parametrize("optimizer", [
    lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
    lambda ps: torch.optim.Adam(ps, lr=0.01),
], ids=["sgd", "adam"])
def test_an_mlp_trains_to_the_same_numbers_as_on_the_cpu(vgpu, optimizer):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    X, y = torch.randn(10, 8), torch.randint(0, 4, (10,))
    on_cpu, cpu_losses = train(copy.deepcopy(net), "cpu", X, y, optimizer)
    on_gpu, gpu_losses = train(copy.deepcopy(net), ds.try_gpu(1), X, y, optimizer)
    same_numbers(cpu_losses, gpu_losses)
    same_numbers(list(on_cpu.parameters()), list(on_gpu.parameters()))
    same_numbers([p.grad for p in on_cpu.parameters()], [p.grad for p in on_gpu.parameters()])


def test_optimisers_and_gradient_clipping_take_cudas_foreach_path_with_the_cpus_numbers(vgpu):
    """On CUDA an optimiser's default is its foreach path (the CPU's is per tensor), and a virtual
    GPU takes it too; the numbers are the CPU's, bit for bit, clipped gradients included."""
    from torch.optim.optimizer import _default_to_fused_or_foreach

    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    on_gpu = copy.deepcopy(net).to(ds.try_gpu(1))
    assert _default_to_fused_or_foreach(list(on_gpu.parameters()), False) == (False, True)
    assert _default_to_fused_or_foreach(list(net.parameters()), False) == (False, False)
    X = torch.randn(5, 8)
    for model, inputs in ((net, X), (on_gpu, X.to(ds.try_gpu(1)))):
        model(inputs).pow(2).sum().backward()
    norms = [torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5) for model in (net, on_gpu)]
    same_numbers(norms[:1], norms[1:])
    same_numbers([p.grad for p in net.parameters()], [p.grad for p in on_gpu.parameters()])


def test_a_small_cnn_trains_to_the_same_numbers_as_on_the_cpu(vgpu):
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(4, 8, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 3),
    )
    X, y = torch.randn(6, 1, 8, 8), torch.randint(0, 3, (6,))
    sgd = lambda ps: torch.optim.SGD(ps, lr=0.05)  # noqa: E731
    on_cpu, cpu_losses = train(copy.deepcopy(net), "cpu", X, y, sgd)
    on_gpu, gpu_losses = train(copy.deepcopy(net), ds.try_gpu(), X, y, sgd)
    same_numbers(cpu_losses, gpu_losses)
    same_numbers(list(on_cpu.state_dict().values()), list(on_gpu.state_dict().values()))  # BN stats too


@pytest.mark.parametrize("layer", [nn.LSTM, nn.GRU], ids=["lstm", "gru"])
def test_recurrent_layers_use_the_gpu_cells_and_agree_with_the_cpu(vgpu, layer):
    """On a GPU torch runs fused LSTM/GRU cells that have no CPU kernel; devshim runs the same math."""
    torch.manual_seed(0)
    net = layer(4, 5)
    on_gpu = copy.deepcopy(net).to("vgpu:0")
    seq = torch.randn(6, 2, 4)
    out_cpu, out_gpu = net(seq)[0], on_gpu(seq.to("vgpu:0"))[0]
    out_cpu.square().sum().backward()
    out_gpu.square().sum().backward()
    torch.testing.assert_close(out_gpu.cpu(), out_cpu)
    for a, b in zip(net.parameters(), on_gpu.parameters()):
        torch.testing.assert_close(b.grad.cpu(), a.grad)


# ------------------------------------------------------------ multi-GPU programs


def test_the_d2l_gpu_chapter(vgpu):
    """d2l.ai "GPUs", PyTorch tab, with ds.try_gpu for the chapter's try_gpu."""
    try_gpu, try_all_gpus = ds.try_gpu, ds.try_all_gpus
    assert (try_gpu(), try_gpu(10), try_all_gpus()) == (
        torch.device("vgpu", 0), torch.device("cpu"), [torch.device("vgpu", 0), torch.device("vgpu", 1)])
    x = torch.tensor([1, 2, 3])
    assert x.device == torch.device("cpu")
    X = torch.ones(2, 3, device=try_gpu())
    Y = torch.randn(2, 3, device=try_gpu(1))
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        X + Y  # "Do not simply add X and Y"
    Z = X.to(try_gpu(1))  # the chapter's X.cuda(1); X.vgpu(1) works too
    assert Z.device == Y.device == try_gpu(1) and X.device == try_gpu()
    torch.testing.assert_close((Y + Z).cpu(), Y.cpu() + 1)
    assert Z.to(try_gpu(1)) is Z and Z.vgpu(1) is Z and ds.copy_if_needed(Z, try_gpu(1)) is Z

    net = nn.Sequential(nn.Linear(3, 1))
    net = net.to(device=try_gpu())
    out = net(X)
    assert out.device == try_gpu() and out.shape == (2, 1)
    assert net[0].weight.data.device == try_gpu()
    torch.testing.assert_close(out.cpu(), net.to("cpu")(X.cpu()))


class MLP(nn.Module):
    def __init__(self, n_in, n_units, n_out):
        super().__init__()
        self.l1, self.l2, self.l3 = nn.Linear(n_in, n_units), nn.Linear(n_units, n_units), nn.Linear(n_units, n_out)

    def forward(self, x):
        return self.l3(F.relu(self.l2(F.relu(self.l1(x)))))


class ParallelMLP(nn.Module):
    """Chainer's model-parallel example: two MLP halves per layer, one per GPU, explicit copies."""

    def __init__(self, gpu0, gpu1):
        super().__init__()
        self.gpu0, self.gpu1 = gpu0, gpu1
        self.mlp1_gpu0 = MLP(6, 10, 8).to(gpu0)
        self.mlp1_gpu1 = MLP(6, 10, 8).to(gpu1)
        self.mlp2_gpu0 = MLP(8, 10, 3).to(gpu0)
        self.mlp2_gpu1 = MLP(8, 10, 3).to(gpu1)

    def forward(self, x):  # x is on gpu0
        z0 = self.mlp1_gpu0(x)
        z1 = self.mlp1_gpu1(ds.to_device(x, self.gpu1))
        h0 = F.relu(z0 + ds.to_device(z1, self.gpu0))
        h1 = F.relu(z1 + ds.to_device(z0, self.gpu1))
        y0 = self.mlp2_gpu0(h0)
        y1 = self.mlp2_gpu1(h1)
        return y0 + ds.to_device(y1, self.gpu0)  # on gpu0


def test_chainer_parallel_mlp_over_two_virtual_gpus(vgpu):
    torch.manual_seed(0)
    split = ParallelMLP(*ds.try_all_gpus())
    whole = copy.deepcopy(split).to("cpu")
    whole.gpu0 = whole.gpu1 = torch.device("cpu")
    x = torch.randn(5, 6)
    y = split(x.to(ds.try_gpu(0)))
    assert y.device == ds.try_gpu(0)
    for half, device in ((split.mlp1_gpu0, "vgpu:0"), (split.mlp1_gpu1, "vgpu:1"), (split.mlp2_gpu1, "vgpu:1")):
        assert all(p.device == torch.device(device) for p in half.parameters())

    y.square().sum().backward()  # gradients flow back across every copy
    expected = whole(x)
    expected.square().sum().backward()
    torch.testing.assert_close(y.cpu(), expected)
    for (name, p), q in zip(split.named_parameters(), whole.parameters()):
        assert p.grad is not None and p.grad.device == p.device, name
        torch.testing.assert_close(p.grad.cpu(), q.grad, msg=name)
    assert split.mlp1_gpu1.l1.weight.grad.abs().sum() > 0

    # One optimizer over parameters on both GPUs (torch groups them by device), as on the CPU.
    for net in (split, whole):
        nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        torch.optim.Adam(net.parameters(), lr=0.01).step()
    for (name, p), q in zip(split.named_parameters(), whole.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), msg=name)


def test_a_data_parallel_step_over_two_virtual_gpus_equals_the_single_device_step(vgpu):
    """Replicate the model, split the batch, backward on each shard, sum the gradients with
    explicit copies, apply the same update to every replica."""
    torch.manual_seed(0)
    model = MLP(6, 12, 3).double()
    X, y = torch.randn(8, 6, dtype=torch.float64), torch.randint(0, 3, (8,))
    lr = 0.1
    gpus = ds.try_all_gpus()
    replicas = [copy.deepcopy(model).to(gpu) for gpu in gpus]
    for replica, Xs, ys, gpu in zip(replicas, X.chunk(2), y.chunk(2), gpus):
        loss = F.cross_entropy(replica(ds.to_device(Xs, gpu)), ds.to_device(ys, gpu), reduction="sum") / len(X)
        loss.backward()
        assert all(p.grad.device == gpu for p in replica.parameters())
    with torch.no_grad():
        for params in zip(*(r.parameters() for r in replicas)):
            total = sum(ds.to_device(p.grad, gpus[0]) for p in params)   # all-reduce, by hand
            for p, gpu in zip(params, gpus):
                p -= lr * ds.to_device(total, gpu)

    F.cross_entropy(model(X), y).backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= lr * p.grad
    for replica in replicas:
        for p, q in zip(replica.parameters(), model.parameters()):
            torch.testing.assert_close(p.cpu(), q)


def test_gradients_cross_virtual_gpus(vgpu):
    w = torch.tensor([1.0, 2.0], device="vgpu:0", requires_grad=True)
    on_1 = ds.to_device(w, ds.gpu(1))
    back = ds.copy_if_needed(on_1 * 3.0, ds.gpu(0))
    back.sum().backward()
    assert (str(ds.neutral_device(on_1)), str(ds.neutral_device(back))) == ("gpu:1", "gpu:0")
    assert w.grad.device == torch.device("vgpu", 0) and w.grad.tolist() == [3.0, 3.0]


def in_a_new_thread(function):
    errors = []

    def run():
        try:
            function()
        except BaseException as err:  # reported below
            errors.append(err)

    worker = threading.Thread(target=run)
    worker.start()
    worker.join()
    assert not errors, errors


def test_backward_from_another_thread(vgpu):
    a = torch.ones(3, device="vgpu:1", requires_grad=True)
    b = a * 3
    gradient = torch.ones(3, device="vgpu:1")
    in_a_new_thread(lambda: b.backward(gradient))
    assert a.grad.tolist() == [3.0, 3.0, 3.0]
    # torch.autograd's own entry points, as the first thing a thread does with a virtual tensor
    doubled, quadrupled, found = a * 2, (a * 4).sum(), []
    in_a_new_thread(lambda: torch.autograd.backward([doubled], [gradient]))
    assert a.grad.tolist() == [5.0, 5.0, 5.0]
    in_a_new_thread(lambda: found.extend(torch.autograd.grad(quadrupled, a)))
    assert found[0].device == torch.device("vgpu", 1) and found[0].tolist() == [4.0, 4.0, 4.0]

    # A loss copied to the CPU, whose backward pass first touches a virtual GPU deep in the graph.
    net = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)).to("vgpu:1")
    loss = ds.to_device(net(torch.ones(5, 3, device="vgpu:1")), "cpu").square().sum()
    in_a_new_thread(loss.backward)
    assert all(p.grad.device == torch.device("vgpu", 1) for p in net.parameters())


# ------------------------------------------------------------ objects around tensors


def test_save_load_and_deepcopy_keep_the_virtual_gpu(vgpu):
    net = nn.Linear(3, 2).to("vgpu:1")
    buffer = io.BytesIO()
    torch.save({"state": net.state_dict(), "x": torch.arange(3.0, device="vgpu:0")}, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer)  # weights_only, torch's default
    assert loaded["x"].device == torch.device("vgpu", 0) and loaded["x"].tolist() == [0.0, 1.0, 2.0]
    same_numbers([net.weight.detach().cpu()], [loaded["state"]["weight"]])
    twin = copy.deepcopy(net)
    assert twin.weight is not net.weight and isinstance(twin.weight, nn.Parameter)
    same_numbers([net.weight.detach().cpu()], [twin.weight.detach()])
    with torch.no_grad():
        twin.weight.add_(1)
    assert not torch.equal(twin.weight.cpu(), net.weight.cpu())


def test_assigning_data_follows_the_new_tensor(vgpu):
    p = nn.Parameter(torch.ones(2, device="vgpu:0"))
    p.data = torch.zeros(3, device="vgpu:1")
    assert p.device == torch.device("vgpu", 1) and p.tolist() == [0.0, 0.0, 0.0]
    with pytest.raises(ds.UnsupportedValueError, match=r"t.data = value.to\(t.device\)"):
        p.data = torch.zeros(3)


def test_synchronize_and_timing_work_on_virtual_gpus(vgpu):
    x = torch.ones(8, 8, device=ds.try_gpu(1))
    ds.synchronize(ds.try_gpu(1))
    ds.synchronize()
    torch.vgpu.synchronize()
    with ds.Timer() as timer:
        (x @ x).sum().item()
    assert timer.avg() >= 0


@pytest.mark.skipif(not real_gpus("torch") or not torch.cuda.is_available(),
                    reason="needs a real CUDA GPU (asked of torch itself): virtual GPUs beside real ones")
def test_virtual_gpus_beside_a_real_gpu_leave_it_working(vgpu):
    """Testing 4-GPU code on a 1-GPU workstation: the virtual GPUs are devshim's gpu:i, and the real
    GPU keeps working through its own device objects, also across to and from a virtual one."""
    cuda = torch.device("cuda", 0)
    assert ds.num_gpus() == 2 and ds.try_gpu() == torch.device("vgpu", 0)
    x = torch.arange(6.0, device=cuda).reshape(2, 3)
    on_virtual = ds.to_device(x, ds.try_gpu(1))
    back = ds.to_device(on_virtual, cuda)
    assert on_virtual.device == torch.device("vgpu", 1) and back.device == cuda and torch.equal(back, x)
    assert ds.copy_if_needed(x, cuda) is x and ds.neutral_device(x) == ds.Device("gpu", 0)
    assert not ds.neutral_device(x).virtual and ds.neutral_device(on_virtual).virtual
    with ds.Timer(cuda) as timer:
        (x @ x.T).sum().item()
    measured = ds.benchmark(lambda: x @ x.T, device=cuda, warmup=1, min_run_time=0.01)
    ds.synchronize(), ds.synchronize(x)
    assert timer.avg() > 0 and measured.median > 0
    assert np.array_equal(ds.to_numpy(back), x.cpu().numpy())


def test_virtual_gpus_beside_a_real_gpu_leave_waiting_for_it_to_its_own_module(vgpu, monkeypatch):
    """On a CUDA machine with virtual GPUs on, torch.accelerator speaks for vgpu and refuses a cuda
    device ("cuda doesn't match the current accelerator vgpu"): devshim waits for the real GPU
    through torch.cuda, so ds.synchronize, ds.Timer and ds.benchmark keep working on it. (On a
    machine without CUDA, torch.cuda is made to report one GPU with work queued.)"""
    waited = []
    if not torch.cuda.is_available():
        monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
        monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
        monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: waited.append(torch.device(device)))
    from devshim.backends.torch import core

    monkeypatch.setattr(core, "_warned_beside", [])  # (a real GPU here: the vgpu fixture warned already)
    ds.testing.virtual_devices(0)
    ds.testing.virtual_devices(2)  # devshim looks for the accelerator again, with the fake in place
    with pytest.warns(ds.VirtualBesideRealGpuWarning, match="a backward pass on the real GPU fails in this process"):
        assert ds.get_backend().accelerator_platform() == "cuda"
    ds.testing.virtual_devices(0)
    ds.testing.virtual_devices(2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ds.VirtualBesideRealGpuWarning)  # once per process
        assert ds.get_backend().accelerator_platform() == "cuda"
    assert torch.accelerator.current_accelerator() == torch.device("vgpu")
    assert ds.num_gpus() == 2 and ds.get_backend().accelerator_platform() == "cuda"
    cuda = torch.device("cuda", 0)
    ds.synchronize(cuda)
    ds.synchronize()
    with ds.Timer(cuda) as timer:
        pass
    ds.benchmark(lambda: None, device=cuda, warmup=0, min_run_time=0.001, max_runs=3)
    assert timer.avg() >= 0
    if not torch.cuda.is_available():
        assert waited and set(waited) == {cuda}

def test_torch_probes_answer_as_on_this_cpu_machine_so_torch_code_takes_its_cpu_path(vgpu):
    """torch.accelerator names the virtual GPUs but calls them unavailable: code that switches on
    availability (DataLoader pinning, torch.utils.benchmark's synchronising) runs as on the CPU."""
    import torch.utils.benchmark as benchmark

    assert torch.accelerator.current_accelerator() == torch.device("vgpu")
    assert not torch.accelerator.is_available() and not torch.vgpu.is_available()
    assert torch.vgpu.device_count() == torch.accelerator.device_count() == 2
    x = torch.ones(4, 4, device=ds.try_gpu(1))
    assert benchmark.Timer("x @ x", globals={"x": x}).timeit(3).mean > 0
    data = torch.utils.data.TensorDataset(torch.arange(6.0))
    with pytest.warns(UserWarning, match="no accelerator is found"):
        batches = [ds.to_device(b, ds.try_gpu(1)) for (b,) in torch.utils.data.DataLoader(data, 3, pin_memory=True)]
    assert [b.tolist() for b in batches] == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]


@pytest.mark.filterwarnings("ignore::devshim.VirtualBesideRealGpuWarning")  # its own test is above
def test_a_real_accelerator_is_still_found_once_virtual_gpus_exist(vgpu, monkeypatch):
    """torch.accelerator answers for the virtual GPUs from now on; devshim looks past them."""
    ds.testing.virtual_devices(0)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 3)
    ds.settings.reload()
    assert torch.accelerator.current_accelerator() == torch.device("vgpu")
    assert vgpu.accelerator_platform() == "cuda" and ds.num_gpus() == 3
    assert ds.try_gpu(2) == torch.device("cuda", 2)


def test_turning_virtual_gpus_off_again(vgpu):
    x = torch.ones(2, device="vgpu:1")
    ds.testing.virtual_devices(0)
    real = real_gpus("torch")  # the machine's own GPUs, asked of torch itself, are back
    assert ds.num_gpus() == real and ds.try_gpu(1) == (torch.device("cuda", 1) if real > 1 else torch.device("cpu"))
    assert ds.neutral_device(x).virtual and (x + 1).tolist() == [2.0, 2.0]  # existing tensors still work
    with pytest.raises(ds.DeviceUnavailableError):
        ds.device(torch.device("vgpu", 1))
    with pytest.raises(ds.DeviceUnavailableError, match="presents 0 virtual GPUs"):
        torch.ones(1, device="vgpu:0")
    ds.testing.virtual_devices(2)
    assert ds.num_gpus() == 2 and torch.ones(1, device="vgpu:1").device.index == 1


# ------------------------------------------------------------ fresh processes


def test_after_virtual_gpus_are_turned_off_devshim_sees_the_machine_as_before():
    """torch keeps the vgpu device registered for the process (a pytest worker's later tests run
    there): once virtual GPUs are off again, devshim's view of the machine and its waits on the
    real accelerator are what they were before they were ever on."""
    result = run_python("""
        import torch
        import devshim as ds

        def view():
            return ds.num_gpus(), [str(ds.neutral_device(d)) for d in ds.devices()], ds.get_backend().accelerator_platform()

        before = view()
        ds.testing.virtual_devices(2)
        ds.synchronize(torch.ones(2, device=ds.try_gpu(1)))
        ds.testing.virtual_devices(0)
        assert view() == before, (before, view())
        x = torch.ones(64, 64, device=ds.try_gpu())  # the real GPU where there is one, else the CPU
        ds.synchronize(), ds.synchronize(x), ds.synchronize(ds.try_gpu())
        with ds.Timer() as timer:
            (x @ x).sum().item()
        assert timer.avg() >= 0 and ds.benchmark(lambda: x @ x, warmup=1, min_run_time=0.01).median > 0
        print("AS BEFORE")
    """, DEVSHIM_BACKEND="torch")
    assert result.returncode == 0, result.stderr
    assert "AS BEFORE" in result.stdout


def test_the_variable_turns_them_on_in_a_fresh_process():
    result = run_python("""
        import torch, devshim as ds
        assert ds.num_gpus() == 3 and ds.try_gpu(2) == torch.device("vgpu", 2)
        x = torch.ones(2, device=ds.try_gpu(2))
        print(ds.neutral_device(x), ds.to_numpy(x * 2).tolist(), torch.vgpu.device_count())
    """, DEVSHIM_BACKEND="torch", DEVSHIM_VIRTUAL_DEVICES="3")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["gpu:2", "[2.0,", "2.0]", "3"]


def test_nothing_virtual_is_imported_or_registered_unless_asked_for():
    result = run_python("""
        import sys, torch, devshim as ds
        x = torch.ones(3)
        ds.num_gpus(), ds.try_gpu(1), ds.try_all_gpus(), ds.devices(), ds.neutral_device(x)
        ds.to_device(x, "cpu"), ds.copy_if_needed(x, ds.try_gpu()), ds.to_numpy(x), ds.synchronize()
        print("devshim.backends.torch._virtual" in sys.modules, torch._C._get_privateuse1_backend_name(),
              hasattr(torch, "vgpu"))
    """, DEVSHIM_BACKEND="torch")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "privateuseone", "False"]


def test_devshim_info_lists_the_virtual_gpus():
    result = run_python("", "-m", "devshim", "info", "--json",
                        DEVSHIM_BACKEND="torch", DEVSHIM_VIRTUAL_DEVICES="2")
    assert result.returncode == 0, result.stderr
    info = next(fw for fw in json.loads(result.stdout)["frameworks"] if fw["name"] == "torch")
    assert info["status"] == "ok"
    assert [(d["device"], bool(d.get("virtual"))) for d in info["devices"]] == [
        ("cpu:0", False), ("gpu:0", True), ("gpu:1", True)]


def test_a_process_whose_out_of_tree_slot_is_taken_is_told_why():
    result = run_python("""
        import torch, devshim as ds
        torch.utils.rename_privateuse1_backend("npu")   # as an Ascend plug-in would
        try:
            ds.num_gpus()
        except ds.BackendError as err:
            print("REFUSED", err)
    """, DEVSHIM_BACKEND="torch", DEVSHIM_VIRTUAL_DEVICES="2")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("REFUSED torch's slot for an out-of-tree device (privateuse1) is "
                                    "already taken by 'npu'")
    assert "Unset DEVSHIM_VIRTUAL_DEVICES" in result.stdout


@pytest.mark.parametrize("version", ["2.9.1", "2.9.0+cpu", "1.13.1"])
def test_virtual_gpus_on_a_torch_older_than_the_tested_range_are_refused(version):
    # The check reads torch.__version__ when the vgpu device is first registered: set it first.
    result = run_python(f"""
        import sys, torch, devshim as ds
        torch.__version__ = {version!r}
        try:
            ds.num_gpus()
        except ds.BackendError as err:
            print("REFUSED", err)
        print(torch._C._get_privateuse1_backend_name())
    """, DEVSHIM_BACKEND="torch", DEVSHIM_VIRTUAL_DEVICES="2")
    assert result.returncode == 0, result.stderr
    refused, slot = result.stdout.strip().splitlines()
    assert refused.startswith(f"REFUSED devshim cannot present virtual GPUs on this torch ({version}): "
                              f"virtual GPUs need torch 2.10 to ")
    assert "Unset DEVSHIM_VIRTUAL_DEVICES" in refused
    assert slot == "privateuseone"   # refused before anything was registered


def test_virtual_gpus_on_a_torch_newer_than_the_tested_range_warn_once_and_work():
    result = run_python("""
        import warnings, torch, devshim as ds
        from devshim.backends.torch._virtual.registration import TESTED
        newest = TESTED[1]
        torch.__version__ = f"{newest[0]}.{newest[1] + 1}.0"
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")   # a second warning would show, not be filtered
            assert ds.num_gpus() == 2
            x = torch.ones(2, device=ds.try_gpu(1)) * 3
            ds.testing.virtual_devices(3)
            assert ds.num_gpus() == 3 and torch.ones(1, device="vgpu:2").device.index == 2
        ours = [w for w in caught if issubclass(w.category, ds.DevshimWarning)]
        print(len(ours), x.device, x.tolist())
        print(ours[0].message)
    """, DEVSHIM_BACKEND="torch", DEVSHIM_VIRTUAL_DEVICES="2")
    assert result.returncode == 0, result.stderr
    counted, message = result.stdout.strip().splitlines()
    assert counted == "1 vgpu:1 [3.0, 3.0]"
    assert message.startswith("devshim's virtual GPUs are tested on torch 2.10 to ")
    assert "this is torch 2." in message and "report it" in message


def test_the_tested_torch_range_covers_this_torch():
    from devshim.backends.torch._virtual.registration import TESTED

    release = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])
    assert TESTED[0] <= release <= TESTED[1]
