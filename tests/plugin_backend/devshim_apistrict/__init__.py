"""The apistrict backend: array_api_strict's arrays, through nothing but what the array API
promises. Its CPU is `CPU_DEVICE`; under `DEVSHIM_VIRTUAL_DEVICES=N` (N at most 2) its virtual
GPUs are the two other devices array_api_strict offers for testing, `device1` and `device2`
(devshim's rule: virtual `gpu:i` is host device `i + 1`)."""

from devshim.backends.spec import BackendSpec

SPEC = BackendSpec(
    "apistrict",
    title="array_api_strict",
    import_name="array_api_strict",
    distributions=("array-api-strict",),
    virtual_devices=True,
)
