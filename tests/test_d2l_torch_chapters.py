"""Three D2L PyTorch chapters, step by step with the book's own torch calls, on virtual GPUs:
"GPUs" (a lazy layer moved to the GPU), "Multiple GPUs from scratch" (LeNet with
nn.parallel.scatter and a hand-written allreduce) and "Concise Implementation for Multiple
GPUs" (ResNet-18 from lazy layers in nn.DataParallel). Data is small and synthetic.

They run in the pass with DEVSHIM_VIRTUAL_DEVICES set (tox's second torch pass): the book's
code asks torch for GPUs, so the virtual ones must exist before the chapter starts.
"""

from __future__ import annotations

import copy
import os
import sys

import pytest

import devshim as ds
from devshim import settings

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

pytestmark = pytest.mark.skipif(
    int(os.environ.get(settings.VIRTUAL_DEVICES_VAR, "0") or 0) < 2,
    reason=f"needs {settings.VIRTUAL_DEVICES_VAR}=2 or more (tox's second torch pass sets it)")


@pytest.fixture
def gpus(setenv):
    setenv("DEVSHIM_DEVICE", None)
    with ds.use_backend("torch"):
        devices = ds.try_all_gpus()
        assert [d.type for d in devices[:2]] == ["vgpu", "vgpu"]
        yield devices[:2]


# ------------------------------------------------------------ "GPUs": a lazy layer on the GPU


def test_gpus_chapter_lazy_linear_moves_and_materialises_on_the_gpu(gpus):
    X = torch.ones(2, 3, device=ds.try_gpu())
    net = nn.Sequential(nn.LazyLinear(1))
    net = net.to(device=ds.try_gpu())
    weight = net[0].weight
    assert isinstance(weight, nn.parameter.UninitializedParameter)
    assert weight.device == ds.try_gpu()

    Y = net(X)
    assert Y.device == ds.try_gpu() and Y.shape == (2, 1)
    assert net[0].weight is weight  # materialised in place, as on CUDA
    assert isinstance(weight, nn.Parameter) and not nn.parameter.is_lazy(weight)
    assert weight.shape == (1, 3) and weight.device == ds.try_gpu()
    expected = X.cpu() @ weight.detach().cpu().T + net[0].bias.detach().cpu()
    assert torch.allclose(Y.detach().cpu(), expected)
    Y.sum().backward()
    assert weight.grad.device == ds.try_gpu()
    assert torch.equal(weight.grad.cpu(), torch.full((1, 3), 2.0))


@pytest.mark.parametrize("make, shape", [
    (lambda: nn.LazyConv1d(4, 3), (2, 3, 8)),
    (lambda: nn.LazyConv2d(4, 3), (2, 3, 8, 8)),
    (lambda: nn.LazyConv3d(4, 3), (2, 3, 5, 5, 5)),
    (lambda: nn.LazyConvTranspose2d(4, 3), (2, 3, 6, 6)),
    (lambda: nn.LazyBatchNorm1d(), (4, 3)),
    (lambda: nn.LazyBatchNorm2d(), (4, 3, 5, 5)),
    (lambda: nn.LazyInstanceNorm2d(affine=True, track_running_stats=True), (2, 3, 5, 5)),
    (lambda: nn.LazyLinear(2), (4, 3)),
], ids=["conv1d", "conv2d", "conv3d", "convT2d", "bn1d", "bn2d", "instancenorm2d", "linear"])
def test_every_lazy_layer_materialises_on_a_virtual_gpu_as_on_the_cpu(gpus, make, shape):
    torch.manual_seed(0)
    on_cpu = make()
    torch.manual_seed(0)
    on_gpu = make().to(gpus[1])
    for tensor in (*on_gpu.parameters(), *on_gpu.buffers()):
        assert tensor.device == gpus[1]
    assert all(nn.parameter.is_lazy(p) for p in on_gpu.parameters())
    X = torch.randn(shape)
    torch.manual_seed(1)
    expected = on_cpu(X)
    torch.manual_seed(1)
    got = on_gpu(X.to(gpus[1]))
    assert got.device == gpus[1]
    assert torch.allclose(got.detach().cpu(), expected.detach(), atol=1e-6)
    for (name, a), (_, b) in zip(on_cpu.state_dict().items(), on_gpu.state_dict().items()):
        assert b.device == gpus[1] and not nn.parameter.is_lazy(b), name
        assert torch.allclose(b.cpu().float(), a.float(), atol=1e-6), name


def test_lazy_modules_move_between_devices_before_their_first_forward(gpus):
    net = nn.LazyLinear(2, device=gpus[1])  # torch's factory argument
    assert net.weight.device == gpus[1] and nn.parameter.is_lazy(net.weight)
    net.to(gpus[0])
    assert net.weight.device == gpus[0] and nn.parameter.is_lazy(net.weight)
    twin = copy.deepcopy(net)
    assert twin.weight.device == gpus[0] and nn.parameter.is_lazy(twin.weight)
    net.to("cpu")
    assert net.weight.device.type == "cpu" and nn.parameter.is_lazy(net.weight)
    assert net(torch.ones(1, 5)).shape == (1, 2)
    with pytest.raises(ds.UnbuiltModelError):
        ds.place_model(nn.Sequential(nn.LazyLinear(1)).to(gpus[0]), gpus[1])


# ------------------------------------------------------------ "Multiple GPUs from scratch"


def lenet_params(seed=0):
    torch.manual_seed(seed)
    scale = 0.01
    return [torch.randn(size=(20, 1, 3, 3)) * scale, torch.zeros(20),
            torch.randn(size=(50, 20, 5, 5)) * scale, torch.zeros(50),
            torch.randn(size=(800, 128)) * scale, torch.zeros(128),
            torch.randn(size=(128, 10)) * scale, torch.zeros(10)]


def lenet(X, params):
    h1 = F.avg_pool2d(input=F.relu(F.conv2d(input=X, weight=params[0], bias=params[1])),
                      kernel_size=(2, 2), stride=(2, 2))
    h2 = F.avg_pool2d(input=F.relu(F.conv2d(input=h1, weight=params[2], bias=params[3])),
                      kernel_size=(2, 2), stride=(2, 2))
    h2 = h2.reshape(h2.shape[0], -1)
    h3 = F.relu(torch.mm(h2, params[4]) + params[5])
    return torch.mm(h3, params[6]) + params[7]


loss = nn.CrossEntropyLoss(reduction="none")


def get_params(params, device):
    new_params = [p.to(device) for p in params]
    for p in new_params:
        p.requires_grad_()
    return new_params


def allreduce(data):
    for i in range(1, len(data)):
        data[0][:] += data[i].to(data[0].device)
    for i in range(1, len(data)):
        data[i][:] = data[0].to(data[i].device)


def split_batch(X, y, devices):
    assert X.shape[0] == y.shape[0]
    return nn.parallel.scatter(X, devices), nn.parallel.scatter(y, devices)


def sgd(params, lr, batch_size):
    with torch.no_grad():
        for param in params:
            param -= lr * param.grad / batch_size
            param.grad.zero_()


def train_batch(X, y, device_params, devices, lr):
    X_shards, y_shards = split_batch(X, y, devices)
    ls = [loss(lenet(X_shard, device_W), y_shard).sum()
          for X_shard, y_shard, device_W in zip(X_shards, y_shards, device_params)]
    for l in ls:  # noqa: E741 (the book's name)
        l.backward()
    with torch.no_grad():
        for i in range(len(device_params[0])):
            allreduce([device_params[c][i].grad for c in range(len(devices))])
    grads = [[p.grad.clone() for p in params] for params in device_params]
    for param in device_params:
        sgd(param, lr, X.shape[0])
    return grads


def batches(count=3, size=16, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [(torch.rand(size, 1, 28, 28, generator=generator),
             torch.randint(0, 10, (size,), generator=generator)) for _ in range(count)]


def test_scatter_and_allreduce_as_the_chapter_shows_them(gpus):
    data = torch.arange(20).reshape(4, 5)
    split = nn.parallel.scatter(data, gpus)
    assert [s.device for s in split] == gpus
    assert torch.equal(split[0].cpu(), data[:2]) and torch.equal(split[1].cpu(), data[2:])

    data = [torch.ones((1, 2), device=ds.try_gpu(i)) * (i + 1) for i in range(2)]
    allreduce(data)
    assert [d.device for d in data] == gpus
    assert all(torch.equal(d.cpu(), torch.full((1, 2), 3.0)) for d in data)

    new_params = get_params(lenet_params(), ds.try_gpu(0))
    assert new_params[1].device == gpus[0] and new_params[1].requires_grad and new_params[1].grad is None


@pytest.mark.parametrize("num_gpus", [1, 2])
def test_lenet_from_scratch_on_virtual_gpus_has_the_cpus_gradients(gpus, num_gpus):
    devices = [ds.try_gpu(i) for i in range(num_gpus)]
    device_params = [get_params(lenet_params(), d) for d in devices]
    cpu_params = get_params(lenet_params(), torch.device("cpu"))
    lr = 0.2
    for X, y in batches():
        grads = train_batch(X, y, device_params, devices, lr)
        ls = loss(lenet(X, cpu_params), y).sum()
        ls.backward()
        cpu_grads = [p.grad.clone() for p in cpu_params]
        sgd(cpu_params, lr, X.shape[0])
        for device, device_grads in zip(devices, grads):  # every GPU holds the summed gradient
            for got, expected in zip(device_grads, cpu_grads):
                assert got.device == device
                assert torch.allclose(got.cpu(), expected, rtol=1e-4, atol=1e-6)
    for params in device_params:
        for got, expected in zip(params, cpu_params):
            assert torch.allclose(got.detach().cpu(), expected.detach(), rtol=1e-4, atol=1e-6)


# ------------------------------------------------------------ "Concise Implementation for Multiple GPUs"


class Residual(nn.Module):
    """The book's residual block, from lazy layers."""

    def __init__(self, num_channels, use_1x1conv=False, strides=1):
        super().__init__()
        self.conv1 = nn.LazyConv2d(num_channels, kernel_size=3, padding=1, stride=strides)
        self.conv2 = nn.LazyConv2d(num_channels, kernel_size=3, padding=1)
        self.conv3 = nn.LazyConv2d(num_channels, kernel_size=1, stride=strides) if use_1x1conv else None
        self.bn1 = nn.LazyBatchNorm2d()
        self.bn2 = nn.LazyBatchNorm2d()

    def forward(self, X):
        Y = F.relu(self.bn1(self.conv1(X)))
        Y = self.bn2(self.conv2(Y))
        if self.conv3:
            X = self.conv3(X)
        Y += X
        return F.relu(Y)


def resnet18(num_classes, in_channels=1):
    def resnet_block(in_channels, out_channels, num_residuals, first_block=False):
        blk = []
        for i in range(num_residuals):
            if i == 0 and not first_block:
                blk.append(Residual(out_channels, use_1x1conv=True, strides=2))
            else:
                blk.append(Residual(out_channels))
        return nn.Sequential(*blk)

    net = nn.Sequential(nn.Conv2d(in_channels, 64, kernel_size=3, stride=1, padding=1),
                        nn.BatchNorm2d(64), nn.ReLU())
    net.add_module("resnet_block1", resnet_block(64, 64, 2, first_block=True))
    net.add_module("resnet_block2", resnet_block(64, 128, 2))
    net.add_module("resnet_block3", resnet_block(128, 256, 2))
    net.add_module("resnet_block4", resnet_block(256, 512, 2))
    net.add_module("global_avg_pool", nn.AdaptiveAvgPool2d((1, 1)))
    net.add_module("fc", nn.Sequential(nn.Flatten(), nn.Linear(512, num_classes)))
    return net


def train(net, num_gpus, lr, data):
    devices = [ds.try_gpu(i) for i in range(num_gpus)]

    def init_weights(module):
        if type(module) in [nn.Linear, nn.Conv2d]:
            nn.init.normal_(module.weight, std=0.01)

    net.apply(init_weights)
    net = nn.DataParallel(net, device_ids=devices)
    trainer = torch.optim.SGD(net.parameters(), lr)
    loss = nn.CrossEntropyLoss()
    net.train()
    losses = []
    for X, y in data:
        trainer.zero_grad()
        X, y = X.to(devices[0]), y.to(devices[0])
        out = net(X)
        assert out.device == devices[0] and out.shape == (X.shape[0], 10)
        l = loss(out, y)  # noqa: E741 (the book's name)
        l.backward()
        trainer.step()
        losses.append(l.item())
    return net, losses


def test_resnet18_from_lazy_layers_on_one_then_two_virtual_gpus_with_data_parallel(gpus):
    torch.manual_seed(0)
    net = resnet18(10)
    data = batches(count=2, size=4)
    data = [(F.interpolate(X, size=(8, 8)), y) for X, y in data]  # tiny images: seconds, not minutes
    wrapped, losses = train(net, 1, 0.1, data)  # the book trains on one GPU first: lazy layers materialise
    assert wrapped.device_ids == [0] and all(p.device == gpus[0] for p in net.parameters())
    assert not any(nn.parameter.is_lazy(p) for p in net.parameters())
    before = [p.detach().clone() for p in net.parameters()]
    wrapped, losses = train(net, 2, 0.1, data)
    assert wrapped.device_ids == [0, 1] and wrapped.src_device_obj == gpus[0]
    assert all(torch.isfinite(torch.tensor(losses)))
    assert all(p.device == gpus[0] for p in net.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, net.parameters()))  # gradients came back


def test_data_parallel_sums_the_replicas_gradients_into_the_module(gpus):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 3))
    cpu = copy.deepcopy(net)
    X, y = torch.randn(8, 5), torch.randint(0, 3, (8,))
    data_parallel = nn.DataParallel(net, device_ids=gpus, output_device=gpus[1]).to(gpus[0])
    out = data_parallel(X)  # CPU input, scattered; the output lands on output_device
    assert out.device == gpus[1]
    nn.CrossEntropyLoss()(out, y.to(gpus[1])).backward()
    nn.CrossEntropyLoss()(cpu(X), y).backward()
    for got, expected in zip(net.parameters(), cpu.parameters()):
        assert got.grad.device == gpus[0]
        assert torch.allclose(got.grad.cpu(), expected.grad, rtol=1e-5, atol=1e-7)


def test_the_torch_parallel_primitives_split_replicate_and_gather(gpus):
    from torch.nn.parallel import gather, parallel_apply, replicate, scatter

    net = nn.Linear(3, 2).to(gpus[0])
    X = torch.randn(6, 3)
    replicas = replicate(net, gpus)
    assert [r.weight.device for r in replicas] == gpus
    shards = scatter(X, gpus)
    outputs = parallel_apply(replicas, shards)
    assert [o.device for o in outputs] == gpus
    for where in (gpus[1], -1):
        gathered = gather(outputs, where)
        assert gathered.device == (gpus[1] if where != -1 else torch.device("cpu"))
        assert torch.allclose(gathered.detach().cpu(), net.cpu()(X).detach(), atol=1e-6)
        net.to(gpus[0])
    with pytest.raises(ZeroDivisionError):
        parallel_apply([lambda x: 1 / 0, lambda x: x], shards)  # a replica's error surfaces, as on CUDA
    assert torch.allclose(nn.parallel.data_parallel(net, X.to(gpus[0]), gpus).cpu(),
                          net.cpu()(X), atol=1e-6)


def test_data_parallel_refuses_rather_than_running_on_one_device(gpus, monkeypatch):
    # A torch whose device discovery devshim does not answer: DataParallel would end up with
    # no devices and run the whole batch on one.
    monkeypatch.setattr(sys.modules["torch.nn.parallel.data_parallel"], "_get_available_device_type",
                        lambda: None)
    with pytest.raises(ds.VirtualDataParallelError, match="ds.split_batch"):
        nn.DataParallel(nn.Linear(2, 2).to(gpus[0]), device_ids=gpus)


# ------------------------------------------------------------ limits


@pytest.mark.parametrize("count", [129, 256, 300])
def test_more_virtual_gpus_than_torch_can_index_is_refused_with_the_range(gpus, count):
    ds.testing.virtual_devices(count)
    with pytest.raises(ds.VirtualDeviceCountError, match="takes 0 to 128"):
        ds.num_gpus()
    with pytest.raises(ds.VirtualDeviceCountError, match="takes 0 to 128"):
        ds.try_gpu()
    ds.testing.virtual_devices(128)
    assert ds.num_gpus() == 128 and ds.try_gpu(127) == torch.device("vgpu", 127)
