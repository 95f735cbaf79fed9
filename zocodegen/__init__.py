"""zocodegen: INT8 TFLite/ONNX models to Cortex-M7 firmware that runs and trains them
without back-propagation (zeroth-order training).

The Python API mirrors the command line (docs/api.md): ``zocodegen.inspect``, ``build``,
``pack``, ``simulate``, ``train`` and ``export`` take the command's options as keyword
arguments and return results. They load on first use, so importing a submodule stays cheap.
"""

from .version import __version__

__all__ = ["inspect", "build", "pack", "simulate", "train", "export", "__version__"]
_API = frozenset(__all__) - {"__version__"}


def __getattr__(name: str):
    if name in _API:
        from . import api
        return getattr(api, name)
    raise AttributeError(f"module 'zocodegen' has no attribute '{name}'")
