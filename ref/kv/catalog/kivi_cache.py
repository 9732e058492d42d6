"""KIVI's cache bookkeeping and attention over it (spec/kv.md#kivi-cache, #kivi-attend).

  kv.kivi.cache   stateful: KiviCache(bits_k, bits_v, group, residual, dtype); prefill(keys,
                  values) once, then decode(keys, values) of one token each; every step
                  observes the four counts and the dequantized [quantized | full] keys and values
  kv.kivi.attend  bounded: q [B, Hq, Lq, D] over the cache a prefill of k, v [B, H, T, D] leaves
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ref.kv import kivi_cache
from ref.kv.catalog.common import AREA
from ref.kv.catalog.kivi import BITS, integers
from ref.testing.bounded import Bound
from ref.testing.catalog_types import Flag, Variant, seed_for
from ref.testing.flags import EMPTY_INPUT, INVALID_INPUT, RANDOM
from ref.testing.stateful import StatefulOp, TraceSpec
from ref.testing.vector_files import Case, VectorSpec

__all__ = ["FLAGS", "OPERATIONS"]

FLAGS = {
    "KiviResidualWindow": Flag("the prefill split off by one: P % R - 1 or + 1 keys left full, R - 1 or R + 1 "
                               "values left full, or P == R treated as P < R",
                               "the wrong tokens are quantized: counts and the dequantized cache differ"),
    "KiviKeyFlush": Flag("keys flushed when the buffer holds R + 1 tokens (or R - 1) instead of R",
                         "groups of G tokens straddle a flush: other scales, one token too many kept full"),
    "KiviValueFlush": Flag("values flushed when the buffer holds R (not R + 1), or more than the oldest one token",
                           "the window keeps R - 1 full-precision values; the newest value is quantized early"),
    "KiviStaleBuffer": Flag("after a flush, the full-precision buffer still read (not emptied, or the flushed "
                            "tokens read at full precision instead of dequantized)",
                            "tokens appear twice in the cache, or the cache reads values it no longer holds"),
    "KiviRequantize": Flag("at a key flush the whole key history (the dequantized old keys with the new window) "
                           "quantized again, as transformers' QuantizedCache does, instead of the R new keys alone",
                           "old keys drift at every flush: a group whose maximum does not decode to itself gets "
                           "another scale, and its tokens other values"),
    "KiviStaleState": Flag("state carried across calls or past a refused step: a dequantized cache memoized on "
                           "shapes and params, or a decode that appends its keys before its values are refused",
                           "a call reads another call's cache, or the cache holds a token that was refused"),
    "KiviBitsPerTensor": Flag("one bit width for keys and values: bits_k used for the values (or bits_v for the keys)",
                              "values decoded on the keys' levels where the two widths differ"),
}

B_K = Variant("bits_k", BITS.values, 2, "bits per key code")
B_V = Variant("bits_v", BITS.values, 2, "bits per value code")
GROUP = Variant("group", (32, 2, 4, 8, 16), 32, "G: tokens per key group and channels per value group")
RESIDUAL = Variant("residual", (128, 4, 8, 16, 32), 128, "R: the full-precision window, a multiple of G")
DTYPE = Variant("dtype", ("float16", "float32", "float64"), "float16", "the cache's dtype: the codec's arithmetic")

P, D = "prefill", "decode"
_SMALL = {"group": 2, "residual": 4}


def _tokens(rng, t: int, d: int = 4, h: int = 1, span: int = 40) -> list:
    """[1, h, t, d] integers times 2^-6 with channel 1 an outlier (x16), as nested lists."""
    return integers(rng, (1, h, t, d), np.float64, span=span).tolist()


def _run(rng, prefill: int, decodes: int, d: int = 4, h: int = 1) -> tuple:
    steps = [(P, {"keys": _tokens(rng, prefill, d, h), "values": _tokens(rng, prefill, d, h)})]
    return tuple(steps + [(D, {"keys": _tokens(rng, 1, d, h), "values": _tokens(rng, 1, d, h)})
                          for _ in range(decodes)])


def _traces() -> list[TraceSpec]:
    rng = np.random.default_rng(seed_for("kv.kivi.cache"))
    flush = ("KiviKeyFlush", "KiviValueFlush", "KiviStaleBuffer")
    one = {"keys": _tokens(rng, 1), "values": _tokens(rng, 1)}
    return [
        TraceSpec("prefill of 3 < R = 4: all full; decodes through the first key flush (R) and value flush (R + 1)",
                  ("KiviResidualWindow", *flush), _run(rng, 3, 6), _SMALL),
        TraceSpec("prefill of exactly R: every key quantized, every value full", ("KiviResidualWindow", *flush),
                  _run(rng, 4, 5), _SMALL),
        TraceSpec("prefill of R + 1: one value quantized, keys 4 quantized and 1 full", ("KiviResidualWindow",),
                  _run(rng, 5, 4), _SMALL),
        TraceSpec("prefill of 2R + 3 = 11: keys 8 + 3, values 7 + 4; decodes through two key flushes",
                  ("KiviResidualWindow", "KiviKeyAxis", *flush), _run(rng, 11, 5), _SMALL),
        TraceSpec("a prefill of one token, then decodes", flush, _run(rng, 1, 6), _SMALL),
        TraceSpec("4-bit keys, 8-bit values, G = 4, R = 8, prefill 13", ("KiviResidualWindow", "KiviKeyAxis", *flush),
                  _run(rng, 13, 4), {"group": 4, "residual": 8, "bits_k": 4, "bits_v": 8}),
        TraceSpec("a float32 cache", ("KiviArithmeticDtype", *flush), _run(rng, 6, 4),
                  {**_SMALL, "dtype": "float32"}),
        TraceSpec("G = R = 2: keys flushed every second token", flush, _run(rng, 1, 5), {"group": 2, "residual": 2}),
        TraceSpec("decode before prefill is refused and changes nothing", (INVALID_INPUT,),
                  ((D, one), *_run(rng, 2, 3)), _SMALL, "invalid", refused=(1,)),
        TraceSpec("a second prefill is refused", (INVALID_INPUT,),
                  (*_run(rng, 3, 1), (P, one), (D, one)), _SMALL, "invalid", refused=(3,)),
        TraceSpec("a decode of two tokens is refused", (INVALID_INPUT,),
                  (*_run(rng, 3, 0), (D, {"keys": _tokens(rng, 2), "values": _tokens(rng, 2)}), (D, one)),
                  _SMALL, "invalid", refused=(2,)),
        TraceSpec("a decode with another head dim is refused", (INVALID_INPUT,),
                  (*_run(rng, 3, 0), (D, {"keys": _tokens(rng, 1, 6), "values": _tokens(rng, 1, 6)}), (D, one)),
                  _SMALL, "invalid", refused=(2,)),
        TraceSpec("a key of 70000, beyond float16's range, is refused", (INVALID_INPUT,),
                  (*_run(rng, 3, 0), (D, {"keys": [[[[70000.0] * 4]]], "values": one["values"]}), (D, one)),
                  _SMALL, "invalid", refused=(2,)),
        TraceSpec("a value 0.1 that float16 cannot hold is refused", (INVALID_INPUT,),
                  (*_run(rng, 3, 0), (D, {"keys": one["keys"], "values": [[[[0.1, 0, 0, 0]]]]})), _SMALL, "invalid"),
        TraceSpec("a residual that is not a multiple of the group is refused", (INVALID_INPUT,), (),
                  {"group": 4, "residual": 6}, "invalid"),
        # ADV15 (kivi): the traces below close gaps an adversary's one-change kernels found.
        TraceSpec("keys re-quantized with their history at the second flush drift (G = R = 4, 2 bits): key "
                  "channel 0 = 89.3125, 29.296875, 63.46875, 147.75, whose maximum decodes to 147.625",
                  ("KiviRequantize",), _requantize(), {"group": 4, "residual": 4}),
        TraceSpec("a decode whose values alone are refused appends no key: the next decode flushes R keys",
                  (INVALID_INPUT, "KiviStaleState"),
                  (*_run(rng, 3, 0), (D, {"keys": one["keys"], "values": [[[[0.1, 0, 0, 0]]]]}), (D, one), (D, one)),
                  _SMALL, "invalid", refused=(2,)),
        TraceSpec("a float64 cache: codes and scales in float64 (a float32 cache quantizes 0.25, 0.75 to other "
                  "values)", ("KiviArithmeticDtype", *flush), _f64_run(rng), {"group": 4, "residual": 4,
                                                                              "dtype": "float64"}),
        TraceSpec("8-bit keys, 2-bit values, G = R = 4 (keys at 4 bits: other levels)", ("KiviScaleLevels", *flush),
                  _run(rng, 6, 5),
                  {"group": 4, "residual": 4, "bits_k": 8}),
        TraceSpec("2 bits, G = 8, R = 16, D = 16 (the reference packs R keys and D value channels into int32 "
                  "words, 16 codes a word): prefill 31, keys 16 + 15 and values 15 + 16; a decode flushes 16 keys "
                  "and one value", ("KiviResidualWindow", "KiviKeyAxis", *flush),
                  _run(rng, 31, 1, d=16), {"group": 8, "residual": 16}),
        TraceSpec("the defaults (2 bits, G = 32, R = 128, float16), for a kernel built for them only: prefill 127 "
                  "(all full), D = 32; the first decode flushes 128 keys, the second one value",
                  ("KiviResidualWindow", *flush), _run(rng, 127, 2, d=32), {}),
    ]


def _requantize() -> tuple:
    """A prefill of 4 tokens (keys: channel 0 non-zero, values 0), then 4 decodes of key
    (1, 0, 0, 0): the second key flush. Exact: each value is an integer times 2^-6."""
    ch0 = [89.3125, 29.296875, 63.46875, 147.75]
    keys = [[[[x, 0.0, 0.0, 0.0] for x in ch0]]]
    zeros = [[[[0.0] * 4] * 4]]
    step = {"keys": [[[[1.0, 0.0, 0.0, 0.0]]]], "values": [[[[0.0] * 4]]]}
    return ((P, {"keys": keys, "values": zeros}), *[(D, step)] * 4)


def _f64_run(rng) -> tuple:
    """A random prefill of 6 tokens with key channel 0 of the first 4 = 0, 0.25, 0.75, 1
    (keys at 2 bits decode to 0, 1/3, 2/3, 1 in float64), then 5 decodes."""
    steps = _run(rng, 6, 5)
    prefill = steps[0][1]
    for i, x in enumerate((0.0, 0.25, 0.75, 1.0)):
        prefill["keys"][0][0][i][0] = x
    return steps


def _steps(model) -> st.SearchStrategy:
    """A prefill of 0 .. 3R tokens first, then decodes; one step in 10 a refused one."""
    def build(draw):
        seed, kind, n, h, m = draw
        rng = np.random.default_rng(seed)
        if model.k_full is None:
            d = model.group * m
            t = 1 + n % (3 * model.residual)  # JSON lists of 0 tokens lose D
            if kind == 0:
                return D, {"keys": _tokens(rng, 1, d, h), "values": _tokens(rng, 1, d, h)}
            return P, {"keys": _tokens(rng, t, d, h), "values": _tokens(rng, t, d, h)}
        _, h, _, d = model.k_full.shape
        t = 2 if kind == 0 else 1
        return (P if kind == 1 else D), {"keys": _tokens(rng, t, d, h), "values": _tokens(rng, t, d, h)}
    return st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 9), st.integers(0, 10**6), st.integers(1, 2),
                     st.integers(1, 2)).map(build)


def _examples(supported):
    def params(p):
        g = p["group"]
        return {**p, "residual": g * p["mult"], "mult": None} if g <= 8 else {**p, "group": 4, "residual": 8}
    grid = st.fixed_dictionaries({
        "bits_k": st.sampled_from(list(supported.get("bits_k", (2,)))),
        "bits_v": st.sampled_from(list(supported.get("bits_v", (2,)))),
        "group": st.sampled_from([g for g in supported.get("group", (32,)) if g <= 8] or [4]),
        "mult": st.integers(1, 3), "dtype": st.sampled_from(list(supported.get("dtype", ("float16",))))})
    return grid.map(params).map(lambda p: {k: v for k, v in p.items() if k != "mult"})


def _snapshot(cache) -> dict:
    return cache.counts() if cache.k_full is not None else {"prefilled": False}


OUT_BOUND = Bound(k=2.0, floor=2.0, scale="relative")


def _attend_case(rng, b, hq, h, lq, t, d, **params) -> Case:
    q = integers(rng, (b, hq, lq, d), np.float16, outlier=False, span=64)
    k = integers(rng, (b, h, t, d), np.float16)
    v = integers(rng, (b, h, t, d), np.float16, outlier=False)
    return Case({"q": q, "k": k, "v": v}, params)


def _attend_vectors() -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for("kv.kivi.attend"))
    small = {"group": 4, "residual": 8}
    return [
        VectorSpec("T = 3R + 5 = 29 tokens: keys 24 quantized + 5 full, values 21 + 8, GQA 4 -> 2", ("KiviResidualWindow",
                   "KiviKeyAxis", RANDOM), _attend_case(rng, 1, 4, 2, 3, 29, 8, **small)),
        VectorSpec("T < R: the whole cache full precision (plain attention)", ("KiviResidualWindow",),
                   _attend_case(rng, 1, 2, 1, 2, 5, 8, **small)),
        VectorSpec("T = R: keys all quantized, values all full", ("KiviResidualWindow", "KiviKeyAxis"),
                   _attend_case(rng, 1, 2, 2, 1, 8, 8, **small)),
        VectorSpec("4-bit keys and values, batch 2, G = 8, R = 16, T = 40", ("KiviKeyAxis", RANDOM),
                   _attend_case(rng, 2, 2, 1, 2, 40, 16, group=8, residual=16, bits_k=4, bits_v=4)),
        VectorSpec("the paper's setting: G = 32, R = 128, T = 300, D = 32, 2 bits", ("KiviKeyAxis", RANDOM),
                   _attend_case(rng, 1, 1, 1, 1, 300, 32)),
        VectorSpec("an explicit scale 1/8", ("KiviKeyAxis",), _attend_case(rng, 1, 1, 1, 1, 12, 4, scale=0.125, **small)),
        VectorSpec("an empty cache: every row attends to nothing, output 0", (EMPTY_INPUT,),
                   _attend_case(rng, 1, 1, 1, 1, 0, 8, **small)),
        VectorSpec("query heads not a multiple of the KV heads are rejected", (INVALID_INPUT,),
                   _attend_case(rng, 1, 3, 2, 1, 8, 8, **small), "invalid"),
        VectorSpec("a head dim the group does not divide is rejected", (INVALID_INPUT,),
                   _attend_case(rng, 1, 1, 1, 1, 8, 6, **small), "invalid"),
        # ADV15 (kivi): k, v of float32 and float64 whose values float16 cannot hold (a kernel
        # that built a float16 cache refused them or rounded them), with a quantized part.
        *(VectorSpec(f"{np.dtype(dt).name} k, v (thirds, not exact in float16), T = 12: keys 8 quantized + 4 full, "
                     "values 4 + 8", ("KiviArithmeticDtype",), _attend_thirds(rng, dt, **small))
          for dt in (np.float32, np.float64)),
        # Two vectors of one shape and the same params with other data: a kernel that memoizes
        # the dequantized cache on (shape, dtype, params) answers the second with the first's cache.
        *(VectorSpec(f"same shape and params as the vector {'after' if i == 0 else 'before'} it, other k and v "
                     "(no memo across calls)", ("KiviStaleState",), _attend_case(rng, 1, 2, 1, 1, 10, 4, group=2,
                                                                                   residual=4))
          for i in range(2)),
        # keys and values at different widths (every vector above had bits_k == bits_v)
        *(VectorSpec(f"{bk}-bit keys, {bv}-bit values, T = 20: keys 16 quantized + 4 full, values 12 + 8",
                     ("KiviBitsPerTensor",), _attend_case(rng, 1, 2, 1, 2, 20, 8, bits_k=bk, bits_v=bv, **small))
          for bk, bv in ((2, 4), (4, 2))),
    ]


def _attend_thirds(rng, dtype, **params) -> Case:
    q = integers(rng, (1, 2, 2, 8), dtype, outlier=False, span=64)
    k = integers(rng, (1, 1, 12, 8), dtype) / dtype(3)
    v = integers(rng, (1, 1, 12, 8), dtype, outlier=False) / dtype(3)
    return Case({"q": q, "k": k, "v": v}, params)


@st.composite
def _attend_examples(draw, supported):
    g = draw(st.sampled_from([2, 4, 8]), label="group")
    r = g * draw(st.integers(1, 3), label="R / G")
    h = draw(st.integers(1, 2), label="kv heads")
    params = {"group": g, "residual": r, "bits_k": draw(st.sampled_from(list(supported.get("bits_k", (2,))))),
              "bits_v": draw(st.sampled_from(list(supported.get("bits_v", (2,)))))}
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1), label="seed"))
    return _attend_case(rng, 1, h * draw(st.integers(1, 2)), h, draw(st.integers(1, 3)), draw(st.integers(0, 4 * r)),
                        g * draw(st.integers(1, 3)), **params)


OPERATIONS = [
    AREA.declare(
        StatefulOp, "kivi.cache", kivi_cache.KiviCache, anchor="kivi-cache",
        summary="KIVI's cache: the prefill split, key flushes at R, value flushes at R + 1; counts and the "
                "dequantized cache after every step",
        methods=(P, D), variants=(B_K, B_V, GROUP, RESIDUAL, DTYPE), vectors=_traces, examples=_examples,
        steps=_steps, snapshot=_snapshot, max_steps=12),
    AREA.bounded(
        "kivi.attend", kivi_cache.attend, anchor="kivi-attend",
        summary="attention of q over [dequantized | full-precision] KIVI keys and values",
        variants=(B_K, B_V), vectors=_attend_vectors, examples=_attend_examples,
        emulate=kivi_cache.attend_emulated, bounds=OUT_BOUND),
]
