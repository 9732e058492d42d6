"""Random cases for the quant.pack ops' property search: codes, words and whole layers
drawn per the op's variant values (spec/quant.md#packing)."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ref.quant import packing as P
from ref.testing.params import variant_params
from ref.testing.vector_files import Case

__all__ = ["awq_case", "awq_dequantize_case", "ct_case", "examples", "g_idx_case", "gptq_codes_case",
           "gptq_dequantize_case", "words_case"]


def examples(build):
    def strategy(supported):
        @st.composite
        def case(draw):
            params = draw(variant_params(supported), label="params")
            return build(draw, params)
        return case()
    return strategy


def gptq_codes_case(key: str, axis: int):
    def build(draw, params):
        bits = params.get("bits", 4)
        per = 32 // int(np.gcd(32, bits))
        rows, words = draw(st.integers(0, 4), label="rows"), draw(st.integers(1, 3), label="words")
        shape = (rows, per * words) if axis == 1 else (per * words, max(rows, 1))
        return Case({key: draw(hnp.arrays(np.int64, shape, elements=st.integers(0, (1 << bits) - 1)), label=key)},
                    params)
    return build


def words_case(key: str, bits_rows: bool):
    def build(draw, params):
        bits = params.get("bits", 4)
        shape = (bits * draw(st.integers(1, 2)), draw(st.integers(1, 4))) if bits_rows else \
            (draw(st.integers(1, 4)), bits * draw(st.integers(1, 2)))
        return Case({key: draw(hnp.arrays(np.int32, shape), label=key)}, params)
    return build


def g_idx_case(draw, params):
    group = params["group"]
    n = (group if group > 0 else 4) * draw(st.integers(1, 3))
    return Case({"perm": np.asarray(draw(st.permutations(list(range(n))), label="perm"), np.int64)}, params)


def awq_case(draw, params):
    shape = (8 * draw(st.integers(1, 3)), draw(st.integers(1, 4)))
    return Case({"codes": draw(hnp.arrays(np.int64, shape, elements=st.integers(0, 15)), label="codes")}, params)


def ct_case(unpack: bool):
    def build(draw, params):
        bits, half = params["bits"], 1 << (params["bits"] - 1)
        rows, cols = draw(st.integers(1, 3), label="rows"), draw(st.integers(1, 40), label="cols")
        v = draw(hnp.arrays(np.int8, (rows, cols), elements=st.integers(-half, half - 1)), label="value")
        v = v if params["packed_dim"] == 1 else np.ascontiguousarray(v.T)
        if not unpack:
            return Case({"value": v}, params)
        return Case({"packed": P.ct_pack(v, bits=bits, packed_dim=params["packed_dim"], layout=params["layout"]),
                     "count": np.int64(cols)}, params)
    return build


def _drawn_layer(draw, bits: int, out: int, inp: int, groups: int):
    codes = draw(hnp.arrays(np.int64, (out, inp), elements=st.integers(0, (1 << bits) - 1)), label="codes")
    zeros = draw(hnp.arrays(np.int64, (out, groups), elements=st.integers(0, (1 << bits) - 1)), label="zeros")
    scales = draw(hnp.arrays(np.float16, (groups, out), elements=st.floats(2.0**-14, 1.0, width=16)), label="scales")
    return codes, zeros, scales


def gptq_dequantize_case(draw, params):
    bits, fmt = params["bits"], params["zero_format"]
    per = 32 // int(np.gcd(32, bits))
    out, inp = per * draw(st.integers(1, 2), label="out"), per * draw(st.integers(1, 2), label="in")
    groups = draw(st.sampled_from([1, 2]), label="groups")
    codes, zeros, scales = _drawn_layer(draw, bits, out, inp, groups)
    perm = np.asarray(draw(st.permutations(list(range(inp))), label="perm"), np.int64)
    g_idx = P.gptq_g_idx(perm, group=inp // groups, static_groups=draw(st.booleans(), label="static"))
    return Case({"qweight": P.gptq_qweight(codes, bits=bits), "qzeros": P.gptq_qzeros(zeros, bits=bits,
                                                                                      zero_format=fmt),
                 "scales": scales, "g_idx": g_idx}, params)


def awq_dequantize_case(draw, params):
    group = params["group"]
    groups = draw(st.integers(1, 3), label="groups") if group > 0 else 1
    inp = group * groups if group > 0 else 8 * draw(st.integers(1, 3), label="in")
    codes, zeros, scales = _drawn_layer(draw, 4, 8 * draw(st.integers(1, 2), label="out"), inp, groups)
    return Case({"qweight": P.awq_pack(codes), "qzeros": P.awq_pack(zeros), "scales": scales}, params)
