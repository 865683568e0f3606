"""The CuPy backend: devices are `cupy.cuda.Device` objects; NumPy is CuPy's host partner,
so CPU copies of CuPy arrays are NumPy arrays and NumPy arrays sent to a GPU become CuPy arrays."""

from devshim.backends.spec import BackendSpec

SPEC = BackendSpec(
    "cupy",
    title="CuPy",
    aliases=("cp",),
    import_name="cupy",
    distributions=("cupy-cuda12x", "cupy-cuda13x", "cupy-cuda11x", "cupy-rocm-6-0", "cupy-rocm-5-0", "cupy"),
    extra="cupy",
    auto_rank=50,
    virtual_devices=False,
    host_partner="numpy",
)
