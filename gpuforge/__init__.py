"""gpuforge: declarative provisioning and validation for GPU clusters."""

__version__ = "0.1.0"
