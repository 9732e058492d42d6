"""What a failure shows of its case: the input element(s) behind the first mismatching
output element, an accepted invalid input, and the case cut down to those elements
(so that the op's case_flags classify the failing element, not the whole array).

Which input elements stand behind an output element is read from the shapes alone:

- an input of the output's shape: the element at the same index, and its block when
  the op has a block size (block codecs: `block`), or for a bounded op its last-axis
  row (attention's query row);
- an input whose last axis is k times the output's (a scale of a block of k; a
  packed pair): the k elements of that block;
- an input whose last axis is 1/k of the output's (a block's scale for an element;
  a packed byte for a code): the one element behind it;
- an input with the output's shape as leading axes (a query row behind an LSE): the
  sub-array at the index; an input of 2 or more axes that are the output's leading
  axes (an LSE behind an output row): its element there;
- anything else: its dtype and shape (values too, when it has at most 8).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ref.testing.vector_files import Case

__all__ = ["accepted_inputs", "array_text", "block_of", "element_case", "element_text", "input_texts", "locate"]

_SHOWN = 8  # values shown of an input that is not located element by element


def _bits(value: np.ndarray) -> str | None:
    """The bit pattern of one element, as hex of its own width."""
    arr = np.asarray(value)
    if arr.dtype.kind not in "biufV" or arr.dtype.itemsize not in (1, 2, 4, 8):
        return None
    raw = int(arr.reshape(1).view(f"u{arr.dtype.itemsize}")[0])
    return f"0x{raw:0{2 * arr.dtype.itemsize}x}"


def element_text(value: Any) -> str:
    """One element as a kernel engineer reads it: its value, dtype and bits."""
    arr = np.asarray(value)
    kind = arr.dtype.kind
    if kind == "b":
        return str(bool(arr))
    if kind in "iu":
        return f"{int(arr)} ({arr.dtype.name} {_bits(arr)})"
    try:
        with np.errstate(all="ignore"):
            shown = repr(float(arr.astype(np.float64)))
    except (TypeError, ValueError):
        return str(arr)
    bits = _bits(arr)
    return f"{shown} ({arr.dtype.name}{' ' + bits if bits else ''})"


def array_text(arr: np.ndarray) -> str:
    """A short rendering of an array: dtype, shape and (up to 8 each end) values."""
    arr = np.asarray(arr)
    head = f"{arr.dtype.name}{list(arr.shape)}"
    if arr.ndim == 0:
        return f"{head} {element_text(arr)}"
    try:
        wide = arr.astype(np.float64) if arr.dtype.kind == "V" else arr
        body = np.array2string(wide.reshape(-1), threshold=2 * _SHOWN, edgeitems=_SHOWN // 2,
                               max_line_width=10_000, floatmode="unique", separator=", ")
    except (TypeError, ValueError):
        body = "..."
    if arr.size > 2 * _SHOWN and arr.dtype.kind in "fV":  # the values left out may be the point
        with np.errstate(all="ignore"):
            flat = arr.reshape(-1).astype(np.float64)
        odd = np.flatnonzero(~np.isfinite(flat))
        if len(odd):
            listed = ", ".join(f"{float(flat[i])!r} at {i}" for i in odd[:3]) + (", ..." if len(odd) > 3 else "")
            body += f" (non-finite: {listed})"
    return f"{head} {body}"


def _index_text(name: str, index: Sequence[Any]) -> str:
    return f"{name}[{', '.join(str(i) for i in index)}]"


def locate(arr: np.ndarray, index: Sequence[int], shape: Sequence[int], *, row: bool = False,
           block: int | None = None) -> tuple[str, Any] | None:
    """(the label, the element or sub-array) of `arr` behind output element `index` of
    an output of `shape`; None where the shapes tell nothing."""
    arr, index, shape = np.asarray(arr), tuple(index), tuple(shape)
    if arr.ndim == 0 or len(index) != len(shape) or not shape:
        return None
    lead = index[:-1]
    if arr.shape == shape:
        if row:
            return _index_text("", index), (arr[index], arr[lead], f"the row [{', '.join(map(str, (*lead, ':')))}]")
        if block and block > 1:
            j = index[-1] // block * block
            return _index_text("", index), (arr[index], arr[(*lead, slice(j, j + block))],
                                            f"the block [..., {j}:{j + block}]")
        return _index_text("", index), arr[index]
    if arr.ndim == len(shape) and arr.shape[:-1] == shape[:-1] and shape[-1] and arr.shape[-1]:
        if arr.shape[-1] % shape[-1] == 0:
            k = arr.shape[-1] // shape[-1]
            j = index[-1] * k
            return _index_text("", (*lead, f"{j}:{j + k}")), arr[(*lead, slice(j, j + k))]
        if shape[-1] % arr.shape[-1] == 0:
            at = (*lead, index[-1] // (shape[-1] // arr.shape[-1]))
            return _index_text("", at), arr[at]
    if arr.ndim > len(shape) and arr.shape[:len(shape)] == shape:
        return _index_text("", (*index, ":")), arr[index]
    if 2 <= arr.ndim < len(shape) and arr.shape == shape[:arr.ndim]:  # a per-row value (an LSE)
        return _index_text("", index[:arr.ndim]), arr[index[:arr.ndim]]
    return None


def input_texts(inputs: Mapping[str, Any], index: Sequence[int] | None, shape: Sequence[int] | None, *,
                row: bool = False, block: int | None = None) -> dict[str, str]:
    """{input name: the input element(s) behind output element `index`, as text}."""
    out = {}
    for name, value in inputs.items():
        arr = np.asarray(value)
        found = locate(arr, index, shape, row=row, block=block) if index is not None and shape is not None else None
        if found is None:
            out[name] = array_text(arr) if arr.ndim == 0 or arr.size <= _SHOWN else f"{arr.dtype.name}{list(arr.shape)}"
            continue
        label, got = found
        if isinstance(got, tuple):  # an element and its block or row
            element, whole, where = got
            kind, _, at = where.partition(" [")
            out[name] = f"{name}{label} = {element_text(element)}, in {kind} {name}[{at} = {array_text(whole)}"
        elif np.ndim(got) == 0:
            out[name] = f"{name}{label} = {element_text(got)}" + _id_row(name, arr, label)
        else:
            out[name] = f"{name}{label} = {array_text(got)}"
    return out


def _id_row(name: str, arr: np.ndarray, label: str) -> str:
    """For an element of a short integer row (a tree's parents, a block table, draft
    tokens), the whole row it sits in: one id seldom shows the structure at fault."""
    try:
        index = tuple(int(i) for i in label.strip("[]").split(","))
    except ValueError:
        return ""
    if arr.dtype.kind not in "iu" or arr.ndim < 2 or len(index) != arr.ndim or not 1 < arr.shape[-1] <= 32:
        return ""
    at = ", ".join(str(i) for i in index[:-1])
    return f", in the row {name}[{at}, :] = {array_text(arr[index[:-1]])}"


def accepted_inputs(inputs: Mapping[str, Any]) -> dict[str, str]:
    """{input name: what an invalid input held}: dtype, shape, and its values (the
    non-finite ones and the range, for a large array)."""
    out = {}
    for name, value in inputs.items():
        arr = np.asarray(value)
        if arr.size <= 2 * _SHOWN or arr.dtype.kind not in "iuf":
            out[name] = array_text(arr)
            continue
        text = f"{arr.dtype.name}{list(arr.shape)}"
        with np.errstate(all="ignore"):
            wide = arr.astype(np.float64)
        odd = np.argwhere(~np.isfinite(wide))
        if len(odd):
            first = tuple(int(i) for i in odd[0])
            text += f", {len(odd)} non-finite (first {_index_text(name, first)} = {element_text(arr[first])})"
        finite = arr[np.isfinite(wide)]
        if finite.size:
            low, high = (int(finite.min()), int(finite.max())) if arr.dtype.kind in "iu" else \
                (float(finite.min()), float(finite.max()))
            text += f", finite values in [{low!r}, {high!r}]"
        out[name] = text
    return out


def block_of(arrays: Sequence[Any]) -> int | None:
    """The block size k of a block codec, read from its arrays: two arrays of the same
    rank and leading axes whose last axes differ by a factor k > 1 (x and its scales,
    codes and packed bytes); None when there are none."""
    shapes = [np.shape(a) for a in arrays if np.ndim(a)]
    for a in shapes:
        for b in shapes:
            if len(a) == len(b) and a[:-1] == b[:-1] and b[-1] and a[-1] > b[-1] and a[-1] % b[-1] == 0:
                return a[-1] // b[-1]
    return None


def element_case(case: Case, index: Sequence[int], shape: Sequence[int], block: int | None = None) -> Case | None:
    """The case cut down to the input elements behind output element `index`: each
    input of the output's shape reduced to that element (to its block for a block
    codec), inputs with a k-times-longer last axis to that block; None when an input
    does not line up (its flags are then the whole case's)."""
    index, shape = tuple(index), tuple(shape)
    cut = {}
    for name, value in case.inputs.items():
        arr = np.asarray(value)
        if arr.shape == shape and arr.ndim:
            if block and block > 1:
                j = index[-1] // block * block
                cut[name] = arr[(*index[:-1], slice(j, j + block))].reshape(1, -1)
            else:
                cut[name] = arr[index].reshape(1)
        elif arr.ndim == len(shape) and arr.ndim and arr.shape[:-1] == shape[:-1] and shape[-1] \
                and arr.shape[-1] and arr.shape[-1] % shape[-1] == 0:
            k = arr.shape[-1] // shape[-1]
            cut[name] = arr[(*index[:-1], slice(index[-1] * k, index[-1] * k + k))].reshape(1, -1)
        elif arr.ndim == len(shape) and arr.ndim and arr.shape[:-1] == shape[:-1] and arr.shape[-1] \
                and shape[-1] % arr.shape[-1] == 0:  # a block's scale behind an element
            cut[name] = arr[(*index[:-1], index[-1] // (shape[-1] // arr.shape[-1]))].reshape(1, 1)
        elif arr.ndim == 0:
            cut[name] = arr
        else:
            return None
    return Case(cut, dict(case.params))
