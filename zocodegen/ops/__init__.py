"""The ops: one table (table.py) whose row says everything each stage needs to know about an
op, and the rules its rows name (conv.py for the convolutions, rules.py for the others).

The stages ask the table instead of listing op names: the validator for options and output
shapes, the reference executor for the golden kernel, the generator for the C layer, the
planner for scratch bytes, in-place and patch windows, training for weights and backward
rules, export for weight layouts. (The package imports nothing itself: the generators the
table names read ops/conv.py's facts.)
"""
