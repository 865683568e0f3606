"""The MXNet 1.9 backend, for both `mxnet.np` and `mxnet.nd`: devices are Contexts;
virtual devices are the host contexts `cpu(1)`, `cpu(2)`, ..."""

from devshim.backends.spec import BackendSpec

SPEC = BackendSpec(
    "mxnet",
    title="MXNet",
    aliases=("mx",),
    import_name="mxnet",
    distributions=("mxnet", "mxnet-cu112", "mxnet-cu117"),
    extra="mxnet",
    auto_rank=40,
    virtual_devices=True,
)
