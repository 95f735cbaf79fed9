"""Zeroth-order training (DESIGN.md section 4): the pieces the numpy simulator and the
generated C share, bit for bit. The contract is written down in docs/training.md."""
