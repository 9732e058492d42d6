"""What the roofline catalog modules share: the area (its dotted prefix and spec page),
the flags more than one op's vectors carry, each explained once, and the vectors every
op derives from one valid case of 0-d inputs (`invalid_vectors`, `dtype_vectors`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from ref.testing.catalog_types import Area, Flag
from ref.testing.vector_files import Case, VectorSpec

__all__ = ["AREA", "SHARED_FLAGS", "dtype_vectors", "invalid_vectors", "scalar_case"]

AREA = Area("roofline", spec="spec/roofline.md")

SHARED_FLAGS = {
    "GQA": Flag("k and v (their projections, cache or state) sized by the query heads where the KV heads are fewer",
                "MHA's size reported for a GQA model: k and v counted heads/kv_heads times too large"),
    "Int64": Flag("a count computed in int32 or float64 (wraps past 2^31, rounds past 2^53)",
                  "a large model's count wraps negative or loses its last digits"),
    "CeilOnce": Flag("bits rounded up to bytes per element, row, block, token, layer or head, then summed, instead "
                     "of once over the whole quantity",
                     "sub-byte formats come out too large: an odd 4-bit row gains half a byte, a 3-bit cache a byte "
                     "per layer"),
}

INVALID = ("InvalidInput",)


def scalar_case(case: Case) -> dict[str, np.ndarray]:
    """The inputs of `case` as 0-d arrays of their dtypes (the first element of each)."""
    return {k: np.asarray(np.asarray(v).reshape(-1)[0]) for k, v in case.inputs.items()}


def invalid_vectors(base: Case, *, counts: Sequence[str] = (), flags: Sequence[str] = (),
                    reals: Sequence[str] = ()) -> list[VectorSpec]:
    """The invalid inputs every roofline op refuses, derived from one valid `base`
    (its first element of every input, as 0-d arrays): each count negative in turn,
    as bool and as float64; each bool switch as int64; each real as int64, NaN and
    +inf; and the first and the last input of shape (1,) beside 0-d others (the same
    size, another shape). `counts`, `flags`, `reals`: the op's input names by kind."""
    x, params = scalar_case(base), dict(base.params)
    out: list[VectorSpec] = []

    def add(comment: str, extra: tuple[str, ...] = (), **change: np.ndarray) -> None:
        out.append(VectorSpec(comment, INVALID + extra, Case({**x, **change}, params), "invalid"))

    for n in counts:
        add(f"a negative {n} is rejected (the others valid)", **{n: np.asarray(-1, np.int64)})
        add(f"a bool {n} is rejected (counts are integers, TypeError)", **{n: np.asarray(True)})
        add(f"a float64 {n} is rejected (counts are integers, TypeError)", **{n: x[n].astype(np.float64)})
    for n in flags:
        add(f"an int64 {n} (1) is rejected where a bool is expected (TypeError)",
            **{n: np.asarray(int(x[n]) or 1, np.int64)})
    for n in reals:
        add(f"an int64 {n} is rejected (a float64 quantity, TypeError)", **{n: np.asarray(max(int(x[n]), 1))})
        add(f"NaN {n} is rejected", ("NaN",), **{n: np.asarray(np.nan)})
        add(f"+inf {n} is rejected", **{n: np.asarray(np.inf)})
    names = list(x)
    for n in dict.fromkeys((names[0], names[-1])):
        add(f"{n} of shape (1,) beside 0-d inputs is rejected (one size, another shape: no broadcasting)",
            **{n: x[n].reshape(1)})
    return out


def dtype_vectors(cases: Iterable[tuple[str, Case, Sequence[type]]], counts: Sequence[str],
                  flags: tuple[str, ...] = ("Int64",)) -> list[VectorSpec]:
    """Valid vectors whose count inputs come in other integer dtypes (the spec takes any):
    (comment, case, dtypes) each; an exact op computes in Python ints whatever the
    inputs' dtype, so int32 or uint8 arithmetic (which wraps) is caught where the
    result passes the dtype's range."""
    out = []
    for comment, case, dtypes in cases:
        for dt in dtypes:
            info = np.iinfo(dt)
            ins = {k: (np.asarray(v).astype(dt) if k in counts else np.asarray(v)) for k, v in case.inputs.items()}
            for k in counts:
                v = np.asarray(case.inputs[k])
                if v.size and (v.min() < info.min or v.max() > info.max):
                    raise ValueError(f"dtype_vectors: {k} does not fit {np.dtype(dt).name}")
            out.append(VectorSpec(f"{comment}, as {np.dtype(dt).name} inputs", flags, Case(ins, dict(case.params))))
    return out
