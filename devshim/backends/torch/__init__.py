"""The PyTorch backend. "gpu" is whichever accelerator this torch build has: CUDA (and
ROCm), XPU, MPS, MTIA, or an out-of-tree device, found with ``torch.accelerator``."""

from devshim.backends.spec import BackendSpec

SPEC = BackendSpec(
    "torch",
    title="PyTorch",
    aliases=("pytorch",),
    import_name="torch",
    distributions=("torch",),
    extra="torch",
    auto_rank=10,
    virtual_devices=False,
)
