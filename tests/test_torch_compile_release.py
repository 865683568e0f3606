"""devshim inside torch.compile on every torch release. torch 2.13 and later trace devshim's own
calls (tests/test_torch.py checks what they compile to); on 2.4 to 2.12, whose Dynamo cannot trace
devshim's dispatch, Dynamo traces the torch backend's traced versions of ds.device_of,
neutral_device, to_device, copy_if_needed and same_device (devshim/backends/torch/_traced.py), and
refuses by name (ds.TorchCompileReleaseError) the calls and nests that have none there. The calls
without a tensor (ds.try_gpu, ...) run in plain Python inside a trace on every release. Every test
here but the refusals runs on every torch, and compares the compiled call with the eager one. The
torch-floor (2.4.1) and torch-vgpu-floor (2.10, on two virtual GPUs) envs run this file."""

from __future__ import annotations

import collections
import inspect
import json
import typing

import pytest

import devshim as ds
from devshim import api
from devshim.backends import dispatch
from devshim.backends.torch import _traced as traced
from helpers import run_python

torch = pytest.importorskip("torch")

_RELEASE = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])
before_compile_support = pytest.mark.skipif(
    _RELEASE >= dispatch.COMPILE_SUPPORT, reason="torch 2.13 and later trace devshim's own calls (tests/test_torch.py)")


def compiled(fn):
    """``fn`` compiled whole (``fullgraph=True``), graphs run as traced (no code generated); its
    ``graphs`` list holds each graph Dynamo traced, so a test asserts that something was traced
    (a skipped frame runs uncompiled, and returns what the eager call returns too)."""
    graphs = []

    def count_graphs(graph, example_inputs):
        graphs.append(graph)
        return graph.forward

    done = torch.compile(fn, fullgraph=True, backend=count_graphs)
    done.graphs = graphs
    return done


class Pair(typing.NamedTuple):
    first: object
    second: object


# ------------------------------------------------------------------ fresh interpreters

# {imports}: devshim's public functions imported before torch (isort's order) or after it.
# {first}: a devshim call before compiling, or none (the compiled function holds the first).
_COMPILE = """
import json
{imports}
import devshim as ds
{first}
def step(x, batch):
    d = ds.device_of(x)
    kept = ds.copy_if_needed(batch, d)
    moved = ds.to_device(batch, d, skip_keys="skip")
    return ds.to_device(x * 2, "cpu"), kept, moved, ds.same_device(x, moved)
graphs = []
def count_graphs(graph, example_inputs):
    graphs.append(graph)
    return graph.forward
compiled = torch.compile(step, fullgraph={fullgraph}, backend=count_graphs)
def batch():
    return {{"a": torch.arange(2.0), "skip": torch.ones(1), "n": 1, "ids": [torch.zeros(1), "t"]}}
def seen(result, given):
    doubled, kept, moved, together = result
    return {{"doubled": doubled.tolist(), "kept_is_batch": kept is given, "moved_is_new": moved is not given,
             "a_copied": moved["a"] is not given["a"], "skip_kept": moved["skip"] is given["skip"],
             "ids": [moved["ids"][0].tolist(), moved["ids"][1]], "n": moved["n"], "together": together}}
first, second = batch(), batch()
got, again = seen(compiled(torch.ones(3), first), first), seen(compiled(torch.ones(3), second), second)
print(json.dumps({{"got": got, "again": again, "eager": seen(step(torch.ones(3), first), first),
                   "graphs": len(graphs)}}))
"""

IMPORTS = {"torch-first": "import torch", "devshim-api-first": "from devshim import device_of\nimport torch"}
FIRST = {"devshim-called-before": "ds.try_gpu()", "first-devshim-call-compiled": ""}
CASES = [pytest.param(imports, first, fullgraph, id=f"{imports}-{first}-fullgraph={fullgraph}")
         for imports in IMPORTS for first in FIRST for fullgraph in (True, False)]


@pytest.mark.parametrize(("imports", "first", "fullgraph"), CASES)
def test_devshim_inside_torch_compile_compiles_in_one_graph_on_every_release(imports, first, fullgraph):
    """A fresh interpreter each: what Dynamo and devshim learn stays in a process. One graph for
    two batches (no compile again), and what the eager call returns."""
    code = _COMPILE.format(imports=IMPORTS[imports], first=FIRST[first], fullgraph=fullgraph)
    result = run_python(code, DEVSHIM_BACKEND="torch")
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found["got"] == found["again"] == found["eager"] == {
        "doubled": [2.0, 2.0, 2.0], "kept_is_batch": True, "moved_is_new": True, "a_copied": True,
        "skip_kept": True, "ids": [[0.0], "t"], "n": 1, "together": True}
    assert found["graphs"] == 1


# ------------------------------------------------------------------ what the compiled calls return


def test_to_device_of_a_tensor_is_a_new_tensor_there_and_keeps_the_gradient():
    x = torch.ones(3, requires_grad=True)
    target = ds.device_of(x)

    def step(x):
        moved = ds.to_device(x, target)
        return moved, (moved * 2).sum()

    step = compiled(step)
    moved, total = step(x)
    assert len(step.graphs) == 1
    total.backward()
    assert moved is not x and moved.device == x.device and torch.equal(moved, x.detach())
    assert x.grad is not None and torch.equal(x.grad, torch.full((3,), 2.0))
    with torch.no_grad():
        moved.add_(1)
    assert torch.equal(x.detach(), torch.ones(3))  # new storage: the original is untouched


def test_copy_if_needed_returns_a_tensor_and_a_dict_already_there_as_themselves():
    x = torch.ones(2)
    batch = {"x": x, "pair": Pair(torch.zeros(1), "label"), "ids": [torch.arange(2), 3]}

    def step(x, batch):
        d = ds.device_of(x)
        return ds.copy_if_needed(x, d), ds.copy_if_needed(batch, d), ds.copy_if_needed(batch, d, non_blocking=True), x + 1

    step = compiled(step)
    kept_x, kept_batch, kept_async, _ = step(x, batch)
    assert kept_x is x and kept_batch is batch and kept_async is batch and len(step.graphs) == 1


def test_a_compiled_function_that_traces_no_op_runs_devshim_as_it_is():
    """Nothing to copy, so no op is traced: Dynamo runs such a function uncompiled (before torch
    2.13 under fullgraph=True too) and meets devshim's functions outside a trace."""
    batch = {"x": torch.ones(2), "n": 1}

    def step(batch):
        return ds.copy_if_needed(batch, ds.device_of(batch["x"])), ds.neutral_device(batch["x"])

    step = compiled(step)
    kept, where = step(batch)
    assert kept is batch and where == ds.neutral_device(batch["x"]) and step.graphs == []


def test_to_device_of_nests_matches_eager_with_skip_keys_and_leaves_that_are_no_tensor():
    x = torch.arange(3.0)
    target = ds.device_of(x)

    def make_batch():
        return {"x": x, "labels": torch.ones(2), "note": "kept", "n": 7, "none": None,
                "seq": [x, (x, "t")], "pair": Pair(x * 1, 2), "inner": {"labels": x, "y": x}}

    def step(batch):
        return ds.to_device(batch, target, skip_keys=["labels", "unknown"], non_blocking=True)

    batch = make_batch()
    traced = compiled(step)
    got, want = traced(batch), step(make_batch())
    assert len(traced.graphs) == 1
    assert type(got) is dict and list(got) == list(want)
    assert got["labels"] is batch["labels"] and got["inner"]["labels"] is batch["inner"]["labels"]  # skipped
    assert (got["note"], got["n"], got["none"]) == ("kept", 7, None)
    assert type(got["seq"]) is list and type(got["seq"][1]) is tuple and got["seq"][1][1] == "t"
    assert type(got["pair"]) is Pair and got["pair"].second == 2
    for new in (got["x"], got["seq"][0], got["seq"][1][0], got["pair"].first, got["inner"]["y"]):
        assert new is not x and torch.equal(new, x) and new.device == target  # each a copy, as eagerly


def test_a_ds_device_is_a_target_and_a_leaf_inside_a_trace():
    x = torch.ones(2)
    where = ds.neutral_device(x)  # a ds.Device, not torch's own device object

    def step(x, batch):
        return ds.to_device(batch, where), ds.copy_if_needed(x, where)

    batch = {"x": x, "where": where}
    step = compiled(step)
    moved, kept = step(x, batch)
    assert len(step.graphs) == 1 and moved["where"] is where and moved["x"] is not x and torch.equal(moved["x"], x) and kept is x


_DEVICE_LEAF_BESIDE = """
import importlib, json
import torch
import devshim as ds
other = importlib.import_module("{other}")
ds.to_device([other.ones(1)], "cpu")  # {other}'s adapter is loaded
x = torch.ones(2)
where = ds.neutral_device(x)
graphs = []
def count_graphs(graph, example_inputs):
    graphs.append(graph)
    return graph.forward
step = torch.compile(lambda x, batch: ds.to_device(batch, where), fullgraph=True, backend=count_graphs)
moved = step(x, {{"x": x, "where": where}})
print(json.dumps([moved["where"] is where, moved["x"] is not x and torch.equal(moved["x"], x), len(graphs)]))
"""


@pytest.mark.parametrize("other", ["jax.numpy", "tensorflow"])
def test_a_ds_device_leaf_traces_where_a_backend_that_cannot_tell_tensors_by_class_is_loaded(other):
    """JAX's and TensorFlow's adapters cannot say from a class alone that it holds no tensor: with one
    loaded, a ds.Device leaf met first inside the trace was asked of them through a lock, which
    Dynamo cannot enter (the test above failed after any test that loaded the JAX adapter)."""
    pytest.importorskip(other)
    result = run_python(_DEVICE_LEAF_BESIDE.format(other=other), DEVSHIM_BACKEND="torch")
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == [True, True, 1]


@pytest.mark.skipif(_RELEASE < (2, 6), reason="torch 2.4's Dynamo hands no ds.Device made inside its trace to a "
                    "function it runs in plain Python (2.6 and later do; 2.5 not measured)")
@pytest.mark.skipif(_RELEASE >= dispatch.COMPILE_SUPPORT, reason="from torch 2.13 devshim's own dispatch fails with "
                    "one once settings changed in the process (as between tests): Dynamo builds the Device without "
                    "its attributes (docs/torch.md)")
def test_a_ds_device_made_inside_the_trace_is_a_target_there():
    x = torch.ones(2)
    step = compiled(lambda x: ds.to_device({"x": x}, ds.neutral_device(x)))
    moved = step(x)
    assert len(step.graphs) == 1 and moved["x"] is not x and torch.equal(moved["x"], x) and moved["x"].device == x.device


def test_device_of_and_same_device_answer_as_eager():
    x, y = torch.ones(2), torch.zeros(3)

    def step(x, y):
        return x.new_zeros(1, device=ds.device_of(x)), ds.device_of(y), ds.same_device(x, {"y": [y, 1]}, (x,))

    step = compiled(step)
    zeros, where, together = step(x, y)
    assert len(step.graphs) == 1 and zeros.device == ds.device_of(x) and where == ds.device_of(y) and together is ds.same_device(x, y) is True


def test_the_public_functions_compiled_as_they_are_return_what_eager_returns():
    """torch.compile(ds.to_device): before torch 2.13 Dynamo runs devshim's own frame uncompiled
    (nothing traced: asserted, as what such a release does), from 2.13 it traces it (a graph)."""
    x = torch.ones(2)
    batch = {"x": x, "skip": x, "n": 1}
    moving = compiled(ds.to_device)
    got = moving(batch, "cpu", skip_keys="skip")
    assert got["skip"] is x and got["x"] is not x and torch.equal(got["x"], x) and got["n"] == 1
    assert len(moving.graphs) == (1 if _RELEASE >= dispatch.COMPILE_SUPPORT else 0)
    assert compiled(ds.copy_if_needed)(x, "cpu") is x
    assert compiled(ds.device_of)(x) == x.device
    inside = compiled(lambda batch: ds.to_device(batch, "cpu", skip_keys="skip"))  # traced on every release
    assert inside(batch)["skip"] is x and len(inside.graphs) == 1


def test_devshims_calls_without_a_tensor_run_in_plain_python_inside_a_trace():
    x = torch.ones(2)

    def step(x):
        return (x.to(ds.try_gpu()), x.to(ds.cpu()), x * ds.num_gpus(), x.to(ds.devices()[0]),
                x.to(ds.try_all_gpus()[0]), x.to(ds.device("cpu")))

    traced = compiled(step)
    for got, want in zip(traced(x), step(x)):
        assert torch.equal(got, want) and got.device == want.device
    assert len(traced.graphs) == 1


# ------------------------------------------------------------------ errors, by name


def _chain(err: BaseException) -> list:
    """``err`` and the exceptions it carries (Dynamo wraps an error raised while it traces)."""
    found = []
    while err is not None and len(found) < 8:
        found.append(err)
        err = err.__cause__ or err.__context__
    return found


def _named(err: BaseException, kind: type) -> str:
    """The message of the devshim error ``kind`` that ``err`` is or carries, or names."""
    for each in _chain(err):
        if isinstance(each, kind) or kind.__name__ in str(each):
            return str(each)
    raise AssertionError(f"no {kind.__name__} in {[repr(each)[:200] for each in _chain(err)]}")


def test_a_device_that_is_not_there_is_refused_by_name_inside_a_trace():
    absent = f"gpu:{ds.num_gpus()}"  # one past the GPUs this machine has
    for fn in (lambda x: ds.to_device(x, absent), lambda x: ds.copy_if_needed({"x": x}, absent)):
        with pytest.raises(Exception) as caught:
            compiled(fn)(torch.ones(2))
        assert f"{absent} is not available" in _named(caught.value, ds.DeviceUnavailableError)
    with pytest.raises(Exception) as caught:
        compiled(lambda x: ds.to_device(x, "no-such-device"))(torch.ones(2))
    assert "'no-such-device'" in _named(caught.value, ds.InvalidDeviceError)


def test_a_value_that_is_no_tensor_is_refused_by_name_inside_a_trace():
    with pytest.raises(Exception) as caught:
        compiled(lambda x: (x + 1, ds.device_of(3)))(torch.ones(2))
    assert "got builtins.int" in _named(caught.value, ds.NotATensorError)


@before_compile_support
@pytest.mark.parametrize("call", ["to_numpy", "ensure_same_device"])
def test_a_call_without_a_traced_version_is_refused_by_name_before_torch_2_13(call):
    with pytest.raises(ds.TorchCompileReleaseError) as caught:
        compiled(lambda x: getattr(ds, call)(x))(torch.ones(2))
    assert isinstance(caught.value, ds.FrameworkReleaseError) and isinstance(caught.value, RuntimeError)
    message = str(caught.value)
    assert message.startswith(f"ds.{call} inside torch.compile needs torch 2.13 or later; this is torch ")
    assert "outside the compiled function" in message and "upgrade torch" in message
    assert ds.to_numpy(torch.ones(1)).tolist() == [1.0]  # devshim still works, after the refusal


@pytest.mark.skipif(_RELEASE < dispatch.COMPILE_SUPPORT, reason="before torch 2.13 they are refused by name (above)")
def test_to_numpy_and_ensure_same_device_compile_from_torch_2_13():
    x = torch.ones(2)

    def step(x):
        return ds.to_numpy(x), ds.ensure_same_device(x, {"y": [x]})

    traced = compiled(step)
    (values, where), (want, want_where) = traced(x), step(x)
    assert len(traced.graphs) == 1 and values.tolist() == want.tolist() and type(values) is type(want) and where == want_where


@before_compile_support
def test_a_nest_of_another_kind_is_refused_by_name_before_torch_2_13():
    batch = collections.UserDict(x=torch.ones(2))
    with pytest.raises(ds.TorchCompileReleaseError) as caught:
        compiled(lambda batch: ds.to_device(batch, "cpu"))(batch)
    message = str(caught.value)
    assert message.startswith("ds.to_device inside torch.compile on torch before 2.13 (this is torch ")
    assert "collections.UserDict" in message and "dict(batch)" in message and "upgrade torch" in message
    assert torch.equal(ds.to_device(batch, "cpu")["x"], batch["x"])  # eagerly, as ever


# ------------------------------------------------------------------ how: marks Dynamo reads


def test_devshims_functions_carry_a_dynamo_mark_where_dynamo_needs_one():
    ds.try_gpu(backend="torch")  # the torch adapter is made: it follows this torch's release
    marks = {name: vars(getattr(ds, name)).get("_torchdynamo_inline") for name in api.__all__}
    without_tensor = ["cpu", "gpu", "num_gpus", "try_gpu", "try_all_gpus", "devices", "device"]
    assert sorted(name for name, mark in marks.items() if mark is not None) == sorted(
        without_tensor if _RELEASE >= dispatch.COMPILE_SUPPORT else api.__all__)
    if _RELEASE < dispatch.COMPILE_SUPPORT:
        assert {name for name, mark in marks.items() if mark in traced.TRACED.values()} == set(traced.TRACED)


@pytest.mark.parametrize("name", sorted(traced.TRACED))
def test_each_traced_version_takes_the_arguments_of_the_public_function(name):
    """Dynamo binds a call's arguments to the traced version (and torch 2.4's guards on the public
    function's keyword defaults in its place): the signatures are the same."""
    public, inside = inspect.signature(getattr(ds, name)), inspect.signature(traced.TRACED[name])
    assert [(p.name, p.kind, p.default) for p in inside.parameters.values()] == [
        (p.name, p.kind, p.default) for p in public.parameters.values()]


def test_the_refusal_is_the_one_kind_dynamo_lets_out_of_a_trace_and_a_devshim_error():
    assert issubclass(ds.TorchCompileReleaseError, ds.FrameworkReleaseError)
    assert issubclass(ds.TorchCompileReleaseError, RuntimeError) and issubclass(ds.TorchCompileReleaseError, AssertionError)
