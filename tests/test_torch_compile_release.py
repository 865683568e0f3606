"""devshim inside torch.compile across torch releases: torch 2.13 and later trace devshim's calls
(tests/test_torch.py checks what they compile to); on an older torch, Dynamo meeting a devshim
function refuses it by name, ds.TorchCompileReleaseError, with fullgraph=True and without, and
devshim keeps working outside the compiled function. The torch-floor env (torch 2.4.1) runs this
file. Each case runs in a fresh interpreter: what Dynamo and devshim learn stays in a process."""

from __future__ import annotations

import json

import pytest

import devshim as ds
from devshim.backends import dispatch
from helpers import run_python

torch = pytest.importorskip("torch")

_RELEASE = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])
before_compile_support = pytest.mark.skipif(
    _RELEASE >= dispatch.COMPILE_SUPPORT, reason="torch 2.13 and later trace devshim's calls (tests/test_torch.py)")
with_compile_support = pytest.mark.skipif(
    _RELEASE < dispatch.COMPILE_SUPPORT, reason="devshim's torch.compile support needs torch 2.13 or later")

# {imports}: devshim's public functions imported before torch (isort's order) or after it.
# {first}: a devshim call before compiling, or none (the compiled function holds the first).
_COMPILE = """
import json
{imports}
import devshim as ds
{first}
def step(x, batch):
    d = ds.device_of(x)
    return ds.to_device(x * 2, "cpu"), ds.copy_if_needed(batch, d)
graphs = []
def count_graphs(graph, example_inputs):
    graphs.append(graph)
    return graph.forward
compiled = torch.compile(step, fullgraph={fullgraph}, backend=count_graphs)
args = (torch.ones(3), {{"a": torch.arange(2.0)}})
try:
    compiled(*args)
    refused = None
except Exception as err:
    refused = {{"type": type(err).__name__, "release_error": isinstance(err, ds.FrameworkReleaseError),
               "runtime_error": isinstance(err, RuntimeError), "message": str(err)}}
again = None if refused else compiled(*args)
eager = step(*args)
print(json.dumps({{"refused": refused, "graphs": len(graphs),
                   "eager": [eager[0].tolist(), eager[1]["a"].tolist()],
                   "again": again and [again[0].tolist(), again[1]["a"].tolist()]}}))
"""

IMPORTS = {"torch-first": "import torch", "devshim-api-first": "from devshim import device_of\nimport torch"}
FIRST = {"devshim-called-before": "ds.try_gpu()", "first-devshim-call-compiled": ""}


def compile_in_a_fresh_process(imports: str, first: str, fullgraph: bool) -> dict:
    code = _COMPILE.format(imports=IMPORTS[imports], first=FIRST[first], fullgraph=fullgraph)
    result = run_python(code, DEVSHIM_BACKEND="torch")
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


CASES = [pytest.param(imports, first, fullgraph, id=f"{imports}-{first}-fullgraph={fullgraph}")
         for imports in IMPORTS for first in FIRST for fullgraph in (True, False)]


@before_compile_support
@pytest.mark.parametrize(("imports", "first", "fullgraph"), CASES)
def test_devshim_inside_torch_compile_is_refused_by_name_before_torch_2_13(imports, first, fullgraph):
    found = compile_in_a_fresh_process(imports, first, fullgraph)
    refused = found["refused"]
    assert refused is not None and refused["type"] == "TorchCompileReleaseError"
    assert refused["release_error"] and refused["runtime_error"]
    message = refused["message"]
    assert message.startswith("ds.device_of inside torch.compile needs torch 2.13 or later; this is torch ")
    assert "outside the compiled function" in message and "upgrade torch" in message
    assert found["eager"] == [[2.0, 2.0, 2.0], [0.0, 1.0]]  # devshim still works, after the refusal


@with_compile_support
@pytest.mark.parametrize(("imports", "first", "fullgraph"), CASES)
def test_devshim_inside_torch_compile_compiles_in_one_graph_from_torch_2_13(imports, first, fullgraph):
    found = compile_in_a_fresh_process(imports, first, fullgraph)
    assert found["refused"] is None and found["graphs"] == 1
    assert found["again"] == found["eager"] == [[2.0, 2.0, 2.0], [0.0, 1.0]]


def test_devshims_functions_carry_a_dynamo_mark_only_before_torch_2_13():
    ds.try_gpu(backend="torch")  # the torch adapter is made: it follows this torch's release
    marked = [name for name in ("device_of", "to_device", "copy_if_needed", "same_device", "try_gpu")
              if "_torchdynamo_inline" in vars(getattr(ds, name))]
    assert marked == ([] if _RELEASE >= dispatch.COMPILE_SUPPORT else
                      ["device_of", "to_device", "copy_if_needed", "same_device", "try_gpu"])


def test_the_refusal_is_the_one_kind_dynamo_lets_out_of_a_trace_and_a_devshim_error():
    assert issubclass(ds.TorchCompileReleaseError, ds.FrameworkReleaseError)
    assert issubclass(ds.TorchCompileReleaseError, RuntimeError) and issubclass(ds.TorchCompileReleaseError, AssertionError)
