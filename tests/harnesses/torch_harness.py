from __future__ import annotations

import numpy as np
import torch

from devshim_conformance import Harness


class TorchHarness(Harness):
    name = "torch"
    first_tensor_code = "import torch; x = torch.ones(4)"

    def array_module(self):
        import array_api_compat.torch

        return array_api_compat.torch  # torch's own namespace is not the array API

    def gpu_count(self):
        count = torch.cuda.device_count()  # CUDA and ROCm; NVML or the runtime, never an error without a driver
        if not count and hasattr(torch, "xpu") and torch.xpu.is_available():
            count = torch.xpu.device_count()
        if not count and torch.backends.mps.is_available():
            count = 1
        return count

    has_meta = True
    runs_mixed_ops = False

    def placements(self, device):
        return [("torch.zeros(2, device=d)", lambda: torch.zeros(2, device=device)),
                ("torch.ones(2).to(d)", lambda: torch.ones(2).to(device)),
                ("torch.tensor([1.0], device=torch.device(d))", lambda: torch.tensor([1.0], device=torch.device(device))),
                ("torch.empty(2).to(device=d, copy=True)", lambda: torch.empty(2).to(device=device, copy=True))]

    def host_reads(self):
        return [("float(t)", float), ("int(t)", int), ("bool(t)", bool), ("t.item()", lambda t: t.item()),
                ("t.tolist()", lambda t: t.tolist()), ("print(t) / repr(t)", repr),
                ("formatting t (f-string, str.format)", lambda t: f"{t}")]
    dtypes = (
        "bool", "uint8", "int8", "int16", "int32", "int64",
        "float16", "bfloat16", "float32", "float64", "complex64", "complex128",
    )

    def real_gpu(self, index):
        import devshim as ds

        return torch.device(ds.get_backend("torch").accelerator_platform() or "cuda", index)

    def _dtype(self, name):
        return getattr(torch, name) if name else None

    def tensor(self, values, device=None, dtype=None):
        return torch.tensor(values, device=device, dtype=self._dtype(dtype))

    def from_bits(self, raw, shape, dtype, device=None):
        target = self._dtype(dtype)
        if dtype == "bool":
            flat = torch.tensor(list(raw), dtype=torch.uint8).bool()
            return flat.reshape(shape).to(device)
        itemsize = torch.empty((), dtype=target).element_size()
        as_bytes = torch.frombuffer(bytearray(raw), dtype=torch.uint8) if raw else torch.empty(0, dtype=torch.uint8)
        grouped = as_bytes.reshape(-1, itemsize)
        return grouped.view(target).reshape(shape).to(device)

    def bits(self, x):
        # A fresh 1-d buffer: contiguous() keeps odd strides on one-element tensors.
        flat = torch.empty(x.numel(), dtype=x.dtype)
        flat.copy_(x.detach().cpu().reshape(-1))
        if flat.dtype == torch.bool:
            flat = flat.to(torch.uint8)
        return flat.view(torch.uint8).numpy().tobytes()

    def values(self, x):
        x = x.detach().cpu()
        if x.dtype == torch.bfloat16:
            x = x.float()
        return x.numpy().copy()

    def dtype_name(self, x):
        return str(x.dtype).replace("torch.", "")

    def fill(self, x, value):
        with torch.no_grad():
            x.fill_(value)

    def aliases(self, a, b):
        if a.numel() == 0 or b.numel() == 0:
            return False
        return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()

    def mlp(self, sizes=(4, 8, 3), seed=0):
        rng = np.random.default_rng(seed)
        layers = []
        for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
            layer = torch.nn.Linear(a, b)
            with torch.no_grad():
                layer.weight.copy_(torch.from_numpy(rng.standard_normal((b, a)).astype(np.float32)))
                layer.bias.copy_(torch.from_numpy(rng.standard_normal(b).astype(np.float32)))
            layers.append(layer)
            if i < len(sizes) - 2:
                layers.append(torch.nn.ReLU())
        return torch.nn.Sequential(*layers)

    def grads(self, model, x, y):
        model.zero_grad(set_to_none=True)
        ((model(x) - y) ** 2).sum().backward()
        return [p.grad for p in model.parameters()]

    def param_values(self, model):
        return [p.detach().cpu().numpy().copy() for p in model.parameters()]

    def sgd_step(self, model, grads, lr):
        with torch.no_grad():
            for p, g in zip(model.parameters(), grads):
                p -= lr * g

    def grad_of_sum(self, fn, values, device=None):
        x = torch.tensor(values, dtype=torch.float64, device=device, requires_grad=True)
        fn(x).sum().backward()
        return x.grad.cpu().numpy()

    def custom_gradient(self, forward, backward):
        class Function(torch.autograd.Function):
            @staticmethod
            def forward(ctx, *inputs):
                ctx.save_for_backward(*inputs)
                return forward(*inputs)

            @staticmethod
            def backward(ctx, grad):
                return tuple(backward(*ctx.saved_tensors, grad))

        return Function.apply

    wrong_gradient_count = r"returned an incorrect number of gradients \(expected 1, got 2\)"

    def identity(self, count):
        class Identity(torch.autograd.Function):
            @staticmethod
            def forward(ctx, *inputs):
                outputs = tuple(x.clone() for x in inputs)
                return outputs if count > 1 else outputs[0]

            @staticmethod
            def backward(ctx, *grads):  # torch gives zeros for an output that got no gradient
                return grads

        return Identity.apply

    def stop_gradient(self, x):
        return x.detach()

    def cast(self, x, dtype):
        return x.to(getattr(torch, dtype))

    def gather_rows(self, weight, rows):
        import torch.nn.functional as F

        import devshim as ds

        # Sparse gradients where torch has sparse kernels: on devshim's virtual GPUs the sparse
        # embedding backward aborts the process (torch 2.13), so there the gradient is dense.
        sparse = not ds.neutral_device(weight).virtual
        return F.embedding(torch.tensor(list(rows), device=weight.device), weight, sparse=sparse)

    def special_kind(self, x):
        return torch.nn.Parameter(x.detach().clone())

    def out_of_memory(self):
        try:
            torch.empty(2**62, dtype=torch.uint8)  # 4 EiB: the CPU allocator refuses at once
        except RuntimeError as error:
            return error
        raise AssertionError("torch allocated 4 EiB")

    def on_host(self, array):
        if array.dtype.name == "bfloat16":  # ml_dtypes' bfloat16: torch takes its bits
            return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
        return torch.from_numpy(array)

    def address(self, x):
        return x.data_ptr()


HARNESS = TorchHarness()

