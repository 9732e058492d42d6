"""TurboQuant (spec/kv.md#turboquant) as exact ops: the sphere-coordinate Lloyd-Max
codebook, TurboQuant_mse's encoder and decoder, TurboQuant_prod's encoder and its
inner-product estimator.

  kv.turboquant.codebook        dim -> (levels [2^b], thresholds [2^b - 1])
  kv.turboquant.quantize_mse    x [..., d], rotation [d, d] -> (codes int64 [..., d], norms [...])
  kv.turboquant.dequantize_mse  codes, norms, rotation -> x_hat [..., d]
  kv.turboquant.quantize_prod   x, rotation, projection [m, d] -> (codes, norms, signs int8 [..., m],
                                residual_norms)
  kv.turboquant.estimate_prod   q [B, Hq, Lq, d] and a prod cache [B, H, T] -> scores [B, Hq, Lq, T]

Codes and signs compare bit for bit; floats (levels, norms, reconstructions, scores)
within a stated relative tolerance (another summation order, another integration
route to the same fixed point), so the float outputs regenerate within the golden
bound. Rotations in the vectors are exact: signed permutations and Hadamard matrices
of order 16 or 64 with random row signs, scaled by 1/4 or 1/8 (block-diagonal for
d = 128); inputs are integers times powers of two.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from ref.kv import turboquant as tq
from ref.kv.catalog.common import AREA
from ref.quant.hadamard import hadamard_matrix
from ref.kv.catalog.turboquant_compare import TOLERANCE, close, compare_codebook, compare_named
from ref.testing.catalog_types import Flag, Variant, seed_for
from ref.testing.flags import COMMON, EMPTY_INPUT, INVALID_INPUT, NAN, RANDOM
from ref.testing.vector_files import Case, VectorSpec

__all__ = ["BITS_PROD", "FLAGS", "OPERATIONS", "TOLERANCE", "hadamard_rotation", "prod_cache", "signed_permutation"]

BITS_CODEBOOK = Variant("bits", (0, 1, 2, 3, 4), 2, "bits per coordinate (0: the one-level codebook {0})")
BITS_MSE = Variant("bits", tq.MSE_BITS, 2, "bits per coordinate of TurboQuant_mse")
BITS_PROD = Variant("bits", tq.PROD_BITS, 3, "total bits per coordinate of TurboQuant_prod: b - 1 of MSE code "
                                             "plus the residual's sign bit")

FLAGS = {
    **COMMON,
    "SphereDensity": Flag("the codebook of the Gaussian limit N(0, 1/d) (or of N(0, 1), the variance 1 instead of "
                          "1/d) used for the exact sphere-coordinate density", "other levels and thresholds: "
                          "at small d every level moves, with variance 1 the codes saturate"),
    "Midpoints": Flag("thresholds that are not the midpoints of adjacent levels (equal-mass quantiles, or the "
                      "levels themselves)", "coordinates between a quantile and a midpoint take the other code"),
    "CodeTie": Flag("a coordinate exactly on a threshold (0 for an even level count) sent to the upper level",
                    "zero coordinates and the all-zero key take code 2^(b-1) instead of 2^(b-1) - 1"),
    "RotationInverse": Flag("the rotation applied as Pi^T on encode, or not inverted on decode (Pi^T twice, Pi "
                            "twice)", "the reconstruction lands in another basis: errors of the size of x"),
    "NormKept": Flag("the norm rho not stored or not applied (the paper's unit-vector form used on general x), "
                     "or the residual norm gamma dropped or replaced by rho", "reconstructions and scores "
                                                                               "off by the vector's length"),
    "ProdBits": Flag("b bits for TurboQuant_prod's MSE part instead of b - 1", "codes of another width: the "
                     "budget exceeded by one bit per coordinate"),
    "BiasedScores": Flag("the MSE reconstruction's inner product used where TurboQuant_prod's unbiased one is "
                         "defined (the QJL term left out)", "scores shrunk by 1 - D_mse (2/pi at 1 bit)"),
    "SketchScale": Flag("the QJL term scaled by 1/d instead of 1/m, or without sqrt(pi/2)",
                        "the residual's contribution off by m/d or by 1.2533"),
    "SignOfZero": Flag("a residual's S r = 0 signed 0 (numpy's sign) or +1 where QJL's -1 is defined",
                       "a zero residual (an all-zero key) gets signs 0 or +1"),
    "GqaHeads": Flag("query head h reading cache head h % H (or h // H) instead of h // g",
                     "scores against another head's keys"),
    "InputDtype": Flag("float16 or float32 inputs computed in their own precision, or a rank mishandled",
                       "norms and reconstructions off by the input precision"),
    "TinyNorm": Flag("an absolute epsilon where the spec has none: y = Pi x / (rho + eps) or / max(rho, eps) "
                     "(a torch port's guard against 0/0), or the residual sign taken as S r > eps",
                     "keys of norm about 1e-15 get the middle codes (their unit coordinates shrunk toward 0) "
                     "and residual signs -1"),
    "Float64Compute": Flag("an intermediate rounded to float32 or float16 in what the spec computes in float64: "
                           "the rotated unit coordinates or the thresholds before the comparison, the sketch "
                           "S r, the queries or their sketch S q (a CUDA or Triton kernel's precision)",
                           "codes flip for coordinates within about 1e-8 of a threshold, signs flip where S r "
                           "nearly cancels, scores off by about 1e-8 of their largest magnitude"),
}

_P = 2.0**-4


def signed_permutation(rng, d: int) -> np.ndarray:
    """A random signed permutation matrix [d, d] (exactly orthogonal)."""
    m = np.zeros((d, d))
    m[np.arange(d), rng.permutation(d)] = rng.choice([-1.0, 1.0], d)
    return m


def hadamard_rotation(rng, d: int) -> np.ndarray:
    """A Sylvester Hadamard matrix of order n (16 or 64: 1/sqrt(n) a power of two) with
    random row signs and columns permuted, block-diagonal when d is a multiple of n."""
    n = 64 if d % 64 == 0 else 16
    blocks = [hadamard_matrix(n) * rng.choice([-1.0, 1.0], (n, 1)) for _ in range(d // n)]
    out = np.zeros((d, d))
    for i, b in enumerate(blocks):
        out[i * n:(i + 1) * n, i * n:(i + 1) * n] = b
    return out[:, rng.permutation(d)]


def _keys(rng, shape, outlier: bool = True) -> np.ndarray:
    """Integers in [-16, 16] times 2^-4, channel 3 times 8 (an outlier channel)."""
    x = rng.integers(-16, 17, shape).astype(np.float64) * _P
    if outlier and shape[-1] > 3:
        x[..., 3] *= 8
    return x


def _projection(rng, m: int, d: int, dtype=np.float32) -> np.ndarray:
    """Integers in [-8, 8] times 2^-3 (a stand-in for N(0, 1): exact in every dtype; float32
    in most vectors to keep the files small, read as float64 all the same)."""
    return (rng.integers(-8, 9, (m, d)).astype(np.float64) / 8).astype(dtype)


def codebook_vectors() -> list[VectorSpec]:
    specs = [VectorSpec(f"d = {d}, {b} bits", ("SphereDensity", "Midpoints") if b else ("SphereDensity",),
                        Case({"dim": np.int64(d)}, {"bits": b}))
             for d in (2, 3, 16, 128) for b in (0, 1, 2, 3, 4)]
    specs += [VectorSpec("d = 4096, 4 bits: near the Gaussian limit", ("SphereDensity", "Midpoints"),
                         Case({"dim": np.int64(4096)}, {"bits": 4})),
              VectorSpec("d = 1 is rejected (no sphere coordinate density)", (INVALID_INPUT,),
                         Case({"dim": np.int64(1)}, {"bits": 2}), "invalid"),
              VectorSpec("a float dim is rejected", (INVALID_INPUT,), Case({"dim": np.float64(128)}, {"bits": 2}),
                         "invalid")]
    return specs


def _cache_cases(rng):
    """(comment, flags, x, rotation) for the encoders: dtypes, ranks, rotations, edges."""
    r16, r64, r128 = hadamard_rotation(rng, 16), hadamard_rotation(rng, 64), hadamard_rotation(rng, 128)
    x = _keys(rng, (1, 2, 8, 64))
    zero_row = _keys(rng, (1, 1, 4, 16))
    zero_row[0, 0, 1] = 0  # an all-zero key: norm 0, every rotated coordinate on the middle threshold
    sparse = _keys(rng, (2, 16))
    sparse[:, ::3] = 0  # zero coordinates: with a signed permutation they stay exactly 0 (the middle threshold)
    return [
        ("a cache [1, 2, 8, 64], Hadamard rotation, an outlier channel", (RANDOM, "SphereDensity", "Midpoints",
                                                                           "RotationInverse", "NormKept"), x, r64),
        ("d = 128: block-diagonal Hadamard", ("SphereDensity", "RotationInverse"), _keys(rng, (1, 1, 6, 128)), r128),
        ("d = 16, a signed permutation: small d, where the sphere density is far from Gaussian",
         ("SphereDensity", "Midpoints", "RotationInverse"), _keys(rng, (1, 2, 5, 16)), signed_permutation(rng, 16)),
        ("an all-zero key: norm 0, codes 2^(b-1) - 1 (the lower level at the tie 0), residual signs -1",
         ("CodeTie", "NormKept", "SignOfZero"), zero_row, r16),
        ("zero coordinates under a signed permutation: the tie at threshold 0 goes to the lower level",
         ("CodeTie",), sparse, signed_permutation(rng, 16)),
        ("float32 keys (widened exactly)", ("InputDtype",), x.astype(np.float32), r64),
        ("float16 keys (widened exactly)", ("InputDtype",), x.astype(np.float16), r64),
        ("one key: 1-d input", ("InputDtype",), x[0, 0, 0], r64),
        ("an empty cache (T = 0)", (EMPTY_INPUT,), x[:, :, :0], r64),
        ("keys scaled by 2^20: norms carry the scale", ("NormKept",), x[:, :1] * 2.0**20, r64),
    ]


def _invalid_encode(rng, extra: dict) -> list[VectorSpec]:
    x = _keys(rng, (1, 1, 4, 16))
    r = hadamard_rotation(rng, 16)

    def bad(comment, **inputs):
        return VectorSpec(comment, (INVALID_INPUT,), Case({"x": x, "rotation": r, **extra, **inputs}), "invalid")

    skew = r.copy()
    skew[0, 0] *= 2
    return [
        VectorSpec("a NaN key is rejected", (INVALID_INPUT, NAN),
                   Case({"x": np.where(np.arange(16) == 2, np.nan, x), "rotation": r, **extra}), "invalid"),
        bad("an Inf key is rejected", x=np.where(np.arange(16) == 5, np.inf, x)),
        bad("a non-orthogonal rotation is rejected", rotation=skew),
        bad("a rotation of the wrong size is rejected", rotation=hadamard_rotation(rng, 64)),
        bad("integer keys are rejected", x=np.ones((1, 1, 4, 16), np.int32)),
        bad("a head dim of 1 is rejected", x=x[..., :1], rotation=np.ones((1, 1))),
    ]


def quantize_mse_vectors() -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for("kv.turboquant.quantize_mse"))
    specs = []
    for comment, flags, x, rot in _cache_cases(rng):
        specs.append(VectorSpec(comment, flags, Case({"x": x, "rotation": rot})))
    x, rot = _keys(rng, (1, 1, 16, 16)), hadamard_rotation(rng, 16)
    specs += [VectorSpec(f"{b} bits, d = 16", ("SphereDensity", "Midpoints"),
                         Case({"x": x, "rotation": rot}, {"bits": b})) for b in tq.MSE_BITS]
    specs += _invalid_encode(rng, {})
    # appended (issue 15): keeps the ids above
    specs.append(VectorSpec("keys of norm about 1e-15 (k/16 times 2^-50): the unit coordinates do not depend on "
                            "the scale (no epsilon in the division)", ("TinyNorm", "NormKept"),
                            Case({"x": _keys(rng, (1, 1, 6, 16)) * 2.0**-50, "rotation": hadamard_rotation(rng, 16)})))
    specs.append(VectorSpec("rotated coordinates 1e-12, 1e-10 and 5e-9 from the thresholds +-0.2398 (d = 16, 2 bits, "
                            "the identity): a float32 or float16 comparison flips them", ("Float64Compute", "Midpoints"),
                            Case({"x": _near_threshold_keys(), "rotation": np.eye(16)}, {"bits": 2})))
    return specs


# x = (+-1, A 2^-50, 0, ..., 0) puts y_0 = 1 / sqrt(1 + (A 2^-50)^2) at these distances from the upper threshold
# t = 0.2398478911673912 of the d = 16, 2-bit codebook (A found once by solving for y_0 = t + gap, then rounded):
# y_0 - t = -1.0e-12, -1.0e-10, +1.0e-12, +5.0e-9, -5.0e-9. float32(t) is t + 7.3e-9 and float16(t) is t + 2.0e-5,
# so float32 y flips the first two, float32 t the third and fourth, float16 all but the fifth. They keep at least
# 1e-12 from t (the oracle and the default kernel agree on t to 3e-16), far above an ulp (enc_recip's 1/rho x is
# legal: it differs only within an ulp of a threshold)
_NEAR_T = (4557202584825132, 4557202586820986, 4557202584784812, 4557202484004280, 4557202685605668)


def _near_threshold_keys() -> np.ndarray:
    x = np.zeros((2 * len(_NEAR_T), 16))
    for i, a in enumerate(_NEAR_T):
        x[2 * i, :2] = 1.0, a * 2.0**-50
        x[2 * i + 1, :2] = -1.0, -a * 2.0**-50  # the lower threshold -t, mirrored
    return x


def _cancelling_keys(rng, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Keys [n, 16] of full 53-bit mantissas in pairs (x_2i, x_2i+1) = (M, -(M - delta)) 2^-52, and the
    projection rows e_2i + e_2i+1: S x = delta 2^-52 exactly in float64, 0 once the pair is rounded to float32."""
    m = rng.integers(2**52, 2**53, (n, 8))
    delta = rng.integers(1, 2**10, (n, 8)) * np.where(np.arange(8) % 4 == 3, -1, 1)
    x = np.zeros((n, 16))
    x[:, 0::2], x[:, 1::2] = m * 2.0**-52, -(m - delta) * 2.0**-52
    s = np.zeros((8, 16))
    s[np.arange(8), 2 * np.arange(8)] = s[np.arange(8), 2 * np.arange(8) + 1] = 1.0
    return x, s


def dequantize_mse_vectors() -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for("kv.turboquant.dequantize_mse"))
    specs = []
    for b in tq.MSE_BITS:
        for d, rot in ((64, hadamard_rotation(rng, 64)), (16, signed_permutation(rng, 16))):
            codes = rng.integers(0, 1 << b, (1, 2, 4, d))
            norms = rng.integers(0, 64, (1, 2, 4)) * 2.0**-3
            specs.append(VectorSpec(f"{b} bits, d = {d}: random codes and norms (one may be 0)",
                                    (RANDOM, "SphereDensity", "RotationInverse", "NormKept"),
                                    Case({"codes": codes, "norms": norms, "rotation": rot}, {"bits": b})))
    rot = hadamard_rotation(rng, 16)
    codes, norms = rng.integers(0, 4, (3, 16)), rng.integers(1, 9, 3) * 0.5

    def bad(comment, **inputs):
        return VectorSpec(comment, (INVALID_INPUT,), Case({"codes": codes, "norms": norms, "rotation": rot, **inputs},
                                                          {"bits": 2}), "invalid")

    return specs + [
        VectorSpec("uint8 codes, float32 norms", ("InputDtype",),
                   Case({"codes": codes.astype(np.uint8), "norms": norms.astype(np.float32), "rotation": rot})),
        VectorSpec("no vectors", (EMPTY_INPUT,), Case({"codes": codes[:0], "norms": norms[:0], "rotation": rot})),
        bad("a code 4 at 2 bits is rejected", codes=np.where(np.arange(16) == 3, 4, codes)),
        bad("negative codes are rejected", codes=codes - 1),
        bad("float codes are rejected", codes=codes.astype(np.float64)),
        bad("norms of the wrong shape are rejected", norms=norms[:2]),
        bad("a negative norm is rejected", norms=-norms),
        bad("a non-orthogonal rotation is rejected", rotation=rot * 1.5),
    ]


def quantize_prod_vectors() -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for("kv.turboquant.quantize_prod"))
    specs = []
    for comment, flags, x, rot in _cache_cases(rng):
        d = x.shape[-1]
        specs.append(VectorSpec(comment, (*flags, "ProdBits"), Case({"x": x, "rotation": rot,
                                                                     "projection": _projection(rng, d, d)})))
    x16, rot16 = _keys(rng, (1, 1, 16, 16)), hadamard_rotation(rng, 16)
    specs += [VectorSpec(f"{b} bits, d = 16: a {b - 1}-bit MSE code and the sign bit", ("ProdBits", "SphereDensity"),
                         Case({"x": x16, "rotation": rot16, "projection": _projection(rng, 16, 16)}, {"bits": b}))
              for b in tq.PROD_BITS]
    x, rot = _keys(rng, (1, 1, 8, 64)), hadamard_rotation(rng, 64)
    specs.append(VectorSpec("a sketch of m = 32 rows for d = 64 (a float64 projection)", ("SketchScale",),
                            Case({"x": x, "rotation": rot, "projection": _projection(rng, 32, 64, np.float64)})))
    s16 = _projection(rng, 16, 16)
    specs += _invalid_encode(rng, {"projection": s16})
    specs.append(VectorSpec("a projection of the wrong width is rejected", (INVALID_INPUT,),
                            Case({"x": x, "rotation": rot, "projection": _projection(rng, 64, 32)}), "invalid"))
    # appended (issue 15): keeps the ids above
    specs.append(VectorSpec("keys of norm about 1e-15 (k/16 times 2^-50): codes as at scale 1, residual signs of "
                            "S r about 1e-16 (no epsilon in the division or the sign)", ("TinyNorm", "NormKept"),
                            Case({"x": _keys(rng, (1, 1, 6, 16)) * 2.0**-50, "rotation": hadamard_rotation(rng, 16),
                                  "projection": _projection(rng, 16, 16)})))
    xc, sc = _cancelling_keys(rng, 6)
    specs.append(VectorSpec("1 bit (r = x): full-mantissa keys whose S r = x_2i + x_2i+1 nearly cancels (|S r| <= "
                            "2^-42, exact in float64, 0 in float32)", ("Float64Compute",),
                            Case({"x": xc, "rotation": np.eye(16), "projection": sc}, {"bits": 1})))
    specs.append(VectorSpec("an empty projection (m = 0) is rejected", (INVALID_INPUT,),
                            Case({"x": x16, "rotation": rot16, "projection": np.zeros((0, 16))}), "invalid"))
    return specs


def prod_cache(rng, b: int, hq: int, h: int, t: int, d: int, m: int | None = None, lq: int = 3):
    """A TurboQuant_prod cache [1, h, t, d] of b bits with its queries [1, hq, lq, d] (norms on a 2^-24 grid)."""
    m = d if m is None else m
    rot, s = hadamard_rotation(rng, d), _projection(rng, m, d)
    codes, norms, signs, gamma = tq.quantize_prod(_keys(rng, (1, h, t, d)), rot, s, bits=b)
    # inputs here: on a 2^-24 grid, so that another numpy's summation order cannot change the bytes
    norms, gamma = (np.round(a * 2**24) / 2**24 for a in (norms, gamma))
    return {"q": _keys(rng, (1, hq, lq, d), outlier=False), "codes": codes, "norms": norms, "signs": signs,
            "residual_norms": gamma, "rotation": rot, "projection": s}


def estimate_prod_vectors() -> list[VectorSpec]:
    rng = np.random.default_rng(seed_for("kv.turboquant.estimate_prod"))
    specs = [VectorSpec(f"{b} bits, Hq = 4 over H = 2 (GQA), T = 8, d = 64",
                        (RANDOM, "BiasedScores", "SketchScale", "NormKept", "GqaHeads", "RotationInverse"),
                        Case(prod_cache(rng, b, 4, 2, 8, 64), {"bits": b})) for b in tq.PROD_BITS]
    base = prod_cache(rng, 3, 2, 2, 5, 16, m=8)
    specs += [
        VectorSpec("a sketch of m = 8 rows for d = 16: the QJL term scales by 1/m", ("SketchScale",), Case(base)),
        VectorSpec("an empty cache (T = 0)", (EMPTY_INPUT,),
                   Case({**base, **{k: base[k][:, :, :0] for k in ("codes", "norms", "signs", "residual_norms")}})),
        VectorSpec("float32 queries", ("InputDtype",), Case({**base, "q": base["q"].astype(np.float32)})),
        VectorSpec("signs of the wrong length are rejected", (INVALID_INPUT, "SketchScale"),
                   Case({**base, "signs": base["signs"][..., :4]}), "invalid"),
        VectorSpec("a sign 0 is rejected", (INVALID_INPUT, "SignOfZero"),
                   Case({**base, "signs": np.where(np.arange(8) == 0, 0, base["signs"]).astype(np.int8)}), "invalid"),
        VectorSpec("Hq not a multiple of H is rejected", (INVALID_INPUT, "GqaHeads"),
                   Case({**base, "q": np.concatenate([base["q"]] * 3, axis=1)[:, :3]}), "invalid"),
        VectorSpec("a NaN query is rejected", (INVALID_INPUT, NAN),
                   Case({**base, "q": np.where(np.arange(16) == 1, np.nan, base["q"])}), "invalid"),
    ]
    # appended (issue 15): keeps the ids above
    specs += [VectorSpec(f"{b} bits, Hq = {hq} over H = {h} (g = {hq // h}, not H): h // H or h % H reads another head",
                         ("GqaHeads",), Case(prod_cache(rng, b, hq, h, 4, 16, m=8), {"bits": b}))
              for b, hq, h in ((3, 6, 2), (2, 4, 1))]
    for b in (1, 3):
        cache = prod_cache(rng, b, 2, 2, 5, 16, m=8)
        q = rng.integers(-2**52, 2**52, cache["q"].shape) * 2.0**-52  # full mantissas: not float32-representable
        specs.append(VectorSpec(f"{b} bits, float64 queries of full 53-bit mantissas: the sketch S q in float64",
                                ("Float64Compute",), Case({**cache, "q": q}, {"bits": b})))
    specs.append(VectorSpec("float signs are rejected", (INVALID_INPUT,),
                            Case({**base, "signs": base["signs"].astype(np.float64)}), "invalid"))
    return specs


def _encode_examples(prod: bool):
    def examples(supported):
        @st.composite
        def case(draw):
            bits = draw(st.sampled_from(list(supported["bits"])), label="bits")
            d = draw(st.sampled_from([4, 16, 64]), label="d")
            seed = draw(st.integers(0, 2**32 - 1), label="seed")
            rng = np.random.default_rng(seed)
            x = _keys(rng, (draw(st.integers(0, 6), label="T"), d), outlier=draw(st.booleans(), label="outlier"))
            rot = hadamard_rotation(rng, d) if d % 16 == 0 and draw(st.booleans(), label="hadamard") \
                else signed_permutation(rng, d)
            inputs = {"x": x, "rotation": rot}
            if prod:
                inputs["projection"] = _projection(rng, draw(st.sampled_from([d, max(1, d // 2)]), label="m"), d)
            return Case(inputs, {"bits": bits})
        return case()
    return examples


def _dequantize_examples(supported):
    @st.composite
    def case(draw):
        bits = draw(st.sampled_from(list(supported["bits"])), label="bits")
        d = draw(st.sampled_from([4, 16, 64]), label="d")
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1), label="seed"))
        t = draw(st.integers(0, 6), label="T")
        return Case({"codes": rng.integers(0, 1 << bits, (t, d)), "norms": rng.integers(0, 64, t) / 8.0,
                     "rotation": signed_permutation(rng, d)}, {"bits": bits})
    return case()


def _estimate_examples(supported):
    @st.composite
    def case(draw):
        bits = draw(st.sampled_from(list(supported["bits"])), label="bits")
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1), label="seed"))
        h, g = draw(st.integers(1, 2), label="H"), draw(st.integers(1, 2), label="g")
        return Case(prod_cache(rng, bits, h * g, h, draw(st.integers(0, 5), label="T"), 16,
                                m=draw(st.sampled_from([8, 16]), label="m")), {"bits": bits})
    return case()


def _codebook_examples(supported):
    return st.builds(lambda b, d: Case({"dim": np.int64(d)}, {"bits": b}),
                     st.sampled_from(list(supported["bits"])), st.integers(2, 256))


OPERATIONS = [
    AREA.exact("turboquant.codebook", tq.codebook, anchor="turboquant-codebook", golden_float_bound=1e-10,
               summary="dim -> Lloyd-Max levels and midpoint thresholds of one coordinate of a uniform point on "
                       "S^{dim-1}", variants=(BITS_CODEBOOK,), vectors=codebook_vectors,
               examples=_codebook_examples, compare=compare_codebook,
               outputs=("levels", "thresholds")),
    AREA.exact("turboquant.quantize_mse", tq.quantize_mse, anchor="turboquant-mse", golden_float_bound=1e-10,
               summary="x [..., d], rotation -> (codes, norms): the nearest level of each rotated unit coordinate",
               variants=(BITS_MSE,), vectors=quantize_mse_vectors, examples=_encode_examples(False),
               compare=compare_named(("codes", "norms"), "exact", "norms"), outputs=("codes", "norms")),
    AREA.exact("turboquant.dequantize_mse", tq.dequantize_mse, anchor="turboquant-mse", golden_float_bound=1e-10,
               summary="(codes, norms, rotation) -> norms * Pi^T levels[codes]", variants=(BITS_MSE,),
               vectors=dequantize_mse_vectors, examples=_dequantize_examples, compare=close("values")),
    AREA.exact("turboquant.quantize_prod", tq.quantize_prod, anchor="turboquant-prod", golden_float_bound=1e-10,
               summary="x, rotation, projection -> (b-1 bit codes, norms, residual signs, residual norms)",
               variants=(BITS_PROD,), vectors=quantize_prod_vectors, examples=_encode_examples(True),
               compare=compare_named(("codes", "norms", "signs", "residual_norms"), "exact", "norms", "exact", "values"),
               outputs=("codes", "norms", "signs", "residual_norms")),
    AREA.exact("turboquant.estimate_prod", tq.estimate_prod, anchor="turboquant-prod", golden_float_bound=1e-10,
               summary="q [B, Hq, Lq, d] against a prod cache -> unbiased scores [B, Hq, Lq, T]",
               variants=(BITS_PROD,), vectors=estimate_prod_vectors, examples=_estimate_examples,
               compare=close("values")),
]
