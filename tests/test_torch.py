"""What is specific to the torch backend: finding the accelerator, dtypes NumPy lacks,
the meta device, Parameters. Virtual GPUs: tests/test_torch_virtual.py."""

from __future__ import annotations

import json
import os
import types
import typing
import warnings

import numpy as np

import pytest

import devshim as ds
from devshim import settings
from helpers import run_python as run_fresh

torch = pytest.importorskip("torch")
# Real accelerators: devshim's virtual GPUs (torch device type "vgpu") do not count.
_accelerator = getattr(torch, "accelerator", None)
# torch before 2.6 has no torch.accelerator: CUDA's own count stands in.
_real = (_accelerator.is_available() and _accelerator.current_accelerator().type != "vgpu" if _accelerator
         else torch.cuda.device_count() > 0)
needs_accelerator = pytest.mark.skipif(not _real, reason="needs a GPU (or other accelerator) visible to torch")
needs_two = pytest.mark.skipif(
    not _real or (_accelerator.device_count() if _accelerator else torch.cuda.device_count()) < 2,
    reason="needs two accelerators visible to torch",
)
needs_torch_accelerator = pytest.mark.skipif(_accelerator is None, reason="torch.accelerator arrived in torch 2.6")
# Inside torch.compile, torch 2.13 and later trace devshim's own dispatch; on 2.4 to 2.12 Dynamo traces the torch
# backend's traced versions of the calls (tests/test_torch_compile_release.py), which walk dicts, lists, tuples
# and namedtuples and never restart a trace (docs/supported-versions.md).
_release = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])


@pytest.fixture
def bk():
    """The torch backend with real accelerators only, whatever DEVSHIM_VIRTUAL_DEVICES says
    (conftest restores it after); tests/test_torch_virtual.py covers the virtual GPUs."""
    ds.testing.virtual_devices(0)
    with ds.use_backend("torch") as adapter:
        yield adapter


def fake_accelerator(monkeypatch, platform, count):
    """Make torch.accelerator report ``count`` devices of ``platform`` (None: no accelerator)."""
    if _accelerator is None:
        pytest.skip("torch.accelerator arrived in torch 2.6")
    found = torch.device(platform) if platform else None
    monkeypatch.setattr(torch.accelerator, "current_accelerator",
                        lambda check_available=False: found)
    monkeypatch.setattr(torch.accelerator, "device_count", _initialises_the_accelerator)
    if platform:  # the device module's count, as torch.accelerator.device_count() asks it from torch 2.8
        monkeypatch.setattr(getattr(torch, platform), "device_count", lambda: count)
    monkeypatch.setattr(torch.accelerator, "current_device_index", lambda: 0)
    settings.reload()  # forget what the adapter found before


def _initialises_the_accelerator():
    raise AssertionError("torch.accelerator.device_count() initialises CUDA on torch 2.6 and 2.7 "
                         "(and raises on a CUDA build without a driver): count through the device module")


@pytest.mark.parametrize("platform", ["cuda", "xpu", "mps", "mtia"])
def test_the_accelerator_torch_reports_is_the_gpu(bk, monkeypatch, platform):
    fake_accelerator(monkeypatch, platform, 2)
    assert ds.num_gpus() == 2
    assert ds.try_gpu(1) == torch.device(platform, 1) and ds.try_gpu(2) == torch.device("cpu")
    assert ds.try_all_gpus() == [torch.device(platform, 0), torch.device(platform, 1)]
    assert ds.device("gpu:1") == ds.device(f"{platform}:1") == torch.device(platform, 1)
    d = bk.describe(torch.device(platform, 1))
    assert (d.kind, d.index, d.platform) == ("gpu", 1, platform)
    assert bk.accelerator_platform() == platform


@needs_torch_accelerator
def test_an_out_of_tree_accelerator_is_the_gpu_under_its_own_name(bk, monkeypatch):
    """A privateuse1 backend renamed by its plug-in (Ascend's "npu", say) is found by torch.accelerator."""
    fake = type("FakeDevice", (), {"type": "npu"})()
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda check_available=False: fake)
    monkeypatch.setattr(torch.accelerator, "device_count", _initialises_the_accelerator)
    npu = types.SimpleNamespace(device_count=lambda: 1)  # the module the plug-in registers
    find_module = torch.get_device_module
    monkeypatch.setattr(torch, "get_device_module", lambda kind=None: npu if kind == "npu" else find_module(kind))
    settings.reload()
    assert bk.accelerator_platform() == "npu" and ds.num_gpus() == 1
    from devshim._device import parse_spec

    assert tuple(parse_spec("npu:0")) == ("gpu", 0, "npu")  # registered as a spec


def test_finding_the_devices_starts_no_cuda():
    """Asking devshim what devices there are initialises no CUDA context: a process can still fork
    workers that use CUDA, and a CUDA build on a machine without a driver (what a plain
    `pip install torch` gives most machines without a GPU) finds no GPU rather than failing. On
    torch 2.6 and 2.7, torch.accelerator.device_count() initialises CUDA: every call failed there
    with "Found no NVIDIA driver on your system". A fresh process: nothing has started CUDA yet."""
    result = run_fresh("""
        import torch, devshim as ds
        found = ds.num_gpus(), ds.try_gpu(), ds.try_all_gpus(), ds.devices()
        ds.to_device(torch.ones(2), ds.cpu())
        started = torch.cuda.is_initialized()
        counts = [getattr(torch, kind).device_count() for kind in ("cuda", "xpu", "mtia")
                  if hasattr(getattr(torch, kind, None), "device_count")]
        print(started, found[0], max(counts + [int(torch.backends.mps.is_available())]))
    """, DEVSHIM_BACKEND="torch", DEVSHIM_VIRTUAL_DEVICES=os.environ.get("DEVSHIM_VIRTUAL_DEVICES", "0"))
    assert result.returncode == 0, result.stderr
    started, found, counted = result.stdout.split()[-3:]
    assert started == "False"
    if not settings.virtual_device_count():
        assert found == counted  # what the device module counts (NVML's count on CUDA)


def test_naming_another_platform_than_the_one_present_says_to_write_gpu(bk, monkeypatch):
    fake_accelerator(monkeypatch, "mps", 1)
    with pytest.raises(ds.DeviceUnavailableError, match="'gpu'"):
        ds.device("cuda:0")


def test_devshim_device_cpu_hides_the_accelerator_too(bk, monkeypatch, setenv):
    fake_accelerator(monkeypatch, "mps", 1)
    setenv("DEVSHIM_DEVICE", "cpu")
    assert ds.num_gpus() == 0 and ds.try_gpu() == torch.device("cpu")
    with pytest.raises(ds.DeviceUnavailableError, match="hidden by DEVSHIM_DEVICE=cpu"):
        ds.device(torch.device("mps", 0))


def test_without_torch_accelerator_the_old_checks_are_used(bk, monkeypatch):
    monkeypatch.delattr(torch, "accelerator", raising=False)  # (torch before 2.6 has none)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)  # (no CUDA GPU, on a CUDA machine too)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    if hasattr(torch.mps, "device_count"):  # (torch 2.4 has none: torch.backends.mps answers there)
        monkeypatch.setattr(torch.mps, "device_count", lambda: 1)
    if hasattr(torch, "xpu"):
        monkeypatch.setattr(torch.xpu, "is_available", lambda: False)
        monkeypatch.setattr(torch.xpu, "device_count", lambda: 0)
    settings.reload()
    assert bk.accelerator_platform() == "mps"
    assert ds.num_gpus() == 1 and ds.try_gpu() == torch.device("mps", 0)


def test_without_torch_accelerator_a_negative_count_is_no_device(bk, monkeypatch):
    """torch before 2.6 answers torch.mtia.device_count() == -1 on a machine without MTIA: that
    is no accelerator, not an MTIA device (it was mtia:0, and copies to it failed)."""
    monkeypatch.delattr(torch, "accelerator", raising=False)  # (torch before 2.6 has none)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    if hasattr(torch.mps, "device_count"):
        monkeypatch.setattr(torch.mps, "device_count", lambda: 0)
    if hasattr(torch, "xpu"):
        monkeypatch.setattr(torch.xpu, "device_count", lambda: 0)
    monkeypatch.setattr(torch.mtia, "device_count", lambda: -1)
    settings.reload()
    assert bk.accelerator_platform() is None
    assert ds.num_gpus() == 0 and ds.try_gpu() == torch.device("cpu")
    assert ds.to_device(torch.ones(2), ds.try_gpu()).device == torch.device("cpu")


def test_cuda_on_old_torch_counts_through_torch_cuda(bk, monkeypatch):
    monkeypatch.delattr(torch, "accelerator", raising=False)  # (torch before 2.6 has none)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 3)
    settings.reload()
    assert ds.num_gpus() == 3
    assert ds.try_all_gpus() == [torch.device("cuda", i) for i in range(3)]
    with pytest.raises(ds.DeviceUnavailableError, match="sees 3 GPUs"):
        ds.gpu(3)


def test_synchronize_waits_through_torch_accelerator(bk, monkeypatch):
    fake_accelerator(monkeypatch, "xpu", 2)
    calls = []
    monkeypatch.setattr(torch.accelerator, "synchronize", lambda device=None: calls.append(device))
    bk.synchronize(None)
    bk.synchronize(torch.device("xpu", 1))
    bk.synchronize(torch.device("cpu"))
    assert calls == [torch.device("xpu", 0), torch.device("xpu", 1), torch.device("xpu", 1)]


def test_no_cuda_context_means_nothing_to_wait_for(bk, monkeypatch):
    fake_accelerator(monkeypatch, "cuda", 1)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.accelerator, "synchronize", lambda device=None: pytest.fail("waited"))
    bk.synchronize(None)


# ------------------------------------------------------------ devices


def test_native_torch_devices_describe_to_neutral_ones(bk):
    assert ds.Device("cpu") == torch.device("cpu")
    assert torch.device("cpu") == ds.neutral_device(torch.ones(1))
    assert ds.Device("gpu", 1) == torch.device("cuda", 1)
    assert ds.Device("gpu", 1) != torch.device("cuda", 0)
    assert ds.Device("meta") == torch.device("meta")


def test_unsupported_torch_device_types_say_what_is_handled(bk):
    with pytest.raises(ds.InvalidDeviceError, match="cpu, meta and this machine's accelerator"):
        bk.describe(torch.device("hpu", 0))
    assert (ds.Device("cpu") == torch.device("hpu", 0)) is False  # comparing never raises


def test_a_numpy_array_sent_to_a_torch_device_becomes_a_torch_tensor_there():
    """A torch.device names torch: a NumPy array sent there becomes a torch tensor, on the CPU as on
    a GPU, whatever backend is selected (tests/devshim_conformance/test_contract_numpy_arrays.py: the rest)."""
    a = np.arange(3)
    with ds.use_backend("numpy"):
        for device in (torch.device("cpu"), ds.Device("cpu", 0, backend="torch")):
            moved = ds.to_device(a, device)
            assert isinstance(moved, torch.Tensor) and moved.device == torch.device("cpu")
            assert torch.equal(moved, torch.arange(3)) and ds.copy_if_needed(a, device) is not a
        assert type(ds.to_device(a, "cpu")) is np.ndarray
        if torch.cuda.is_available():
            assert ds.to_device(a, torch.device("cuda", 0)).device == torch.device("cuda", 0)
        else:
            with pytest.raises(ds.DeviceUnavailableError, match="real GPU"):
                ds.to_device(a, torch.device("cuda", 0))


def test_mixed_framework_nests_move_leaf_by_leaf():
    t, a = torch.arange(3), np.arange(3)
    moved = ds.to_device({"t": t, "a": a}, "cpu")
    assert isinstance(moved["t"], torch.Tensor) and isinstance(moved["a"], np.ndarray)
    assert moved["t"] is not t and moved["a"] is not a
    assert ds.same_device(t, a)
    assert ds.ensure_same_device(t, a) == torch.device("cpu")  # the first tensor's framework's device


def test_copy_if_needed_with_an_unindexed_native_device_is_exact(bk, monkeypatch):
    """torch.device("cuda") means the current GPU: the resolved target carries its index."""
    fake_accelerator(monkeypatch, "cuda", 2)
    assert ds.device(torch.device("cuda")) == torch.device("cuda", 0)


# ------------------------------------------------------------ copies and dtypes


def test_parameters_copy_as_tensors_with_gradient(bk):
    layer = torch.nn.Linear(2, 1)
    weight = ds.to_device(layer.weight, "cpu")
    assert ds.copy_if_needed(layer.weight, "cpu") is layer.weight
    weight.sum().backward()
    assert torch.equal(layer.weight.grad, torch.ones(1, 2))


def test_to_numpy_keeps_bfloat16_exactly_through_ml_dtypes(bk):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = torch.tensor([1.5, -2.25, float("inf")], dtype=torch.bfloat16)
    host = ds.to_numpy(x)
    assert host.dtype == ml_dtypes.bfloat16
    assert host.view(np.int16).tobytes() == x.view(torch.int16).numpy().tobytes()


def test_to_numpy_of_dtypes_numpy_lacks_says_what_to_convert_to(bk):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns that complex32 and quantization are experimental
        complex32 = torch.zeros(2, dtype=torch.complex32)
        quantized = torch.quantize_per_tensor(torch.ones(2), 0.1, 0, torch.qint8)
    with pytest.raises(ds.UnsupportedDtypeError, match=r"complex32.*x.to\(torch.complex64\)") as info:
        ds.to_numpy(complex32)
    assert isinstance(info.value, TypeError)
    with pytest.raises(ds.UnsupportedDtypeError, match=r"qint8.*dequantize\(\)"):
        ds.to_numpy(quantized)
    np.testing.assert_allclose(ds.to_numpy(quantized.dequantize()), [1.0, 1.0])


def test_to_numpy_without_ml_dtypes_is_the_same_clear_error(bk, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "ml_dtypes", None)
    with pytest.raises(ds.UnsupportedDtypeError, match=r"bfloat16.*ml_dtypes"):
        ds.to_numpy(torch.ones(2, dtype=torch.bfloat16))


def test_to_numpy_of_conjugate_and_grad_tensors(bk):
    z = torch.tensor([1 + 2j]).conj()
    np.testing.assert_array_equal(ds.to_numpy(z), [1 - 2j])
    w = torch.ones(2, requires_grad=True)
    np.testing.assert_array_equal(ds.to_numpy(w * 2), [2.0, 2.0])


def test_non_blocking_is_accepted(bk):
    x = torch.ones(4)
    y = ds.to_device(x, ds.try_gpu(), non_blocking=True)
    ds.synchronize(y)
    assert torch.equal(y.cpu(), x)


def test_a_meta_module_places_like_any_other_but_holds_no_data(bk):
    with torch.device("meta"):
        layer = torch.nn.Linear(3, 2)
    assert ds.neutral_device(layer.weight) == "meta" and ds.same_device(layer.weight, layer.bias)
    assert not ds.same_device(layer.weight, torch.ones(1))
    with pytest.raises(ds.DatalessTensorError, match="to_empty"):
        ds.to_device(layer.weight, "cpu")


# ------------------------------------------------------------ real hardware


@needs_accelerator
def test_on_a_real_accelerator_to_device_and_back(bk):
    x = torch.arange(6.0).reshape(2, 3)
    g = ds.to_device(x, ds.try_gpu())
    platform = bk.accelerator_platform()
    assert g.device.type == platform and ds.neutral_device(g) == "gpu:0" and ds.neutral_device(g) == f"{platform}:0"
    assert ds.copy_if_needed(g, "gpu") is g and ds.copy_if_needed(g, platform) is g
    assert ds.copy_if_needed(g, torch.device(platform)) is g
    np.testing.assert_array_equal(ds.to_numpy(g), x.numpy())
    assert not ds.same_device(x, g)
    with pytest.raises(ds.DeviceMismatchError):
        ds.ensure_same_device(x, g)


@needs_two
def test_on_two_real_accelerators(bk):
    X = torch.ones(2, 3, device=ds.try_gpu())
    Y = torch.rand(2, 3, device=ds.try_gpu(1))
    Z = ds.to_device(X, ds.try_gpu(1))
    assert ds.same_device(Y, Z) and torch.equal((Y + Z).cpu(), Y.cpu() + 1)
    assert ds.copy_if_needed(Z, ds.try_gpu(1)) is Z


# ------------------------------------------------------------ torch.compile


def graph_counter():
    """A torch.compile backend that keeps each graph Dynamo hands it (and runs it as traced), with
    the list it fills: a compile test asserts that something was traced, never only that the
    compiled call returned (Dynamo runs a frame it skips uncompiled, and that returns too)."""
    graphs = []

    def count_graphs(graph, example_inputs):
        graphs.append(graph)
        return graph.forward

    return graphs, count_graphs


def test_hot_paths_compile_with_fullgraph_and_return_what_eager_returns():
    torch = pytest.importorskip("torch")
    target = ds.try_gpu()

    def step(x, batch):
        d = ds.device_of(x)
        moved = ds.to_device(batch, d)
        kept = ds.copy_if_needed(x, d)
        return ds.to_device(x * 2, target), moved["a"] + kept, ds.same_device(x, moved)

    x, batch = torch.ones(3), {"a": torch.arange(3.0), "n": 1}
    eager = step(x, batch)  # devshim has met these types: the compiled path is lookups only
    graphs, count_graphs = graph_counter()
    compiled = torch.compile(step, fullgraph=True, backend=count_graphs)(x, batch)
    assert len(graphs) == 1  # traced, on every release: devshim's calls inside one graph
    assert compiled[2] is eager[2] is True
    for a, b in zip(compiled[:2], eager[:2]):
        assert torch.equal(a, b) and a.device == b.device


class _Pair(typing.NamedTuple):
    first: object
    second: object


@pytest.mark.skipif(_release < (2, 13), reason="a UserDict nest inside torch.compile needs torch 2.13 (before: refused "
                    "by name, tests/test_torch_compile_release.py)")
def test_compiled_nest_copies_compile_once_and_match_eager():
    """Nests as Hugging Face batches have them (a UserDict, a namedtuple, strings met for the first
    time inside the trace), skip_keys and non_blocking: one graph, no recompile on later calls."""
    torch = pytest.importorskip("torch")
    from collections import UserDict

    target = ds.try_gpu()
    graphs = []

    def count_graphs(graph, example_inputs):
        graphs.append(graph)
        return graph.forward

    def step(batch):
        moved = ds.to_device(batch, target, skip_keys="labels", non_blocking=True)
        return moved, ds.copy_if_needed(batch, target), ds.same_device(moved["ids"], moved["pair"])

    def make_batch(scale):
        return UserDict({"ids": torch.arange(3.0) * scale, "labels": torch.ones(2), "note": "first seen here",
                         "pair": _Pair(torch.zeros(1) + scale, 7)})

    scales = (1.0, 2.0, 3.0)
    wants = [step(make_batch(scale))[0] for scale in scales]  # eager first: devshim knows every type now
    compiled = torch.compile(step, fullgraph=True, backend=count_graphs)
    for scale, want in zip(scales, wants):
        batch = make_batch(scale)
        got, kept, together = compiled(batch)
        assert together is True and type(got) is UserDict and type(got["pair"]) is _Pair and type(kept) is UserDict
        assert got["labels"] is batch["labels"] and got["note"] == "first seen here" and got["pair"][1] == 7
        for a, b in ((got["ids"], want["ids"]), (got["pair"][0], want["pair"][0]), (kept["ids"], want["ids"])):
            assert torch.equal(a, b) and a.device == b.device == target
    assert len(graphs) == 1


def test_the_public_functions_themselves_compile_with_fullgraph():
    """ds.to_device and ds.copy_if_needed compiled as they are (`torch.compile(ds.to_device)`), with a
    spec string, keywords and a nest, to the host and to the meta device (a copy on any machine).

    From torch 2.13 Dynamo traces devshim's own dispatch: each call that copies traces a graph.
    Before 2.13 it cannot, and devshim has Dynamo run devshim's own frames as they are
    (`_traced.run_devshim_uncompiled`, docs/torch.md): compiled as they are, the public functions
    trace nothing (no graph at all: asserted, so a release that changes this is seen) and return
    what their eager calls return; the same calls inside a compiled function are traced there (one
    graph, asserted here too, and tests/test_torch_compile_release.py)."""
    torch = pytest.importorskip("torch")
    x = torch.zeros([1], dtype=torch.bfloat16)
    batch = {"x": x, "ids": [torch.arange(2)], "skip": x, "n": 1}
    meta = torch.device("meta")
    ds.to_device(x, "cpu")  # devshim has met the types: the compiled call is lookups only
    for fn in (ds.to_device, ds.copy_if_needed):
        graphs, count_graphs = graph_counter()
        compiled = torch.compile(fn, fullgraph=True, backend=count_graphs)
        got = compiled(x, "cpu")
        assert got.dtype == torch.bfloat16 and got.device == ds.device_of(fn(x, "cpu"))
        assert torch.equal(got, x)
        first = len(graphs)
        moved = compiled(batch, "cpu", non_blocking=True, skip_keys="skip")
        assert moved["skip"] is x and moved["n"] == 1 and torch.equal(moved["ids"][0], torch.arange(2))
        second = len(graphs)
        there = compiled(batch, meta, skip_keys="skip")
        assert there["skip"] is x and there["x"].device == meta == there["ids"][0].device and there["n"] == 1
        if _release >= (2, 13):  # traced: a graph for every call that copies
            assert first == 1 and len(graphs) > second, (fn.__name__, first, second, len(graphs))
            assert second > first or fn is ds.copy_if_needed  # (a batch already on the host: no op, no graph)
            continue
        assert graphs == [], f"torch {torch.__version__} traced {fn.__name__} compiled as it is"
        inside = torch.compile(lambda b, d, fn=fn: fn(b, d, skip_keys="skip"), fullgraph=True, backend=count_graphs)
        there = inside(batch, meta)
        assert len(graphs) == 1 and there["skip"] is x and there["x"].device == meta


_COMPILE_COLD = """
import json, torch, devshim as ds
{first}
class OwnTensor(torch.Tensor):
    pass
def step(x, w, batch):
    d = ds.device_of(x)
    moved = ds.to_device(batch, d)
    kept = ds.copy_if_needed(w, d)
    return ds.to_device(x * 2, "cpu"), moved["a"] + kept, ds.same_device(x, moved, w)
graphs = []
def count_graphs(graph, example_inputs):
    graphs.append(graph)
    return graph.forward
x = torch.ones(3).as_subclass(OwnTensor) if {own} else torch.ones(3)
args = (x, torch.nn.Parameter(torch.ones(3)), {{"a": torch.arange(3.0), "n": 1}})
compiled = torch.compile(step, fullgraph=True, backend=count_graphs)
try:
    got, refused = compiled(*args), ""
except Exception as err:
    got, refused = compiled(*args), repr(err)
again = compiled(*args)
want = step(*args)
print(json.dumps({{"refused": refused, "graphs": len(graphs), "same": got[2] is want[2] is again[2] is True
    and all(torch.equal(a, b) and torch.equal(a, c) and a.device == b.device == c.device
            and type(a) is type(b) for a, b, c in zip(got[:2], want[:2], again[:2]))}}))
"""


def _dynamo_traces_own_subclasses() -> bool:
    """Whether this torch's Dynamo traces ``x * 2`` on a torch.Tensor subclass of one's own (torch 2.4's cannot)."""
    class OwnTensor(torch.Tensor):
        pass

    try:
        torch.compile(lambda x: x * 2, fullgraph=True, backend="eager")(torch.ones(1).as_subclass(OwnTensor))
    except Exception:  # Dynamo's own refusal (torch._dynamo.exc.Unsupported, ...)
        return False
    return True


@pytest.mark.parametrize(("first", "own"), [("ds.try_gpu()", False), ("", False), ("ds.try_gpu()", True)],
                         ids=["devshim-called-before", "first-devshim-call", "own-subclass-first-met-in-trace"])
def test_first_compiled_call_meeting_torch_types_compiles_in_one_graph(first, own):
    """Fresh interpreters: devshim has never met the tensor classes before the compiled call (or,
    last case, meets the user's own subclass there). When devshim fills its tables inside the
    trace, Dynamo starts the trace over (torch 2.13 and later; before, Dynamo traces devshim's traced
    versions, which learn nothing): one graph, no error, no recompile on the second call."""
    pytest.importorskip("torch")
    if own and not _dynamo_traces_own_subclasses():
        pytest.skip(f"torch {torch.__version__}'s Dynamo cannot trace a tensor subclass of one's own (x * 2 fails "
                    f"without devshim)")
    result = run_fresh(_COMPILE_COLD.format(first=first, own=own))
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found == {"refused": "", "graphs": 1, "same": True}


@pytest.mark.skipif(_release < (2, 13), reason="before torch 2.13 no trace is started over: Dynamo traces devshim's "
                    "traced versions, which learn nothing")
def test_first_compiled_call_without_a_restartable_trace_says_what_to_do():
    """A torch whose Dynamo cannot start over (here: the torch adapter's restart made a no-op):
    the compile fails with FirstCallInTraceError saying to call devshim first; then it works."""
    pytest.importorskip("torch")
    first = "from devshim.backends.torch.core import TorchBackend\nTorchBackend.restart_trace = lambda self: None"
    result = run_fresh(_COMPILE_COLD.format(first=first, own=False))
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert "FirstCallInTraceError" in found["refused"] and "before compiling" in found["refused"]
    assert found["same"] is True
