"""Golden vectors of the element codecs (encode and decode), one group of edge cases
per function; `ref.formats.catalog.element` declares the operations."""

from __future__ import annotations

import numpy as np

from ref.formats.minifloat import FloatFormat, Rounding
from ref.testing.catalog_types import Variant, seed_for
from ref.testing.strategies import both_signs, edge_values, representable_values, rounding_ties, spread
from ref.testing.vector_files import Case, VectorSpec

__all__ = ["DIRECTED", "EncodeVectors", "decode_vectors", "encode_vectors", "random_magnitudes", "tie_probe"]

DIRECTED = (Rounding.TOWARD_ZERO.value, Rounding.TOWARD_POSITIVE.value, Rounding.TOWARD_NEGATIVE.value)
F32 = np.float32


class EncodeVectors:
    """Collects the `VectorSpec`s of an op with an x input (encode, encode_stochastic):
    NaN input into a format without NaN becomes a latitude vector of the `nan` axis."""

    def __init__(self, f: FloatFormat, variants: tuple[Variant, ...]):
        self.f = f
        self.defaults = {v.name: v.default for v in variants}
        self.signs = both_signs if f.signed else np.atleast_1d
        self.specs: list[VectorSpec] = []

    def add(self, comment, flags, x, *, dtype=np.float32, result="valid", **inputs_and_params):
        inputs = {k: np.asarray(v, dtype=np.uint32) for k, v in inputs_and_params.items() if k == "rbits"}
        params = {k: v for k, v in inputs_and_params.items() if k != "rbits"}
        with np.errstate(over="ignore", invalid="ignore"):
            x = np.asarray(x) if np.asarray(x).dtype == dtype else np.asarray(x, dtype=np.float64).astype(dtype)
        latitude = ()
        if not self.f.has_nan and np.isnan(x).any() and result == "valid":
            result, latitude = "acceptable", ("nan",)
            flags = (*flags, "NanNoNanFormat")
            params = {"nan": self.defaults["nan"], **params}
        self.specs.append(VectorSpec(comment, tuple(flags), Case({"x": x, **inputs}, params), result, latitude))

    def invalid(self, comment, flags, **inputs):
        self.specs.append(VectorSpec(comment, tuple(flags), Case(inputs, {}), "invalid"))


def random_magnitudes(f: FloatFormat, rng: np.random.Generator, n: int = 256, *,
                      past_max: bool = True) -> np.ndarray:
    """Log-uniform values across the format's range (and, with `past_max`, a little past
    it), built exactly as mantissa times a power of two (np.exp and np.log round
    differently across numpy versions); signed where the format is."""
    top = min(f.max_normal * (2 if past_max else 1), 3e38)
    exponents = rng.integers(np.frexp(f.min_subnormal / 4)[1], np.frexp(top)[1] + 1, n)
    magnitudes = np.minimum(np.ldexp(rng.uniform(0.5, 1.0, n), exponents), top)
    return magnitudes * (rng.choice([-1.0, 1.0], n) if f.signed else 1.0)


def encode_vectors(f: FloatFormat, variants: tuple[Variant, ...]) -> list[VectorSpec]:
    v = EncodeVectors(f, variants)
    rng = np.random.default_rng(seed_for(f"formats.{f.name}.encode"))
    _zeros_and_extremes(v)
    _overflow(v)
    ties = spread(rounding_ties(f)[rounding_ties(f) > 0], 480)
    _ties(v, ties)
    # Vectors that are not about overflow hold no value past max, so that their output does
    # not depend on the overflow policy and a nonsaturating kernel meets them too.
    rand = random_magnitudes(f, rng, past_max=False)
    v.add("random float32 values across the format's range, as a 16x16 matrix", ["Random"], rand.reshape(16, 16))
    _dtypes_and_shapes(v, ties, rand, rng)
    _directed(v, ties, rand)
    return v.specs


def _zeros_and_extremes(v: EncodeVectors) -> None:
    f, signs = v.f, v.signs
    tiny, both = f.min_subnormal, ", both signs" if f.signed else ""
    if f.has_zero:
        if f.has_negative_zero:
            v.add("+0 and -0 keep their sign", ["SignedZero"], [0.0, -0.0])
        else:
            v.add("-0 encodes as +0: FNUZ has no negative zero (0x80 is NaN)", ["NoNegativeZero"], [0.0, -0.0])
    else:
        v.add("zero and -0 have no E8M0 code: NaN", ["E8M0"], [0.0, -0.0])
    if f.has_subnormals:
        v.add(f"smallest subnormal{both}", ["Subnormal"], signs([tiny]))
        v.add(f"largest subnormal{both}", ["Subnormal"], signs([f.min_normal - tiny]))
        v.add("largest subnormal plus half an ulp carries into the smallest normal", ["CarryIntoExponent", "Subnormal"],
              signs([f.min_normal - tiny / 2]))
        v.add("half the smallest subnormal is a tie with zero: rounds to zero", ["Underflow", "TiesToEven"],
              signs([tiny / 2]))
        v.add("just above half the smallest subnormal rounds up to it", ["Underflow", "Subnormal"],
              signs(np.nextafter(F32(tiny / 2), F32(1))))
        v.add("far below the subnormal range rounds to zero", ["Underflow"], signs([tiny / 5, 1e-30, 1e-40]))
    else:
        v.add("values below 2^-127 have no smaller code: they give 2^-127", ["E8M0", "Underflow"],
              [tiny / 2, tiny / 3, 1e-40, np.nextafter(F32(tiny), F32(0))])
    v.add(f"smallest normal{both}", ["MinNormal"], signs([f.min_normal]))
    v.add(f"largest finite value{both}", ["MaxNormal"], signs([f.max_normal]))
    values = representable_values(f)
    v.add("every listed representable value encodes to its own code", ["RoundTrip"],
          signs(spread(values[values > 0], 400)))


def _overflow(v: EncodeVectors) -> None:
    f, signs, mx = v.f, v.signs, v.f.max_normal
    boundary = mx + f.ulp_at_max / 2
    for policy in [o.value for o in f.overflow_policies()]:
        if f.max_code & 1:
            comment = f"max plus half an ulp: a tie whose even neighbour is past max ({policy})"
        else:
            comment = f"max plus half an ulp: a tie that rounds to the even max ({policy})"
        v.add(comment, ["OverflowBoundary"], signs([boundary]), overflow=policy)
        v.add(f"one float32 ulp past the overflow tie overflows ({policy})", ["OverflowBoundary", "Overflow"],
              signs(np.nextafter(F32(boundary), F32(np.inf))), overflow=policy)
        v.add(f"one float32 ulp below the overflow tie stays at max ({policy})", ["OverflowBoundary"],
              signs(np.nextafter(F32(boundary), F32(0))), overflow=policy)
        v.add(f"large finite values overflow ({policy})", ["Overflow"],
              signs([2 * mx, 1e30, float(np.finfo(np.float32).max)]) if mx < 1e38 else
              signs([float(np.finfo(np.float32).max)]), overflow=policy)
        v.add(f"+-Inf ({policy})", ["Infinity"], signs([np.inf]), overflow=policy)
    if f.signed:
        v.add("NaN of both signs", ["NaN"], [np.nan, -np.nan])
    else:
        v.add("NaN and negative values are NaN in E8M0", ["E8M0", "NaN"], [np.nan, -1.0, -f.min_subnormal, -np.inf])


def _ties(v: EncodeVectors, ties: np.ndarray) -> None:
    f, signs = v.f, v.signs
    inside = ties[ties < f.max_normal]  # the overflow tie is the overflow vectors' (both policies)
    v.add("every rounding tie rounds to the even code", ["TiesToEven"], signs(inside))
    v.add("one float32 ulp above each tie rounds away from zero", ["RoundingDirection"],
          signs(np.nextafter(inside.astype(F32), F32(np.inf))))
    v.add("one float32 ulp below each tie rounds toward zero", ["RoundingDirection"],
          signs(np.nextafter(ties.astype(F32), F32(0))))
    values = representable_values(f)
    tops = values[(values > f.min_normal) & (np.frexp(values)[0] == 0.5)]  # powers of two
    below = tops - values[np.searchsorted(values, tops) - 1]  # the spacing just below each
    v.add("ties just below each power of two carry into the next binade", ["CarryIntoExponent", "TiesToEven"],
          signs(tops - below / 2))
    sub32 = np.array([1, 2**10, 2**21, 2**22, 2**22 + 1, 2**22 + 2**21, 2**23 - 1], dtype=np.uint32).view(F32)
    v.add("float32 subnormal inputs are values, not zeros (no DAZ)", ["InputSubnormal"], signs(sub32))


def _dtypes_and_shapes(v: EncodeVectors, ties: np.ndarray, rand: np.ndarray, rng) -> None:
    f, signs = v.f, v.signs
    t64 = ties[ties < f.max_normal].astype(np.float64)  # float64 inputs just off a tie: a float32 detour lands on it
    off = np.concatenate([t64 * (1 + 2.0**-40), t64 * (1 - 2.0**-40)])
    v.add("float64 inputs just off a tie round once, not through float32", ["DoubleRounding"],
          signs(off), dtype=np.float64)
    v.add("random float64 values, as a 4x8x8 array", ["Random"],
          (rand.astype(np.float64) * (1 + rng.uniform(-1e-9, 1e-9, 256))).reshape(4, 8, 8), dtype=np.float64)
    half = rand[np.abs(rand) < 6e4][:128].astype(np.float16)
    v.add("float16 inputs, as a matrix", ["Float16Input"], half.reshape(-1, 8), dtype=np.float16)
    edges16 = np.concatenate(list(edge_values(f, np.float16).values()))
    v.add("float16 edge values: ties, neighbours, subnormals, NaN (none past max)", ["Float16Input", "TiesToEven"],
          edges16[~(np.abs(edges16.astype(np.float64)) > f.max_normal)], dtype=np.float16)
    v.add("big-endian float32 input: the same values, another byte order", ["Random"],
          rand[:32].astype(">f4"), dtype=np.dtype(">f4"))
    for dt in (F32, np.float16, np.float64):
        with np.errstate(over="ignore"):
            cube = rand[:48].astype(dt)
        v.add(f"a 3-d {np.dtype(dt).name} input keeps its shape", ["InputRank"], cube.reshape(2, 3, 8), dtype=dt)
    for bad in (np.int32, np.uint16, np.bool_):
        v.invalid(f"{np.dtype(bad).name} input is rejected, not converted", ["InvalidInput"], x=np.ones(4, dtype=bad))
    values = representable_values(f)
    v.add("empty input gives empty codes", ["EmptyInput"], np.zeros((2, 0)))
    v.add("a 0-d input gives a 0-d code", ["EmptyInput"], F32(np.median(values[values > 0]) * 1.01))
    nan32 = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FA00000, 0x7FFFFFFF, 0x7FC00001],
                     dtype=np.uint32).view(F32)
    v.add("NaN payloads: quiet, signalling, payload only in the low bits, both signs", ["NaN", "NanPayload"], nan32)
    nan64 = np.array([0x7FF8000000000000, 0x7FF0000000000001, 0xFFF0000000000001, 0x7FF0000000100000],
                     dtype=np.uint64).view(np.float64)
    v.add("float64 NaN payloads", ["NaN", "NanPayload"], nan64, dtype=np.float64)
    v.add("float16 NaN payloads", ["NaN", "NanPayload", "Float16Input"],
          np.array([0x7E00, 0x7C01, 0xFC01, 0x7D00], dtype=np.uint16).view(np.float16), dtype=np.float16)


def tie_probe(f: FloatFormat, ties: np.ndarray) -> np.ndarray:
    """Ties, one float32 ulp either side of each, and some representable values."""
    values = representable_values(f)
    return np.concatenate([ties, np.nextafter(ties.astype(F32), F32(0)), np.nextafter(ties.astype(F32), F32(np.inf)),
                           spread(values[values > 0], 64)])


def _directed(v: EncodeVectors, ties: np.ndarray, rand: np.ndarray) -> None:
    f, signs, mx = v.f, v.signs, v.f.max_normal
    policies = [o.value for o in f.overflow_policies()]
    probe = tie_probe(f, ties)
    for mode in DIRECTED:
        for policy in policies:
            v.add(f"{mode}: ties and their neighbours ({policy})", ["DirectedRounding"], signs(probe),
                  rounding=mode, overflow=policy)
            v.add(f"{mode}: finite overflow and Inf ({policy})", ["DirectedRounding", "Overflow"],
                  signs([2 * mx if mx < 1e38 else 3.4e38, np.inf]), rounding=mode, overflow=policy)
    values = representable_values(f)
    exact = spread(values[values > 0], 96)
    for dt, name in ((np.float64, "float64"), (F32, "float32")):
        near = np.concatenate([np.nextafter(exact.astype(dt), dt(np.inf)), np.nextafter(exact.astype(dt), dt(0))])
        for mode in DIRECTED:
            v.add(f"{mode}: {name} one ulp either side of representable values (and powers of two)",
                  ["DirectedRounding", "ScaleCeil" if not f.signed else "RoundingDirection"], signs(near),
                  dtype=dt, rounding=mode, overflow="saturate")
    for policy in policies:
        v.add(f"nearest_away: ties go away from zero ({policy})", ["TiesAway"], signs(probe),
              rounding=Rounding.NEAREST_AWAY.value, overflow=policy)
    if not f.signed:
        v.add("magnitude: zero and -0 give the smallest value, 2^-127", ["E8M0"], [0.0, -0.0], negative="magnitude")
        v.add("magnitude: negative values encode |x|; NaN and Inf stay special", ["E8M0"],
              np.concatenate([-rand[:32], [-np.inf, np.nan, -f.min_subnormal]]), negative="magnitude")
        v.add("toward_positive: E8M0 scales round up (PTX .rp), e.g. amax/6", ["ScaleCeil", "DirectedRounding"],
              np.concatenate([rand / 6, [3.0, 5.0, 6.0, 0.75, 1.0 + 2**-20]]), rounding="toward_positive")


def decode_vectors(f: FloatFormat) -> list[VectorSpec]:
    specs = []

    def add(comment, flags, codes, result="valid"):
        specs.append(VectorSpec(comment, tuple(flags), Case({"codes": np.asarray(codes)}), result))

    if f.nbits <= 8:
        add("every code of the format", ["Exhaustive"], np.arange(1 << f.nbits).astype(f.code_dtype))
    else:
        rng = np.random.default_rng(seed_for(f"formats.{f.name}.decode"))
        edges = [0, f.sign_mask, 1, f.sign_mask | 1, (1 << f.mbits) - 1, 1 << f.mbits, f.max_code,
                 f.sign_mask | f.max_code, f.inf_code, f.sign_mask | f.inf_code, f.nan_code, f.sign_mask | f.nan_code,
                 f.inf_code + 1]
        add("zeros, subnormal and normal extremes, Inf, NaN", ["SignedZero", "Subnormal", "MaxNormal", "Infinity",
            "NaN"], np.array(edges, dtype=f.code_dtype))
        add("random codes", ["Random"], rng.integers(0, 1 << f.nbits, 512).astype(f.code_dtype))
        add("every subnormal code", ["Subnormal"], np.arange(1 << f.mbits).astype(f.code_dtype))
    add("empty codes give empty values", ["EmptyInput"], np.zeros((0, 3), dtype=f.code_dtype))
    add("a 0-d code gives a 0-d value", ["EmptyInput"], np.array(f.max_code, dtype=f.code_dtype))
    add("codes of another width are rejected", ["InvalidInput"], np.zeros(4, dtype=np.int32), "invalid")
    add("signed codes are rejected, not reinterpreted", ["InvalidInput"],
        np.zeros(4, dtype=np.int8 if f.nbits <= 8 else np.int16), "invalid")
    every = np.arange(min(1 << f.nbits, 256)).astype(f.code_dtype)
    add("codes as a 3-d array keep their shape", ["InputRank"], every.reshape(2, -1, 4))
    # Codes travel one per byte; the bits above a sub-byte code are zero, and a byte that
    # sets any of them is not a code: rejected, never masked. One vector per high bit, so a
    # check of only the next bit (codes & 0x10) or only the sign of the byte fails too.
    for bit in range(f.nbits, 8 * f.code_dtype.itemsize):
        add(f"a code with bit {bit} set is rejected, not masked to 1", ["DirtyBits", "InvalidInput"],
            np.array([1, (1 << bit) | 1], dtype=f.code_dtype), "invalid")
    return specs
