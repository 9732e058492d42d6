"""The argument checks of the roofline area's array ops, and their exact arithmetic:
counts checked once and computed with Python integers, results returned as int64,
never wrapped.

    v = counts("roofline.kv_bytes.attention", tokens=t, layers=l, ...)
    bits = v["tokens"] * v["layers"] * ...      # object arrays of Python ints
    return to_int64(ceil_div(bits, 8), "roofline.kv_bytes.attention", v)

counts(op, **arrays)     integer arrays (any integer dtype, not bool), every value
                         non-negative and below 2^63, as object arrays of Python ints
flags(op, **arrays)      bool arrays (bool dtype only)
reals(op, **arrays)      float arrays, every value finite, as float64
same_shape(op, **arrays) one shape for all (no broadcasting); counts, flags and reals
                         each check their own arguments, an op mixing them calls it too
at_least(op, minimum, **arrays)   every value >= minimum (a group, a kernel, experts)
decoder_config(op, v)    a GQA decoder's counts agree with each other (params, flops)
checked_model(model)     a ref.roofline.config.Model (the model-level functions)
ceil_div(a, b)           ceil(a / b) of Python ints (object arrays too), b > 0
to_int64(value, op, inputs)       exact results as int64, or a ValueError naming the
                         op's inputs when one passes 2^63 - 1

Any shape is taken, 0-d included; a Python int is read as a 0-d int64 array. A wrong
dtype is a TypeError, a wrong shape or value a ValueError; each message names the op,
the argument, what was expected and what came. Object arrays of Python ints hold any
size exactly, so a product past 2^63 is seen (and rejected by `to_int64`) instead of
wrapping as int64 arithmetic would, and never passes through float64, which rounds
past 2^53.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ref.roofline.config import Model

__all__ = ["INT64_MAX", "at_least", "ceil_div", "checked_model", "counts", "decoder_config", "flags", "reals",
           "same_shape", "to_int64"]

INT64_MAX = (1 << 63) - 1


def same_shape(op: str, **arrays: ArrayLike) -> tuple[int, ...]:
    """The arrays' common shape (the first one's); a ValueError naming the first
    argument whose shape differs."""
    first, shape = None, ()
    for name, arr in arrays.items():
        if first is None:
            first, shape = name, np.shape(arr)
        elif np.shape(arr) != shape:
            raise ValueError(f"{op}: {name}: expected the shape of {first} {shape} (no broadcasting), "
                             f"got {np.shape(arr)}")
    return shape


def counts(op: str, **arrays: ArrayLike) -> dict[str, NDArray[np.object_]]:
    """The integer arguments as object arrays of Python ints, after the checks (see the module)."""
    out = {}
    for name, value in arrays.items():
        arr = np.asarray(value)
        if arr.dtype.kind not in "iu":
            raise TypeError(f"{op}: {name}: expected an integer array (int64), got dtype {arr.dtype}")
        if arr.size and int(arr.min()) < 0:
            raise ValueError(f"{op}: {name}: expected non-negative counts, got {int(arr.min())}")
        if arr.size and int(arr.max()) > INT64_MAX:  # a uint64 no int64 array can hold
            raise ValueError(f"{op}: {name}: expected counts below 2^63, got {int(arr.max())}")
        out[name] = arr.astype(object)
    same_shape(op, **out)
    return out


def flags(op: str, **arrays: ArrayLike) -> dict[str, NDArray[np.bool_]]:
    """The boolean arguments (bool dtype only, one shape) as bool arrays."""
    out = {}
    for name, value in arrays.items():
        arr = np.asarray(value)
        if arr.dtype != np.bool_:
            raise TypeError(f"{op}: {name}: expected a bool array, got dtype {arr.dtype}")
        out[name] = arr
    same_shape(op, **out)
    return out


def reals(op: str, **arrays: ArrayLike) -> dict[str, NDArray[np.float64]]:
    """The real arguments (a float dtype, every element finite, one shape) as float64."""
    out = {}
    for name, value in arrays.items():
        arr = np.asarray(value)
        if arr.dtype.kind != "f":
            raise TypeError(f"{op}: {name}: expected a float array (float64), got dtype {arr.dtype}")
        arr = arr.astype(np.float64)
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"{op}: {name}: expected finite values, got {arr[~np.isfinite(arr)].flat[0]}")
        out[name] = arr
    same_shape(op, **out)
    return out


def at_least(op: str, minimum: int, **arrays: NDArray) -> None:
    """A ValueError naming the first argument with a value below `minimum`."""
    for name, arr in arrays.items():
        if np.size(arr) and min(np.ravel(arr).tolist()) < minimum:
            raise ValueError(f"{op}: {name}: expected {name} >= {minimum}, got {min(np.ravel(arr).tolist())}")


def decoder_config(op: str, v: dict[str, np.ndarray]) -> None:
    """The consistency of a GQA decoder's checked counts (and shared_gate, where the op
    has it): kv_heads >= 1 divides heads; an MoE model (experts > 0) has intermediate 0
    and 1 <= top_k <= experts; a dense one top_k, expert_intermediate,
    shared_intermediate (and shared_gate) 0. A ValueError names the argument."""
    at_least(op, 1, kv_heads=v["kv_heads"])
    if np.any(v["heads"] % np.maximum(v["kv_heads"], 1) != 0):
        raise ValueError(f"{op}: heads: expected a multiple of kv_heads (GQA groups)")
    moe = np.asarray(v["experts"] > 0, dtype=bool)
    if np.any(moe & (v["intermediate"] != 0)):
        raise ValueError(f"{op}: intermediate: expected 0 for an MoE model (experts > 0); "
                         "the experts' width is expert_intermediate")
    if np.any(moe & ((v["top_k"] < 1) | (v["top_k"] > v["experts"]))):
        raise ValueError(f"{op}: top_k: expected 1 <= top_k <= experts for an MoE model")
    for name in ("top_k", "expert_intermediate", "shared_intermediate", "shared_gate"):
        if name in v and np.any(~moe & (v[name] != 0)):
            raise ValueError(f"{op}: {name}: expected 0 (False) for a dense model (experts == 0)")


def checked_model(model) -> Model:
    """`model` if it is a ref.roofline.config.Model; a TypeError naming `model` otherwise."""
    if not isinstance(model, Model):
        raise TypeError(f"model: expected a ref.roofline.config.Model, got {type(model).__name__}")
    return model


def ceil_div(a, b):
    """ceil(a / b) of Python ints (object arrays too), for b > 0."""
    return -((-a) // b)


def to_int64(value, op: str, inputs: dict[str, np.ndarray]) -> NDArray[np.int64]:
    """An object array (or Python int) of exact results as int64 of the inputs' shape;
    a result past 2^63 - 1 is a ValueError naming the op's inputs."""
    shape = next(iter(inputs.values())).shape if inputs else ()
    exact = np.asarray(value, dtype=object).reshape(shape)
    if exact.size and max(exact.ravel().tolist()) > INT64_MAX:
        raise ValueError(f"{op}: the result does not fit int64 for these inputs ({', '.join(inputs)}); "
                         "counts past 2^63 - 1 are rejected, not wrapped")
    return exact.astype(np.int64)
