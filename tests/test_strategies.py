"""The public strategies deliver what they promise."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import Phase, find, given, settings
from hypothesis import strategies as st

from ref.formats import FORMATS, decode, encode
from ref.testing.strategies import (
    FLOAT_DTYPES,
    block_shapes,
    both_signs,
    codes,
    edge_arrays,
    edge_values,
    element_inputs,
    float_bits_arrays,
    outlier_arrays,
    realistic_arrays,
    representable_values,
    rounding_ties,
    spread,
    variant_grid,
)

NAMES = list(FORMATS)


@pytest.mark.parametrize("name", NAMES)
def test_edge_values_cover_every_class(name):
    f = FORMATS[name]
    ev = edge_values(f, np.float32)
    assert set(ev) == {"zeros", "subnormals", "normals", "overflow", "special", "ties", "tie_neighbours"}
    assert np.signbit(ev["zeros"]).tolist() == [False, True]
    assert f.max_normal in ev["normals"] and f.min_normal in ev["normals"]
    assert np.isnan(ev["special"]).sum() == 2 and np.isinf(ev["special"]).sum() == 2
    if f.has_subnormals:
        assert f.min_subnormal in ev["subnormals"]
    top_tie = f.max_normal + f.ulp_at_max / 2
    assert top_tie in ev["ties"]


@pytest.mark.parametrize("name", NAMES)
def test_ties_are_exact_midpoints(name):
    f = FORMATS[name]
    v = representable_values(f)
    ties = rounding_ties(f)
    pos = ties[ties > 0]
    i = np.searchsorted(v, pos)
    inner = i < len(v)
    assert np.array_equal(pos[inner] * 2, v[i[inner]] + v[i[inner] - 1])
    # RNE lands on a neighbour with an even code (or overflows past max).
    c = encode(pos.astype(np.float32), f, overflow="saturate")
    assert (((c & 1) == 0) | (c == f.max_code)).all()


@given(name=st.sampled_from(NAMES), data=st.data())
def test_codes_stay_inside_the_format(name, data):
    f = FORMATS[name]
    c = data.draw(codes(f))
    assert c.dtype == f.code_dtype and (c.astype(np.int64) < (1 << f.nbits)).all()
    decode(c, f)  # every drawn code is decodable


def test_codes_reach_nan_and_the_top_code():
    f = FORMATS["float8_e4m3fn"]
    find(codes(f), lambda c: (c == 0x7F).any())
    find(codes(f), lambda c: (c == 0x7E).any())


@given(data=st.data())
def test_float_bits_arrays_reach_specials(data):
    x = data.draw(float_bits_arrays(dtype=st.just(np.dtype(np.float32))))
    assert x.dtype == np.float32


def test_float_bits_and_edge_arrays_find_every_class():
    f = FORMATS["float8_e5m2"]
    for pred in (lambda x: np.isnan(x).any(), lambda x: np.isinf(x).any(),
                 lambda x: ((x != 0) & (np.abs(x) < f.min_normal)).any(),
                 lambda x: (np.abs(x) > f.max_normal).any() & np.isfinite(x).all()):
        find(edge_arrays(f, dtype=st.just(np.dtype(np.float32))), pred,
             settings=settings(max_examples=2000, phases=(Phase.generate,)))  # found is enough: no shrinking
    find(edge_arrays(f), lambda x: x.dtype == np.float64)


def test_edge_arrays_are_dense_sometimes_and_shrink_to_one_simple_element():
    """Dense arrays of many distinct values are drawn (the seeded half), and a failure
    that one element shows shrinks to a one-element array holding the simplest value
    that fails (here the first one past 1: a normal-class edge value or small bits)."""
    f = FORMATS["float8_e4m3fn"]
    flat = settings(max_examples=300, phases=(Phase.generate,), database=None)
    find(edge_arrays(f), lambda x: x.size >= 64 and np.unique(x[np.isfinite(x)]).size >= x.size // 2, settings=flat)
    minimal = find(edge_arrays(f, dtype=st.just(np.dtype(np.float32))), lambda x: bool((np.abs(x) > 1).any()),
                   settings=settings(max_examples=100, database=None))
    assert minimal.shape == (1,), minimal
    assert minimal.view(np.uint32)[0] < 0x40000000 or abs(minimal[0]) <= f.max_normal, minimal


@given(shape=block_shapes(block=32))
def test_block_shapes(shape):
    assert shape[-1] % 32 == 0 and shape[-1] >= 32


def test_block_shapes_rejects_bad_block():
    with pytest.raises(ValueError, match="block"):
        block_shapes(block=0)


@given(x=realistic_arrays(scale=st.just(10.0), dtype=st.just(np.dtype(np.float32))))
def test_realistic_arrays_have_the_drawn_scale(x):
    assert x.dtype == np.float32 and np.isfinite(x).all()
    if x.size > 200:
        assert 5 < x.std() < 20


@given(x=outlier_arrays(fraction=st.just(0.01), magnitude=st.just(1000.0), dtype=st.just(np.dtype(np.float64))))
def test_outlier_arrays_have_an_outlier(x):
    assert np.abs(x).max() >= 1000.0
    assert np.median(np.abs(x)) < 1000.0 or x.size < 8


@given(x=element_inputs("float8_e4m3fn"))
def test_element_inputs_are_encodable_floats(x):
    assert x.dtype in FLOAT_DTYPES
    encode(x, "float8_e4m3fn")  # never rejected


def test_element_inputs_reach_ties_subnormals_and_specials():
    ties = set(rounding_ties("float4_e2m1fn").tolist())
    tie = find(element_inputs("float4_e2m1fn"), lambda x: any(float(v) in ties for v in x.ravel()),
               settings=settings(phases=[Phase.generate], max_examples=2000))
    assert tie.size
    find(element_inputs("float4_e2m1fn"), lambda x: bool(np.isnan(x).any()),
         settings=settings(phases=[Phase.generate], max_examples=2000))


SUPPORTED = {"rounding": ["nearest_even", "toward_zero"], "sr_bits": [32, 8], "tile_2d": [False]}


def test_variant_grid_is_the_product_in_order():
    grid = variant_grid(SUPPORTED)
    assert len(grid) == 4 and grid[0] == {"rounding": "nearest_even", "sr_bits": 32, "tile_2d": False}
    assert len({tuple(sorted(g.items())) for g in grid}) == 4
    assert variant_grid(SUPPORTED, skip={"sr_bits": [8]}) == [g for g in grid if g["sr_bits"] == 32]
    assert variant_grid({}) == [{}]


def test_spread_keeps_both_ends_and_thins_the_middle():
    v = np.arange(1000.0)
    s = spread(v, 50)
    assert s[:16].tolist() == list(range(16)) and s[-16:].tolist() == list(range(984, 1000))
    assert 50 <= s.size <= 82 and (np.diff(s) > 0).all()
    assert spread(v[:40], 50).tolist() == v[:40].tolist()


def test_both_signs():
    assert both_signs([0.0, 1.5]).tolist() == [0.0, 1.5, -0.0, -1.5]
    assert np.signbit(both_signs(0.0)).tolist() == [False, True]
