"""The NumPy backend: one device, the host CPU. NumPy is devshim's only hard dependency,
so this backend is always installed and comes last in automatic selection."""

from devshim.backends.spec import BackendSpec

SPEC = BackendSpec(
    "numpy",
    title="NumPy",
    import_name="numpy",
    distributions=("numpy",),
    extra=None,
    auto_rank=100,
    virtual_devices=False,
)
