"""The JAX backend: devices are `jax.Device` objects; arrays are `jax.Array` (tracers
included); virtual devices are JAX host (CPU) devices configured before JAX initialises."""

from devshim.backends.spec import BackendSpec

SPEC = BackendSpec(
    "jax",
    title="JAX",
    import_name="jax",
    distributions=("jax",),
    extra="jax",
    auto_rank=30,
    virtual_devices=True,
    installs={"nvidia": 'pip install "jax[cuda12]", then pip install "devshim[jax]" where devshim is installed'},
)
