"""Exact integer arithmetic for the accounting ops: count inputs checked once, results
computed with Python integers and returned as int64, never wrapped.

    values = counts("roofline.kv_bytes.attention", tokens=t, layers=l, ...)
    bits = values["tokens"] * values["layers"] * ...      # object arrays of Python ints
    return to_int64(ceil_div(bits, 8), "roofline.kv_bytes.attention", values)

A count is an array of an integer dtype (any shape, 0-d included; a Python int is taken
as a 0-d int64 array); every count of one call has the same shape (no broadcasting).
A bool, float or other dtype is a TypeError, a negative count or a shape that differs
from the first argument's a ValueError; each names the argument. Object arrays of
Python ints hold any size exactly, so a product past 2^63 is seen (and rejected by
`to_int64`, naming the op's inputs) instead of wrapping as int64 arithmetic would.
"""

from __future__ import annotations

import numpy as np

__all__ = ["INT64_MAX", "ceil_div", "counts", "flags", "to_int64"]

INT64_MAX = (1 << 63) - 1


def _array(value, name: str) -> np.ndarray:
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name}: expected an integer array, got bool {value!r}")
    arr = np.asarray(value)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{name}: expected an integer array (int64), got dtype {arr.dtype}")
    return arr


def _same_shape(name: str, arr: np.ndarray, first: str | None, shape: tuple[int, ...] | None) -> None:
    if shape is not None and arr.shape != shape:
        raise ValueError(f"{name}: expected the shape of {first} {shape} (no broadcasting), got {arr.shape}")


def counts(op: str, **arrays) -> dict[str, np.ndarray]:
    """The inputs as object arrays of Python ints, after the checks (see the module)."""
    out: dict[str, np.ndarray] = {}
    first, shape = None, None
    for name, value in arrays.items():
        arr = _array(value, name)
        _same_shape(name, arr, first, shape)
        first, shape = (name, arr.shape) if shape is None else (first, shape)
        if arr.size and arr.min() < 0:
            raise ValueError(f"{name}: expected non-negative counts, got {arr.min()}")
        out[name] = arr.astype(object)
    return out


def flags(op: str, shape: tuple[int, ...], first: str, **arrays) -> dict[str, np.ndarray]:
    """Boolean inputs (bool dtype only, the counts' shape) as bool arrays."""
    out = {}
    for name, value in arrays.items():
        arr = np.asarray(value)
        if arr.dtype != np.bool_:
            raise TypeError(f"{name}: expected a bool array, got dtype {arr.dtype}")
        _same_shape(name, arr, first, shape)
        out[name] = arr
    return out


def ceil_div(a, b):
    """ceil(a / b) of Python ints (object arrays too), for b > 0."""
    return -((-a) // b)


def to_int64(value, op: str, inputs: dict[str, np.ndarray]) -> np.ndarray:
    """An object array (or Python int) of exact results as int64 of the inputs' shape;
    a result past 2^63 - 1 is a ValueError naming the op's inputs."""
    shape = next(iter(inputs.values())).shape if inputs else ()
    exact = np.asarray(value, dtype=object).reshape(shape)
    if exact.size and max(exact.ravel().tolist()) > INT64_MAX:
        raise ValueError(f"{op}: the result does not fit int64 for these inputs ({', '.join(inputs)}); "
                         "counts past 2^63 - 1 are rejected, not wrapped")
    return exact.astype(np.int64)
