"""Hypothesis strategies for kernel inputs, public and keyword-only.

hypothesis cannot infer bfloat16 or FP8 dtypes, so low-precision arrays are drawn
as bit patterns. The curated edge values of a format (zeros, subnormal and normal
extremes, max plus half an ulp, every rounding tie and its neighbours, NaN, Inf)
are plain functions too, so a test can enumerate them instead of sampling.

Arguments that shape a draw are themselves strategies (xarray's convention).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from numpy.typing import NDArray

from ref.formats.minifloat import FloatFormat, decode, get_format

__all__ = [
    "FLOAT_DTYPES",
    "block_shapes",
    "both_signs",
    "codes",
    "edge_arrays",
    "edge_values",
    "element_inputs",
    "float_bits_arrays",
    "outlier_arrays",
    "realistic_arrays",
    "representable_values",
    "rounding_ties",
    "small_shapes",
    "spread",
    "variant_grid",
]

FLOAT_DTYPES = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))


def small_shapes(*, max_dims: int = 3, max_side: int = 16) -> st.SearchStrategy[tuple[int, ...]]:
    """Array shapes of 1..max_dims axes, each 1..max_side long."""
    return hnp.array_shapes(min_dims=1, max_dims=max_dims, min_side=1, max_side=max_side)


def block_shapes(
    *, block: int, max_blocks: int = 8, leading: st.SearchStrategy[tuple[int, ...]] | None = None
) -> st.SearchStrategy[tuple[int, ...]]:
    """Shapes whose last axis is a whole number (>= 1) of `block`-element blocks."""
    if block < 1:
        raise ValueError(f"block: expected a positive block size, got {block}")
    leading = hnp.array_shapes(min_dims=0, max_dims=2, min_side=1, max_side=4) if leading is None else leading
    return st.tuples(leading, st.integers(1, max_blocks)).map(lambda t: (*t[0], t[1] * block))


def codes(
    fmt: str | FloatFormat, *, shape: st.SearchStrategy[tuple[int, ...]] | None = None
) -> st.SearchStrategy[NDArray]:
    """Arrays of raw codes of `fmt`: every bit pattern of its width, NaN and Inf included."""
    f = get_format(fmt)
    shape = small_shapes() if shape is None else shape
    return hnp.arrays(f.code_dtype, shape, elements=st.integers(0, (1 << f.nbits) - 1))


def float_bits_arrays(
    *, dtype: st.SearchStrategy[np.dtype] | None = None,
    shape: st.SearchStrategy[tuple[int, ...]] | None = None,
) -> st.SearchStrategy[NDArray]:
    """float16/32/64 arrays from uniformly random bit patterns (NaN, Inf, subnormals)."""
    dtype = st.sampled_from(FLOAT_DTYPES[1:]) if dtype is None else dtype
    shape = small_shapes() if shape is None else shape

    def draw_bits(args):
        dt, shp = args
        uint = np.dtype(f"uint{8 * dt.itemsize}")
        return hnp.arrays(uint, shp, elements=st.integers(0, (1 << (8 * dt.itemsize)) - 1)).map(
            lambda a: a.view(dt)
        )

    return st.tuples(dtype, shape).flatmap(draw_bits)


@lru_cache(maxsize=None)
def representable_values(fmt: str | FloatFormat) -> NDArray[np.float64]:
    """Every finite value of `fmt`, ascending, with one zero."""
    f = get_format(fmt)
    if f.nbits > 16:
        raise ValueError(f"fmt: {f.name} has too many codes to list")
    all_codes = np.arange(1 << f.nbits, dtype=np.int64).astype(f.code_dtype)
    values = decode(all_codes, f).astype(np.float64)
    return np.unique(values[np.isfinite(values)])


@lru_cache(maxsize=None)
def rounding_ties(fmt: str | FloatFormat) -> NDArray[np.float64]:
    """Every midpoint between two neighbouring finite values of `fmt` (both signs),
    and the midpoint between max and the next power-of-two step past it."""
    f = get_format(fmt)
    v = representable_values(f)
    mids = (v[:-1] + v[1:]) / 2
    top = v[-1] + f.ulp_at_max / 2  # max plus half an ulp
    mids = np.concatenate([mids, [top, -top] if f.signed else [top]])
    return np.unique(mids)


@lru_cache(maxsize=None)
def edge_values(fmt: str | FloatFormat, dtype: np.dtype | type = np.float32) -> dict[str, NDArray]:
    """Curated edge inputs for encoding to `fmt`, as `dtype` arrays by class.

    Classes: zeros, subnormals, normals (extremes), overflow, ties (every rounding
    midpoint), tie_neighbours (one `dtype` ulp either side of each tie), special
    (NaN and Inf of both signs).
    """
    f = get_format(fmt)
    dt = np.dtype(dtype)
    tiny, mn, mx = f.min_subnormal, f.min_normal, f.max_normal
    with np.errstate(over="ignore"):
        ties = rounding_ties(f).astype(dt)
        classes = {
            "zeros": [0.0, -0.0],
            "subnormals": [tiny, -tiny, mn - tiny, tiny / 2, -tiny / 2, tiny / 4] if f.has_subnormals else [],
            "normals": [mn, -mn, mx, -mx, 1.0, -1.0],
            "overflow": [2 * mx, -2 * mx, float(np.finfo(dt).max), -float(np.finfo(dt).max)],
            "special": [np.nan, -np.nan, np.inf, -np.inf],
        }
        out = {k: np.array(v, dtype=np.float64).astype(dt) for k, v in classes.items()}
    out["ties"] = ties
    out["tie_neighbours"] = np.concatenate(
        [np.nextafter(ties, np.array(np.inf, dt)), np.nextafter(ties, np.array(-np.inf, dt))]
    )
    return out


def edge_arrays(
    fmt: str | FloatFormat, *, dtype: st.SearchStrategy[np.dtype] | None = None,
    shape: st.SearchStrategy[tuple[int, ...]] | None = None,
) -> st.SearchStrategy[NDArray]:
    """Arrays mixing `fmt`'s edge values (every class of `edge_values`) with random bits:
    either a few elements drawn one by one over a drawn fill value (these shrink to
    small arrays of simple values: +0, then the first edge values), or every element
    from a seeded generator, half of them edge values (dense, and one draw however
    large the array; a smaller shape keeps the first elements)."""
    f = get_format(fmt)
    dtype = st.sampled_from(FLOAT_DTYPES[1:]) if dtype is None else dtype
    shape = small_shapes() if shape is None else shape

    def draw(args):
        dt, shp = args
        uint, pool, element = _edge_bits(f, np.dtype(dt))
        top = (1 << (8 * dt.itemsize)) - 1
        sparse = hnp.arrays(uint, shp, elements=element)

        def dense(seed: int) -> NDArray:
            n = int(np.prod(shp))
            picks = np.random.default_rng([seed, 0]).integers(0, pool.size, n)
            bits = np.random.default_rng([seed, 1]).integers(0, top, n, dtype=uint, endpoint=True)
            use_pool = np.random.default_rng([seed, 2]).random(n) < 0.5
            return np.where(use_pool, pool[picks], bits).reshape(shp)

        return st.one_of(sparse, st.integers(0, 2**32 - 1).map(dense)).map(lambda a: a.view(dt))

    return st.tuples(dtype, shape).flatmap(draw)


@lru_cache(maxsize=None)
def _edge_bits(f: FloatFormat, dt: np.dtype) -> tuple[np.dtype, NDArray, st.SearchStrategy[int]]:
    """edge_arrays' bit patterns of `dt`: the unsigned dtype, the edge values' bits and
    the element strategy, built once (a sampled_from of a thousand values costs
    milliseconds to label). Bit patterns, not floats: integers give hypothesis a fill
    value (sparse, cheap draws) and shrink toward 0, the bits of +0."""
    uint = np.dtype(f"uint{8 * dt.itemsize}")
    pool = np.unique(np.concatenate(list(edge_values(f, dt).values())).view(uint))
    return uint, pool, st.one_of(st.integers(0, (1 << (8 * dt.itemsize)) - 1), st.sampled_from(pool.tolist()))


def _seeded(shape, dtype, fill):
    return st.tuples(shape, dtype, st.integers(0, 2**32 - 1)).map(
        lambda t: fill(np.random.default_rng(t[2]), t[0]).astype(t[1])
    )


def realistic_arrays(
    *, dtype: st.SearchStrategy[np.dtype] | None = None,
    shape: st.SearchStrategy[tuple[int, ...]] | None = None,
    scale: st.SearchStrategy[float] | None = None,
) -> st.SearchStrategy[NDArray]:
    """Gaussian arrays at a drawn magnitude, like activations or weights (seeded, fast)."""
    dtype = st.sampled_from(FLOAT_DTYPES[1:]) if dtype is None else dtype
    shape = small_shapes(max_side=64) if shape is None else shape
    scale = st.sampled_from([1e-4, 1e-2, 0.1, 1.0, 10.0, 300.0]) if scale is None else scale
    def scaled(t):
        with np.errstate(over="ignore"):  # float16 at scale 300 may reach Inf: a value like any other
            return (t[0] * t[1]).astype(t[2])

    return st.tuples(_seeded(shape, st.just(np.float64), lambda rng, s: rng.standard_normal(s)), scale,
                     dtype).map(scaled)


def outlier_arrays(
    *, dtype: st.SearchStrategy[np.dtype] | None = None,
    shape: st.SearchStrategy[tuple[int, ...]] | None = None,
    fraction: st.SearchStrategy[float] | None = None,
    magnitude: st.SearchStrategy[float] | None = None,
) -> st.SearchStrategy[NDArray]:
    """Gaussian arrays where a drawn fraction of elements (at least one) is pushed to
    (|x| + 1) * magnitude: the outlier channels that inflate a block's scale."""
    dtype = st.sampled_from(FLOAT_DTYPES[1:]) if dtype is None else dtype
    shape = small_shapes(max_side=64) if shape is None else shape
    fraction = st.sampled_from([0.001, 0.01, 0.05]) if fraction is None else fraction
    magnitude = st.sampled_from([20.0, 100.0, 1000.0]) if magnitude is None else magnitude

    def fill(t):
        shp, dt, seed, frac, mag = t
        rng = np.random.default_rng(seed)
        x = rng.standard_normal(shp)
        hit = rng.random(shp) < frac
        if x.size:
            hit.flat[rng.integers(x.size)] = True  # at least one outlier
        return np.where(hit, np.copysign(np.abs(x) + 1, x) * mag, x).astype(dt)

    return st.tuples(shape, dtype, st.integers(0, 2**32 - 1), fraction, magnitude).map(fill)


def element_inputs(fmt: str | FloatFormat, *,
                   dtype: st.SearchStrategy[np.dtype] | None = None) -> st.SearchStrategy[NDArray]:
    """Inputs for encoding to `fmt`: edge-value mixes, random bit patterns, or Gaussian
    arrays at the format's small, unit or large magnitudes (float16/32/64 by default)."""
    f = get_format(fmt)
    dtype = st.sampled_from(FLOAT_DTYPES) if dtype is None else dtype
    return st.one_of(
        edge_arrays(f, dtype=dtype),
        float_bits_arrays(dtype=dtype),
        realistic_arrays(dtype=dtype, scale=st.sampled_from([f.min_normal, 1.0, f.max_normal / 8])),
    )


def variant_grid(supported: Mapping[str, Sequence[Any]], *, skip: Mapping[str, Sequence[Any]] | None = None
                 ) -> list[dict[str, Any]]:
    """Every combination of the supported variant values (for exhaustive sweeps), in
    the order given; `skip` leaves values out of an axis."""
    skip = skip or {}
    axes = list(supported)
    values = [[v for v in supported[a] if v not in skip.get(a, ())] for a in axes]
    return [dict(zip(axes, combo)) for combo in itertools.product(*values)]


def spread(values: NDArray, n: int) -> NDArray:
    """All of `values` if there are at most n, else both ends (16 each) and n evenly
    spaced between them: a deterministic sample of a sorted grid."""
    values = np.asarray(values)
    if values.size <= n:
        return values
    idx = np.unique(np.concatenate([np.arange(16), np.linspace(0, values.size - 1, n).astype(int),
                                    np.arange(values.size - 16, values.size)]))
    return values[idx]


def both_signs(values) -> NDArray[np.float64]:
    """`values` as float64 followed by their negatives ([v, -v]; 0 gives +0 and -0)."""
    v = np.atleast_1d(np.asarray(values, dtype=np.float64))
    return np.concatenate([v, -v])
