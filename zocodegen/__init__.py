"""zocodegen: INT8 TFLite/ONNX models to Cortex-M7 firmware that runs and trains them
without back-propagation (zeroth-order training)."""

__version__ = "0.1.0"
