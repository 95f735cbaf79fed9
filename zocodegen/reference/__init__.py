"""Bit-exact numpy reference kernels (TFLite reference-kernel arithmetic), one module per
op family, named by the op table's rows (ops/table.py); executor.py runs a graph on them."""
