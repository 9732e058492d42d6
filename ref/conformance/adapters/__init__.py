"""Adapters: the bundled implementation of a real third-party library, and helpers
that turn a framework kernel into a callable over NumPy arrays.

`as_numpy` and `wrap` move arrays through DLPack, so an adapter for a torch, CuPy
or JAX kernel is a few lines::

    import torch
    from ref.conformance.adapters import as_numpy, wrap

    def encode(x, **variant):
        t = torch.from_dlpack(x).to("cuda").to(torch.float8_e4m3fn)
        return as_numpy(t.view(torch.uint8))

NumPy has no FP8 or FP4 dtypes, so low-precision tensors cross as their raw bits
(a uint8/uint16 view), which is what the catalog's codecs return anyway.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["DEFAULT", "as_native", "as_numpy", "shipped_xfails", "wrap"]

# What `python -m ref conform` and the pytest plugin judge when no implementation is named.
DEFAULT = "ref.conformance.adapters.default"


def shipped_xfails(spec: str) -> Path | None:
    """The expected failures an implementation module ships: the path in its `XFAILS`
    attribute, else `name.xfails` beside `name.py`; None when it ships none (or the
    module cannot be found: loading it names that problem)."""
    module_name = spec.partition(":")[0]
    try:
        found = importlib.util.find_spec(module_name)
    except (ImportError, ValueError):
        return None
    if found is None or not found.origin:
        return None
    beside = Path(found.origin).with_suffix(".xfails")
    if beside.is_file():
        return beside
    try:
        declared = getattr(importlib.import_module(module_name), "XFAILS", None)
    except Exception:  # noqa: BLE001 - loading the implementation reports it properly
        return None
    return Path(declared) if declared is not None and Path(declared).is_file() else None


def as_native(a: np.ndarray) -> np.ndarray:
    """A C-contiguous copy in native byte order, 0-d kept 0-d: what torch.from_numpy and
    DLPack accept (they refuse negative strides and non-native byte order)."""
    a = np.asarray(a)
    return a.astype(a.dtype.newbyteorder("="), order="C", copy=True)


def as_numpy(x: Any) -> np.ndarray:
    """A NumPy array from a NumPy, torch, CuPy or JAX array (copied to the host if needed)."""
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "__dlpack_device__"):
        device_type, _ = x.__dlpack_device__()
        if device_type == 1:  # kDLCPU
            return np.from_dlpack(x)
    for host in ("cpu", "get"):  # torch .cpu(), CuPy .get()
        if hasattr(x, host):
            y = getattr(x, host)()
            return y if isinstance(y, np.ndarray) else as_numpy(y)
    return np.asarray(x)


def wrap(kernel: Callable[..., Any], from_dlpack: Callable[[Any], Any], *,
         params: tuple[str, ...] = ()) -> Callable[..., np.ndarray]:
    """Turn `kernel(*tensors, **params)` into a catalog callable over NumPy arrays.

    Array keyword arguments go through `from_dlpack` (e.g. torch.from_dlpack) in
    order, as native, C-contiguous copies; keyword arguments named in `params` are passed through; the others
    (variant parameters the kernel does not take) are dropped. The result comes
    back through `as_numpy`.
    """

    def call(**kwargs: Any) -> np.ndarray:
        arrays = [from_dlpack(as_native(v)) for v in kwargs.values() if isinstance(v, np.ndarray)]
        kept = {k: v for k, v in kwargs.items() if k in params}
        return as_numpy(kernel(*arrays, **kept))

    return call
