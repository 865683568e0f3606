"""The PyTorch backend. "gpu" is whichever accelerator this torch build has: CUDA (and
ROCm), XPU, MPS, MTIA, or an out-of-tree device, found with `torch.accelerator`. With
`DEVSHIM_VIRTUAL_DEVICES=N` it is N virtual GPUs, torch devices `vgpu:0` ... backed by
host memory (the `_virtual` package)."""

from devshim.backends.spec import BackendSpec

SPEC = BackendSpec(
    "torch",
    title="PyTorch",
    aliases=("pytorch",),
    import_name="torch",
    distributions=("torch",),
    extra="torch",
    auto_rank=10,
    virtual_devices=True,
    # A plain `pip install torch` on Linux is a CUDA build of several GB: without an NVIDIA GPU,
    # the README recommends PyTorch's CPU build.
    installs={"cpu": "pip install torch --index-url https://download.pytorch.org/whl/cpu (the CPU build; a "
                     "plain pip install torch downloads several GB of CUDA packages), then pip install "
                     "\"devshim[torch]\" where devshim is installed"},
)
