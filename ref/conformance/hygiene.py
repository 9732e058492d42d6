"""Memory hygiene: what a kernel may assume about the arrays it is handed and the
arrays it hands back, whatever the op computes.

- Inputs arrive in several memory layouts (`layouts`, `lay_out`): a kernel that walks
  raw memory instead of following strides reads the wrong elements.
- Inputs are the caller's: a kernel that writes into one fails (`check_unmodified`).
- Outputs are the caller's too: one that changes while a later call runs was handed
  out of a shared workspace (`SharedOutputs`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Generic, TypeVar

import numpy as np

__all__ = ["InputModified", "SharedOutputs", "check_unmodified", "lay_out", "layouts", "snapshot"]

class InputModified(Exception):
    """An implementation wrote into an array it was given."""


def lay_out(a: np.ndarray, layout: str) -> np.ndarray:
    """A copy of `a` with the same values in another memory layout: C order; a view
    whose last axis has stride 2; one whose last axis runs backwards; Fortran order;
    rows with a pitch wider than the row. Every layout but C is read-only, so a
    kernel that scribbles on its inputs fails there even if it restores them."""
    if layout == "C" or a.ndim == 0:
        return np.array(a, copy=True, order="C")
    if layout == "strided":
        buf = np.zeros((*a.shape[:-1], 2 * a.shape[-1]), dtype=a.dtype)
        buf[..., ::2] = a
        view = buf[..., ::2]
    elif layout == "negative":
        view = np.ascontiguousarray(a[..., ::-1])[..., ::-1]
    elif layout == "F":
        view = np.asfortranarray(a.copy())
    else:  # row_pitch
        buf = np.zeros((*a.shape[:-1], a.shape[-1] + 3), dtype=a.dtype)
        buf[..., : a.shape[-1]] = a
        view = buf[..., : a.shape[-1]]
    view.flags.writeable = False
    return view


def layouts(inputs: Mapping[str, Any]) -> tuple[str, ...]:
    """The layouts worth trying for a call with these inputs: C always; the others
    where they differ from it (a 1-D array has no Fortran order)."""
    ndim = max((np.ndim(a) for a in inputs.values()), default=0)
    return ("C",) + (("strided", "negative") if ndim >= 1 else ()) + (("F", "row_pitch") if ndim >= 2 else ())


def check_unmodified(given: Mapping[str, np.ndarray], originals: Mapping[str, Any]) -> None:
    """Raise InputModified when an array the kernel was given no longer holds its
    original's values (or shape)."""
    for name, arr in given.items():
        original = np.asarray(originals[name])
        if arr.shape != original.shape or arr.tobytes() != np.ascontiguousarray(original).tobytes():
            raise InputModified(f"the implementation modified its input {name!r} in place")


def snapshot(output: Any) -> bytes:
    """The bytes of an output (one array, or a tuple of them)."""
    arrays = output if isinstance(output, tuple) else (output,)
    return b"".join(np.asarray(a).tobytes() for a in arrays)


Owner = TypeVar("Owner")


class SharedOutputs(Generic[Owner]):
    """The last output handed back, with the bytes it held then: a kernel returning
    views of one reused buffer changes it on its next call."""

    def __init__(self) -> None:
        self._held: tuple[Owner, Any, bytes] | None = None

    def changed(self) -> Owner | None:
        """The owner of the held output if its bytes changed since it was held."""
        if self._held is not None and snapshot(self._held[1]) != self._held[2]:
            return self._held[0]
        return None

    def hold(self, owner: Owner, output: Any) -> None:
        self._held = (owner, output, snapshot(output))
