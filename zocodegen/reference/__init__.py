"""Bit-exact numpy reference kernels (TFLite reference-kernel arithmetic), one module per
op family, registered in ``registry.KERNELS``."""
from .executor import run, run_all

__all__ = ["run", "run_all"]
