"""Errors a user can fix. The CLI prints their message on one line and exits with status 2;
anything else that escapes is an internal failure (status 1)."""
from __future__ import annotations


class UserError(Exception):
    """Bad input or usage: a malformed/unsupported model, wrong data shape, missing file."""


class ModelError(UserError):
    """The model file cannot be read or uses something the IR cannot express."""


class UnsupportedOpError(ModelError):
    pass


class DataError(UserError):
    """Input data (tensors, datasets) does not match what the model expects."""
