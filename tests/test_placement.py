"""What is specific to each framework's model placement (the conformance suite has the rest)."""

from __future__ import annotations

import numpy as np
import pytest

import devshim as ds
from helpers import run_python

# ------------------------------------------------------------ torch


@pytest.fixture
def torch():
    return pytest.importorskip("torch")


def test_torch_tied_weights_stay_tied_and_non_persistent_buffers_move(torch):
    class Tied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(5, 3)
            self.out = torch.nn.Linear(3, 5, bias=False)
            self.out.weight = self.embed.weight  # tied
            self.register_buffer("scale", torch.ones(3), persistent=False)

    net = ds.place_model(Tied(), "meta")  # (PyTorch's own .to("meta") unties them)
    assert net.out.weight is net.embed.weight
    assert net.scale.is_meta and "scale" not in net.state_dict()
    assert ds.model_devices(net) == {torch.device("meta")}  # the framework's own devices


def test_torch_a_tied_weight_cannot_be_split_over_two_devices(torch):
    net = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 3))
    net[1].weight = net[0].weight
    with pytest.raises(ds.UnsupportedPlacementError, match="0.weight and 1.weight are one tied parameter"):
        ds.place_model(net, {"0": "cpu", "1": "meta"})


def test_torch_a_meta_submodule_makes_the_model_spread_and_names_the_parameters(torch):
    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    net[2].to("meta")
    with pytest.raises(ds.DeviceMismatchError, match=r"cpu:0: 0.weight, 0.bias; meta:0: 2.weight, 2.bias"):
        ds.model_device(net)
    assert ds.model_devices(net) == {torch.device("cpu"), torch.device("meta")}


def test_torch_lazy_layers_have_no_device_until_their_first_forward(torch):
    net = torch.nn.Sequential(torch.nn.LazyLinear(4))
    for ask in (ds.model_device, lambda n: ds.place_model(n, "cpu")):
        with pytest.raises(ds.UnbuiltModelError, match="Run one forward pass"):
            ask(net)
    net(torch.ones(2, 3))
    assert ds.model_device(net) == torch.device("cpu")
    with pytest.raises(ds.UnbuiltModelError, match="no parameters or buffers"):
        ds.model_device(torch.nn.ReLU())


def test_torch_a_device_map_copies_inputs_at_the_seams_and_gradients_flow_back(torch):
    """Chainer's ParallelMLP through place_model: the split model computes what the whole one does."""
    torch.manual_seed(0)
    whole = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    split = ds.replicate(whole, ["cpu"])[0]
    devices = ds.try_all_gpus() * 2
    ds.place_model(split, {"0": devices[0], "2": devices[1]})
    x = torch.randn(5, 4)
    out_whole, out_split = whole(x), split(ds.to_device(x, devices[0]))
    torch.testing.assert_close(ds.to_device(out_split, "cpu"), out_whole)
    out_whole.sum().backward()
    out_split.sum().backward()
    for a, b in zip(whole.parameters(), split.parameters()):
        torch.testing.assert_close(ds.to_device(b.grad, "cpu"), a.grad)


def test_torch_hooks_are_removable_and_forward_is_untouched(torch):
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 3))
    forward = net[1].forward
    ds.place_model(net, {"1": "meta"})
    assert len(net[1]._forward_pre_hooks) == 1 and net[1].forward == forward
    out = net(torch.ones(2, 4))  # the hook copies the CPU activations to meta
    assert out.is_meta
    ds.unplace(net)
    assert len(net[1]._forward_pre_hooks) == 0
    with pytest.raises(RuntimeError):
        net(torch.ones(2, 4))  # without the hook PyTorch refuses the mixed devices
    with pytest.raises(ds.UnsupportedPlacementError, match="ds.unplace"):
        ds.place_model(net, {"1": "meta"}) and ds.replicate(net, ["cpu"])


def test_a_torch_device_is_torchs_where_no_tensor_says_so_whatever_backend_is_selected(torch):
    """An empty nest (a block's kwargs, copied by the hooks above) or a leaf with a .to method:
    torch resolves torch.device("meta"), which the jax or cupy backend could not name."""

    class Leaf:
        def to(self, device):
            self.got = device
            return self

    for name in ds.available_backends():
        with ds.use_backend(name):
            assert ds.to_device({}, torch.device("meta")) == {}
            assert ds.copy_if_needed([], torch.device("meta")) == []
            assert ds.to_device([Leaf()], torch.device("meta"))[0].got == torch.device("meta"), name


def test_torch_balanced_spreads_children_by_parameter_bytes(torch):
    net = torch.nn.Sequential(torch.nn.Linear(100, 100), torch.nn.Linear(100, 2), torch.nn.Linear(2, 2))
    ds.place_model(net, "balanced")
    devices = ds.try_all_gpus(backend="torch")  # the model's framework's devices, whatever backend is selected
    placed = [ds.model_device(child) for child in net]
    assert placed[0] == devices[0] and torch.ones(1).to(placed[0]).device == devices[0]
    if len(devices) > 1:
        assert placed[1] == placed[2] != placed[0]  # the big layer alone; the small ones together


# ------------------------------------------------------------ Gluon


@pytest.fixture
def gluon():
    pytest.importorskip("mxnet")
    from mxnet import gluon

    return gluon


def test_gluon_initialises_on_the_device_or_resets_its_context(gluon):
    import mxnet as mx

    net = gluon.nn.Dense(2, in_units=3)
    net = ds.place_model(net, mx.cpu(3))  # uninitialised: initialize(ctx=...)
    assert ds.model_device(net) == mx.cpu(3)  # MXNet's own Context
    assert ds.neutral_device(ds.model_device(net)) == ds.Device("cpu", 3)
    weight = net.weight.data().asnumpy()
    net = ds.place_model(net, mx.cpu(0))  # initialised: reset_ctx keeps the values
    assert ds.model_device(net) == mx.cpu(0) and np.array_equal(net.weight.data().asnumpy(), weight)


def test_gluon_deferred_initialisation_is_an_unbuilt_model(gluon):
    import mxnet as mx

    net = ds.place_model(gluon.nn.Dense(2), mx.cpu())
    with pytest.raises(ds.UnbuiltModelError, match="run one forward pass"):
        ds.model_device(net)
    from mxnet import npx

    net((mx.np if npx.is_np_array() else mx.nd).ones((1, 3)))  # whichever front-end this thread uses
    assert ds.model_device(net) == mx.cpu()


def test_gluon_refuses_a_device_map_and_says_how_to_split(gluon):
    net = gluon.nn.Sequential()
    net.add(gluon.nn.Dense(2, in_units=3))
    net.initialize()
    with pytest.raises(ds.UnsupportedPlacementError, match="copy at the seams"):
        ds.place_model(net, {"0": "cpu"})


# ------------------------------------------------------------ Keras


def test_keras_clones_onto_another_device_and_refuses_subclassed_models():
    result = run_python("""
        import numpy as np, keras
        import devshim as ds
        ds.num_gpus()  # the virtual GPUs exist before Keras makes its first variable
        m = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
        clone = ds.place_model(m, ds.gpu(1))
        x = np.ones((2, 3), "float32")
        with ds.gpu(1):
            same = np.allclose(clone(x).numpy(), m(x).numpy())
        where = lambda model: ds.neutral_device(ds.model_device(model))
        assert ds.model_device(clone) == ds.gpu(1)  # TensorFlow's own device, a scope
        print(where(clone), where(m), clone is not m, same, ds.place_model(clone, ds.gpu(1)) is clone)
        unbuilt = keras.Sequential([keras.layers.Dense(2)])
        try:
            ds.model_device(unbuilt)
        except ds.UnbuiltModelError:
            print("unbuilt")
        print(where(ds.place_model(unbuilt, ds.gpu(0), input_shape=(None, 3))))
        class Sub(keras.Model):
            def __init__(self):
                super().__init__()
                self.d = keras.layers.Dense(2)
            def call(self, x):
                return self.d(x)
        s = Sub(); s(x)
        for attempt in (lambda: ds.place_model(s, ds.gpu(1)), lambda: ds.place_model(m, {"dense": ds.gpu(1)})):
            try:
                attempt()
            except ds.UnsupportedPlacementError as err:
                print("refused:", str(err).split(":")[0].split(",")[0])
    """, DEVSHIM_BACKEND="tensorflow", DEVSHIM_VIRTUAL_DEVICES="2") if _has("tensorflow") else pytest.skip("no tensorflow")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["gpu:1", "cpu:0", "True", "True", "True"]
    assert lines[1:3] == ["unbuilt", "gpu:0"]
    assert lines[3].startswith("refused: This Sub is a subclassed Keras model")
    assert lines[4].startswith("refused: Keras places a layer's weights when the layer is built")


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None
