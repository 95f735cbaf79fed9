"""The C layer generators, one module per op family, named by the op table's rows
(ops/table.py).

Every generator has the same signature, ``generator(op, ctx) -> LayerCode``: it decides which
portable kernel to call and with which parameters, all derived by the same pure functions the
numpy reference uses, so the C and the reference cannot drift apart.
"""
