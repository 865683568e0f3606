"""The TensorFlow backend: devices are `TFDevice` values that are also `with` scopes;
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
    # What the README recommends: the smaller CPU package without a GPU, TensorFlow's CUDA extra
    # with an NVIDIA GPU, the plain package on macOS.
    installs={"cpu": 'pip install tensorflow-cpu, or pip install "devshim[tensorflow-cpu]" where devshim is installed',
              "nvidia": 'pip install "tensorflow[and-cuda]", then pip install "devshim[tensorflow]" where devshim is installed'},
)
