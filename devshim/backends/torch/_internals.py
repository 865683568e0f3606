"""The private torch names the torch backend uses, each behind a probe (``devshim.backends.probes``).

The backend's modules ask these probes and name no torch internal themselves. Each probe
says which feature needs the name and what that feature does without it; on a torch that
moved one, its first use issues one ``FrameworkInternalWarning``. The canary tests
(``tests/test_internals.py``) fail in CI the day a release moves one.

Still named where they are used (they move here next, with the virtual-GPU package; a source
scan in ``tests/test_internals.py`` excepts that package until then):

=====================================  ====  ================================================  ====================
file                                   line  name                                              feature
=====================================  ====  ================================================  ====================
_virtual/dispatch.py                   27    torch.Tensor._make_wrapper_subclass               virtual GPUs
_virtual/dispatch.py                   62    torch._C.DisableTorchFunction                     virtual GPUs
_virtual/dispatch.py                   63    torch._C.TensorBase.data.__set__                  virtual GPUs
_virtual/dispatch.py                   75    torch._C._is_multithreading_enabled               virtual GPUs
_virtual/dispatch.py                   76    torch._C._set_multithreading_enabled              virtual GPUs
_virtual/dispatch.py                   175   OpOverload._op                                    virtual GPUs
_virtual/dispatch.py                   377   OpOverload._schema                                virtual GPUs
_virtual/registration.py               108   torch._C._acc (PrivateUse1Hooks, device guard)    virtual GPUs
_virtual/registration.py               113   torch._C._get_privateuse1_backend_name            virtual GPUs
_virtual/registration.py               151   torch._register_device_module                     virtual GPUs
_virtual/registration.py               225   device module ._is_in_bad_fork                    virtual GPUs
_virtual/reads.py                      22    torch._C.DisableTorchFunctionSubclass             virtual GPUs
_virtual/reads.py                      60    torch._tensor_str._str                            virtual GPUs: repr
_virtual/tensor.py                     26    torch._C._disabled_torch_function_impl            virtual GPUs
_virtual/tensor.py                     138   torch._C.TensorBase.data.__get__                  virtual GPUs
_virtual/lazy.py                       109   UninitializedTensorMixin._allowed_methods         virtual GPUs: lazy
_virtual/parallel.py                   41    torch._utils.ExceptionWrapper                     virtual GPUs: DP
=====================================  ====  ================================================  ====================
"""

from __future__ import annotations

from devshim.backends.probes import Internals, names_in_code

#: The torch releases devshim's CI tests (tox envs torch-floor, torch and torch-latest).
TESTED = "2.4 to 2.15"

INTERNALS = Internals("torch", title="torch", tested=TESTED)


def _privateuse1_name():
    import torch

    return torch._C._get_privateuse1_backend_name


def _restart_analysis():
    from torch._dynamo.exc import RestartAnalysis

    return RestartAnalysis


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
#: it). On a torch before 2.13 devshim's public functions carry a stand-in there that refuses them
#: by name (``devshim.backends.dispatch.follow_torch_release``); set before torch is imported too,
#: hence a name here and not only the probe's answer. Releases before 2.13 are fixed: the probe,
#: run by the torch-floor env, checks the one that is the floor.
DYNAMO_INLINE_ATTRIBUTE = "_torchdynamo_inline"


def _dynamo_inline():
    import inspect

    from torch._dynamo.variables import builder

    if DYNAMO_INLINE_ATTRIBUTE not in names_in_code(inspect.unwrap(builder.VariableBuilder._wrap).__code__):
        raise AttributeError(f"torch._dynamo's VariableBuilder no longer reads {DYNAMO_INLINE_ATTRIBUTE}")
    return DYNAMO_INLINE_ATTRIBUTE


def _function_mode_stack():
    import torch

    return torch.overrides._get_current_function_mode_stack


DYNAMO_INLINE = INTERNALS.add(
    "torch._dynamo VariableBuilder reading _torchdynamo_inline",
    feature="torch.compile refusing devshim's functions by name on torch before 2.13 (TorchCompileReleaseError)",
    fallback="Dynamo traces devshim's dispatch and fails inside it with its own error (and may leave "
             "devshim's dispatch broken for the process): call devshim outside the compiled function.",
    find=_dynamo_inline,
    before=(2, 13),
)
FUNCTION_MODE_STACK = INTERNALS.add(
    "torch.overrides._get_current_function_mode_stack",
    feature="the transfer guard taking its op-input check (a TorchFunctionMode) off a thread's mode "
            "stack when the thread's last guard block ends",
    fallback="the guard's mode stays on that thread's torch function mode stack after the block; it lets "
             "every op through there, at the cost of one Python call per op.",
    find=_function_mode_stack,
)
PRIVATEUSE1_NAME = INTERNALS.add(
    "torch._C._get_privateuse1_backend_name",
    feature="telling a real out-of-tree accelerator from devshim's virtual GPUs (ds.try_gpu)",
    fallback="torch.accelerator's answer is taken as the accelerator unless it is devshim's vgpu.",
    find=_privateuse1_name,
)
RESTART_ANALYSIS = INTERNALS.add(
    "torch._dynamo.exc.RestartAnalysis",
    feature="torch.compile when the compiled function holds the process's first devshim call",
    fallback="such a compile raises FirstCallInTraceError; call any devshim function once before compiling.",
    find=_restart_analysis,
)
CURRENT_TX = INTERNALS.add(
    "torch._dynamo.symbolic_convert.InstructionTranslator.current_tx",
    feature="torch.compile when the compiled function holds the process's first devshim call",
    fallback="such a compile raises FirstCallInTraceError; call any devshim function once before compiling.",
    find=_current_tx,
)
MODULE_SLOTS = INTERNALS.add(
    "torch.nn.Module._parameters / _buffers",
    feature="ds.place_model's rollback when moving a module fails part way",
    fallback="a failed ds.place_model still raises, but the tensors it had moved stay moved.",
    find=_module_slots,
)

__all__ = ["INTERNALS", "TESTED", "DYNAMO_INLINE_ATTRIBUTE", "DYNAMO_INLINE", "FUNCTION_MODE_STACK", "PRIVATEUSE1_NAME", "RESTART_ANALYSIS", "CURRENT_TX", "MODULE_SLOTS"]
