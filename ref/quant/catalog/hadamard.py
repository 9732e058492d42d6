"""quant.hadamard_transform: the randomized Hadamard transform of QuaRot and SpinQuant
(spec/quant.md#hadamard), for n = 2^m and n = K * 2^m with the small matrices each
library ships; quant.small_hadamard: those matrices (spec/quant.md#hadamard-matrices).

  quant.hadamard_transform  x [..., n], signs [n] (+-1) -> y = H_n (signs * x) / sqrt(n)   [..., n]
  quant.small_hadamard      k (0-d integer) -> H_K [k, k] int8 (exact)

Bounded: a kernel at precision P is judged against the float64 oracle by the error
of `ref.quant.hadamard.emulate_transform` (the butterfly in float32, or a dense
float32 product: whichever lands further).
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ref.quant import hadamard
from ref.quant.catalog.common import AREA
from ref.testing.bounded import Bound
from ref.testing.catalog_types import Flag, Variant, seed_for
from ref.testing.compare import compare_exact
from ref.testing.vector_files import Case, VectorSpec

__all__ = ["FLAGS", "HADAMARD_BOUND", "OPERATIONS"]

# k = 2 over the worse of two float32 evaluations (butterfly, dense product in order);
# floor 2 units of 2^-20 relative to the largest output.
HADAMARD_BOUND = Bound(k=2.0, floor=2.0, scale="relative")

FLAGS = {
    "Unnormalized": Flag("the Hadamard transform not normalized (no 1/sqrt(n), or 1/n, or 1/sqrt of the "
                         "power-of-two part only)", "outputs sqrt(n) times too large: the rotation is not "
                                                    "orthogonal and the folded weights no longer cancel it"),
    "ButterflyStride": Flag("a butterfly stage pairing the wrong elements (stride not doubling, or pairs "
                            "from the wrong ends)", "a different, usually non-orthogonal, mixing of channels"),
    "SignsOrder": Flag("the random signs applied after the transform instead of before (diag(s) H in place "
                       "of H diag(s))", "a different rotation than the one folded into the weights"),
    "KroneckerOrder": Flag("H_{2^m} (x) H_K instead of H_K (x) H_{2^m}: the small factor on the fast index",
                           "channels mixed in the wrong groups for every n = K * 2^m with m >= 1"),
    "SmallFactorSide": Flag("the small matrix applied from the wrong side (H_K^T, as QuaRot's matmul_hadUt, "
                            "where H_K is meant)", "the inverse rotation's small factor: wrong for every "
                                                   "non-symmetric H_K (QuaRot's 12, 20, 40, 52, 60, ...)"),
    "SmallMatrix": Flag("another library's small Hadamard matrix (fast-hadamard-transform's order 12 where "
                        "QuaRot's is meant, or the reverse), or a Paley matrix in another orientation",
                        "an orthogonal but different rotation: weights rotated offline by one and "
                        "activations online by the other do not cancel"),
}

SOURCE = Variant("source", hadamard.Source, "quarot",
                 "whose small matrices H_K: QuaRot's (Sloane's library), SpinQuant's (QuaRot's plus 44), "
                 "fast-hadamard-transform's (12, 20, 28, 40) or compressed-tensors' (every multiple of 4 to 256)")
INVERSE = Variant("inverse", (False, True), False, "the transform (H_n) or its inverse (H_n^T, signs after)")


def _values(rng, shape, scale_exp: int = 5) -> np.ndarray:
    """Integers in [-128, 127] times 2^-scale_exp: exact at bfloat16, float16 and float32."""
    return (rng.integers(-128, 128, shape) * 2.0 ** -scale_exp).astype(np.float32)


def _signs(rng, n: int) -> np.ndarray:
    return (rng.integers(0, 2, n) * 2 - 1).astype(np.int8)


# compressed-tensors' orders in the vectors: Hall's 20, paley1(31) at a power of two,
# the Goethals-Seidel 188, the normalized Paley 212 and 224 (Llama-3's 14336 = 224 * 64),
# a doubled Williamson 232, Sylvester's 256.
_CT_PICKS = (20, 32, 188, 212, 224, 232, 256)


def _vectors() -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for("quant.hadamard_transform"))
    specs = []

    def add(comment, flags, x, signs, result="valid", **params):
        specs.append(VectorSpec(comment, tuple(flags), Case({"x": x, "signs": signs}, params), result))

    for n in (2, 16, 256, 1024):
        add(f"power of two n = {n}, random signs", ("Unnormalized", "ButterflyStride", "SignsOrder"),
            _values(rng, (3, n)), _signs(rng, n))
    add("n = 1: the identity times the sign", ("Unnormalized",), _values(rng, (4, 1)), np.int8([-1]))
    add("n = 64, all signs +1 (the plain normalized Walsh-Hadamard transform)", ("Unnormalized", "ButterflyStride"),
        _values(rng, (2, 64)), np.ones(64, np.int8))
    add("a one-hot row: the output is one column of H_n / sqrt(n)", ("ButterflyStride", "Unnormalized"),
        np.eye(32, dtype=np.float32)[[0, 5, 31]], np.ones(32, np.int8))
    for source in hadamard.Source:
        for k in _CT_PICKS if source is hadamard.Source.COMPRESSED_TENSORS else hadamard.SMALL_ORDERS[source]:
            if source is hadamard.Source.SPINQUANT and k != 44:
                continue  # SpinQuant's other matrices are QuaRot's bytes
            m = 2 if k <= 60 else 1
            add(f"{source.value}: n = {k} * {m}, its H_{k} on the slow index", (
                "SmallMatrix", "KroneckerOrder", "SmallFactorSide", "SignsOrder", "Unnormalized"),
                _values(rng, (2, k * m)), _signs(rng, k * m), source=source.value)
    add("quarot: n = 12 alone (m = 0): H_12 only", ("SmallMatrix", "SmallFactorSide"), _values(rng, (3, 12)),
        np.ones(12, np.int8))
    add("quarot: n = 40 * 8 = 320 (40 chosen over 20 * 16, as get_hadK does)", ("SmallMatrix", "KroneckerOrder"),
        _values(rng, (2, 320)), _signs(rng, 320))
    add("compressed_tensors: n = 160 * 2 = 320 (its largest order: QuaRot's is 40 * 8)", ("SmallMatrix",),
        _values(rng, (2, 320)), _signs(rng, 320), source="compressed_tensors")
    add("quarot: n = 172 * 4 (Llama-2-7B's intermediate 11008 is 172 * 64)", ("KroneckerOrder", "SmallFactorSide"),
        _values(rng, (1, 688)), _signs(rng, 688))
    for source in ("quarot", "fast_hadamard_transform"):
        add(f"{source}: the inverse at n = 20 * 4 (H^T, signs after)", ("SmallFactorSide", "SignsOrder"),
            _values(rng, (2, 80)), _signs(rng, 80), source=source, inverse=True)
    add("the inverse at n = 128", ("SignsOrder", "ButterflyStride"), _values(rng, (2, 128)), _signs(rng, 128),
        inverse=True)
    add("a 3-d stack [2, 3, 24]", ("InputRank",), _values(rng, (2, 3, 24)), _signs(rng, 24))
    add("a 1-d row", ("InputRank",), _values(rng, (48,)), _signs(rng, 48))
    add("float16 input", ("Float16Input",), _values(rng, (2, 96)).astype(np.float16), _signs(rng, 96))
    add("float64 input", ("InputRank",), _values(rng, (2, 36)).astype(np.float64), _signs(rng, 36))
    add("float32 signs (+-1.0)", ("SignsOrder",), _values(rng, (2, 16)), _signs(rng, 16).astype(np.float32))
    add("no rows", ("EmptyInput",), np.zeros((0, 16), np.float32), _signs(rng, 16))
    inf = _values(rng, (3, 16))
    inf[0, 3], inf[1, 2], inf[1, 9], inf[2, 5] = np.inf, np.inf, -np.inf, np.nan
    add("one infinity (every output infinite), both infinities and a NaN (NaN)", ("Infinity", "NaN"), inf,
        np.ones(16, np.int8))
    x = _values(rng, (1, 24))
    for comment, bad_x, bad_s, params in (
            ("n = 6 is not K * 2^m: rejected", _values(rng, (1, 6)), _signs(rng, 6), {}),
            ("n = 44 under QuaRot's list (SpinQuant's only): rejected", _values(rng, (1, 44)), _signs(rng, 44),
             {"source": "quarot"}),
            ("n = 36 under fast-hadamard-transform's list: rejected", _values(rng, (1, 36)), _signs(rng, 36),
             {"source": "fast_hadamard_transform"}),
            ("n = 0: rejected", np.zeros((2, 0), np.float32), np.zeros(0, np.int8), {}),
            ("a sign of 0: rejected", x, np.where(np.arange(24) == 5, 0, 1).astype(np.int8), {}),
            ("signs of the wrong length: rejected", x, _signs(rng, 12), {}),
            ("integer x: rejected", np.ones((1, 8), np.int32), _signs(rng, 8), {}),
            ("a 0-d x: rejected", np.float32(1), np.int8([1]), {})):
        add(comment, ("InvalidInput",), bad_x, bad_s, "invalid", **params)
    return specs


_SIZES = {s.value: sorted({k * 2 ** m for k in (1,) + hadamard.SMALL_ORDERS[s] for m in range(4) if k * 2 ** m <= 400})
          for s in hadamard.Source}  # n up to 400 (compressed_tensors: every multiple of 4, and 8 * 52, ...)


def _examples(supported):
    @st.composite
    def case(draw):
        source = draw(st.sampled_from(list(supported["source"])), label="source")
        inverse = draw(st.sampled_from(list(supported["inverse"])), label="inverse")
        n = draw(st.sampled_from(_SIZES[source]), label="n")
        rows = draw(st.integers(0, 3), label="rows")
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1), label="seed"))
        x = _values(rng, (rows, n), draw(st.integers(-4, 12), label="exponent"))
        return Case({"x": x, "signs": _signs(rng, n)}, {"source": source, "inverse": inverse})

    return case()


def _case_flags(case) -> tuple[str, ...]:
    n = np.shape(case.inputs["x"])[-1] if np.ndim(case.inputs["x"]) else 0
    k = hadamard.decompose(n, source=case.params.get("source", "quarot"))[0] if n else 1
    return ("Unnormalized", "SignsOrder") + (("SmallMatrix", "SmallFactorSide", "KroneckerOrder") if k > 1 else
                                              ("ButterflyStride",))


def _small_vectors() -> list[VectorSpec]:
    specs = []
    for source in hadamard.Source:
        orders = _CT_PICKS[:-1] if source is hadamard.Source.COMPRESSED_TENSORS else hadamard.SMALL_ORDERS[source]
        for k in (1,) + orders:
            if source is hadamard.Source.SPINQUANT and k != 44:
                continue  # SpinQuant's other matrices are QuaRot's bytes (tested)
            specs.append(VectorSpec(f"{source.value}: H_{k}", ("SmallMatrix",),
                                    Case({"k": np.int64(k)}, {"source": source.value})))
    for k, source in ((44, "quarot"), (36, "fast_hadamard_transform"), (24, "quarot"), (0, "quarot")):
        specs.append(VectorSpec(f"{source}: k = {k} is not one of its orders: rejected", ("InvalidInput",),
                                Case({"k": np.int64(k)}, {"source": source}), "invalid"))
    specs.append(VectorSpec("a float k is rejected", ("InvalidInput",), Case({"k": np.float64(12)},
                                                                              {"source": "quarot"}), "invalid"))
    return specs


def _small_examples(supported):
    @st.composite
    def case(draw):
        source = draw(st.sampled_from(list(supported["source"])), label="source")
        k = draw(st.sampled_from((1,) + hadamard.SMALL_ORDERS[hadamard.Source(source)]), label="k")
        return Case({"k": np.int64(k)}, {"source": source})

    return case()


OPERATIONS = [
    AREA.exact("small_hadamard", hadamard.small_hadamard, anchor="hadamard-matrices",
               summary="the small Hadamard matrix H_K a library ships: k -> [k, k] int8 of +-1",
               variants=(SOURCE,), vectors=_small_vectors, examples=_small_examples, compare=compare_exact,
               case_flags=lambda case: ("SmallMatrix",)),
    AREA.bounded("hadamard_transform", hadamard.hadamard_transform, anchor="hadamard",
                 summary="randomized Hadamard transform, n = K * 2^m: x [..., n], signs [n] -> H_n (s * x) / sqrt(n)",
                 variants=(SOURCE, INVERSE), vectors=_vectors, examples=_examples,
                 emulate=hadamard.emulate_transform, bounds=HADAMARD_BOUND, case_flags=_case_flags),
]
