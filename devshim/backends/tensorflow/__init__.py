"""The TensorFlow backend: devices are ``TFDevice`` values that are also ``with`` scopes;
virtual devices are logical CPUs configured before TensorFlow initialises."""

from devshim.backends.spec import BackendSpec

SPEC = BackendSpec(
    "tensorflow",
    title="TensorFlow",
    aliases=("tf",),
    import_name="tensorflow",
    distributions=("tensorflow", "tensorflow-cpu", "tensorflow-macos", "tensorflow-intel", "tf-nightly"),
    extra="tensorflow",
    auto_rank=20,
    virtual_devices=True,
)
