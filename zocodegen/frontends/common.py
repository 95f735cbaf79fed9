"""Helpers shared by the frontends: TF's SAME padding and naming (window output sizes are
ops/window.py's, which the validator uses too)."""
from __future__ import annotations


def same_padding(size: int, kernel: int, stride: int, dilation: int) -> tuple[int, int]:
    """TF 'SAME' padding: output = ceil(size / stride), extra pixel goes after."""
    effective = (kernel - 1) * dilation + 1
    out = (size + stride - 1) // stride
    total = max((out - 1) * stride + effective - size, 0)
    return total // 2, total - total // 2


def printable_name(raw: str, limit: int = 1024) -> str:
    """A model's own name made safe for one-line messages and C comments: control characters
    escaped, absurd lengths cut (a corrupted file can hold anything there)."""
    text = "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in raw)
    return text if len(text) <= limit else text[:limit] + "..."


def unique_name(name: str, used: set[str]) -> str:
    """Return ``name`` or ``name#k`` so that it is not in ``used``; records the result."""
    candidate, k = name, 1
    while candidate in used:
        candidate, k = f"{name}#{k}", k + 1
    used.add(candidate)
    return candidate
