"""Accelerator facts for the Python SDK (as ray._private.accelerators): TPU shape arithmetic and what the current
host and process hold."""

from torus._private.accelerators.tpu_host import TPUAcceleratorManager

__all__ = ["TPUAcceleratorManager"]
